// A reserved item users hold: Reserved, a thin layer over QueueCore that settles one delivery.
import type { QueueItem } from '../api/handles.js';
import { type Codec, decodeFailure, isRaw } from '../lib/codec.js';
import { expectation } from '../lib/validate.js';
import type { QueueCore } from './queue-core.js';
import type { Entry, Guard, Holder } from './entry.js';
import { type Lease, extendLength } from './leases.js';
import { delayMs, nackDelay } from './retry.js';
import type { NackOptions } from '../api/types.js';

/** A reserved item. Ack it to remove it, nack it to have it redelivered. */
export class Reserved<T = Uint8Array> implements QueueItem<T> {
  readonly #core: QueueCore;
  readonly #entry: Entry;
  readonly #token: number;
  #settled = false;
  /** Keeps the tracking group alive while this reservation is unsettled and reachable. */
  #guard: Guard | undefined;
  readonly #slot: number;
  /** This reservation's lease; undefined while it has none. */
  #lease: Lease | undefined;
  #onLeaseExpired: ((error: unknown) => void) | undefined;
  /** The forked consumer that reserved it; undefined for the queue's own. @internal */
  readonly holder: Holder | undefined;

  /** @internal */
  constructor(core: QueueCore, entry: Entry, guard: Guard, slot: number, lease: Lease | undefined, holder: Holder | undefined) {
    this.#core = core;
    this.holder = holder;
    this.#entry = entry;
    this.#token = entry.token;
    this.#guard = guard;
    this.#slot = slot;
    this.#lease = lease;
  }

  /** The decoded value, for a typed queue; undefined until decoded. */
  #value: unknown;

  /** The payload as pushed. Do not modify it: a redelivery hands out the same bytes. */
  get bytes(): Uint8Array {
    return this.#entry.bytes;
  }

  /**
   * The value, decoded by the queue's codec (`Builder.codec`) before the item was handed out; for
   * the default byte queue, the payload bytes. A redelivery decodes again: a handler may change
   * its value freely.
   */
  get value(): T {
    return (isRaw(this.#core.codec) ? this.#entry.bytes : this.#value) as T;
  }

  /** Decode the payload with `codec`; the reason it could not be, or undefined. @internal */
  decodeWith(codec: Codec<unknown>): string | undefined {
    try {
      this.#value = codec.decode(this.#entry.bytes);
      return undefined;
    } catch (error) {
      return decodeFailure(codec, error);
    }
  }

  /**
   * For an item a schedule fired (`tx.schedule()`): the schedule's name and the slot, in ms since
   * the epoch (each slot fires one item, so a catch-up of several nights hands out one per night).
   * Undefined for a pushed item.
   */
  get fired(): { readonly name: string; readonly slot: number } | undefined {
    const fired = this.#entry.fired;
    return fired === undefined ? undefined : { name: fired.name, slot: fired.slot };
  }

  /** Stable id of the item, unchanged by redelivery: dedupe on it. */
  get seq(): number {
    return this.#entry.seq;
  }

  /**
   * 1 on first delivery, +1 on each redelivery. Over a store that keeps delivery counts
   * (`features.deliveries`) the count goes on across restarts and crashes (after a crash it may
   * count one delivery more than an item had: see docs/guides/dead-letters.md, "Delivery counts"); over another store
   * it starts again from 1 at each open.
   */
  get deliveries(): number {
    return this.#entry.deliveries;
  }

  /** True once acked, nacked, dead-lettered, returned by close, or once its lease ran out. */
  get settled(): boolean {
    return (
      this.#settled ||
      this.#entry.token !== this.#token ||
      this.#core.closed ||
      this.#lease?.expired === true ||
      this.holder?.closed === true
    );
  }

  /**
   * When this reservation's lease runs out, in ms since the epoch; `Infinity` without a lease.
   * Past it the item is back in the queue and this handle's calls reject with `ERR_LEASE_EXPIRED`.
   */
  get leaseExpiresAt(): number {
    const lease = this.#lease;
    if (lease === undefined) return Infinity;
    return this.#core.time.wallNow() + (lease.dueMs - this.#core.time.monoNow());
  }

  /** The length of this reservation's lease in ms (what `extend()` renews by); Infinity without one. @internal */
  get leaseMs(): number {
    return this.#lease?.lengthMs ?? Infinity;
  }

  /** @internal */
  get leaseExpired(): boolean {
    return this.#lease?.expired === true;
  }

  /** process() is told when the lease runs out (it aborts the handler's signal). @internal */
  onLeaseExpired(callback: ((error: unknown) => void) | undefined): void {
    this.#onLeaseExpired = callback;
    if (this.#lease !== undefined) this.#lease.onExpire = callback;
  }

  /**
   * Renew the lease: it runs out `ms` from now (default: the reservation's lease length). An item
   * reserved without a lease gets one with `extend(ms)`; `extend()` alone leaves it without.
   * Rejects with `ERR_LEASE_EXPIRED` once the lease ran out, `ERR_ALREADY_SETTLED` once settled.
   */
  extend(ms?: number): Promise<void> {
    let lengthMs: number | undefined;
    try {
      lengthMs = extendLength(ms);
    } catch (error) {
      return Promise.reject(error);
    }
    const lease = this.#core.extend(this, this.#entry, lengthMs ?? this.#lease?.lengthMs);
    if (lease instanceof Error) return Promise.reject(lease);
    if (lease === undefined) return Promise.resolve();
    this.#lease = lease;
    lease.onExpire = this.#onLeaseExpired;
    return Promise.resolve();
  }

  /** @internal */
  markSettled(): void {
    this.#settled = true;
    const guard = this.#guard;
    if (guard !== undefined) {
      guard.members[this.#slot] = undefined;
      this.#guard = undefined;
    }
  }

  /** Remove the item. Resolves once the removal is stored under the durability policy. */
  ack(): Promise<void> {
    return this.#core.ack(this, this.#entry);
  }

  /**
   * Return the item to the queue, to be delivered again ahead of newer items. With `delayMs` it is
   * ready again only once that time has passed (newer items are delivered meanwhile); the wait is
   * kept in memory only.
   */
  nack(options?: NackOptions): Promise<void> {
    let delay: number;
    try {
      delay = nackDelay(options);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.#core.nack(this, this.#entry, delay);
  }

  /**
   * The work was refused for its rate (an HTTP 429, a quota): return the item to the queue, ready
   * again after `retryAfterMs`, without counting this delivery (`deliveries` goes back by one, so
   * `maxDeliveries` never moves an item for being throttled; after a restart the delivery may
   * count once). Under a rate limit (`Builder.rateLimit`) the item's window, its group's or the
   * queue's, hands out nothing more for that long either. `retryAfterMs`: a finite number of ms, 0
   * or more. See docs/guides/groups-and-rate-limits.md, "Groups and rate limits".
   */
  rateLimited(retryAfterMs: number): Promise<void> {
    let ms: number;
    try {
      ms = delayMs('retryAfterMs', retryAfterMs);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.#core.rateLimited(this, this.#entry, ms);
  }

  /**
   * Move the item into the dead-letter queue with `reason` (cut to 1024 UTF-8 bytes), instead of
   * acking it. Resolves once the move survives power loss. Rejects with `ERR_UNSUPPORTED` (the
   * item stays reserved) over a store without dead letters.
   */
  deadLetter(reason?: string): Promise<void> {
    if (reason !== undefined && typeof reason !== 'string') return Promise.reject(new TypeError(expectation('reason', 'a string', reason)));
    return this.#core.deadLetter(this, this.#entry, reason ?? 'dead-lettered by the consumer');
  }

  /** process() keeps the handler's error with the item, for the dead letter it may become. @internal */
  noteError(error: unknown): void {
    this.#core.noteError(this.#entry, error);
  }

  /** process() retries the item after a failed handler, counted in `stats().retried`. @internal */
  retryAfter(delay: number): Promise<void> {
    return this.#core.nack(this, this.#entry, delay, true);
  }

  /** Nack the item if it is still unsettled (for `await using`). */
  async [Symbol.asyncDispose](): Promise<void> {
    if (this.settled) return;
    await this.#core.nack(this, this.#entry);
  }
}
