// The queue API both engines implement: the embedded queue (`Producer`, `Consumer`, `Reserved`,
// `DeadLetterQueue`), the JetStream queue (`JetStreamProducer`, `JetStreamConsumer`,
// `JetStreamReserved`, `JetStreamDeadLetters`) and the producer `connect()` returns. Each class
// declares `implements`, so a call one engine changes and the other does not is a compile error
// rather than a surprise to code written for both.
//
// Where an engine can only answer by asking a server, the type says so: an `Answer<X>` is `X` on
// the embedded queue, which holds what it is asked about, and a promise of `X` on the JetStream
// queue. Code written for both awaits it; awaiting a value that is not a promise costs one turn.
import type { DeadLetter } from '../contract/store.js';
import type {
  DeadLetterListOptions,
  DeadLetterSelection,
  HandlerContext,
  NackOptions,
  PushOptions,
  PushValue,
  ReserveManyOptions,
  ReserveOptions,
  WorkerOptions,
} from './types.js';

/** An answer the embedded queue gives at once and the JetStream queue after asking its server. */
export type Answer<X> = X | Promise<X>;

/** What a producer offers on either engine, and from another process (`connect()`). */
export interface QueueProducer<T = Uint8Array> {
  /** Stores one item; resolves with its seq once it is durable under the queue's policy. */
  push(value: PushValue<T>, options?: PushOptions): Promise<number>;
  /** Stores the items together, in order; resolves with their seqs. */
  pushMany(values: Iterable<PushValue<T>>, options?: PushOptions): Promise<number[]>;
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** A reserved item on either engine: read it, then settle it once. */
export interface QueueItem<T = Uint8Array> {
  readonly seq: number;
  /** Deliveries so far, this one included. */
  readonly deliveries: number;
  readonly bytes: Uint8Array;
  /** The payload through the queue's codec. */
  readonly value: T;
  readonly settled: boolean;
  /** When the lease runs out, on the queue's clock; `Infinity` without a lease. */
  readonly leaseExpiresAt: number;
  ack(): Promise<void>;
  nack(options?: NackOptions): Promise<void>;
  extend(ms?: number): Promise<void>;
  deadLetter(reason?: string): Promise<void>;
  /** The delivery was refused for its rate (a 429): wait without counting a failed delivery. */
  rateLimited(retryAfterMs: number): Promise<void>;
  /** Gives the item back (a nack) unless it was settled. */
  [Symbol.asyncDispose](): Promise<void>;
}

/** The figures `stats()` gives on either engine. */
export interface QueueStatsCommon {
  ready: number;
  inFlight: number;
  delayed: number;
  leased: number;
  deadLetters: number;
  pendingPushes: number;
  pendingAcks: number;
  closed: boolean;
  pushed: number;
  acked: number;
  nacked: number;
  redelivered: number;
  retried: number;
  deadLettered: number;
  leaseExpired: number;
}

/** The dead letters of a queue on either engine. */
export interface QueueDeadLetters {
  count(): Answer<number>;
  list(options?: DeadLetterListOptions): Promise<DeadLetter[]>;
  peek(): Promise<DeadLetter | null>;
  redrive(options?: DeadLetterSelection): Promise<number[]>;
  purge(options?: DeadLetterSelection): Promise<number>;
  [Symbol.asyncIterator](): AsyncIterator<DeadLetter>;
}

/** What a consumer offers on either engine. */
export interface QueueConsumer<T = Uint8Array, Item extends QueueItem<T> = QueueItem<T>> {
  readonly closed: boolean;
  readonly deadLetters: QueueDeadLetters;
  /** A competing consumer of the same queue, closed with it. */
  fork(): QueueConsumer<T, Item>;
  reserve(options?: ReserveOptions): Promise<Item | null>;
  /** The next ready item, or null when none is ready now: at once on the embedded queue, after a pull that does not wait on JetStream. */
  tryReserve(): Answer<Item | null>;
  reserveMany(n: number, options?: ReserveManyOptions): Promise<Item[]>;
  ackMany(items: Item[]): Promise<void>;
  nackMany(items: Item[], options?: NackOptions): Promise<void>;
  process(handler: (item: Item, context: HandlerContext) => unknown, options?: WorkerOptions): Promise<void>;
  stats(): Answer<QueueStatsCommon>;
  close(): Promise<void>;
  [Symbol.asyncIterator](): AsyncIterator<Item>;
  [Symbol.asyncDispose](): Promise<void>;
}
