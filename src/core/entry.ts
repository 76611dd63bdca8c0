// The records the core keeps per push, per item and per ack batch, and small helpers the core and the handles share.
import type { ByteArena } from '../lib/bytes.js';
import { QueueError } from '../contract/errors.js';
import type { ScheduleFire, SpoolSource, Store, StoredItem } from '../contract/store.js';
import { expectation } from '../lib/validate.js';
import type { Lease } from './leases.js';

export type { PushPayload } from '../api/types.js';

/**
 * What a push stores with its items besides their bytes, each field only when set: `PLAIN` for a
 * push with none, so a plain push allocates nothing for it.
 */
export interface PushMeta {
  /** The items' priority. @default 0 */
  readonly priority?: number;
  /** Not before this time, in ms since the epoch. @default 0 (none) */
  readonly notBefore?: number;
  /** The items' group. */
  readonly group?: string | undefined;
  /** A redrive: the dead letters the payloads come from, one per payload. */
  readonly from?: number[];
  /** Idempotency keys, one per payload, and when they were stored. */
  readonly keys?: readonly string[];
  readonly keyedAt?: number;
  /** Records ingested from a spool: where each payload came from. */
  readonly sources?: readonly SpoolSource[];
  /** Items a schedule fires: the slot of each payload. */
  readonly fires?: readonly ScheduleFire[];
}

export const PLAIN: PushMeta = Object.freeze({});

/** The meta of a push with these options: `PLAIN` when it has none. */
export function pushMeta(priority: number, notBefore: number, group: string | undefined): PushMeta {
  return priority === 0 && notBefore === 0 && group === undefined ? PLAIN : { priority, notBefore, group };
}

export interface PendingPush {
  payloads: Uint8Array[];
  /** Set for a redrive: the dead letters the payloads come from, one per payload. */
  from?: number[];
  /** `push` resolves with one seq, `pushMany` with the list. */
  single: boolean;
  /** The items' priority and not-before time (ms since the epoch, 0: none). */
  priority: number;
  notBefore: number;
  /** Set for a push with idempotency keys: one per payload, with when they were stored. */
  keys?: readonly string[];
  keyedAt?: number;
  /** Set for records ingested from a spool: where each payload came from, stored with its item. */
  sources?: readonly SpoolSource[];
  /** The items' group (`push(value, { group })`), or undefined. */
  group: string | undefined;
  /** Set for the items a schedule fires: the slot of each payload, stored with its item. */
  fires?: readonly ScheduleFire[];
  resolve: (seqs: number | number[]) => void;
  reject: (error: unknown) => void;
  signal: AbortSignal | undefined;
  onAbort: (() => void) | undefined;
}

export interface Waiter<T> {
  resolve: (value: T) => void;
  reject: (error: unknown) => void;
  signal: AbortSignal | undefined;
  onAbort: (() => void) | undefined;
  /** A reserve waiter's lease length; undefined: the queue's. */
  leaseMs?: number;
  /** The forked consumer a reserve waiter waits for; undefined: the queue's own consumer. */
  holder?: Holder;
  /** The group a reserve waiter can be withdrawn with (`waitInGroup`); undefined: none. */
  group?: WaitGroup;
  /** A reserve waiter takes no item of a group with this many in flight (`process({ groupConcurrency })`); undefined: no limit. */
  groupLimit?: number;
}

/**
 * Waiters withdrawn together (the workers of one `process()` call, one gather's wait): each
 * member names its group, and withdrawing scans the waiting list, which is rare. Not a Set of the
 * members: one add and one delete per delivery rehash a Set's table every few dozen deliveries,
 * and an obsolete table keeps a link to its successor. Once one of those tables was promoted,
 * every later one, with the waiters it held and all they reach, outlived the young-generation
 * collections as well: `process()` promoted about ten times the bytes of the same loop written
 * with `reserve()`, and the collector took a third of its busy time.
 */
export class WaitGroup {}

/**
 * A forked consumer's share of the queue (`Consumer.fork()`): the items it holds, so that closing
 * it returns them. The queue's own consumer has none: closing it closes the queue.
 */
export interface Holder {
  readonly held: Set<Entry>;
  closed: boolean;
}

/**
 * One item on its way through the core. The object made when its batch is handed to the store (at
 * `push()` for a push of bytes without options, `OnePush`) is the same one the store may keep, the
 * read-ahead holds, and the consumer's reservation points to: one allocation per item. Stores read
 * only `seq` and `bytes`.
 */
export interface Entry extends StoredItem {
  /** The payload; a delayed retry replaces a view into a store's read chunk with a copy (`unpinned`). */
  bytes: Uint8Array;
  /** Set when stored, never changed: 0 for a plain item. */
  readonly priority: number;
  readonly notBefore: number;
  /** Set when stored, never changed: undefined for an item without a group. */
  readonly group: string | undefined;
  /** Set when stored, never changed: the schedule slot it was fired for, undefined for a pushed item. */
  readonly fired: ScheduleFire | undefined;
  /** Deliveries so far, this one included. */
  deliveries: number;
  /** Identifies the current reservation, so a stale Reserved cannot settle a redelivery. */
  token: number;
  /** Reserved by the consumer and not yet settled. */
  inFlight: boolean;
  /** The current reservation's lease (./leases.ts), while it runs; undefined without one. */
  lease: Lease | undefined;
  /** The forked consumer holding the current reservation; undefined for the queue's own. */
  holder: Holder | undefined;
  // Kept only over a store with delivery counts (./deliveries.ts).
  /** Deliveries the store holds a record of (a mark, or the first-delivery bound). */
  marked: number;
  /** First and last delivery, milliseconds since the epoch; 0 when none is known. */
  firstAt: number;
  lastAt: number;
  /** Message of the last handler error, '' when none. */
  lastError: string;
}

export function newEntry(
  seq: number,
  bytes: Uint8Array,
  priority = 0,
  notBefore = 0,
  group: string | undefined = undefined,
  fired: ScheduleFire | undefined = undefined,
): Entry {
  return {
    seq,
    bytes,
    priority,
    notBefore,
    group,
    fired,
    deliveries: 0,
    token: 0,
    inFlight: false,
    lease: undefined,
    holder: undefined,
    marked: 0,
    firstAt: 0,
    lastAt: 0,
    lastError: '',
  };
}

/**
 * A push of one payload without options (`push(bytes)`): the entry its item becomes, made at
 * `push()` and given its seq at the hand-over, and the push's resolving functions. Two small
 * objects where a push with options takes a pending record, an array for its payload and an entry
 * (measured: about 5 % of a push's main-thread time in the `group` cell without the disk). The
 * functions stay out of the entry: a store receives the entry as a `StoredItem` and may keep or
 * clone it, so it holds data only.
 */
export interface OnePush {
  readonly entry: Entry;
  resolve: (seq: number) => void;
  reject: (error: unknown) => void;
}

/** The entry of an item pushed with an idempotency key: a plain entry with the two fields added. */
export function keyedEntry(
  seq: number,
  bytes: Uint8Array,
  priority: number,
  notBefore: number,
  key: string,
  keyedAt: number,
  group: string | undefined,
): Entry {
  const entry = newEntry(seq, bytes, priority, notBefore, group) as Entry & { key: string; keyedAt: number };
  entry.key = key;
  entry.keyedAt = keyedAt;
  return entry;
}

/** The entry of an item ingested from a spool: its origin is stored with it (`StoredItem.spool`). */
export function withSource(entry: Entry, source: SpoolSource): Entry {
  (entry as Entry & { spool: SpoolSource }).spool = source;
  return entry;
}

/** The entry of an item a schedule fired: the slot is stored with it (`StoredItem.fired`). */
export function withFire(entry: Entry, fire: ScheduleFire): Entry {
  (entry as { fired: ScheduleFire | undefined }).fired = fire;
  return entry;
}

/** The entry of an item read from the store, its priority, not-before time and group included. */
export function entryOf(item: StoredItem): Entry {
  return newEntry(item.seq, item.bytes, item.priority ?? 0, item.notBefore ?? 0, item.group, item.fired);
}

/** Acks that go to the store in one call and settle together, sharing one promise. */
export interface AckBatch {
  readonly entries: Entry[];
  readonly seqs: number[];
  promise: Promise<void>;
  resolve: () => void;
  reject: (error: unknown) => void;
}

/** What a pending push's or an ack batch's resolve and reject are until its promise's executor has run. */
export const unset = (): void => {};

/**
 * A batch holding the ack of `first`. Its arrays start as literals of one element: an empty array's
 * first push allocates room for seventeen, which a serial consumer's batch of one never uses (two
 * arrays per ack, about a third of what an ack allocated). The promise's executor closes over the
 * batch alone.
 */
export function newAckBatch(first: Entry): AckBatch {
  const batch: AckBatch = {
    entries: [first],
    seqs: [first.seq],
    promise: undefined as unknown as Promise<void>,
    resolve: unset,
    reject: unset,
  };
  batch.promise = new Promise<void>((resolve, reject) => {
    batch.resolve = resolve;
    batch.reject = reject;
  });
  return batch;
}

export const encoder = new TextEncoder();
export const NO_PUSHES: (PendingPush | OnePush)[] = [];
export const NO_ENTRIES: Entry[] = [];
/** Stores backing an open queue; a store backs one open queue at a time. */
export const busyStores = new WeakSet<Store>();

export function toBytes(name: string, payload: unknown, arena: ByteArena): Uint8Array {
  if (typeof payload === 'string') return encoder.encode(payload);
  // Copied, so the caller may reuse its buffer at once, and the core may hand the bytes to the
  // store and to the consumer without further copies.
  if (payload instanceof Uint8Array) return arena.copy(payload);
  throw new TypeError(expectation(name, 'a Uint8Array or a string', payload));
}

export function closedError(): QueueError {
  return new QueueError('ERR_CLOSED', 'The queue is closed');
}

export function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException('This operation was aborted', 'AbortError');
}

/**
 * Wait in `list` (which is never replaced, only spliced): on abort the waiter leaves the list and
 * the promise rejects with the signal's reason. Whoever settles a waiter detaches its listener.
 */
export function waitIn<T>(
  list: Waiter<T>[],
  signal: AbortSignal | undefined,
  leaseMs?: number,
  holder?: Holder,
  left?: () => void,
  groupLimit = Infinity,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const waiter: Waiter<T> = { resolve, reject, signal, onAbort: undefined, leaseMs, holder, group: undefined, groupLimit };
    if (signal) {
      waiter.onAbort = () => {
        const i = list.indexOf(waiter);
        if (i >= 0) list.splice(i, 1);
        left?.();
        reject(abortReason(signal));
      };
      signal.addEventListener('abort', waiter.onAbort, { once: true });
    }
    list.push(waiter);
  });
}

/** Wait in `list` as a member of `group`: whoever holds the group can withdraw all its members at once, without a listener per member. */
export function waitInGroup<T>(list: Waiter<T>[], group: WaitGroup, leaseMs?: number, holder?: Holder, groupLimit = Infinity): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    list.push({ resolve, reject, signal: undefined, onAbort: undefined, leaseMs, holder, group, groupLimit });
  });
}

/** Take every member of `group` out of `list` and resolve it with `value`, in the order they waited. */
export function withdrawGroup<T>(list: Waiter<T>[], group: WaitGroup, value: T): void {
  const members: Waiter<T>[] = [];
  let kept = 0;
  for (const waiter of list) {
    if (waiter.group === group) members.push(waiter);
    else list[kept++] = waiter;
  }
  list.length = kept;
  for (const waiter of members) waiter.resolve(value);
}

/** Remove the abort listener of a waiter or push that is being settled. */
export function detachAbort(pending: { signal: AbortSignal | undefined; onAbort: (() => void) | undefined }): void {
  if (pending.onAbort) pending.signal!.removeEventListener('abort', pending.onAbort);
  pending.onAbort = undefined;
}

/** The group object whose collection returns the dropped reservations of its members (see core.ts). */
export interface Guard {
  /**
   * Entry and reservation token pairs, flattened: [entry, token, entry, token, ...]. Settling a
   * reservation clears its pair, so the registry holds no settled item (nor its bytes).
   */
  readonly members: (Entry | number | undefined)[];
}
