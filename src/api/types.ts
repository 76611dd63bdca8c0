// The public option and result types of the queue, and the durability policies.

/** When a push or ack resolves; see docs/guides/durability.md "Durability". */
export type Durability = 'sync' | 'group' | 'none';

/** The durability policies by name. */
export const Durability = {
  /** Each operation waits for an fsync of its own bytes. Survives power loss. */
  Sync: 'sync',
  /** Operations wait for an fsync that started after their bytes were written; concurrent operations share it. Survives power loss. */
  Group: 'group',
  /** Operations resolve once their bytes are handed to the OS. Survives a process crash, not power loss. */
  None: 'none',
} as const satisfies Record<string, Durability>;

export const DURABILITIES: readonly string[] = ['sync', 'group', 'none'];

/** When an ack resolves; see docs/guides/durability.md "Durability". */
export type AckDurability = 'sync' | 'group' | 'lazy';

/** The ack durability policies by name. */
export const AckDurability = {
  /** Each ack waits for an fsync of its own. */
  Sync: 'sync',
  /** Acks wait for an fsync that started after they were written; concurrent acks share it. */
  Group: 'group',
  /** Acks resolve once written; a sync within `maxDelayMs` or `maxPending` acks makes them durable. */
  Lazy: 'lazy',
} as const satisfies Record<string, AckDurability>;

export const ACK_DURABILITIES: readonly string[] = ['sync', 'group', 'lazy'];

/** Options of `Builder.ackDurability('lazy', options)`. */
export interface LazyAckOptions {
  /**
   * A sync starts at most this many milliseconds after the first unsynced ack was written.
   * @default 100
   */
  maxDelayMs?: number;
  /**
   * A sync starts as soon as this many written acks wait for one.
   * @default 4096
   */
  maxPending?: number;
}

export interface PushOptions {
  /** Abort while the push waits for capacity or for its batch; an aborted push leaves no trace. */
  signal?: AbortSignal;
  /**
   * Higher priorities are handed out first; FIFO by seq within one priority. An integer from
   * -128 to 127. Strict: a lower priority waits while a higher one is ready. See docs/guides/scheduling.md, "Delayed delivery and priorities".
   * @default 0
   */
  priority?: number;
  /**
   * Not handed out before this many ms from now (the queue's clock); stored at once, ready across
   * restarts once the time has come. Not together with `notBefore`. See docs/guides/scheduling.md, "Delayed delivery and priorities".
   */
  delayMs?: number;
  /** Not handed out before this time: a Date, or ms since the Unix epoch. Not together with `delayMs`. */
  notBefore?: Date | number;
  /**
   * An idempotency key: a string of 1 to 255 UTF-8 bytes. When the queue remembers the key (it
   * was pushed less than `Builder.idempotency`'s window ago, acked or not, across restarts and
   * crashes), the push stores nothing and resolves with the seq the key has; the first push's
   * payload, priority and time stand. Needs a store with `features.idempotency`. `push` only. See
   * docs/guides/effectively-once.md, "Idempotency keys".
   */
  key?: string;
  /**
   * `pushMany` only: an idempotency key per payload, as `key` is for `push`. A remembered key gives
   * its seq and stores nothing; a key that appears twice in the batch gives the seq of its first
   * payload; the other payloads are stored as one batch.
   */
  keys?: readonly string[];
  /**
   * The item's group (a tenant, an account, a resource): a string of 1 to 64 UTF-8 bytes, stored
   * with the item (`pushMany`: every item of the batch). `process(handler, { groupConcurrency })`
   * runs at most that many items of one group at once; a rate limit by group counts each group
   * apart. Needs a store with `features.groups`. See docs/guides/groups-and-rate-limits.md, "Groups and rate limits".
   */
  group?: string;
}

export interface ReserveOptions {
  /** Stop waiting: the returned promise rejects with the signal's reason. */
  signal?: AbortSignal;
  /**
   * The lease of this reservation, in ms (a positive number, or Infinity for none): unsettled
   * when it runs out, the item returns to the queue. See docs/guides/processing.md, "Leases".
   * @default the queue's `Builder.leaseMs` (Infinity)
   */
  leaseMs?: number;
  /** Take no item of a group that has this many in flight, as `process()`'s option does. @default Infinity */
  groupConcurrency?: number;
}

export interface WaitOptions {
  /** Stop waiting: the returned promise rejects with the signal's reason. */
  signal?: AbortSignal;
}

/** The options of `process()` both engines take (the JetStream queue's `process()` takes these alone). */
export interface WorkerOptions {
  /**
   * How many handlers run at once.
   * @default 1
   */
  concurrency?: number;
  /**
   * Stop taking new items; `process()` resolves once running handlers have settled. The handlers'
   * own signals abort too.
   */
  signal?: AbortSignal;
  /**
   * Called with every error a handler throws (or the `TimeoutError` of `timeoutMs`) and the item's
   * `{ seq, deliveries }`, before the item is retried. Not awaited. An `onError` that throws or
   * rejects does not stop processing: its error is emitted as a process warning
   * (`PersistentQueueWarning`, code `PQ_ON_ERROR_FAILED`).
   */
  onError?: (error: unknown, item: HandlerErrorInfo) => unknown;
  /**
   * How long a handler may run. Past it, the handler's signal aborts with a `TimeoutError`, the item
   * is retried under the retry policy, and whatever the handler does later is ignored (its own
   * ack or nack rejects with `ERR_ALREADY_SETTLED`). `process()` does not wait for it.
   * @default Infinity
   */
  timeoutMs?: number;
  /**
   * Extend a running handler's lease (`Builder.leaseMs`) each time half of it has passed, so that
   * a long handler keeps its item. Without it, a handler that outlives its lease has its signal
   * aborted with `ERR_LEASE_EXPIRED`, reported to `onError`, and the item is not retried by it
   * (it is back in the queue already).
   * @default false
   */
  heartbeat?: boolean;
}

export interface ProcessOptions extends WorkerOptions {
  /**
   * At most this many items of one group (`push(value, { group })`) in flight at once, counting
   * every consumer of the queue (forks, other `process()` calls, plain reserves). An item whose
   * group is at the limit waits aside while the items of other groups behind it are handed out;
   * within a group, items keep their order (priority, then seq). Items without a group are not
   * limited by it. See docs/guides/groups-and-rate-limits.md, "Groups and rate limits".
   * @default Infinity
   */
  groupConcurrency?: number;
  /**
   * Batch mode: the handler gets an array of up to `size` items (those ready, and those that come
   * within `waitMs` while fewer are in hand) instead of one. When it resolves, every item it left
   * unsettled is acked; when it throws (or runs past `timeoutMs`), every item it left unsettled is
   * retried. It may settle items itself, one by one (partial success). `concurrency` counts batch
   * handlers. Not with `heartbeat`. See docs/guides/processing.md, "Batches".
   */
  batch?: BatchOptions;
}

export interface BatchOptions {
  /** Most items in one batch: a positive integer. */
  size: number;
  /**
   * How long to wait for more items once the first is in hand, while fewer than `size` are, in
   * ms (on the queue's clock).
   * @default 0 (the items ready at that moment)
   */
  waitMs?: number;
}

export interface ReserveManyOptions {
  /** Stop waiting for the first item: the promise rejects with the signal's reason. */
  signal?: AbortSignal;
  /** As for `BatchOptions.waitMs`. @default 0 */
  waitMs?: number;
  /** The lease of each reservation, as for `reserve()`. */
  leaseMs?: number;
  /** As for `reserve()`: no item of a group that has this many in flight. @default Infinity */
  groupConcurrency?: number;
}

/** What `onError` is told about the item whose handler failed. */
export interface HandlerErrorInfo {
  readonly seq: number;
  /** Deliveries so far, the failed one included. */
  readonly deliveries: number;
}

/** The second argument of a `process()` handler. */
export interface HandlerContext {
  /**
   * Aborts when the handler's `timeoutMs` passes (reason: a `TimeoutError` `DOMException`), when its
   * item's lease runs out (reason: a `QueueError` with code `ERR_LEASE_EXPIRED`), or when
   * `process()` stops taking items (its `signal` aborted, or a fatal error). Created on first read.
   */
  readonly signal: AbortSignal;
}

export interface NackOptions {
  /**
   * How long the item waits before it is ready again, in ms. Meanwhile newer items are delivered;
   * once its time comes it is ready again in seq order. In memory only: after a reopen the item is
   * ready at once.
   * @default 0
   */
  delayMs?: number;
}

/**
 * A snapshot of the queue's state and counters. The cumulative counters (`pushed`, `acked`,
 * `nacked`, `redelivered`, `retried`) count from this queue's `open()`, are kept in memory only, and start
 * again at 0 when the store is opened again.
 */
export interface QueueStats {
  /** Stored items not reserved by the consumer, not waiting for a delayed retry nor for their not-before time. */
  ready: number;
  /** Reserved items not yet acked or nacked. */
  inFlight: number;
  /** Maximum unacked items (ready + in flight + being stored); `Infinity` when unbounded. */
  capacity: number;
  /** Pushes not yet resolved: waiting for capacity or for their batch to be stored. */
  pendingPushes: number;
  /** Acks issued and not yet resolved. */
  pendingAcks: number;
  durability: Durability;
  /** The ack policy in force: what `Builder.ackDurability` asked for, or `'none'` under `durability('none')`, `'group'` for a store without `sync()`. */
  ackDurability: AckDurability | 'none';
  /** Acks resolved under `lazy` whose sync has not completed: what a power loss now may redeliver (0 under every other policy). */
  unsyncedAcks: number;
  closed: boolean;
  /** This queue's id, unique within the process (in open order from 1); diagnostics messages carry it. */
  queueId: number;
  /**
   * The store's identity (`StoreRecovery.storeId`), when the store has one: created at random when
   * the store was created, kept across reopens. Store-and-forward names items by it and their seq.
   */
  storeId?: string;
  /** Items whose push resolved (a `pushMany` of n counts n). */
  pushed: number;
  /** Items whose ack resolved. */
  acked: number;
  /** Items nacked (by `nack()`, a throwing `process()` handler, or an `await using` scope left unacked). */
  nacked: number;
  /** Deliveries after an item's first one in this process: nacked items, dropped reservations, acks refused with `ERR_STORE_FULL`. */
  redelivered: number;
  /**
   * Items waiting for their time: nacked with a delay (`nack({ delayMs })`, a retry of
   * `process()`), or pushed with `delayMs`/`notBefore` and not yet due.
   */
  delayed: number;
  /** Reservations whose lease is running (reserved with a lease, not yet settled). */
  leased: number;
  /** Handler failures (throws and timeouts) that `process()` retried. */
  retried: number;
  /** Items moved into the dead-letter queue by this queue (`maxDeliveries`, `item.deadLetter()`). */
  deadLettered: number;
  /** Dead letters the store holds now (0 over a store without dead letters). */
  deadLetters: number;
  /** Leases that ran out (`Builder.leaseMs`, `reserve({ leaseMs })`), their items returned to the queue. */
  leaseExpired: number;
  /**
   * Deliveries handed out while the store refused their delivery record for want of space
   * (`ERR_STORE_FULL`): counted in memory, and stored with the next record that fits; a crash
   * before that one loses them from the counts. 0 over a store without delivery counts.
   */
  uncountedDeliveries: number;
  /**
   * Items on their way into the dead letters (a `maxDeliveries` move, a payload that did not
   * decode, `item.deadLetter()`, a `process()` failure past the limit): neither ready nor in
   * flight, not yet in `deadLetters`. `drained()` waits for them.
   */
  deadLettering: number;
  /**
   * Ready items set aside because their group is at a consumer's `groupConcurrency`: counted in
   * `ready` too; handed out as their group's items settle.
   */
  groupLimited: number;
  /**
   * Ready items held back by the rate limit (`Builder.rateLimit`): under a limit by group, the
   * items whose group's window is full or paused; under a limit for the queue, every ready item
   * (but those waiting for their group) while its window is full or paused. Counted in `ready`
   * too; 0 without a limit.
   */
  rateLimited: number;
  /** The byte capacity (`Builder.capacityBytes`); present only on a queue that has one. */
  capacityBytes?: number;
  /**
   * Payload bytes of the unacked items (ready, in flight, being acked; dead letters not counted),
   * on a queue with a byte capacity. Exact when `bytesExact` is true; until then (while items
   * stored before this open are left) an upper bound from the store.
   */
  bytes?: number;
  /** True when `bytes` is exact (see `bytes`). */
  bytesExact?: boolean;
  /** Bytes of the store's files, when the store reports its usage (`Store.usage`, LogStore) and the queue is open. */
  bytesOnDisk?: number;
  /** The store's segment (or file) count, reported alongside `bytesOnDisk`. */
  segments?: number;
}

/** A payload of the default byte queue: bytes, or a string stored as UTF-8. */
export type PushPayload = Uint8Array | string;

/**
 * What `push` takes: a value of the queue's type, through its codec (`Builder.codec`); for the
 * default byte queue, a `Uint8Array` or a string (stored as UTF-8).
 */
export type PushValue<T> = 0 extends 1 & T ? T : [T] extends [Uint8Array] ? PushPayload : T;

/** Options of `deadLetters.list()`. */
export interface DeadLetterListOptions {
  /** Only dead letters with a seq above this. @default 0 */
  after?: number;
  /** At most this many. @default 100 */
  limit?: number;
}

/** Options of `deadLetters.redrive()` and `deadLetters.purge()`. */
export interface DeadLetterSelection {
  /** Only these dead letters (by the seq they had); seqs that are not dead letters are skipped. @default every one */
  seqs?: Iterable<number>;
  /** At most this many, oldest first. @default Infinity */
  limit?: number;
}
