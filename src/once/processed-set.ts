/**
 * Processed sets: effectively-once handling on the consumer side. An item's seq never changes
 * across redeliveries and restarts, so a handler that records the seqs it processed can skip a
 * redelivery of one (after a crash between its side effect and the ack, an ack a power loss
 * undid, a lease that ran out). docs/guides/effectively-once.md "Effectively once", docs/internals/core.md "Processed sets".
 *
 * The wrapper here drives any {@link ProcessedSet}: it skips recorded seqs, records after the
 * handler (or in the handler's own transaction, for a {@link TransactionalProcessedSet}), acks,
 * and forgets a seq only once its ack can no longer be undone.
 */
import { QueueError } from '../contract/errors.js';
import { Consumer, Reserved } from '../core/handles.js';
import type { HandlerContext } from '../api/types.js';
import { expectation, knownKeys, optionsObject, positiveInteger } from '../lib/validate.js';

/**
 * The seqs a handler has processed, kept where its side effects go. Implement it over your own
 * database: `record` belongs in the transaction of the side effect when there is one. Each method
 * may answer synchronously or with a promise.
 */
export interface ProcessedSet {
  /** Whether `seq` is recorded as processed. */
  has(seq: number): boolean | Promise<boolean>;
  /** Record `seq` as processed; once this resolves the record must survive what the side effect survives. */
  record(seq: number): void | Promise<void>;
  /** Drop these seqs (their items' acks are durable: they are never delivered again). Unknown seqs are ignored. */
  forget(seqs: readonly number[]): void | Promise<void>;
  /**
   * The highest seq recorded, 0 when none. Optional: with it, the wrapper refuses a set that holds
   * a seq the queue's store did not hold when the queue opened (a set of another queue, or of a
   * store since recreated).
   */
  highest?(): number | Promise<number>;
  /**
   * Bind the set to the store whose identity is `storeId` (`stats().storeId`) unless it serves one
   * already, and answer the identity it serves: the one it kept, or `storeId` when it kept none.
   * The set keeps the identity with its first record, so an empty set binds to whatever queue uses
   * it first. Answer null when the set holds records but no identity (written before it was bound,
   * or by an earlier format): then nothing but `highest` tells its queue apart. Optional: with it,
   * the wrapper refuses a set that serves another store, before any handler runs.
   */
  bind?(storeId: string): string | null | Promise<string | null>;
}

/**
 * A processed set whose records live in the same database as the side effects, written in one
 * synchronous transaction with them (`SqliteProcessedSet` from `persistent-queue/sqlite`).
 */
export interface TransactionalProcessedSet extends ProcessedSet {
  /**
   * In one transaction: unless `seq` is recorded, run `effect` and record `seq`. True when the
   * effect ran; false when `seq` was recorded already. An effect that throws rolls back both.
   */
  runOnce(seq: number, effect: () => void): boolean;
}

/** The handler of a {@link ProcessedSet}: any function, asynchronous or not. */
export type OnceHandler<T> = (item: Reserved<T>, context?: HandlerContext) => unknown;

/** Refuses, at compile time, a function that returns a promise. */
export type NotPromise<R> = R extends PromiseLike<unknown> ? never : R;

/**
 * The handler of a {@link TransactionalProcessedSet}: synchronous, since it runs inside a
 * synchronous transaction (better-sqlite3's). A handler that returns a promise is a compile error,
 * and a `TypeError` at run time: what it wrote before its first `await` is rolled back with the
 * record; what it writes after that runs outside the transaction, in autocommit, and stays.
 */
export type SyncOnceHandler<T, R> = (item: Reserved<T>) => R & NotPromise<R>;

export interface EffectivelyOnceOptions {
  /**
   * Forget the acked seqs in batches of this many: each batch waits for its acks to be durable
   * (under the `lazy` ack policy, for the sync that covers them), then is dropped in one call.
   * @default 256
   */
  forgetBatch?: number;
}

/** The wrapped handler: pass it to `rx.process()`, or call it on each item of a `for await` loop. */
export interface EffectivelyOnce<T> {
  /**
   * Run the handler on `item` unless its seq is recorded, record it, then ack the item. Resolves
   * true when the handler ran, false when the item was skipped as processed; rejects (leaving the
   * item unsettled, so it is retried) when the handler or the set fails.
   */
  (item: Reserved<T>, context?: HandlerContext): Promise<boolean>;
  /** Items skipped as already processed, since this wrapper was made. */
  readonly skipped: number;
  /** Seqs acked and not yet forgotten by the set. */
  readonly unforgotten: number;
  /**
   * Forget every seq acked so far now: waits for their acks to be durable, then drops them from
   * the set. Call it before closing the set (not needed for correctness: a seq left in the set
   * only costs its room).
   */
  flush(): Promise<void>;
}

const DEFAULT_FORGET_BATCH = 256;

function mismatch(what: string): QueueError {
  return new QueueError(
    'ERR_SET_MISMATCH',
    `${what}: the set belongs to another queue, or the queue's store was recreated. Nothing ran. If the store was recreated on purpose, clear the set or delete it (its directory, or its tables) and start again`,
  );
}

const isThenable = (value: unknown): boolean =>
  value !== null &&
  (typeof value === 'object' || typeof value === 'function') &&
  typeof (value as PromiseLike<unknown>).then === 'function';

function isProcessedSet(set: unknown): set is ProcessedSet {
  if (set === null || typeof set !== 'object') return false;
  const s = set as Record<string, unknown>;
  return (
    typeof s.has === 'function' &&
    typeof s.record === 'function' &&
    typeof s.forget === 'function' &&
    (s.highest === undefined || typeof s.highest === 'function') &&
    (s.bind === undefined || typeof s.bind === 'function')
  );
}

/**
 * Make `handler` effectively once over `set` for the items of `consumer`'s queue: an item whose
 * seq the set holds is acked without running the handler. See docs/guides/effectively-once.md, "Processed sets".
 *
 * With a {@link TransactionalProcessedSet} the handler runs inside the set's synchronous
 * transaction, its side effects and the record committing together; it must be synchronous.
 */
export function effectivelyOnce<T, R>(
  consumer: Consumer<T>,
  set: TransactionalProcessedSet,
  handler: SyncOnceHandler<T, R>,
  options?: EffectivelyOnceOptions,
): EffectivelyOnce<T>;
/**
 * With any other {@link ProcessedSet} the handler runs first (its side effects should be
 * idempotent or external), then the seq is recorded, then the item is acked.
 */
export function effectivelyOnce<T>(
  consumer: Consumer<T>,
  set: ProcessedSet & { runOnce?: never },
  handler: OnceHandler<T>,
  options?: EffectivelyOnceOptions,
): EffectivelyOnce<T>;
export function effectivelyOnce<T>(
  consumer: Consumer<T>,
  set: ProcessedSet,
  handler: (item: Reserved<T>, context?: HandlerContext) => unknown,
  options?: EffectivelyOnceOptions,
): EffectivelyOnce<T> {
  if (!(consumer instanceof Consumer)) throw new TypeError(expectation('consumer', 'a Consumer', consumer));
  if (!isProcessedSet(set)) throw new TypeError(expectation('set', 'a ProcessedSet ({ has, record, forget })', set));
  if (typeof handler !== 'function') throw new TypeError(expectation('handler', 'a function', handler));
  const o = optionsObject('options', options);
  knownKeys('options', o, ['forgetBatch']);
  const forgetBatch = o.forgetBatch === undefined ? DEFAULT_FORGET_BATCH : positiveInteger('options.forgetBatch', o.forgetBatch);
  // Under `none` an item is handed out before it is synced: a power loss takes it back and the
  // next push reuses its seq under the same store identity, while a record of that seq may have
  // reached the disk of the set (whatever the set's own durability). The new item would be
  // skipped, acked without its handler. docs/internals/core.md "Processed sets".
  if (consumer.stats().durability === 'none') {
    throw new QueueError(
      'ERR_UNSUPPORTED',
      "effectivelyOnce needs a queue whose items are durable before they are handed out: use durability 'group' or 'sync', not 'none'",
    );
  }
  const runner = new OnceRunner<T>(consumer as Consumer<T>, set, handler, forgetBatch);
  const wrapped = ((item: Reserved<T>, context?: HandlerContext) => runner.handle(item, context)) as EffectivelyOnce<T>;
  Object.defineProperties(wrapped, {
    skipped: { get: () => runner.skipped, enumerable: true },
    unforgotten: { get: () => runner.unforgotten, enumerable: true },
    flush: { value: () => runner.flush(), enumerable: true },
  });
  return wrapped;
}

/** The state of one wrapper: the runs in progress by seq, the acked seqs to forget, the guard. */
class OnceRunner<T> {
  readonly #consumer: Consumer<T>;
  readonly #set: ProcessedSet;
  readonly #handler: (item: Reserved<T>, context?: HandlerContext) => unknown;
  readonly #forgetBatch: number;
  readonly #transactional: boolean;
  /**
   * The run of each seq in progress in this process. A lease that runs out redelivers an item
   * while its first handler may still be running; the second run waits for the first, then finds
   * its record and skips, instead of running the side effect beside it.
   */
  readonly #running = new Map<number, Promise<unknown>>();
  /** Seqs acked since the last forget started. */
  #acked: number[] = [];
  #forgetting: Promise<void> | undefined;
  /** Set once a forget failed: the set is broken, and every later call rejects with this. */
  #failure: unknown;
  #guard: Promise<void> | undefined;
  skipped = 0;

  constructor(
    consumer: Consumer<T>,
    set: ProcessedSet,
    handler: (item: Reserved<T>, context?: HandlerContext) => unknown,
    forgetBatch: number,
  ) {
    this.#consumer = consumer;
    this.#set = set;
    this.#handler = handler;
    this.#forgetBatch = forgetBatch;
    this.#transactional = typeof (set as Partial<TransactionalProcessedSet>).runOnce === 'function';
  }

  get unforgotten(): number {
    return this.#acked.length;
  }

  async handle(item: Reserved<T>, context: HandlerContext | undefined): Promise<boolean> {
    if (!(item instanceof Reserved)) throw new TypeError(expectation('item', 'a Reserved item', item));
    if (this.#failure !== undefined) throw this.#failure;
    if (item.settled) throw new QueueError('ERR_ALREADY_SETTLED', `Item ${item.seq} is settled already: there is nothing to process`);
    await (this.#guard ??= this.#checkGuard());
    const seq = item.seq;
    for (let prior = this.#running.get(seq); prior !== undefined; prior = this.#running.get(seq)) {
      await prior.catch(() => {});
    }
    const run = this.#run(item, context);
    this.#running.set(seq, run);
    try {
      return await run;
    } finally {
      if (this.#running.get(seq) === run) this.#running.delete(seq);
    }
  }

  /**
   * A set that belongs elsewhere would skip new items that happen to reuse its seqs. Checked once
   * per set and queue instance, before the first item is handled: the seqs first (a set holding
   * one the store did not hold at open), then the store identity the set keeps. A set that passed
   * is not checked again by a later wrapper over the same queue, since what it holds past
   * `storedAtOpen` it recorded for this queue.
   */
  async #checkGuard(): Promise<void> {
    const checked = this.#consumer.checkedSets;
    if (checked.has(this.#set)) return;
    if (this.#set.highest !== undefined) {
      const highest = await this.#set.highest();
      if (typeof highest !== 'number' || !Number.isSafeInteger(highest) || highest < 0) {
        throw new TypeError(expectation('set.highest()', 'a non-negative integer', highest));
      }
      const storedAtOpen = this.#consumer.storedAtOpen;
      if (highest >= storedAtOpen) {
        throw mismatch(
          `The processed set holds seq ${highest}, but this queue's store held no seq above ${storedAtOpen - 1} when the queue opened`,
        );
      }
    }
    const storeId = this.#consumer.stats().storeId;
    if (this.#set.bind !== undefined && storeId !== undefined) {
      const bound = await this.#set.bind(storeId);
      if (bound !== null && typeof bound !== 'string') throw new TypeError(expectation('set.bind()', 'a store identity or null', bound));
      if (bound !== null && bound !== storeId) {
        throw mismatch(`The processed set serves the store ${bound}, but this queue's store is ${storeId}`);
      }
    }
    checked.add(this.#set);
  }

  async #run(item: Reserved<T>, context: HandlerContext | undefined): Promise<boolean> {
    const seq = item.seq;
    let ran: boolean;
    if (this.#transactional) {
      ran = (this.#set as TransactionalProcessedSet).runOnce(seq, () => {
        const result = this.#handler(item);
        if (isThenable(result)) {
          // The transaction commits when the handler returns: work still to come would run outside
          // it. Its outcome is dropped here (the TypeError says why), not left unhandled.
          (result as PromiseLike<unknown>).then(undefined, () => {});
          throw new TypeError(expectation('handler', 'a synchronous function (the transaction is synchronous)', result));
        }
      });
    } else if (await this.#set.has(seq)) {
      ran = false;
    } else {
      await this.#handler(item, context);
      // Recorded before the ack: once the ack is durable the item never comes back, and until
      // then a redelivery finds the record.
      await this.#set.record(seq);
      ran = true;
    }
    if (!ran) this.skipped++;
    await item.ack();
    this.#ackedOne(seq);
    return ran;
  }

  #ackedOne(seq: number): void {
    this.#acked.push(seq);
    if (this.#acked.length >= this.#forgetBatch && this.#forgetting === undefined) this.#forgetting = this.#forget(false);
  }

  /** Forget the acked seqs, a batch at a time, each once its acks are durable. */
  async #forget(all: boolean): Promise<void> {
    try {
      while (this.#acked.length >= (all ? 1 : this.#forgetBatch) && this.#failure === undefined) {
        const seqs = this.#acked;
        this.#acked = [];
        // Under `lazy` an ack resolves before it is synced: a power loss could still bring its
        // item back, and then the record must be there.
        // A flush waits for a sync it starts; a batch in the background for the next one due.
        await this.#consumer.acksDurable(all);
        await this.#set.forget(seqs);
      }
    } catch (error) {
      this.#failure = error;
    } finally {
      this.#forgetting = undefined;
    }
  }

  async flush(): Promise<void> {
    // A forget under way may be waiting for the sync the lazy bound starts, on a timer that does
    // not hold the process: start that sync now. A failure shows in the forget that waits for it.
    if (this.#forgetting !== undefined) this.#consumer.acksDurable(true).catch(() => {});
    while (this.#forgetting !== undefined) await this.#forgetting;
    if (this.#failure === undefined && this.#acked.length > 0) {
      this.#forgetting = this.#forget(true);
      await this.#forgetting;
    }
    if (this.#failure !== undefined) throw this.#failure;
  }
}
