/**
 * MemStore: the reference implementation of the Store contract. It keeps items in memory only
 * and never persists, whatever the durability policy; its contents survive closing and opening
 * the same MemStore object again within one process, which is what the conformance suite's
 * reopen tests use.
 */
import { OpenError, QueueError } from '../../contract/errors.js';
import {
  type DeadLetter,
  type DeadLetterRange,
  type DeliveryMark,
  type ReadRange,
  type Redrive,
  type Store,
  type StoredItem,
  type StoredSchedule,
  type StoreFeatures,
  type StoreRecovery,
  isScheduled,
} from '../../contract/store.js';
import { optionsObject, positiveInteger } from '../../lib/validate.js';
import { scheduleFault } from '../../contract/records/schedules.js';
import { KeyTable, keyFault } from '../../contract/records/keys.js';
import { groupFault } from '../../contract/records/groups.js';
import { ScheduleTable, fireFault, storedScheduleFault } from '../../contract/schedule-table.js';
import { lowerBound } from '../../lib/lower-bound.js';

export interface MemStoreOptions {
  /**
   * Largest payload accepted, in bytes.
   * @default 67108864 (64 MiB)
   */
  maxItemBytes?: number;
}

const DEFAULT_MAX_ITEM_BYTES = 64 * 1024 * 1024;
/** The item array is compacted once this many acked items sit before its live head. */
const COMPACT_HEAD_COUNT = 1024;
/**
 * Out-of-order acks past this many, and past half of the live items, are dropped from the array:
 * an old item left unacked at the head (a poison item being retried) would otherwise keep one
 * entry per later acked item, and every ack on the slow path, for as long as it stays.
 */
const COMPACT_ACKED_COUNT = 1024;
/** Every successful call settles with this one promise: nothing to wait for in memory. */
const DONE = Promise.resolve();
const EMPTY = new Uint8Array(0);

export class MemStore implements Store {
  readonly maxItemBytes: number;
  readonly features: StoreFeatures = {
    reopen: true,
    crashSafe: false,
    deliveries: true,
    scheduling: true,
    idempotency: true,
    groups: true,
    schedules: true,
  };
  /** What `append` and `ack` return once they finished, which is during the call (`Store.done`). */
  readonly done: Promise<void> = DONE;

  /** Items in seq order; entries before `#head` are acked and only wait to be compacted away. */
  #items: StoredItem[] = [];
  #head = 0;
  /** Seqs from the head on are consecutive (no acked item was dropped from the middle). */
  #dense = true;
  /** Seqs acked out of order, at or after `#head`. */
  #acked = new Set<number>();
  #nextSeq = 1;
  #open = false;
  #deliveredBelow = 1;
  /** The newest delivery mark of each item that has one; marks of acked items are dropped. */
  #marks = new Map<number, DeliveryMark>();
  /** Dead letters in seq order. */
  #dead: DeadLetter[] = [];
  /**
   * A fresh identity per instance: the items live as long as the object, and a new MemStore
   * starts its seqs at 1 again, so it must not share an identity with any other.
   */
  readonly #storeId = globalThis.crypto.randomUUID();
  /** Idempotency keys of the items appended with one, acked or not, until `keepKeysFrom` lets them go. */
  readonly #keys = new KeyTable();
  /** Schedules, with the progress of the items fired for them, acked or not. */
  readonly #schedules = new ScheduleTable();

  constructor(options?: MemStoreOptions) {
    const o = optionsObject('options', options);
    this.maxItemBytes = o.maxItemBytes === undefined ? DEFAULT_MAX_ITEM_BYTES : positiveInteger('options.maxItemBytes', o.maxItemBytes);
  }

  async open(): Promise<StoreRecovery> {
    if (this.#open) throw new OpenError('ERR_LOCKED', 'This MemStore already backs an open queue');
    this.#open = true;
    for (const seq of this.#marks.keys()) if (!this.#holds(seq)) this.#marks.delete(seq);
    const marks = [...this.#marks.values()].sort((a, b) => a.seq - b.seq);
    // In memory a walk over the live items costs little; a store on disk keeps this bound instead.
    let scheduledFrom = this.#nextSeq;
    for (let i = this.#head; i < this.#items.length; i++) {
      const item = this.#items[i]!;
      if (isScheduled(item) && !this.#acked.has(item.seq)) {
        scheduledFrom = item.seq;
        break;
      }
    }
    return {
      scheduledFrom,
      nextSeq: this.#nextSeq,
      count: this.#items.length - this.#head - this.#acked.size,
      deliveredBelow: this.#deliveredBelow,
      marks,
      deadLetters: this.#dead.length,
      storeId: this.#storeId,
      keys: this.#keys.list(),
      schedules: this.#schedules.list(),
    };
  }

  putSchedule(schedule: StoredSchedule, _sync: boolean): Promise<void> {
    if (!this.#open) return Promise.reject(new QueueError('ERR_CLOSED', 'MemStore is not open'));
    const fault = storedScheduleFault(schedule, this.maxItemBytes);
    if (fault !== undefined) return Promise.reject(new QueueError('ERR_STORE', `MemStore cannot store ${fault}`));
    this.#schedules.put({
      name: schedule.name,
      spec: schedule.spec,
      bytes: schedule.bytes.slice(),
      firedThrough: schedule.firedThrough,
      nextAt: schedule.nextAt,
    });
    return DONE;
  }

  dropSchedule(name: string, _sync: boolean): Promise<void> {
    if (!this.#open) return Promise.reject(new QueueError('ERR_CLOSED', 'MemStore is not open'));
    if (!this.#schedules.drop(name))
      return Promise.reject(new QueueError('ERR_STORE', `MemStore holds no schedule ${JSON.stringify(name)}`));
    return DONE;
  }

  /** Exact: a walk over the live items, in memory. */
  payloadBytes(): number {
    let bytes = 0;
    for (let i = this.#head; i < this.#items.length; i++) {
      const item = this.#items[i]!;
      if (!this.#acked.has(item.seq)) bytes += item.bytes.byteLength;
    }
    return bytes;
  }

  /** Finishes synchronously: nothing to wait for in memory. */
  markDelivered(below: number, marks: readonly DeliveryMark[], _sync: boolean): void {
    if (!this.#open) throw new QueueError('ERR_CLOSED', 'MemStore is not open');
    for (const mark of marks) {
      if (!this.#holds(mark.seq)) throw new QueueError('ERR_STORE', `MemStore cannot mark seq ${mark.seq}: not held`);
    }
    this.#deliveredBelow = below;
    for (const mark of marks) this.#marks.set(mark.seq, { ...mark });
  }

  deadLetter(entries: readonly DeadLetter[]): Promise<void> {
    if (!this.#open) return Promise.reject(new QueueError('ERR_CLOSED', 'MemStore is not open'));
    for (const entry of entries) {
      if (!this.#holds(entry.seq))
        return Promise.reject(new QueueError('ERR_STORE', `MemStore cannot dead-letter seq ${entry.seq}: not held`));
    }
    const moved = this.ack(
      entries.map((e) => e.seq),
      true,
    );
    for (const entry of entries) {
      const at = this.#deadIndex(entry.seq);
      this.#dead.splice(at, 0, { ...entry });
      this.#marks.delete(entry.seq);
    }
    return moved;
  }

  readDeadLetters(range: DeadLetterRange): readonly DeadLetter[] {
    const from = this.#deadIndex(range.after + 1);
    return this.#dead.slice(from, from + range.limit);
  }

  dropDeadLetters(seqs: readonly number[], _sync: boolean): Promise<void> {
    if (!this.#open) return Promise.reject(new QueueError('ERR_CLOSED', 'MemStore is not open'));
    const drop = new Set(seqs);
    const before = this.#dead.length;
    this.#dead = this.#dead.filter((d) => !drop.has(d.seq));
    if (before - this.#dead.length !== drop.size)
      return Promise.reject(new QueueError('ERR_STORE', 'MemStore cannot drop a dead letter it does not hold'));
    return DONE;
  }

  redrive(moves: readonly Redrive[], sync: boolean): Promise<void> {
    if (!this.#open) return Promise.reject(new QueueError('ERR_CLOSED', 'MemStore is not open'));
    for (const move of moves) {
      const at = this.#deadIndex(move.from);
      if (this.#dead[at]?.seq !== move.from)
        return Promise.reject(new QueueError('ERR_STORE', `MemStore holds no dead letter ${move.from}`));
    }
    const stored = this.append(
      moves.map((m) => m.item),
      sync,
    );
    const from = new Set(moves.map((m) => m.from));
    this.#dead = this.#dead.filter((d) => !from.has(d.seq));
    return stored;
  }

  /** Index of the first dead letter with seq >= `seq`. */
  #deadIndex(seq: number): number {
    const dead = this.#dead;
    return lowerBound(0, dead.length, (i) => dead[i]!.seq < seq);
  }

  /** `seq` is stored and unacked. */
  #holds(seq: number): boolean {
    return this.#indexOf(seq) >= 0 && !this.#acked.has(seq);
  }

  append(items: readonly StoredItem[], _sync: boolean): Promise<void> {
    if (!this.#open) return Promise.reject(new QueueError('ERR_CLOSED', 'MemStore is not open'));
    // Checked whole first, so that a refused batch stores nothing.
    let seq = this.#nextSeq;
    for (const item of items) {
      if (item.seq !== seq++) {
        return Promise.reject(new QueueError('ERR_STORE', `MemStore expected seq ${seq - 1}, got ${item.seq}`));
      }
      // The same refusals as the stores on disk make (a plain item pays the two comparisons).
      const fault =
        (isScheduled(item) ? scheduleFault(item) : undefined) ??
        (item.key !== undefined || item.keyedAt !== undefined ? keyFault(item) : undefined) ??
        (item.group !== undefined ? groupFault(item) : undefined) ??
        (item.fired !== undefined ? fireFault(item) : undefined);
      if (fault !== undefined) return Promise.reject(new QueueError('ERR_STORE', `MemStore cannot store ${fault}`));
    }
    // The queue hands over bytes it copied from the caller: they are ours to keep.
    for (const item of items) this.#items.push(item);
    this.#keys.addItems(items);
    if (this.#schedules.size > 0) this.#schedules.addFires(items);
    this.#nextSeq = seq;
    return DONE;
  }

  ack(seqs: readonly number[], _sync: boolean): Promise<void> {
    if (!this.#open) return Promise.reject(new QueueError('ERR_CLOSED', 'MemStore is not open'));
    for (const seq of seqs) {
      // In-order acks, the common case, only move the head.
      if (this.#head < this.#items.length && this.#items[this.#head]!.seq === seq && this.#acked.size === 0) {
        this.#head++;
        if (this.#marks.size !== 0) this.#marks.delete(seq);
        continue;
      }
      const index = this.#indexOf(seq);
      if (index < 0 || this.#acked.has(seq)) {
        return Promise.reject(new QueueError('ERR_STORE', `MemStore cannot ack seq ${seq}: not held`));
      }
      this.#acked.add(seq);
      this.#marks.delete(seq);
      // Free the payload now: an old unacked item at the head may keep the array from compacting.
      this.#items[index] = { seq, bytes: EMPTY };
    }
    const items = this.#items;
    while (this.#head < items.length && this.#acked.delete(items[this.#head]!.seq)) this.#head++;
    if (this.#acked.size >= COMPACT_ACKED_COUNT && this.#acked.size * 2 >= items.length - this.#head) {
      const acked = this.#acked;
      this.#items = items.slice(this.#head).filter((item) => !acked.has(item.seq));
      this.#head = 0;
      this.#acked = new Set();
      this.#dense = false;
    } else if (this.#head >= COMPACT_HEAD_COUNT && this.#head * 2 >= items.length) {
      this.#items = items.slice(this.#head);
      this.#head = 0;
    }
    if (this.#head >= this.#items.length) this.#dense = true; // empty: seqs start again from the next append
    return DONE;
  }

  read(range: ReadRange): readonly StoredItem[] | Promise<readonly StoredItem[]> {
    const out: StoredItem[] = [];
    const items = this.#items;
    let i = this.#lowerBound(range.after + 1);
    for (; i < items.length && out.length < range.limit; i++) {
      const item = items[i]!;
      if (item.seq >= range.before) break;
      if (!this.#acked.has(item.seq)) out.push(item);
    }
    return out;
  }

  async close(): Promise<void> {
    this.#open = false;
  }

  /** Keys older than `at` go at once: in memory nothing is cheaper later. */
  keepKeysFrom(at: number): void {
    this.#keys.keepKeysFrom(at);
    this.#keys.expire();
  }

  /** Nothing to make durable: a MemStore never persists. */
  sync(): Promise<void> {
    return Promise.resolve();
  }

  /**
   * Index of the first live item with seq >= `seq`. While seqs are consecutive from the head this
   * is arithmetic; after acked items were dropped from the middle, a binary search.
   */
  #lowerBound(seq: number): number {
    const items = this.#items;
    if (this.#head >= items.length) return items.length;
    if (this.#dense) {
      const first = items[this.#head]!.seq;
      return Math.min(items.length, this.#head + Math.max(0, seq - first));
    }
    return lowerBound(this.#head, items.length, (i) => items[i]!.seq < seq);
  }

  #indexOf(seq: number): number {
    const i = this.#lowerBound(seq);
    return i < this.#items.length && this.#items[i]!.seq === seq ? i : -1;
  }
}
