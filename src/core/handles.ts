// The consuming handle users hold: Consumer, a thin layer over QueueCore. Producer and Reserved
// live in ./producer.ts and ./reserved.ts; this module exports all three, as it always has.
import type { QueueConsumer } from '../api/handles.js';
import { isRaw } from '../lib/codec.js';
import { expectation, knownKeys, optionalSignal, optionsObject, positiveInteger } from '../lib/validate.js';
import { type WorkerSettings, workerSettings } from '../api/worker-pool.js';
import type { QueueCore } from './queue-core.js';
import type { Holder } from './entry.js';
import { DeadLetterQueue } from './dead-letters.js';
import { leaseLength } from './leases.js';
import { type Taker, gather, settleAll } from './batches.js';
import { runProcess } from './process.js';
import type { BatchHandler, ProcessHandler } from './run-context.js';
import { type RetryDelayFunction, defaultRetryDelays, delayMs } from './retry.js';
import type {
  BatchOptions,
  NackOptions,
  ProcessOptions,
  QueueStats,
  ReserveManyOptions,
  ReserveOptions,
  WaitOptions,
} from '../api/types.js';
import { waitFor } from './producer.js';
import { Reserved } from './reserved.js';

export { Producer, type PushValue, keyOption, keysOption } from './producer.js';
export { delayOption } from './push-options.js';
export { Reserved } from './reserved.js';
export type { BatchHandler, ProcessHandler } from './run-context.js';

/** The consuming handle: reserve items, then ack or nack each. */
export class Consumer<T = Uint8Array> implements QueueConsumer<T, Reserved<T>> {
  readonly #core: QueueCore;
  readonly #retryDelays: RetryDelayFunction;
  /** The dead-letter queue: items moved out by `maxDeliveries` or `item.deadLetter()`. See docs/guides/dead-letters.md, "Dead letters". */
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
   * See docs/guides/processing.md, "Competing consumers".
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

  async #reserveAccepted(signal: AbortSignal | undefined, leaseMs: number, groupLimit: number): Promise<Reserved<T> | null> {
    for (;;) {
      const item = await this.#core.reserve(signal, leaseMs, this.#holder, groupLimit);
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
    let groupLimit: number;
    try {
      const o = optionsObject('options', options);
      knownKeys('options', o, ['signal', 'leaseMs', 'groupConcurrency']);
      signal = optionalSignal('options.signal', o.signal);
      leaseMs = o.leaseMs === undefined ? this.#core.leaseMs : leaseLength('options.leaseMs', o.leaseMs, true);
      groupLimit = groupConcurrencyOption(o.groupConcurrency);
    } catch (error) {
      return Promise.reject(error);
    }
    if (isRaw(this.#core.codec)) return this.#core.reserve(signal, leaseMs, this.#holder, groupLimit) as Promise<Reserved<T> | null>;
    return this.#reserveAccepted(signal, leaseMs, groupLimit);
  }

  /**
   * The oldest ready item, or `null` when none is ready or the queue is closed. Never waits. The
   * queue's lease applies. With `groupConcurrency`, no item of a group that has that many in
   * flight (as for `process()`).
   */
  tryReserve(options?: { groupConcurrency?: number }): Reserved<T> | null {
    let groupLimit = Infinity;
    if (options !== undefined) {
      const o = optionsObject('options', options);
      knownKeys('options', o, ['groupConcurrency']);
      groupLimit = groupConcurrencyOption(o.groupConcurrency);
    }
    for (;;) {
      const item = this.#core.tryReserve(this.#holder, this.#core.leaseMs, groupLimit);
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
    let common: WorkerSettings;
    let batch: { size: number; waitMs: number; handler: BatchHandler } | undefined;
    let groupLimit = Infinity;
    try {
      if (typeof handler !== 'function') throw new TypeError(expectation('handler', 'a function', handler));
      const { settings, o } = workerSettings(options, ['batch', 'groupConcurrency']);
      if (o.batch !== undefined) {
        const b = optionsObject('options.batch', o.batch);
        knownKeys('options.batch', b, ['size', 'waitMs']);
        const size = positiveInteger('options.batch.size', b.size);
        const waitMs = b.waitMs === undefined ? 0 : delayMs('options.batch.waitMs', b.waitMs);
        if (settings.heartbeat)
          throw new TypeError(
            expectation('options.heartbeat', 'false or absent with options.batch (a batch has no single lease to keep)', o.heartbeat),
          );
        batch = { size, waitMs, handler: handler as BatchHandler };
      }
      groupLimit = groupConcurrencyOption(o.groupConcurrency);
      common = settings;
    } catch (error) {
      return Promise.reject(error);
    }
    const core = this.#core;
    // While it runs, the queue has a consumer, also between two items (`QueueCore.consuming`).
    core.loops++;
    return runProcess(core, handler as ProcessHandler, {
      ...common,
      retryDelays: this.#retryDelays,
      time: core.time,
      holder: this.#holder,
      accept: isRaw(core.codec) ? undefined : this.#accept,
      groupLimit,
      batch,
    }).finally(() => core.loops--);
  }

  /**
   * Up to `n` items: waits for the first as `reserve()` does, then takes those ready, and those
   * that come within `waitMs` while fewer than `n` are in hand. Resolves `[]` once the queue is
   * closed. Each item is a reservation of its own: settle them one by one, or with `ackMany` /
   * `nackMany`. See docs/guides/processing.md, "Batches".
   */
  async reserveMany(n: number, options?: ReserveManyOptions): Promise<Reserved<T>[]> {
    let waitMs: number;
    let reserveOptions: ReserveOptions;
    let groupLimit: number;
    try {
      positiveInteger('n', n);
      const o = optionsObject('options', options);
      knownKeys('options', o, ['signal', 'waitMs', 'leaseMs', 'groupConcurrency']);
      waitMs = o.waitMs === undefined ? 0 : delayMs('options.waitMs', o.waitMs);
      groupLimit = groupConcurrencyOption(o.groupConcurrency);
      reserveOptions = {
        signal: o.signal as AbortSignal | undefined,
        leaseMs: o.leaseMs as number | undefined,
        groupConcurrency: groupLimit,
      };
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
          const item = await this.#core.reserveIn(group, this.#holder, leaseMs, groupLimit);
          if (item === null || this.#accept(item)) return item;
        }
      },
      now: () => {
        for (;;) {
          const item = this.#core.tryReserve(this.#holder, leaseMs, groupLimit);
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

/** `groupConcurrency` of `process()`, `reserve()`, `tryReserve()` and `reserveMany()`: a positive integer or Infinity (none, the default). */
function groupConcurrencyOption(value: unknown): number {
  return value === undefined ? Infinity : positiveInteger('options.groupConcurrency', value, true);
}
