// The consumer's read-ahead: items fetched from the store ahead of the consumer, the read cursor,
// the reads that refill them, and the hand-over of just-stored batches to a caught-up consumer.
// The core owns every count and every failure; it answers this object's questions through a host.
import { QueueError } from '../contract/errors.js';
import { type Store, type StoredItem, isScheduled } from '../contract/store.js';
import { type Entry, newEntry } from './entry.js';

/** How many items one store read fetches ahead of the consumer. */
export const READ_AHEAD_COUNT = 256;

/** `ReadAhead.headSeq()`: no ready plain item comes before the seq asked about. */
export const NO_PLAIN_ITEM = Infinity;
/** `ReadAhead.headSeq()`: an asynchronous read is out; its answer may hold an item that comes first. */
export const READ_PENDING = -1;

/** What the read-ahead asks of the core. */
export interface ReadAheadHost {
  /** Every item with a seq below this is stored (its push resolved). */
  committedBefore(): number;
  /** Ready items that are not in the returned list: read ahead, or in the store above the read cursor. */
  readyNotReturned(): number;
  /** A batch is being stored now. */
  appendInFlight(): boolean;
  /** The queue is open (an answer that arrives after close is dropped). */
  isOpen(): boolean;
  /** A store read threw or rejected. */
  readFailed(error: unknown): void;
  /** The store broke the contract: fail the queue. */
  fail(error: QueueError): void;
  /** An asynchronous read was handled: waiting consumers may be served. */
  fetched(): void;
}

export class ReadAhead {
  readonly #store: Store;
  readonly #host: ReadAheadHost;
  #buffer: Entry[] = [];
  #head = 0;
  /** Highest seq fetched from the store into the read-ahead (or delivered from it). */
  #readCursor = 0;
  #fetching = false;
  /** Settles when the asynchronous read in flight has been handled; close waits for it. */
  #fetchDone: Promise<void> | undefined;
  /**
   * True when the read-ahead holds every stored item above the read cursor: the last read
   * returned less than it was asked for and every batch stored since was handed over directly.
   * A caught-up consumer then never waits on a store read.
   */
  #caughtUp = false;

  constructor(store: Store, host: ReadAheadHost) {
    this.#store = store;
    this.#host = host;
  }

  /** The asynchronous read in flight, if any, until it has been handled. */
  get fetchDone(): Promise<void> | undefined {
    return this.#fetchDone;
  }

  /**
   * The next item read ahead, refilled from the store when empty. Null when nothing is ready, a
   * read from an asynchronous store is in progress, or the read failed (the host was told).
   */
  take(): Entry | null {
    if (this.#head === this.#buffer.length && !this.#refill()) return null;
    const entry = this.#buffer[this.#head]!;
    this.#buffer[this.#head++] = undefined as unknown as Entry;
    return entry;
  }

  /**
   * The seq of the plain item `take()` would return, if it is below `below`: `NO_PLAIN_ITEM`
   * (Infinity) when no ready plain item has a lower seq, `READ_PENDING` when that is not known
   * until an asynchronous read in flight comes back. Refills from the store as `take()` does, but
   * only when an item below `below` may be unread: every unread item's seq is above the cursor.
   */
  headSeq(below: number): number {
    if (this.#head === this.#buffer.length) {
      // A read in flight covers only seqs above the cursor: it cannot bring one that comes first.
      if (below <= this.#readCursor + 1) return NO_PLAIN_ITEM;
      if (!this.#refill()) return this.#fetching ? READ_PENDING : NO_PLAIN_ITEM;
    }
    return this.#buffer[this.#head]!.seq;
  }

  /** Fetch until the read-ahead holds an item; false when none is ready or the fetch is asynchronous. */
  #refill(): boolean {
    // A read may find only scheduled items, which the core holds elsewhere: read on past them.
    while (this.#head === this.#buffer.length) {
      if (this.#fetching || this.#host.readyNotReturned() === 0) return false;
      const cursor = this.#readCursor;
      this.#fetch();
      if (this.#fetching || this.#readCursor === cursor) return this.#head < this.#buffer.length;
    }
    return true;
  }

  /** The lowest seq of a ready plain item not handed out: read ahead, or unread above the cursor; Infinity when none. */
  lowestUnread(): number {
    if (this.#head < this.#buffer.length) return this.#buffer[this.#head]!.seq;
    return this.#host.readyNotReturned() > 0 ? this.#readCursor + 1 : Infinity;
  }

  /** Drop everything read ahead (close returns it to the store). */
  clear(): void {
    this.#buffer = [];
    this.#head = 0;
  }

  /** Refill the read-ahead from the store; synchronous stores fill it before this returns. */
  #fetch(): void {
    this.#buffer.length = 0;
    this.#head = 0;
    // Batches stored while an asynchronous read is in flight are not in its answer: remember the
    // bound it was asked for, so the consumer is not taken for caught up past them.
    const before = this.#host.committedBefore();
    // No hand-over while a read is out: its items must come first.
    this.#caughtUp = false;
    let result;
    try {
      result = this.#store.read({ after: this.#readCursor, before, limit: READ_AHEAD_COUNT });
    } catch (error) {
      this.#host.readFailed(error);
      return;
    }
    if (Array.isArray(result)) {
      this.#fill(result as readonly StoredItem[], before);
      return;
    }
    this.#fetching = true;
    this.#fetchDone = (result as Promise<readonly StoredItem[]>).then(
      (items) => {
        this.#fetching = false;
        this.#fetchDone = undefined;
        if (!this.#host.isOpen()) return;
        this.#fill(items, before);
        this.#host.fetched();
      },
      (error: unknown) => {
        this.#fetching = false;
        this.#fetchDone = undefined;
        if (!this.#host.isOpen()) return;
        this.#host.readFailed(error);
        this.#host.fetched();
      },
    );
  }

  /** A batch was just stored: put it straight into the read-ahead when caught up, while that stays bounded. */
  stored(items: Entry[]): void {
    if (!this.#caughtUp) return;
    const count = items.length;
    if (this.#buffer.length - this.#head + count > READ_AHEAD_COUNT) {
      this.#caughtUp = false;
      return;
    }
    // The read-ahead never aliases `items`: that array was handed to the store, which may keep it.
    if (this.#head === this.#buffer.length) {
      this.#buffer.length = 0;
      this.#head = 0;
    } else if (this.#head >= READ_AHEAD_COUNT) {
      // A consumer a few items behind never empties the array: drop the consumed slots.
      this.#buffer = this.#buffer.slice(this.#head);
      this.#head = 0;
    }
    for (let i = 0; i < count; i++) this.#buffer.push(items[i]!);
    this.#readCursor = items[count - 1]!.seq;
  }

  #fill(items: readonly StoredItem[], before: number): void {
    let last = this.#readCursor;
    for (const item of items) {
      // The store must answer the range it was asked for, in seq order.
      if (!(item.seq > last && item.seq < before)) {
        this.#host.fail(new QueueError('ERR_STORE', `Store read returned seq ${item.seq} out of order or out of range`));
        return;
      }
      last = item.seq;
    }
    // Ready items that are neither returned nor read ahead are in the store, above the read
    // cursor; when the read was asked for all of them, it must have found some.
    const unread = this.#host.readyNotReturned() - (this.#buffer.length - this.#head);
    const complete = before === this.#host.committedBefore();
    if (items.length === 0 && unread > 0 && complete) {
      this.#host.fail(new QueueError('ERR_STORE', `Store read returned nothing while ${unread} items are ready`));
      return;
    }
    const buffer = this.#buffer;
    for (let i = 0; i < items.length; i++) {
      const item = items[i]!;
      // Items with a priority or a not-before time are in the core's schedule already.
      if (isScheduled(item)) continue;
      buffer.push(newEntry(item.seq, item.bytes, 0, 0, item.group, item.fired));
    }
    this.#readCursor = last;
    this.#caughtUp = items.length < READ_AHEAD_COUNT && !this.#host.appendInFlight() && complete;
  }
}
