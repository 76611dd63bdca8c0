// The items that do not simply wait their turn by seq: those returned to the queue (nacked,
// dropped, their lease run out, their retry delay over), and those pushed with a priority or a
// not-before time. Ready ones wait in one lane per priority, by seq; those whose time has not
// come wait in a heap by not-before time behind one timer. The core takes the best ready item
// from here or from the read-ahead (plain items, priority 0, in seq order), whichever comes first.
import type { TimeSource } from '../lib/clock.js';
import { DueTimer } from './due-timer.js';
import { Heap } from './heap.js';
import type { Entry } from './entry.js';
import { lowerBound } from '../lib/lower-bound.js';
/** A lane drops its consumed slots once this many sit before its head. */
const LANE_COMPACT_COUNT = 1024;

/** The ready items of one priority, in seq order. Items mostly arrive in seq order: appended. */
class Lane {
  readonly priority: number;
  #items: Entry[] = [];
  #head = 0;

  constructor(priority: number) {
    this.priority = priority;
  }

  get size(): number {
    return this.#items.length - this.#head;
  }

  first(): Entry | undefined {
    return this.#items[this.#head];
  }

  shift(): Entry {
    const entry = this.#items[this.#head]!;
    this.#items[this.#head++] = undefined as unknown as Entry;
    if (this.#head === this.#items.length) {
      this.#items = [];
      this.#head = 0;
    } else if (this.#head >= LANE_COMPACT_COUNT && this.#head * 2 >= this.#items.length) {
      this.#items = this.#items.slice(this.#head);
      this.#head = 0;
    }
    return entry;
  }

  /** Put back the item just shifted (it waits, first in line, for its delivery mark). */
  unshift(entry: Entry): void {
    if (this.#head > 0) this.#items[--this.#head] = entry;
    else this.#items.unshift(entry);
  }

  insert(entry: Entry): void {
    const items = this.#items;
    const last = items.length - 1;
    if (last < this.#head || items[last]!.seq < entry.seq) {
      items.push(entry);
      return;
    }
    const seq = entry.seq;
    items.splice(
      lowerBound(this.#head, items.length, (i) => items[i]!.seq < seq),
      0,
      entry,
    );
  }

  entries(): Entry[] {
    return this.#items.slice(this.#head);
  }
}

function before(a: Entry, b: Entry): boolean {
  return a.notBefore < b.notBefore || (a.notBefore === b.notBefore && a.seq < b.seq);
}

export class Schedule {
  readonly #time: TimeSource;
  readonly #released: () => void;
  /** Lanes by priority; `#order` lists the priorities of lanes that exist, highest first. */
  readonly #lanes = new Map<number, Lane>();
  #order: Lane[] = [];
  /** Ready items in every lane. */
  #readyCount = 0;
  /** Entries by not-before time (ties by seq): a million delayed pushes stay cheap. */
  readonly #waiting = new Heap<Entry>(before);
  /** Armed for the earliest not-before time; it keeps the process alive only while a consumer waits. */
  readonly #timer: DueTimer;

  /** `released` is told when items whose time came joined their lanes. */
  constructor(time: TimeSource, released: () => void) {
    this.#time = time;
    this.#released = released;
    this.#timer = new DueTimer(time, time.wallNow, this.#onTimer, false);
  }

  /** Ready items in the lanes. */
  get readyCount(): number {
    return this.#readyCount;
  }

  /** Items whose not-before time has not come. */
  get waitingCount(): number {
    return this.#waiting.size;
  }

  /** A pushed item with a priority or a not-before time (at open, or once stored). */
  add(entry: Entry): void {
    if (entry.notBefore > this.#time.wallNow()) {
      this.#waiting.push(entry);
      if (entry.notBefore < this.#timer.dueMs) this.#timer.arm(entry.notBefore);
      return;
    }
    this.ready(entry);
  }

  /** An item ready now: by seq in the lane of its priority. */
  ready(entry: Entry): void {
    this.#lane(entry.priority).insert(entry);
    this.#readyCount++;
  }

  /** The lane holding the best ready item (highest priority), or undefined when none is ready. */
  best(): Lane | undefined {
    if (this.#readyCount === 0) return undefined;
    for (const lane of this.#order) if (lane.size > 0) return lane;
    return undefined;
  }

  take(lane: Lane): Entry {
    this.#readyCount--;
    return lane.shift();
  }

  /** Put back the item just taken from `lane`, first in its line. */
  putBack(lane: Lane, entry: Entry): void {
    lane.unshift(entry);
    this.#readyCount++;
  }

  /** Every item held, ready or waiting. */
  entries(): Entry[] {
    // One by one, not push(...): a spread of a million arguments overflows the stack.
    const out: Entry[] = [];
    for (const lane of this.#order) for (const entry of lane.entries()) out.push(entry);
    for (const entry of this.#waiting.values()) out.push(entry);
    return out;
  }

  /** Keep the process alive while a consumer waits and an item is still to fall due. */
  hold(held: boolean): void {
    this.#timer.hold(held);
  }

  clear(): void {
    for (const lane of this.#order) while (lane.size > 0) lane.shift();
    this.#readyCount = 0;
    this.#waiting.clear();
    this.#timer.disarm();
  }

  #lane(priority: number): Lane {
    let lane = this.#lanes.get(priority);
    if (lane === undefined) {
      lane = new Lane(priority);
      this.#lanes.set(priority, lane);
      this.#order = [...this.#order, lane].sort((a, b) => b.priority - a.priority);
    }
    return lane;
  }

  readonly #onTimer = (): void => {
    const now = this.#time.wallNow();
    let released = 0;
    while (this.#waiting.size > 0 && this.#waiting.peek()!.notBefore <= now) {
      this.ready(this.#waiting.pop()!);
      released++;
    }
    // Early (see due-timer.ts), or a wall-clock step back: items not yet due arm it again.
    const next = this.#waiting.peek();
    if (next !== undefined) this.#timer.arm(next.notBefore);
    if (released > 0) this.#released();
  };
}

export type { Lane };
