// The handles users hold: Producer, Consumer and Reserved, thin layers over QueueCore.
import { AsyncSchemaError, type Codec, encodeValue, isRaw } from '../codec.js';
import { QueueError } from '../errors.js';
import { MAX_KEY_BYTES, PRIORITY_MAX, PRIORITY_MIN } from '../store.js';
import { isValidKey } from '../key-records.js';
import { expectation, knownKeys, optionalSignal, optionsObject, positiveInteger } from '../validate.js';
import type { QueueCore } from './core.js';
import { type Entry, type Guard, type Holder, type PushPayload, toBytes, closedError, abortReason } from './entry.js';
import { DeadLetterQueue } from './dead-letters.js';
import { type Lease, leaseLength } from './leases.js';
import { type Taker, gather, settleAll } from './batches.js';
import { runProcess } from './process.js';
import { type RetryDelayFunction, defaultRetryDelays, delayMs } from './retry.js';
import type { BatchOptions, HandlerContext, NackOptions, ProcessOptions, PushOptions, QueueStats, ReserveManyOptions, ReserveOptions, WaitOptions } from './types.js';

/** The producing handle: push items. Any number of callers may push concurrently. */
/**
 * What `push` takes: a value of the queue's type, through its codec (`Builder.codec`); for the
 * default byte queue, a `Uint8Array` or a string (stored as UTF-8).
 */
export type PushValue<T> = 0 extends 1 & T ? T : [T] extends [Uint8Array] ? PushPayload : T;

export class Producer<T = Uint8Array> {
  readonly #core: QueueCore;

  /** @internal */
  constructor(core: QueueCore) {
    this.#core = core;
  }

  /** The bytes the store keeps for `value`: the payload itself, or what the queue's codec encodes it to. */
  #bytesOf(name: string, value: unknown): Uint8Array {
    const codec = this.#core.codec;
    if (isRaw(codec)) return toBytes(name, value, this.#core.arena);
    const out = encodeValue(codec, value);
    if (out instanceof QueueError) throw out;
    return toBytes(name, out, this.#core.arena);
  }

  /**
   * Store one item. Resolves with its seq once it is stored under the queue's durability policy.
   * Waits while the queue is at capacity. Strings are stored as UTF-8. With a codec, the value
   * is encoded first; one that fails to encode (or to validate) rejects with `ERR_ENCODE` (or
   * `ERR_INVALID`) and stores nothing.
   */
  push(payload: PushValue<T>, options?: PushOptions): Promise<number> {
    let bytes: Uint8Array;
    let o: PushSettings;
    try {
      o = pushSettings(options);
      bytes = this.#bytesOf('payload', payload);
    } catch (error) {
      return Promise.reject(error);
    }
    if (o.keys !== undefined) return Promise.reject(new TypeError(expectation('options.keys', 'undefined: push takes one key, as options.key', o.keys)));
    if (o.key !== undefined) return this.#core.pushKeyed(bytes, o.key, o.signal, o.priority, notBeforeOf(o, this.#core));
    return this.#core.push([bytes], true, o.signal, undefined, o.priority, notBeforeOf(o, this.#core)) as Promise<number>;
  }

  /**
   * Store a batch behind one durability wait; resolves with the seqs in order. The batch is
   * admitted whole: it waits until all of it fits under the capacity. With `keys` (one per
   * payload, not `key`), each payload is pushed as `push` with its key would be: a remembered key
   * gives its seq and stores nothing, a key twice in the batch gives its first payload's seq, and
   * the rest are stored as one batch. See README, "Idempotency keys".
   */
  pushMany(payloads: Iterable<PushValue<T>>, options?: PushOptions): Promise<number[]> {
    let list: Uint8Array[];
    let o: PushSettings;
    try {
      o = pushSettings(options);
      if (o.key !== undefined) throw new TypeError(expectation('options.key', 'undefined: pushMany takes one key per payload, as options.keys', o.key));
      if (payloads === null || typeof payloads !== 'object' || typeof (payloads as Iterable<unknown>)[Symbol.iterator] !== 'function') {
        throw new TypeError(expectation('payloads', 'an iterable of Uint8Array or string', payloads));
      }
      list = [];
      let i = 0;
      for (const p of payloads) list.push(this.#bytesOf(`payloads[${i++}]`, p));
      if (o.keys !== undefined && o.keys.length !== list.length) {
        throw new RangeError(expectation('options.keys', `an array of ${list.length} keys, one per payload`, o.keys));
      }
    } catch (error) {
      return Promise.reject(error);
    }
    if (list.length === 0) {
      const error = this.#core.operationalError();
      if (error) return Promise.reject(error);
      if (o.signal?.aborted) return Promise.reject(abortReason(o.signal));
      // As a non-empty batch would: refused over a store that cannot keep what was asked for.
      const time = notBeforeOf(o, this.#core);
      if ((o.priority !== 0 || time !== 0) && this.#core.store.features.scheduling !== true) return this.#core.push([], false, undefined, undefined, o.priority, time) as Promise<number[]>;
      if (o.keys !== undefined && this.#core.keys === undefined) return this.#core.pushManyKeyed([], [], undefined, 0, 0);
      return Promise.resolve([]);
    }
    if (o.keys !== undefined) return this.#core.pushManyKeyed(list, o.keys, o.signal, o.priority, notBeforeOf(o, this.#core));
    return this.#core.push(list, false, o.signal, undefined, o.priority, notBeforeOf(o, this.#core)) as Promise<number[]>;
  }

  stats(): QueueStats {
    return this.#core.stats();
  }

  /** As {@link Consumer.drained}: the same queue, the same promise semantics. */
  drained(options?: WaitOptions): Promise<void> {
    return waitFor(this.#core, 'drained', options);
  }

  /** As {@link Consumer.onIdle}: the same queue, the same promise semantics. */
  onIdle(options?: WaitOptions): Promise<void> {
    return waitFor(this.#core, 'onIdle', options);
  }

  /** Close the queue (both handles). Idempotent. */
  close(): Promise<void> {
    return this.#core.close();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.#core.close();
  }
}

interface PushSettings {
  signal: AbortSignal | undefined;
  priority: number;
  /** A delay to read off the queue's clock at the call (0: none), or else a not-before time (0: none). */
  delayMs: number;
  at: number;
  /** The idempotency key, or undefined. */
  key: string | undefined;
  /** `pushMany`'s idempotency keys, one per payload, or undefined. */
  keys: string[] | undefined;
}

/** Longest delay (about 31,000 years): the time it gives stays a safe integer. */
const MAX_DELAY_MS = 1e15;

/** What a push without options gets; shared, so that a plain push allocates nothing for them. */
const PLAIN_PUSH: PushSettings = Object.freeze({ signal: undefined, priority: 0, delayMs: 0, at: 0, key: undefined, keys: undefined });

/** The not-before time a push asks for, in ms since the epoch (0: none). */
function notBeforeOf(o: PushSettings, core: QueueCore): number {
  return o.delayMs > 0 ? Math.ceil(core.time.wallNow() + o.delayMs) : o.at;
}

/** Validate the options of `push()` and `pushMany()`. */
function pushSettings(options: PushOptions | undefined): PushSettings {
  if (options === undefined) return PLAIN_PUSH;
  const o = optionsObject('options', options);
  knownKeys('options', o, ['signal', 'priority', 'delayMs', 'notBefore', 'key', 'keys']);
  const signal = optionalSignal('options.signal', o.signal);
  let priority = 0;
  if (o.priority !== undefined) {
    if (typeof o.priority !== 'number') throw new TypeError(expectation('options.priority', `an integer from ${PRIORITY_MIN} to ${PRIORITY_MAX}`, o.priority));
    if (!Number.isInteger(o.priority) || o.priority < PRIORITY_MIN || o.priority > PRIORITY_MAX) {
      throw new RangeError(expectation('options.priority', `an integer from ${PRIORITY_MIN} to ${PRIORITY_MAX}`, o.priority));
    }
    priority = o.priority === 0 ? 0 : o.priority; // -0 is 0
  }
  if (o.delayMs !== undefined && o.notBefore !== undefined) {
    throw new TypeError(expectation('options', 'either delayMs or notBefore, not both', options));
  }
  let ms = 0;
  let at = 0;
  if (o.delayMs !== undefined) {
    ms = delayMs('options.delayMs', o.delayMs);
    if (ms > MAX_DELAY_MS) throw new RangeError(expectation('options.delayMs', `a number of ms from 0 to ${MAX_DELAY_MS}`, ms));
  } else if (o.notBefore !== undefined) {
    at = o.notBefore instanceof Date ? o.notBefore.getTime() : (o.notBefore as number);
    const what = 'a Date or a non-negative safe integer of ms since the epoch';
    if (typeof at !== 'number') throw new TypeError(expectation('options.notBefore', what, o.notBefore));
    if (!Number.isSafeInteger(at) || at < 0) throw new RangeError(expectation('options.notBefore', what, o.notBefore));
  }
  const key = o.key === undefined ? undefined : keyOption('options.key', o.key);
  const keys = o.keys === undefined ? undefined : keysOption(o.keys);
  return { signal, priority, delayMs: ms, at, key, keys };
}

/** `options.keys`: an array of idempotency keys, one per payload (its length is checked by the caller). */
export function keysOption(value: unknown): string[] {
  if (!Array.isArray(value)) throw new TypeError(expectation('options.keys', 'an array of keys, one per payload', value));
  return (value as unknown[]).map((k, i) => keyOption(`options.keys[${i}]`, k));
}

/** An idempotency key given as `name`: a string of 1 to `MAX_KEY_BYTES` UTF-8 bytes (`isValidKey`, the stores' rule too). */
export function keyOption(name: string, value: unknown): string {
  const what = `a string of 1 to ${MAX_KEY_BYTES} UTF-8 bytes`;
  if (typeof value !== 'string') throw new TypeError(expectation(name, what, value));
  if (!isValidKey(value)) throw new RangeError(expectation(name, what, value));
  return value;
}

/** Validate the options of `drained()` and `onIdle()`, then wait in the core. */
function waitFor(core: QueueCore, which: 'drained' | 'onIdle', options: WaitOptions | undefined): Promise<void> {
  let signal: AbortSignal | undefined;
  try {
    signal = optionalSignal('options.signal', optionsObject('options', options).signal);
  } catch (error) {
    return Promise.reject(error);
  }
  return which === 'drained' ? core.drained(signal) : core.onIdle(signal);
}

/** A `process()` handler: resolving acks the item, throwing (or timing out) retries it. */
export type ProcessHandler<T = Uint8Array> = (item: Reserved<T>, context: HandlerContext) => unknown;

/** A batch handler of `process(handler, { batch })`: resolving acks every item it left unsettled, throwing retries them. */
export type BatchHandler<T = Uint8Array> = (items: Reserved<T>[], context: HandlerContext) => unknown;

/** The consuming handle: reserve items, then ack or nack each. */
export class Consumer<T = Uint8Array> {
  readonly #core: QueueCore;
  readonly #retryDelays: RetryDelayFunction;
  /** The dead-letter queue: items moved out by `maxDeliveries` or `item.deadLetter()`. See README, "Dead letters". */
  readonly deadLetters: DeadLetterQueue<T>;

  /** Set on a consumer made by `fork()`: what it holds, so that closing it returns them. */
  readonly #holder: Holder | undefined;

  /** @internal */
  constructor(core: QueueCore, retryDelays: RetryDelayFunction = defaultRetryDelays, holder?: Holder) {
    this.#core = core;
    this.#retryDelays = retryDelays;
    this.#holder = holder;
    this.deadLetters = new DeadLetterQueue<T>(core);
  }

  /**
   * Another consumer of the same open queue, competing with this one for its items: each has its
   * own reservations, `process()` loops and leases, and an item is held by at most one of them at
   * a time. Closing a forked consumer ends its waits and loops and returns the items it holds to
   * the queue (their holders' later calls reject with `ERR_CLOSED`); the queue stays open.
   * Closing the queue (the producer, or the consumer `open()` returned) closes every fork.
   * See README, "Competing consumers".
   */
  fork(): Consumer<T> {
    const error = this.#core.operationalError();
    if (error) throw error;
    return new Consumer<T>(this.#core, this.#retryDelays, { held: new Set(), closed: false });
  }

  /**
   * True when `item` may be handed out: its payload decodes (and validates) under the queue's
   * codec. Otherwise it is moved into the dead-letter queue with the reason, never handed out.
   */
  readonly #accept = (item: Reserved): boolean => {
    const codec = this.#core.codec;
    if (isRaw(codec)) return true;
    let reason: string | undefined;
    try {
      reason = item.decodeWith(codec);
    } catch (error) {
      // The codec itself is unusable (a schema that answers asynchronously): the item goes back.
      item.nack().catch(() => {});
      throw error;
    }
    if (reason === undefined) return true;
    // A move that fails is reported where moves are: the queue fails, or the item is ready again.
    item.deadLetter(reason).catch(() => {});
    return false;
  };

  async #reserveAccepted(signal: AbortSignal | undefined, leaseMs: number): Promise<Reserved<T> | null> {
    for (;;) {
      const item = await this.#core.reserve(signal, leaseMs, this.#holder);
      if (item === null || this.#accept(item)) return item as Reserved<T> | null;
    }
  }

  /** True once this consumer is closed: the queue is, or (for a fork) the fork itself. */
  get closed(): boolean {
    return this.#core.closed || this.#holder?.closed === true;
  }

  /** Wait for the oldest ready item; resolves `null` once the queue is closed. */
  reserve(options?: ReserveOptions): Promise<Reserved<T> | null> {
    let signal: AbortSignal | undefined;
    let leaseMs: number;
    try {
      const o = optionsObject('options', options);
      knownKeys('options', o, ['signal', 'leaseMs']);
      signal = optionalSignal('options.signal', o.signal);
      leaseMs = o.leaseMs === undefined ? this.#core.leaseMs : leaseLength('options.leaseMs', o.leaseMs, true);
    } catch (error) {
      return Promise.reject(error);
    }
    if (isRaw(this.#core.codec)) return this.#core.reserve(signal, leaseMs, this.#holder) as Promise<Reserved<T> | null>;
    return this.#reserveAccepted(signal, leaseMs);
  }

  /** The oldest ready item, or `null` when none is ready or the queue is closed. Never waits. The queue's lease applies. */
  tryReserve(): Reserved<T> | null {
    for (;;) {
      const item = this.#core.tryReserve(this.#holder);
      if (item === null || this.#accept(item)) return item as Reserved<T> | null;
    }
  }

  /**
   * Run `handler` on each item, with up to `concurrency` at once: ack when it resolves; when it
   * throws (or runs past `timeoutMs`), report the error to `onError` and retry the item after the
   * delay of the queue's retry policy (`Builder.retry`). The handler gets `(item, { signal })`.
   * Resolves once `signal` aborts and every running handler has settled, or once the queue's
   * `close()` has finished; rejects if the queue fails.
   */
  process(handler: BatchHandler<T>, options: ProcessOptions & { batch: BatchOptions }): Promise<void>;
  process(handler: ProcessHandler<T>, options?: ProcessOptions): Promise<void>;
  process(handler: ProcessHandler<T> | BatchHandler<T>, options?: ProcessOptions): Promise<void> {
    let concurrency: number;
    let batch: { size: number; waitMs: number; handler: BatchHandler } | undefined;
    let signal: AbortSignal | undefined;
    let timeoutMs = Infinity;
    let onError: ProcessOptions['onError'];
    let heartbeat = false;
    try {
      if (typeof handler !== 'function') throw new TypeError(expectation('handler', 'a function', handler));
      const o = optionsObject('options', options);
      knownKeys('options', o, ['concurrency', 'signal', 'onError', 'timeoutMs', 'heartbeat', 'batch']);
      if (o.batch !== undefined) {
        const b = optionsObject('options.batch', o.batch);
        knownKeys('options.batch', b, ['size', 'waitMs']);
        const size = positiveInteger('options.batch.size', b.size);
        const waitMs = b.waitMs === undefined ? 0 : delayMs('options.batch.waitMs', b.waitMs);
        if (o.heartbeat === true) throw new TypeError(expectation('options.heartbeat', 'false or absent with options.batch (a batch has no single lease to keep)', o.heartbeat));
        batch = { size, waitMs, handler: handler as BatchHandler };
      }
      if (o.heartbeat !== undefined && typeof o.heartbeat !== 'boolean') throw new TypeError(expectation('options.heartbeat', 'a boolean', o.heartbeat));
      heartbeat = o.heartbeat === true;
      concurrency = o.concurrency === undefined ? 1 : positiveInteger('options.concurrency', o.concurrency);
      signal = optionalSignal('options.signal', o.signal);
      if (o.timeoutMs !== undefined && o.timeoutMs !== Infinity) {
        timeoutMs = delayMs('options.timeoutMs', o.timeoutMs);
        if (timeoutMs === 0) throw new RangeError(expectation('options.timeoutMs', 'a positive number of ms', 0));
      }
      if (o.onError !== undefined && typeof o.onError !== 'function') throw new TypeError(expectation('options.onError', 'a function', o.onError));
      onError = o.onError as ProcessOptions['onError'];
    } catch (error) {
      return Promise.reject(error);
    }
    return runProcess(this.#core, handler as ProcessHandler, {
      concurrency,
      signal,
      onError,
      timeoutMs,
      heartbeat,
      retryDelays: this.#retryDelays,
      time: this.#core.time,
      holder: this.#holder,
      accept: isRaw(this.#core.codec) ? undefined : this.#accept,
      batch,
    });
  }

  /**
   * Up to `n` items: waits for the first as `reserve()` does, then takes those ready, and those
   * that come within `waitMs` while fewer than `n` are in hand. Resolves `[]` once the queue is
   * closed. Each item is a reservation of its own: settle them one by one, or with `ackMany` /
   * `nackMany`. See README, "Batches".
   */
  async reserveMany(n: number, options?: ReserveManyOptions): Promise<Reserved<T>[]> {
    let waitMs: number;
    let reserveOptions: ReserveOptions;
    try {
      positiveInteger('n', n);
      const o = optionsObject('options', options);
      knownKeys('options', o, ['signal', 'waitMs', 'leaseMs']);
      waitMs = o.waitMs === undefined ? 0 : delayMs('options.waitMs', o.waitMs);
      reserveOptions = { signal: o.signal as AbortSignal | undefined, leaseMs: o.leaseMs as number | undefined };
      if (reserveOptions.leaseMs === undefined) delete reserveOptions.leaseMs;
    } catch (error) {
      return Promise.reject(error);
    }
    const first = await this.reserve(reserveOptions);
    if (first === null) return [];
    const leaseMs = reserveOptions.leaseMs ?? this.#core.leaseMs;
    const take: Taker = {
      waitIn: async (group, stopped) => {
        for (;;) {
          if (stopped()) return null;
          const item = await this.#core.reserveIn(group, this.#holder, leaseMs);
          if (item === null || this.#accept(item)) return item;
        }
      },
      now: () => {
        for (;;) {
          const item = this.#core.tryReserve(this.#holder, leaseMs);
          if (item === null || this.#accept(item)) return item;
        }
      },
    };
    return (await gather(this.#core, take, first as Reserved, n, waitMs, { signal: reserveOptions.signal })) as Reserved<T>[];
  }

  /** Ack every item, or none: one that may no longer be settled makes the call reject with its error, before any is acked. */
  ackMany(items: Reserved<T>[]): Promise<void> {
    return settleAll(items as Reserved[], isReserved, (item) => item.ack());
  }

  /** Nack every item (as `item.nack(options)`), or none, as `ackMany` does. */
  nackMany(items: Reserved<T>[], options?: NackOptions): Promise<void> {
    return settleAll(items as Reserved[], isReserved, (item) => item.nack(options));
  }

  /**
   * `for await (const item of rx)`: each step is a `reserve()`; the loop ends when the consumer
   * closes. A plain iterator rather than an async generator, whose `yield` adds an await and a
   * request queue to every item (`bench/experiments/for-await.mjs`: the loop over a MemStore
   * backlog 1.07–1.46× faster). Once a step rejects or `return()` is called (a `break`), every
   * later step is done.
   */
  [Symbol.asyncIterator](): AsyncIterableIterator<Reserved<T>> {
    const core = this.#core;
    const holder = this.#holder;
    const accept = this.#accept;
    let done = false;
    const end: IteratorReturnResult<undefined> = { value: undefined, done: true };
    /** The step's result for `item`, or undefined when the codec refused it (the next item is taken). */
    const settle = (item: Reserved | null): IteratorResult<Reserved<T>, undefined> | undefined => {
      // An item reserved for a step is handed out even if return() came meanwhile, as a generator would.
      if (item === null) {
        done = true;
        return end;
      }
      try {
        return accept(item) ? { value: item as Reserved<T>, done: false } : undefined;
      } catch (error) {
        // An unusable codec: the step rejects, and the iterator is done, as a generator would be.
        done = true;
        throw error;
      }
    };
    const failed = (error: unknown): never => {
      done = true;
      throw error;
    };
    const next = (): Promise<IteratorResult<Reserved<T>, undefined>> => {
      // An item ready now is handed out in the step's own promise, without a reserve() promise and
      // a reaction on it; items the codec refuses are skipped in a loop, not by recursion.
      while (!done) {
        let result: IteratorResult<Reserved<T>, undefined> | undefined;
        try {
          const item = core.reserveNow(holder);
          if (item === undefined) return core.reserve(undefined, undefined, holder).then((got) => settle(got) ?? next(), failed);
          result = settle(item);
        } catch (error) {
          done = true;
          return Promise.reject(error);
        }
        if (result !== undefined) return Promise.resolve(result);
      }
      return Promise.resolve(end);
    };
    const iterator: AsyncIterableIterator<Reserved<T>> = {
      next,
      return: () => {
        done = true;
        return Promise.resolve(end);
      },
      [Symbol.asyncIterator]: () => iterator,
    };
    return iterator;
  }

  stats(): QueueStats {
    return this.#core.stats();
  }

  /**
   * Resolves once every ack that resolved before the call can no longer be undone by a power loss
   * (at once under the `sync` and `group` ack policies; under `lazy`, once the syncs covering those
   * acks completed; with `now`, the sync starts at once instead of when the bound says). Rejects
   * when the queue fails. A processed set forgets an item only then. @internal
   */
  acksDurable(now = false): Promise<void> {
    return this.#core.acksDurable(now);
  }

  /** The seqs the queue's store held when the queue opened are those below this. @internal */
  get storedAtOpen(): number {
    return this.#core.storedAtOpen;
  }

  /** Processed sets already checked against this queue (shared by its forks). @internal */
  get checkedSets(): WeakSet<object> {
    return this.#core.checkedSets;
  }

  /**
   * Resolves once nothing is left to hand to the consumer: every push made so far is stored and
   * delivered (`ready` and `pendingPushes` are 0), though items may still be in flight. Resolves
   * at once when that already holds. Rejects with `ERR_STORE_FAILED` if the queue fails, with
   * `ERR_CORRUPT` once a read met damaged data, and with `ERR_CLOSED` if the queue closes before
   * it holds (close first stores the pushes and acks already under way).
   */
  drained(options?: WaitOptions): Promise<void> {
    return waitFor(this.#core, 'drained', options);
  }

  /**
   * Resolves once the queue is idle: drained, and every item acked with its ack stored under the
   * durability policy (`ready`, `inFlight`, `pendingPushes` and `pendingAcks` are all 0). Settles
   * as {@link Consumer.drained} does otherwise.
   */
  onIdle(options?: WaitOptions): Promise<void> {
    return waitFor(this.#core, 'onIdle', options);
  }

  /**
   * Close the queue (both handles, and every fork). Idempotent. On a consumer made by `fork()`,
   * close that consumer only: its items go back to the queue, which stays open.
   */
  close(): Promise<void> {
    if (this.#holder !== undefined) {
      this.#core.closeHolder(this.#holder);
      return Promise.resolve();
    }
    return this.#core.close();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}

const isReserved = (item: unknown): boolean => item instanceof Reserved;

/** A reserved item. Ack it to remove it, nack it to have it redelivered. */
export class Reserved<T = Uint8Array> {
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
      if (error instanceof AsyncSchemaError) throw error;
      const message = (error as Error)?.message ?? String(error);
      return error instanceof QueueError && error.code === 'ERR_INVALID' ? `${codec.name}: ${message}` : `${codec.name} could not decode the payload: ${message}`;
    }
  }

  /** Stable id of the item, unchanged by redelivery: dedupe on it. */
  get seq(): number {
    return this.#entry.seq;
  }

  /**
   * 1 on first delivery, +1 on each redelivery. Over a store that keeps delivery counts
   * (`features.deliveries`) the count goes on across restarts and crashes (after a crash it may
   * count one delivery more than an item had: see README, "Delivery counts"); over another store
   * it starts again from 1 at each open.
   */
  get deliveries(): number {
    return this.#entry.deliveries;
  }

  /** True once acked, nacked, dead-lettered, returned by close, or once its lease ran out. */
  get settled(): boolean {
    return this.#settled || this.#entry.token !== this.#token || this.#core.closed || this.#lease?.expired === true || this.holder?.closed === true;
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
      if (ms !== undefined) lengthMs = leaseLength('ms', ms, false);
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
    let delay = 0;
    try {
      const o = optionsObject('options', options);
      knownKeys('options', o, ['delayMs']);
      if (o.delayMs !== undefined) delay = delayMs('options.delayMs', o.delayMs);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.#core.nack(this, this.#entry, delay);
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

