/**
 * The Store contract: what a backend implements so the queue can persist through it.
 *
 * The core queue owns every piece of in-memory state (ready order, in-flight reservations,
 * waiters, capacity, seq assignment, group commit). A Store owns persistence only. The
 * contract is batch-oriented so the core can batch and group-commit once, for every backend.
 *
 * The core calls a store from one logical owner and never overlaps two `append` calls or two
 * `ack` calls; an `append` and an `ack` may be in flight at the same time. `read` may be called
 * at any time between `open` and `close`.
 *
 * The conformance suite (`persistent-queue/conformance`) checks every rule written here.
 */
import type { OwnerSurface } from './owner-surface.js';

/** One stored item: its sequence number and its payload bytes. */
export interface StoredItem {
  /** Sequence number assigned by the core; strictly increasing in append order, never reused. */
  readonly seq: number;
  /** The payload exactly as pushed. The store must not mutate it after returning it. */
  readonly bytes: Uint8Array;
  /**
   * Stores with `features.scheduling`: the item's priority, an integer from
   * {@link PRIORITY_MIN} to {@link PRIORITY_MAX}; 0 (the default) may be left out.
   */
  readonly priority?: number;
  /**
   * Stores with `features.scheduling`: the item is not handed out before this time, in
   * milliseconds since the Unix epoch (a non-negative safe integer); 0 (none, the default) may be
   * left out. A store refuses any other value with `ERR_STORE` and stores nothing of the batch.
   */
  readonly notBefore?: number;
  /**
   * Stores with `features.idempotency`: the item's idempotency key, a string of 1 to
   * {@link MAX_KEY_BYTES} UTF-8 bytes; absent for an item pushed without one. Given with `keyedAt`.
   */
  readonly key?: string;
  /**
   * Stores with `features.idempotency`, with `key` only: when the key was stored, in ms since the
   * Unix epoch on the queue's clock (a non-negative safe integer). The queue forgets a key once it
   * is older than its window; the store keeps it as long as {@link Store.keepKeysFrom} asks.
   */
  readonly keyedAt?: number;
  /**
   * Stores that ingest a spool (LogStore): the spool record this item was pushed as, stored with
   * the item in the same atomic write, so that a crash never ingests a record twice.
   */
  readonly spool?: SpoolSource;
  /**
   * Stores with `features.groups`: the item's group, a string of 1 to {@link MAX_GROUP_BYTES}
   * UTF-8 bytes; absent for an item pushed without one. The queue limits how many items of one
   * group are in flight at once (`process(handler, { groupConcurrency })`) and may count rate
   * limits by it.
   */
  readonly group?: string;
  /**
   * Stores with `features.schedules`: the schedule slot this item was fired for, stored with the
   * item in the same atomic write, so that a crash never loses a slot's progress while keeping its
   * item, nor the other way round. The store reports the progress it implies from `open`
   * (`StoreRecovery.schedules`), acked or not.
   */
  readonly fired?: ScheduleFire;
}

/** What fired an item (`StoredItem.fired`): a schedule's name, the slot, and the slot after it. */
export interface ScheduleFire {
  /** The schedule's name (see {@link StoredSchedule.name}). */
  readonly name: string;
  /** The slot's time, in ms since the Unix epoch: a non-negative safe integer. */
  readonly slot: number;
  /** The schedule's next slot after this one, in ms since the Unix epoch (0 when it has none). */
  readonly next: number;
}

/**
 * A schedule a store keeps (`features.schedules`): what the queue fires, opaque to the store but
 * for its name, and how far it fired.
 */
export interface StoredSchedule {
  /** A string of 1 to {@link MAX_SCHEDULE_NAME_BYTES} UTF-8 bytes; one schedule per name. */
  readonly name: string;
  /** How the queue describes the schedule (its slots and its items' options): at most {@link MAX_SCHEDULE_SPEC_BYTES} UTF-8 bytes. */
  readonly spec: string;
  /** The payload of every item it fires (at most the store's `maxItemBytes`). */
  readonly bytes: Uint8Array;
  /** Every slot at or before this time (ms since the Unix epoch) fired, or was passed over. */
  readonly firedThrough: number;
  /** The schedule's next slot, in ms since the Unix epoch (0 when it has none). */
  readonly nextAt: number;
}

/** Longest schedule name, in UTF-8 bytes (one metadata entry of a LogStore frame holds it with its slot). */
export const MAX_SCHEDULE_NAME_BYTES = 128;
/** Longest schedule description (`StoredSchedule.spec`), in UTF-8 bytes. */
export const MAX_SCHEDULE_SPEC_BYTES = 512;

/** Where an ingested item came from: a spool file's id (32 hex digits) and its record number there (from 1). */
export interface SpoolSource {
  readonly file: string;
  readonly record: number;
}

/** Longest idempotency key, in UTF-8 bytes (one metadata entry of a LogStore frame holds it). */
export const MAX_KEY_BYTES = 255;

/** Longest group name, in UTF-8 bytes: a tenant's or an account's id, kept with every item of it. */
export const MAX_GROUP_BYTES = 64;

/**
 * One idempotency key a store holds (stores with `features.idempotency`): the key, the seq of the
 * item pushed with it, and when it was stored.
 */
export interface StoredKey {
  readonly key: string;
  readonly seq: number;
  readonly keyedAt: number;
}

/** Lowest item priority. */
export const PRIORITY_MIN = -128;
/** Highest item priority: higher priorities are handed out first. */
export const PRIORITY_MAX = 127;

/** True when `item` has a priority or a not-before time: the queue keeps it in its schedule. */
export function isScheduled(item: StoredItem): boolean {
  return (item.priority !== undefined && item.priority !== 0) || (item.notBefore !== undefined && item.notBefore !== 0);
}

/** What a store reports when it is opened. */
export interface StoreRecovery {
  /**
   * The seq the next appended item must get: one more than the highest seq the store ever held
   * (acked or not), or 1 for an empty store. A store must never make the core reuse a seq.
   */
  readonly nextSeq: number;
  /** How many unacked items the store holds (dead letters are not counted). */
  readonly count: number;
  /**
   * Stores with `features.deliveries`: the last `below` given to {@link Store.markDelivered}
   * (1 when none was): every unacked item with a smaller seq was handed out once (a queue stores
   * it one past the item it hands out, never ahead).
   */
  readonly deliveredBelow?: number;
  /** Stores with `features.deliveries`: the newest delivery mark of each unacked item that has one, in seq order. */
  readonly marks?: readonly DeliveryMark[];
  /** Stores with `features.deliveries`: how many dead letters the store holds. */
  readonly deadLetters?: number;
  /**
   * Stores with `features.scheduling`: every unacked item with a priority or a not-before time
   * has a seq at or above this one. It may be lower than the lowest such seq (the queue reads the
   * items from there on once, at open), never higher; a store that never held one reports
   * `nextSeq`, so that a queue without scheduled items is not read at open.
   */
  readonly scheduledFrom?: number;
  /**
   * Optional: the store's identity, created once and at random when the store is created and kept
   * across every reopen, so that `(storeId, seq)` names one item for good even though seqs start
   * again at 1 in a store deleted and created again. 1 to 64 characters from `[A-Za-z0-9._-]`
   * (LogStore, MemStore: a UUID). A store without one leaves it out.
   */
  readonly storeId?: string;
  /**
   * Stores with `features.idempotency`: every key the store holds, in any order: the keys of
   * unacked items, and those of items acked, dead-lettered or dropped since, at least while their
   * `keyedAt` is at or above the last {@link Store.keepKeysFrom} bound. A key of an item lost in a
   * crash is never reported (item and key are stored together or not at all). The same key may
   * appear more than once (a key forgotten and pushed again): the highest seq wins.
   */
  readonly keys?: readonly StoredKey[];
  /**
   * Stores with `features.schedules`: every schedule the store holds, in any order, each with its
   * `firedThrough` and `nextAt` as its latest `putSchedule` stored them, raised by the items stored
   * since with a `fired` of its name and a later slot (acked, dead-lettered or not): the fire with
   * the highest slot gives both. A fire of a name the store holds no schedule of is left out.
   */
  readonly schedules?: readonly StoredSchedule[];
}

/**
 * How often one item was handed out, stored before it is handed out again, so that the count
 * survives a restart (stores with `features.deliveries`). Times are milliseconds since the Unix
 * epoch, 0 when not known.
 */
export interface DeliveryMark {
  readonly seq: number;
  /** Times handed out, the delivery this mark is stored for included; at least 1. */
  readonly deliveries: number;
  readonly firstDeliveredAt: number;
  readonly lastDeliveredAt: number;
  /** Message of the last handler error, '' when none; at most {@link MAX_REASON_BYTES} UTF-8 bytes. */
  readonly lastError: string;
}

/** An item moved out of the queue into the store's dead-letter queue. */
export interface DeadLetter {
  /** The seq the item had in the queue; dead letters are kept and listed in this order. */
  readonly seq: number;
  /** The payload exactly as pushed. */
  readonly bytes: Uint8Array;
  /** Times the item was handed out before it was moved (0 when never). */
  readonly deliveries: number;
  /** Milliseconds since the Unix epoch, 0 when not known. */
  readonly firstDeliveredAt: number;
  readonly lastDeliveredAt: number;
  /** When it was moved. */
  readonly deadAt: number;
  /** Why: the last handler error or the reason given; at most {@link MAX_REASON_BYTES} UTF-8 bytes. */
  readonly reason: string;
}

/** Longest `reason` or `lastError` a store must keep, in UTF-8 bytes; the queue cuts longer ones. */
export const MAX_REASON_BYTES = 1024;

/** Arguments of {@link Store.readDeadLetters}. */
export interface DeadLetterRange {
  /** Return only dead letters with `seq > after`. */
  readonly after: number;
  /** Return at most this many (at least one when any qualifies). */
  readonly limit: number;
}

/** One dead letter put back into the queue by {@link Store.redrive}. */
export interface Redrive {
  /** The dead letter's seq. */
  readonly from: number;
  /** The item it becomes: a new seq (as for `append`) and the dead letter's bytes. */
  readonly item: StoredItem;
}

/** Which parts of the conformance suite apply to a store. */
export interface StoreFeatures {
  /** Items survive closing the store and opening it again over the same data. */
  readonly reopen: boolean;
  /** Items survive the process being killed (SIGKILL) under `sync`/`group`. */
  readonly crashSafe: boolean;
  /**
   * The store keeps delivery counts and a dead-letter queue: it implements `markDelivered`,
   * `deadLetter`, `readDeadLetters`, `dropDeadLetters` and `redrive`, and reports
   * `deliveredBelow`, `marks` and `deadLetters` from `open`. A queue asked for `maxDeliveries` or
   * a dead-letter operation over a store without it fails with `ERR_UNSUPPORTED`.
   */
  readonly deliveries?: boolean;
  /**
   * The store keeps each item's `priority` and `notBefore` as appended, returns them from `read`,
   * and reports `scheduledFrom` from `open`. A push with a priority or a delay over a store
   * without it rejects with `ERR_UNSUPPORTED`. Items put back by `redrive` have neither.
   */
  readonly scheduling?: boolean;
  /**
   * The store keeps each item's `key` and `keyedAt` as appended, in the same atomic write as the
   * item, keeps the key after the item is acked or dead-lettered, reports every key it holds as
   * `keys` from `open`, and implements `keepKeysFrom`. A push with an idempotency key over a store
   * without it rejects with `ERR_UNSUPPORTED`. `read` need not return the key.
   */
  readonly idempotency?: boolean;
  /**
   * The store keeps each item's `group` as appended, in the same atomic write as the item, and
   * returns it from `read`. A push with a group over a store without it rejects with
   * `ERR_UNSUPPORTED`. Items put back by `redrive` have none.
   */
  readonly groups?: boolean;
  /**
   * The store keeps schedules (`putSchedule`, `dropSchedule`), keeps each item's `fired` in the
   * same atomic write as the item, and reports the schedules with the progress their fires imply
   * as `schedules` from `open`. The queue's `schedule()` over a store without it rejects with
   * `ERR_UNSUPPORTED`.
   */
  readonly schedules?: boolean;
}

/** What {@link Store.usage} reports. */
export interface StoreUsage {
  /** Bytes the store's files take, preallocated space included. */
  readonly bytesOnDisk: number;
  /** How many segment (or data) files the store has. */
  readonly segments: number;
}

/** Arguments of {@link Store.read}. */
export interface ReadRange {
  /** Return only items with `seq > after`. */
  readonly after: number;
  /** Return only items with `seq < before`. */
  readonly before: number;
  /** Return at most this many items (at least one when any qualifies). */
  readonly limit: number;
}

/**
 * A persistence backend.
 *
 * Lifecycle: `open()` once, then any number of `append`/`ack`/`read`, then `close()` once.
 * A store backs one open queue at a time.
 *
 * Errors: a method that rejects with anything but a `QueueError` of code `ERR_STORE_FULL`
 * fails the queue instance (fail-stop: every pending and later operation rejects with
 * `ERR_STORE_FAILED`). `ERR_STORE_FULL` means the batch was not stored and the store is still
 * consistent (for example ENOSPC, with the partial write cut off again); only that batch fails.
 * `read` may throw or reject `QueueError` `ERR_CORRUPT` for damage found while reading.
 */
export interface Store {
  /** Largest payload, in bytes, this store accepts. Larger pushes reject with `ERR_TOO_LARGE`. */
  readonly maxItemBytes: number;
  /** What the conformance suite may expect of this store. */
  readonly features: StoreFeatures;

  /**
   * Acquire the backing resource and recover its state. Rejects with `OpenError` (codes
   * `ERR_STORE`, `ERR_CORRUPT`, `ERR_UNSUPPORTED_VERSION`, `ERR_LOCKED`) and changes nothing when
   * the data cannot be opened.
   */
  open(): Promise<StoreRecovery>;

  /**
   * Store a batch. `items` is non-empty; its seqs are consecutive and continue from the last
   * appended seq (or `StoreRecovery.nextSeq`). When `sync` is true the promise resolves only once
   * the batch survives power loss (and every earlier batch with it); when false, once it survives
   * the process exiting. The batch is all-or-nothing after a crash only in the sense that each
   * item is either wholly present or absent; a prefix of a batch may survive an unsynced crash.
   */
  append(items: readonly StoredItem[], sync: boolean): Promise<void>;
  // The store may keep `items` and the objects in it: the core never changes the array, nor the
  // `seq`, `bytes`, `priority`, `notBefore`, `key`, `keyedAt`, `group` and `fired` of an item, after the
  // call (the bytes are the core's own copy). Over a store without `features.scheduling` every
  // item's priority and not-before time are 0; over one without `features.idempotency` no item has
  // a key; over one without `features.groups` no item has a group.

  /**
   * Remove a batch of items, in any order. Each seq was appended and not yet acked. With `sync`
   * the removal survives power loss when the promise resolves; without it, a process exit.
   */
  ack(seqs: readonly number[], sync: boolean): Promise<void>;

  /**
   * Unacked items in `(after, before)`, in seq order, at most `limit`, skipping acked ones.
   * May return synchronously (the core then serves `tryReserve()` from it without waiting)
   * or a promise. Items must be returned exactly as appended (with `features.scheduling`, their
   * `priority` and `notBefore` too; with `features.groups`, their `group`; with
   * `features.schedules`, their `fired`).
   */
  read(range: ReadRange): readonly StoredItem[] | Promise<readonly StoredItem[]>;

  /**
   * Optional, for a store that keeps its data in memory (MemStore): one settled promise that its
   * `append` and `ack` return when the call finished before returning. The core, given it back,
   * goes on at once instead of a microtask later and, while calls keep returning it, hands each
   * push and ack over as it comes rather than gathering a batch over a microtask, since a call
   * costs such a store less than the wait. Any other result (a rejection, another promise) is
   * waited for as usual, and batches gather again. A store that writes to a file must not have
   * it: every operation would then be a call, and a write.
   */
  readonly done?: Promise<void>;

  /** Release the backing resource. Called once, after every append, ack and sync has settled. */
  close(): Promise<void>;

  /**
   * Optional: make every earlier `append` and `ack` survive power loss, as the next call with
   * `sync: true` would, without storing anything new. The queue calls it for `lazy` acks (acks
   * stored with `sync: false`, made durable within a bound) when no synced call comes: from a
   * timer, and before `close`. Never overlaps another `sync`; may overlap an `append` or `ack`.
   * A rejection fails the queue instance. A store without it keeps acks under `group` when
   * `lazy` is asked for (stronger, never weaker).
   */
  sync?(): Promise<void>;

  /**
   * Optional: what the store takes on disk now, for `stats()`. Called between `open` and
   * `close`, synchronously, as often as the user asks for stats: answer from memory, never by
   * reading the disk. Both numbers are non-negative safe integers.
   */
  usage?(): StoreUsage;

  /**
   * Optional: at least the payload bytes of the unacked items (dead letters not counted), for a
   * queue with a byte capacity (`Builder.capacityBytes`; a queue asked for one over a store
   * without this method fails to open with `ERR_UNSUPPORTED`). Called once, right after `open`,
   * before any other call. Exact, or an upper bound the store can give without reading every
   * item (a number below the true bytes would let the queue hold more than its bound). A
   * non-negative safe integer.
   */
  payloadBytes?(): number | Promise<number>;
  /**
   * Required when `features.idempotency` is true: keys whose `keyedAt` is below `at` need not be
   * kept any longer. The store may drop them whenever it likes (at once, or at its next
   * checkpoint or compaction); until it does, `open` may still report them. `at` never decreases
   * within one open. Synchronous, never fails: it only lowers what the store must keep.
   */
  keepKeysFrom?(at: number): void;

  /**
   * Optional: serve the queue to other processes and threads. The Builder calls it once the queue
   * is open, before `open()` resolves, with what the queue lets others do (`OwnerSurface`); the
   * store stops serving when it closes. A rejection fails the open (the queue is closed again).
   * LogStore serves an endpoint in its directory and ingests its spool (docs/guides/other-processes.md, "Producers in other
   * processes and threads").
   */
  attach?(surface: OwnerSurface): void | Promise<void>;

  // ---- Schedules: required when `features.schedules` is true. ----
  //
  // Never called while another of the two is in flight; each may overlap an append, an ack or a sync.

  /**
   * Store `schedule`, replacing the one of its name, if any. With `sync` it survives power loss when
   * the promise resolves; without it, a process exit. A schedule outside the contract is refused
   * with `ERR_STORE` and nothing changes.
   */
  putSchedule?(schedule: StoredSchedule, sync: boolean): Promise<void>;

  /** Delete the schedule of `name` (one the store holds). `sync` as for `putSchedule`. */
  dropSchedule?(name: string, sync: boolean): Promise<void>;

  // ---- Delivery counts and dead letters: required when `features.deliveries` is true. ----
  //
  // markDelivered, deadLetter and dropDeadLetters are never called while another of the three is
  // in flight; each may overlap an append, an ack, a redrive or a sync. The core never acks a seq
  // it is dead-lettering, nor the other way round. redrive takes the place of an append: it never
  // overlaps an append or another redrive.

  /**
   * Store `below` as the new `deliveredBelow` (it may be lower than the last one: a clean close
   * stores the exact bound) and each mark in `marks` (replacing any earlier mark of its seq). Each
   * seq is appended and unacked. `sync` as for `ack`. Marks of items acked or dead-lettered since
   * are dropped by the store whenever it likes.
   *
   * May finish synchronously, as `read` may: returning `undefined` (rather than a promise) says
   * the marks are stored, as the promise resolving would, by the time the call returns (it then
   * throws instead of rejecting). The queue then hands the item out in the same call (a
   * `tryReserve()` finds the item at once); a promise makes the item wait for it. It is on the
   * consumer's path, called before each hand-out (or each run of hand-outs made together), so a
   * store should finish it synchronously when it can. A refusal with `ERR_STORE_FULL` stores
   * nothing and fails nothing: the queue hands the item out and counts it in memory.
   */
  markDelivered?(below: number, marks: readonly DeliveryMark[], sync: boolean): void | Promise<void>;

  /**
   * Move items out of the queue into the dead-letter queue: each entry's seq is appended, unacked
   * and not yet a dead letter, and its bytes are that item's. When the promise resolves, each
   * item is acked (no longer read or counted) and held as a dead letter, and this survives power
   * loss whatever the durability policy. After a crash at any moment each entry is either moved
   * or not moved at all: never lost, never in both.
   */
  deadLetter?(entries: readonly DeadLetter[]): Promise<void>;

  /** Dead letters with `seq > after`, in seq order, at most `limit`, exactly as stored. */
  readDeadLetters?(range: DeadLetterRange): readonly DeadLetter[] | Promise<readonly DeadLetter[]>;

  /** Delete dead letters (each one is held). `sync` as for `ack`. */
  dropDeadLetters?(seqs: readonly number[], sync: boolean): Promise<void>;

  /**
   * Put dead letters back into the queue as new items, in place of an `append`: the items' seqs
   * follow the last appended seq as for `append`, and each item's bytes are its dead letter's.
   * After a crash each move is either done (the item stored and unacked, the dead letter gone) or
   * not done (the dead letter held, the seq never stored); `sync` as for `append`.
   */
  redrive?(moves: readonly Redrive[], sync: boolean): Promise<void>;
}

/** True when `value` has the shape of a {@link Store}. */
export function isStore(value: unknown): value is Store {
  if (value === null || typeof value !== 'object') return false;
  const s = value as Record<string, unknown>;
  return (
    typeof s.open === 'function' &&
    typeof s.append === 'function' &&
    typeof s.ack === 'function' &&
    typeof s.read === 'function' &&
    typeof s.close === 'function' &&
    typeof s.maxItemBytes === 'number'
  );
}

/** True when `store` declares `features.idempotency` and has the method it needs. */
export function keepsKeys(store: Store): boolean {
  return store.features.idempotency === true && typeof store.keepKeysFrom === 'function';
}

/** True when `store` declares `features.schedules` and has the methods it needs. */
export function keepsSchedules(store: Store): boolean {
  return store.features.schedules === true && typeof store.putSchedule === 'function' && typeof store.dropSchedule === 'function';
}

/** True when `store` declares `features.deliveries` and has every method it needs. */
export function keepsDeliveries(store: Store): boolean {
  return (
    store.features.deliveries === true &&
    typeof store.markDelivered === 'function' &&
    typeof store.deadLetter === 'function' &&
    typeof store.readDeadLetters === 'function' &&
    typeof store.dropDeadLetters === 'function' &&
    typeof store.redrive === 'function'
  );
}

/** The characters and length a {@link StoreRecovery.storeId} may have. */
export const STORE_ID_PATTERN = /^[A-Za-z0-9._-]{1,64}$/;
