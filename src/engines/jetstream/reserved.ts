// A reservation of the JetStream queue: the delivered message, its lease on the queue's clock,
// and the in-progress replies that keep the server's ack wait from running out while this
// process holds it.
import type { QueueItem } from '../../api/handles.js';
import { decodeFailure, isRaw } from '../../lib/codec.js';
import { QueueError } from '../../contract/errors.js';
import { errorMessage } from '../../core/deliveries.js';
import { extendLength } from '../../core/leases.js';
import { nackDelay } from '../../core/retry.js';
import type { NackOptions } from '../../api/types.js';
import { expectation } from '../../lib/validate.js';
import { type JetStreamCore, unconfirmed } from './core.js';
import type { JetStreamConsumer } from './handles.js';
import { itemSeqOf } from './delayed.js';
import type { Delivery } from './message.js';

/** A reserved item: ack it to remove it, nack it to have it delivered again. */
export class JetStreamReserved<T = Uint8Array> implements QueueItem<T> {
  readonly #core: JetStreamCore;
  readonly #consumer: JetStreamConsumer<T>;
  readonly #delivery: Delivery;
  readonly #seq: number;
  #value: unknown;
  #settled = false;
  #expired = false;
  #leaseMs: number;
  #dueMs = Infinity;
  #leaseTimer: unknown;
  #keepAlive: ReturnType<typeof setInterval> | undefined;
  #onExpire: ((error: QueueError) => void) | undefined;

  /** @internal */
  constructor(core: JetStreamCore, consumer: JetStreamConsumer<T>, delivery: Delivery, leaseMs: number) {
    this.#core = core;
    this.#consumer = consumer;
    this.#delivery = delivery;
    this.#seq = itemSeqOf(delivery);
    this.#leaseMs = leaseMs;
  }

  /**
   * The seq its push resolved with: the stream sequence (for a delayed item, the delayed
   * stream's), stable across redeliveries, unique in the queue. Dedupe on it.
   */
  get seq(): number {
    return this.#seq;
  }

  /** 1 on first delivery, +1 on each redelivery, as the server counts them (every process's). */
  get deliveries(): number {
    return this.#delivery.info.deliveries;
  }

  /** The payload as pushed. */
  get bytes(): Uint8Array {
    return this.#delivery.bytes;
  }

  /** The value, decoded by the queue's codec; the payload bytes for a byte queue. */
  get value(): T {
    return (isRaw(this.#core.s.codec) ? this.#delivery.bytes : this.#value) as T;
  }

  /** True once acked, nacked, dead-lettered, returned by close, or once its lease ran out. */
  get settled(): boolean {
    return this.#settled || this.#expired || this.#core.closed || this.#consumer.closed;
  }

  /** When the lease runs out, in ms since the epoch; Infinity without a lease. */
  get leaseExpiresAt(): number {
    if (this.#dueMs === Infinity) return Infinity;
    const time = this.#core.s.time;
    return time.wallNow() + (this.#dueMs - time.monoNow());
  }

  /** @internal */
  get leaseMs(): number {
    return this.#leaseMs;
  }

  /** @internal */
  get leaseExpired(): boolean {
    return this.#expired;
  }

  /** @internal */
  onLeaseExpired(callback: ((error: QueueError) => void) | undefined): void {
    this.#onExpire = callback;
  }

  /** Decode the payload; the reason it could not be, or undefined. @internal */
  decode(): string | undefined {
    const codec = this.#core.s.codec;
    try {
      this.#value = codec.decode(this.#delivery.bytes);
      return undefined;
    } catch (error) {
      return decodeFailure(codec, error);
    }
  }

  /**
   * Start the lease and keep the server's ack wait from running out while this process holds
   * the item: an in-progress reply every half ack wait. If the process dies, the replies stop and
   * the server delivers the item again after its ack wait. @internal
   */
  startLease(): void {
    const { time, ackWaitMs } = this.#core.s;
    this.#keepAlive = setInterval(() => this.#delivery.working(), Math.max(1, ackWaitMs / 2));
    this.#keepAlive.unref();
    this.#arm(time.monoNow() + this.#leaseMs);
  }

  #arm(dueMs: number): void {
    const time = this.#core.s.time;
    if (this.#leaseTimer !== undefined) time.clearTimeout(this.#leaseTimer);
    this.#leaseTimer = undefined;
    this.#dueMs = dueMs;
    if (dueMs === Infinity) return;
    this.#leaseTimer = time.setTimeout(() => this.#expire(), dueMs - time.monoNow());
    (this.#leaseTimer as { unref?: () => void } | null)?.unref?.();
  }

  #stopTimers(): void {
    if (this.#keepAlive !== undefined) clearInterval(this.#keepAlive);
    this.#keepAlive = undefined;
    if (this.#leaseTimer !== undefined) this.#core.s.time.clearTimeout(this.#leaseTimer);
    this.#leaseTimer = undefined;
  }

  #expire(): void {
    this.#leaseTimer = undefined;
    if (this.#settled || this.#expired) return;
    this.#expired = true;
    this.#stopTimers();
    this.#consumer.held.delete(this);
    this.#core.counters.leaseExpired++;
    // Back to the queue now, as the embedded queue returns it, not after the server's ack wait.
    this.#delivery.nak(0).catch(() => {});
    this.#onExpire?.(new QueueError('ERR_LEASE_EXPIRED', `The lease of item ${this.seq} ran out: it was returned to the queue`));
  }

  /** Why this reservation may not be settled now, or undefined. */
  #refusal(): QueueError | undefined {
    const error = this.#core.operationalError();
    if (error) return error;
    if (this.#consumer.closed) return new QueueError('ERR_CLOSED', 'The consumer is closed: its items went back to the queue');
    if (this.#expired) return new QueueError('ERR_LEASE_EXPIRED', `The lease of item ${this.seq} ran out: it was returned to the queue`);
    if (this.#settled) return new QueueError('ERR_ALREADY_SETTLED', `Item ${this.seq} was already settled`);
    return undefined;
  }

  #settle(): QueueError | undefined {
    const refused = this.#refusal();
    if (refused) return refused;
    this.#settled = true;
    this.#stopTimers();
    this.#consumer.held.delete(this);
    return undefined;
  }

  /** Remove the item. Resolves once the server confirmed the ack (it no longer holds the item). */
  ack(): Promise<void> {
    const refused = this.#settle();
    if (refused) return Promise.reject(refused);
    const counters = this.#core.counters;
    counters.pendingAcks++;
    // An item with an idempotency key has it recorded first: the ack deletes the message whose
    // id the queue stream would otherwise rebuild its memory of the key from at a restart.
    const recorded = this.#core.s.keys.remember(this.#delivery, this.seq);
    const acked = recorded === undefined ? this.#delivery.ackAck() : recorded.then(() => this.#delivery.ackAck());
    const done = acked.then(
      () => {
        counters.pendingAcks--;
        counters.acked++;
        this.#core.forget(this.#delivery.info.streamSeq);
      },
      (cause: unknown) => {
        counters.pendingAcks--;
        throw new QueueError(
          'ERR_STORE',
          `The server did not confirm the ack of item ${this.seq}: ${errorMessage(cause)}; it may be delivered again`,
          { cause },
        );
      },
    );
    return this.#core.track(done);
  }

  /** Return the item, delivered again at once or, with `delayMs`, once that time has passed (the server's clock). */
  nack(options?: NackOptions): Promise<void> {
    let delay: number;
    try {
      delay = nackDelay(options);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.retryAfter(delay, false);
  }

  /**
   * Refused with `ERR_UNSUPPORTED`: the server counts every delivery, so a throttled one cannot go
   * uncounted. Return the item with `nack({ delayMs })` instead.
   */
  rateLimited(_retryAfterMs: number): Promise<never> {
    return Promise.reject(
      new QueueError(
        'ERR_UNSUPPORTED',
        'A JetStream queue cannot leave a delivery uncounted (the server counts each): nack({ delayMs }) returns the item after the wait, counted',
      ),
    );
  }

  /** @internal */
  retryAfter(delay: number, retried: boolean): Promise<void> {
    const refused = this.#settle();
    if (refused) return Promise.reject(refused);
    this.#core.counters.nacked++;
    if (retried) this.#core.counters.retried++;
    return this.#core.track(
      this.#delivery.nak(delay).catch((cause: unknown) => {
        throw unconfirmed(`the nack of item ${this.seq} (it comes back after the ack wait)`, cause);
      }),
    );
  }

  /** Renew the lease: it runs out `ms` from now (default: the reservation's lease length). */
  extend(ms?: number): Promise<void> {
    let lengthMs: number | undefined;
    try {
      lengthMs = extendLength(ms);
    } catch (error) {
      return Promise.reject(error);
    }
    const refused = this.#refusal();
    if (refused) return Promise.reject(refused);
    if (lengthMs !== undefined) this.#leaseMs = lengthMs;
    this.#delivery.working();
    this.#arm(this.#core.s.time.monoNow() + this.#leaseMs);
    return Promise.resolve();
  }

  /** Move the item into the dead-letter stream with `reason`, instead of acking it. */
  deadLetter(reason?: string): Promise<void> {
    if (reason !== undefined && typeof reason !== 'string') return Promise.reject(new TypeError(expectation('reason', 'a string', reason)));
    const refused = this.#settle();
    if (refused) return Promise.reject(refused);
    return this.#core.moveToDeadLetters(this.#delivery, this.deliveries, reason ?? 'dead-lettered by the consumer');
  }

  /** @internal */
  noteError(error: unknown): void {
    this.#core.noteError(this.#delivery.info.streamSeq, errorMessage(error));
  }

  /** Returned by a close (or a reserveMany that failed): back to the queue at once. @internal */
  giveBack(): Promise<void> {
    if (this.#settled || this.#expired) return Promise.resolve();
    this.#settled = true;
    this.#stopTimers();
    this.#consumer.held.delete(this);
    return this.#delivery.nak(0);
  }

  /** Nack the item if it is still unsettled (for `await using`). */
  async [Symbol.asyncDispose](): Promise<void> {
    if (this.settled) return;
    await this.nack();
  }
}
