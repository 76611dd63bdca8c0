/**
 * The core queue: Builder, Producer, Consumer and Reserved over a Store.
 *
 * One object, QueueCore, owns all mutable in-memory state: seq assignment, capacity and its
 * waiters, the batches handed to the store (group commit), the read-ahead buffer, the in-flight
 * reservations and the items returned by nack. Producer and Consumer are thin handles on it.
 * A Store only persists (see src/contract/store.ts).
 *
 * Memory is O(in-flight + read-ahead): ready items stay in the store until the consumer is about
 * to take them. Items with a priority or a not-before time are held in memory until acked
 * (./schedule.ts).
 */
import { ownerSurface } from './owner.js';
import { OpenError, QueueError } from '../contract/errors.js';
import type { Store, StoreRecovery } from '../contract/store.js';
import { isStore, keepsDeliveries, keepsKeys } from '../contract/store.js';
import { storedScheduleFault } from '../contract/schedule-table.js';
import { DEFAULT_KEY_WINDOW_MS, DEFAULT_MAX_KEYS, type IdempotencyOptions, type KeyWindow } from './idempotency.js';
import { expectation, knownKeys, optionsObject, positiveInteger } from '../lib/validate.js';
import { QueueCore } from './queue-core.js';
import { busyStores } from './entry.js';
import { leaseLength } from './leases.js';
import { type Clock, type TimeSource, checkClock, systemTime, timeOf } from '../lib/clock.js';
import { type Codec, bytes, checkCodec, isRaw } from '../lib/codec.js';
import type { TurnBudget } from './flush.js';
import { Consumer, Producer } from './handles.js';
import { type LazyAckBound, resolveAckPolicy } from './lazy-acks.js';
import { type RetryDelayFunction, type RetryPolicyInput, defaultRetryDelays, retryDelays } from './retry.js';
import { ACK_DURABILITIES, type AckDurability, DURABILITIES, type Durability, type LazyAckOptions } from '../api/types.js';
import { type RateLimit, type RateLimitOptions, rateLimitOf } from './rate-limit.js';

export { Consumer, Producer, Reserved } from './handles.js';
export { AckDurability, Durability } from '../api/types.js';
export type { Clock } from '../lib/clock.js';
export type { PushValue } from './handles.js';
export type { IdempotencyOptions } from './idempotency.js';
export type { RateLimitBy, RateLimitOptions } from './rate-limit.js';
export type { CatchUp, ScheduleOptions, ScheduleSpec } from './schedule-slots.js';
export type { ScheduleInfo } from './schedules.js';
export type {
  BatchOptions,
  LazyAckOptions,
  ProcessOptions,
  PushOptions,
  QueueStats,
  ReserveManyOptions,
  ReserveOptions,
  WaitOptions,
} from '../api/types.js';
export type { HandlerContext, HandlerErrorInfo, NackOptions, WorkerOptions } from '../api/types.js';
export type { BatchHandler, ProcessHandler } from './handles.js';
export type { DeadLetterQueue, DeadLetterListOptions, DeadLetterSelection } from './dead-letters.js';
export type { CustomRetry, ExponentialRetry, FixedRetry, RetryDelayFunction, RetryPolicy, RetryPolicyInput } from './retry.js';

/**
 * The ack policy of a Builder that was not told one: it follows the push policy. `sync` syncs every
 * ack, as it syncs every push (a user who picks it picks it for exactly that); `group` keeps its
 * acks `lazy`, chosen from measurements (docs/internals/core.md, "Lazy acks"); `none` syncs
 * nothing.
 */
function defaultAckDurability(durability: Durability): AckDurability {
  return durability === 'sync' ? 'sync' : 'lazy';
}
const DEFAULT_LAZY_BOUND: LazyAckBound = { maxDelayMs: 100, maxPending: 4096 };
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Configures and opens a queue over a store. `T` is the type of the queue's values: payload bytes
 * by default, or what the codec given to {@link Builder.codec} decodes.
 */
export class Builder<T = Uint8Array> {
  readonly #store: Store;
  #capacity = Infinity;
  #capacityBytes = Infinity;
  #durability: Durability = 'group';
  #storeCallsPerTurn: TurnBudget = 'auto';
  /** Undefined until `ackDurability()` is called: the ack policy then follows `durability()`. */
  #ackDurability: AckDurability | undefined;
  #lazyBound: LazyAckBound = DEFAULT_LAZY_BOUND;
  #retryDelays: RetryDelayFunction = defaultRetryDelays;
  #maxDeliveries = Infinity;
  #leaseMs = Infinity;
  #time: TimeSource = systemTime;
  #codec: Codec<unknown> = bytes();
  #keyWindow: KeyWindow = { windowMs: DEFAULT_KEY_WINDOW_MS, maxKeys: DEFAULT_MAX_KEYS };
  /** `idempotency()` was called: a store without keys is refused at open. */
  #keysAsked = false;
  #rateLimit: RateLimit | undefined;

  constructor(store: Store) {
    if (!isStore(store)) throw new TypeError(expectation('store', 'a Store', store));
    this.#store = store;
  }

  /**
   * Maximum unacked items (ready + in flight). `push` waits while the queue is full.
   * @default Infinity
   */
  capacity(n: number): this {
    this.#capacity = positiveInteger('capacity', n, true);
    return this;
  }

  /**
   * Maximum payload bytes of the unacked items, alongside the item count of `capacity`: a push
   * waits while either is full; a push larger than it rejects with a `RangeError`. Needs a store
   * with `payloadBytes()` (every store of this package has it), else `open()` rejects with
   * `ERR_UNSUPPORTED`. See docs/guides/capacity.md, "Byte capacity".
   * @default Infinity
   */
  capacityBytes(n: number): this {
    this.#capacityBytes = positiveInteger('capacityBytes', n, true);
    return this;
  }

  /**
   * When a push or ack resolves.
   * @default 'group'
   */
  durability(policy: Durability): this {
    if (typeof policy !== 'string') throw new TypeError(expectation('durability', "'sync', 'group' or 'none'", policy));
    if (!DURABILITIES.includes(policy)) throw new RangeError(expectation('durability', "'sync', 'group' or 'none'", policy));
    this.#durability = policy;
    return this;
  }

  /**
   * When an ack resolves, separately from pushes. `'sync'` and `'group'` as for pushes; `'lazy'`:
   * once the ack is written to the store, with no fsync waited for. A later sync makes it durable:
   * one starts at most `maxDelayMs` after the first unsynced ack was written, or as soon as
   * `maxPending` acks wait for one, and `close()` syncs what is left. A power loss before that
   * sync can only redeliver those items, never lose one. Under `durability('none')` no ack is
   * synced whatever this says; a store without `sync()` keeps acks under `'group'`.
   * See docs/guides/durability.md, "Durability".
   * @default follows `durability()`: `'sync'` under `'sync'`, `'lazy'` (maxDelayMs 100, maxPending
   * 4096) under `'group'`, nothing synced under `'none'`
   */
  ackDurability(policy: AckDurability, options?: LazyAckOptions): this {
    const what = "'sync', 'group' or 'lazy'";
    if (typeof policy !== 'string') throw new TypeError(expectation('ackDurability', what, policy));
    if (!ACK_DURABILITIES.includes(policy)) throw new RangeError(expectation('ackDurability', what, policy));
    const o = optionsObject('options', options);
    if (policy !== 'lazy' && options !== undefined) {
      throw new TypeError(expectation('options', `undefined: only 'lazy' takes options, got '${policy}'`, options));
    }
    knownKeys('options', o, ['maxDelayMs', 'maxPending']);
    const maxDelayMs = o.maxDelayMs === undefined ? DEFAULT_LAZY_BOUND.maxDelayMs : positiveInteger('options.maxDelayMs', o.maxDelayMs);
    // Timers hold a signed 32-bit delay; a longer one would fire at once.
    if (maxDelayMs > MAX_TIMER_MS)
      throw new RangeError(expectation('options.maxDelayMs', `a positive integer up to ${MAX_TIMER_MS}`, maxDelayMs));
    const maxPending = o.maxPending === undefined ? DEFAULT_LAZY_BOUND.maxPending : positiveInteger('options.maxPending', o.maxPending);
    this.#ackDurability = policy;
    this.#lazyBound = { maxDelayMs, maxPending };
    return this;
  }

  /**
   * How many store calls each pipeline (appends, acks) makes in one turn of the event loop. Past
   * that, the operations issued in the rest of the turn wait for the next turn and join one batch.
   * `'auto'` (the default) lets each pipeline choose between 1 and 16 from what waiting a turn
   * gathered: 1 while many callers chain operations in promise callbacks (one batch per turn;
   * measured under `none`, 64 producers end to end, 1.7–3.0× a fixed 16), 16 for a serial caller,
   * who then waits a turn every 16 operations (a fixed 1 costs it 37–80 %). A number fixes the
   * budget; `Infinity` never defers. See docs/guides/durability.md, "Batching under `none`".
   * @default 'auto'
   */
  storeCallsPerTurn(n: number | 'auto'): this {
    this.#storeCallsPerTurn = n === 'auto' ? n : positiveInteger('storeCallsPerTurn', n, true);
    return this;
  }

  /**
   * How `process()` retries an item whose handler threw or ran past its `timeoutMs`: after a delay
   * given by the policy, during which newer items are delivered.
   * - `{ kind: 'exponential', baseMs = 100, maxMs = 30000, factor = 2, jitter = 0.5, random? }`:
   *   `min(maxMs, baseMs × factor^(deliveries − 1))`, less a random share of up to `jitter` of it;
   * - `{ kind: 'fixed', delayMs }`;
   * - `{ kind: 'custom', delayMs: (deliveries, error) => ms }`, or that function alone.
   * A delay of 0 retries at once (after a turn of the event loop).
   * @default { kind: 'exponential', baseMs: 100, maxMs: 30000, factor: 2, jitter: 0.5 }
   */
  retry(policy: RetryPolicyInput): this {
    this.#retryDelays = retryDelays(policy);
    return this;
  }

  /**
   * Hand an item out at most `n` times: when it would be handed out again (after a nack, a failed
   * handler, a dropped reservation or a restart), it is moved into the dead-letter queue instead,
   * with its last error as the reason. Delivery counts survive restarts and crashes, so a handler
   * that kills the process on one item gets that item dead-lettered after at most `n` restarts.
   * Needs a store that keeps delivery counts (`features.deliveries`: all four stores here);
   * `open()` rejects with `ERR_UNSUPPORTED` over one that does not. See docs/guides/dead-letters.md, "Dead letters".
   * @default Infinity
   */
  maxDeliveries(n: number): this {
    this.#maxDeliveries = positiveInteger('maxDeliveries', n, true);
    return this;
  }

  /**
   * The lease of every reservation, in ms (a positive number, or Infinity for none): a reserved
   * item not settled within it returns to the queue as a dropped reservation does, and its stale
   * holder's calls reject with `ERR_LEASE_EXPIRED`. `reserve({ leaseMs })` overrides it; a holder
   * renews its lease with `item.extend()`. Leases are kept in memory only. See docs/guides/processing.md, "Leases".
   * @default Infinity (no lease: an item stays reserved until it is settled, dropped or the queue closes)
   */
  leaseMs(ms: number): this {
    this.#leaseMs = leaseLength('leaseMs', ms, true);
    return this;
  }

  /**
   * The clock the queue reads: for not-before times (`push({ delayMs, notBefore })`), leases,
   * retry delays and `process()` timeouts. A test gives one it moves itself (`ManualClock` from
   * `persistent-queue/testing`), so that it never sleeps. See docs/guides/scheduling.md, "Delayed delivery and priorities".
   * @default the system's clocks (`Date.now()` for not-before times, `performance.now()` for lengths)
   */
  clock(clock: Clock): this {
    this.#time = timeOf(checkClock(clock));
    return this;
  }

  /**
   * How long, and how many, idempotency keys (`push(value, { key })`) the queue remembers. A key is
   * remembered while less than `windowMs` passed since it was stored, on the queue's clock
   * (`Builder.clock`), whether its item is still queued, acked or dead-lettered, across restarts
   * and crashes; an older key may be forgotten, and a push of it then stores a new item. At most
   * `maxKeys` are remembered (pushes being stored included): a push of a new key beyond that
   * rejects with `ERR_KEYS_FULL` until one expires. Needs a store that keeps keys
   * (`features.idempotency`: all four stores here); `open()` rejects with `ERR_UNSUPPORTED` over
   * one that does not. A queue not told this still remembers keys, with the defaults, over such a
   * store. See docs/guides/effectively-once.md, "Idempotency keys".
   * @default { windowMs: 86400000 (24 h), maxKeys: 100000 }
   */
  idempotency(options: IdempotencyOptions): this {
    const o = optionsObject('options', options);
    knownKeys('options', o, ['windowMs', 'maxKeys']);
    const windowMs = o.windowMs === undefined ? DEFAULT_KEY_WINDOW_MS : positiveInteger('options.windowMs', o.windowMs);
    if (windowMs > Number.MAX_SAFE_INTEGER) throw new RangeError(expectation('options.windowMs', 'a positive safe integer', windowMs));
    const maxKeys = o.maxKeys === undefined ? DEFAULT_MAX_KEYS : positiveInteger('options.maxKeys', o.maxKeys);
    this.#keyWindow = { windowMs, maxKeys };
    this.#keysAsked = true;
    return this;
  }

  /**
   * At most `max` items handed out in any window of `perMs` ms on the queue's clock, by every
   * consumer of the queue together: for the whole queue (`by: 'queue'`, the default), or for each
   * group (`by: 'group'`: `push(value, { group })`; the items without a group share one window).
   * Under a limit by group, an item whose group's window is full waits aside while the items of
   * other groups go. `item.rateLimited(ms)` (a 429 from an API) pauses the item's window for `ms`.
   * The windows are kept in memory: a restart starts them empty. See docs/guides/groups-and-rate-limits.md, "Groups and rate limits".
   * @default none
   */
  rateLimit(options: RateLimitOptions): this {
    this.#rateLimit = rateLimitOf(options);
    return this;
  }

  /**
   * How the queue's values become payloads and back: `json<T>()`, `structured<T>()`, `text()`,
   * `bytes()` (the default), a codec with a Standard Schema validator (`json(schema)`,
   * `validated(codec, schema)`), or any `{ name, encode, decode }`. The handles are typed by it:
   * `push(value: T)`, `item.value: T`. A value that fails to encode or validate rejects its push
   * and stores nothing; a payload that fails to decode or validate is never handed out: it is
   * moved into the dead-letter queue with the reason. Any codec but `bytes()` needs a store with
   * dead letters (`features.deliveries`). See docs/guides/typed-queues.md, "Typed queues".
   * @default bytes()
   */
  codec<U>(codec: Codec<U>): Builder<U> {
    this.#codec = isRaw(codec as Codec<unknown>) ? (codec as Codec<unknown>) : (checkCodec(codec) as Codec<unknown>);
    return this as unknown as Builder<U>;
  }

  /** What this Builder asks of the store that the store does not declare: refused before anything is opened. */
  #refuseWhatTheStoreCannotKeep(store: Store): void {
    const keep = keepsDeliveries(store);
    if (!keep && this.#maxDeliveries !== Infinity) {
      throw new QueueError(
        'ERR_UNSUPPORTED',
        'maxDeliveries needs a store that keeps delivery counts (features.deliveries); this store does not',
      );
    }
    if (!keep && !isRaw(this.#codec)) {
      // An item that fails to decode must go somewhere other than the handler without being lost.
      throw new QueueError(
        'ERR_UNSUPPORTED',
        `The ${this.#codec.name} codec needs a store with dead letters (features.deliveries), for the items that fail to decode; this store has none`,
      );
    }
    if (this.#capacityBytes !== Infinity && typeof store.payloadBytes !== 'function') {
      throw new QueueError(
        'ERR_UNSUPPORTED',
        'capacityBytes needs a store that reports the payload bytes it holds (payloadBytes()); this store does not',
      );
    }
    if (this.#keysAsked && !keepsKeys(store)) {
      throw new QueueError(
        'ERR_UNSUPPORTED',
        'idempotency() needs a store that keeps idempotency keys (features.idempotency); this store does not',
      );
    }
  }

  /** The payload bytes the store holds, for `capacityBytes`; undefined without that limit. */
  async #recoveredBytes(store: Store): Promise<{ capacity: number; recovered: number } | undefined> {
    if (this.#capacityBytes === Infinity) return undefined;
    let recovered: unknown;
    try {
      recovered = await store.payloadBytes!();
    } catch (error) {
      recovered = error instanceof Error ? error : new Error(String(error));
    }
    if (typeof recovered !== 'number' || !Number.isSafeInteger(recovered) || recovered < 0) {
      if (recovered instanceof QueueError) throw recovered;
      const what =
        recovered instanceof Error ? `failed: ${recovered.message}` : `returned ${String(recovered)}, not a non-negative safe integer`;
      throw new OpenError('ERR_STORE', `The store's payloadBytes() ${what}`, recovered instanceof Error ? { cause: recovered } : undefined);
    }
    return { capacity: this.#capacityBytes, recovered };
  }

  /**
   * Open the store and return the queue's two handles. In steps: refuse what the store cannot
   * keep (nothing touched yet); open the store; build the core over what it recovered and load
   * the rest of it; hand the queue to other processes. A step that fails undoes the ones before it
   * in one place, and the store is closed and free again.
   */
  async open(): Promise<[Producer<T>, Consumer<T>]> {
    const store = this.#store;
    this.#refuseWhatTheStoreCannotKeep(store);
    if (busyStores.has(store)) throw new OpenError('ERR_LOCKED', 'This store already backs an open queue');
    busyStores.add(store);
    let recovery: StoreRecovery;
    try {
      recovery = await store.open();
    } catch (error) {
      busyStores.delete(store);
      throw storeFailure('The store failed to open', error);
    }
    let core: QueueCore | undefined;
    try {
      checkRecovery(recovery);
      const bytes = await this.#recoveredBytes(store);
      const acks = resolveAckPolicy(
        store,
        this.#durability,
        this.#ackDurability ?? defaultAckDurability(this.#durability),
        this.#lazyBound,
      );
      core = new QueueCore({
        store,
        capacity: this.#capacity,
        durability: this.#durability,
        acks,
        recovery,
        storeCallsPerTurn: this.#storeCallsPerTurn,
        deliveries: { maxDeliveries: this.#maxDeliveries, keep: keepsDeliveries(store) },
        leaseMs: this.#leaseMs,
        time: this.#time,
        keyWindow: this.#keyWindow,
        bytes,
        rateLimit: this.#rateLimit,
      });
      core.codec = this.#codec;
      await loadRecovered(core, store, recovery);
    } catch (error) {
      core?.discard();
      busyStores.delete(store);
      await store.close().catch(() => {});
      throw error;
    }
    const tx = new Producer<T>(core);
    const rx = new Consumer<T>(core, this.#retryDelays);
    if (typeof store.attach === 'function') {
      const dir = (store as { dir?: unknown }).dir;
      try {
        await store.attach(ownerSurface(core, rx as Consumer<unknown>, typeof dir === 'string' ? dir : ''));
      } catch (error) {
        await core.close().catch(() => {});
        throw storeFailure('The store failed to serve the queue to other processes', error);
      }
    }
    // The slots that passed while no queue was open fire now (pushes, not waited for).
    core.schedules?.start();
    return [tx, rx];
  }
}

/** A store's failure as `open()` reports it: a QueueError as it is, anything else as `ERR_STORE` saying what failed. */
function storeFailure(what: string, error: unknown): QueueError {
  if (error instanceof QueueError) return error;
  return new OpenError('ERR_STORE', `${what}: ${(error as Error)?.message ?? error}`, { cause: error });
}

/** The counts every store's `open()` returns, checked before the core is built on them. */
function checkRecovery(recovery: StoreRecovery): void {
  if (
    recovery === null ||
    typeof recovery !== 'object' ||
    !Number.isSafeInteger(recovery.nextSeq) ||
    recovery.nextSeq < 1 ||
    !Number.isSafeInteger(recovery.count) ||
    recovery.count < 0 ||
    recovery.count >= recovery.nextSeq
  ) {
    throw new OpenError('ERR_STORE', `The store's open() returned an invalid recovery ${JSON.stringify(recovery)}`);
  }
}

/**
 * The rest of what the store recovered, into the core: idempotency keys, where the scheduled items
 * are, the delivery counts' starting bound, the schedules. Each is checked as the store's feature
 * promises it; a store that declares a feature and returns nothing valid for it is `ERR_STORE`.
 */
async function loadRecovered(core: QueueCore, store: Store, recovery: StoreRecovery): Promise<void> {
  if (core.keys !== undefined) {
    const keys = recovery.keys;
    if (
      !Array.isArray(keys) ||
      !keys.every(
        (k) =>
          k !== null &&
          typeof k === 'object' &&
          typeof k.key === 'string' &&
          Number.isSafeInteger(k.seq) &&
          k.seq >= 1 &&
          k.seq < recovery.nextSeq &&
          Number.isSafeInteger(k.keyedAt),
      )
    ) {
      throw new OpenError(
        'ERR_STORE',
        'The store declares features.idempotency but its open() returned no valid keys: an array of { key, seq, keyedAt } with seqs below nextSeq',
      );
    }
    core.keys.load(keys);
  }
  if (store.features.scheduling === true) {
    const scheduledFrom = recovery.scheduledFrom;
    // Without it the queue could not tell where its scheduled items are: the read-ahead skips them.
    if (
      typeof scheduledFrom !== 'number' ||
      !Number.isSafeInteger(scheduledFrom) ||
      scheduledFrom < 1 ||
      scheduledFrom > recovery.nextSeq
    ) {
      throw new OpenError(
        'ERR_STORE',
        `The store declares features.scheduling but its open() returned scheduledFrom ${String(scheduledFrom)}, not a seq from 1 to nextSeq (${recovery.nextSeq})`,
      );
    }
    try {
      if (scheduledFrom < recovery.nextSeq) await core.loadSchedule(scheduledFrom);
    } catch (error) {
      throw storeFailure('The store failed to read its scheduled items at open', error);
    }
  }
  if (core.ledger !== undefined) {
    try {
      await core.ledger.start();
    } catch (error) {
      throw storeFailure('The store failed to store delivery counts at open', error);
    }
  }
  if (core.schedules !== undefined) {
    const schedules = recovery.schedules;
    if (
      !Array.isArray(schedules) ||
      !schedules.every((s) => s !== null && typeof s === 'object' && storedScheduleFault(s, store.maxItemBytes) === undefined)
    ) {
      throw new OpenError(
        'ERR_STORE',
        'The store declares features.schedules but its open() returned no valid schedules: an array of { name, spec, bytes, firedThrough, nextAt }',
      );
    }
    await core.schedules.load(schedules);
  }
}
