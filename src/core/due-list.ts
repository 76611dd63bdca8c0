// Things due at a time, in memory, sorted by due time behind one timer: the retries waiting for
// their delay (delayed.ts) and the leases of reservations (leases.ts).
import type { TimeSource } from '../lib/clock.js';
import { DueTimer } from './due-timer.js';
import { lowerBound } from '../lib/lower-bound.js';

/** What a DueList holds: anything with the monotonic time (`TimeSource.monoNow()`) it is due at. */
export interface Due {
  readonly dueMs: number;
}

/**
 * Items sorted by due time (ties keep insertion order) and one timer armed for the earliest. The
 * lists are short (retries of failed items, reservations in flight), so a sorted array with a
 * binary search is enough. The clock is monotonic (`performance.now()` unless a clock was
 * injected), read at each call, so a wall-clock step neither fires early nor holds back.
 */
export class DueList<T extends Due> {
  readonly #fire: (due: T[]) => void;
  readonly #time: TimeSource;
  readonly #timer: DueTimer;
  #list: T[] = [];

  /** `fire` gets the items whose time came, in due order, already out of the list. `unref`: the timer does not keep the process alive. */
  constructor(fire: (due: T[]) => void, unref: boolean, time: TimeSource) {
    this.#fire = fire;
    this.#time = time;
    this.#timer = new DueTimer(time, time.monoNow, this.#onTimer, !unref);
  }

  get size(): number {
    return this.#list.length;
  }

  /** The items, in due order. */
  items(): T[] {
    return this.#list.slice();
  }

  add(item: T): void {
    const list = this.#list;
    const dueMs = item.dueMs;
    list.splice(
      lowerBound(0, list.length, (i) => list[i]!.dueMs <= dueMs),
      0,
      item,
    );
    if (item.dueMs < this.#timer.dueMs) this.#timer.arm(item.dueMs);
  }

  /** Take `item` out (its `dueMs` must be the one it was added with). */
  remove(item: T): void {
    const list = this.#list;
    // The first item due at or after this one's time, then forward over the ties.
    const dueMs = item.dueMs;
    const lo = lowerBound(0, list.length, (i) => list[i]!.dueMs < dueMs);
    for (let i = lo; i < list.length && list[i]!.dueMs === item.dueMs; i++) {
      if (list[i] === item) {
        list.splice(i, 1);
        break;
      }
    }
    if (list.length === 0) this.#timer.disarm();
  }

  /** Forget every item and the timer. */
  clear(): void {
    this.#list = [];
    this.#timer.disarm();
  }

  readonly #onTimer = (): void => {
    const now = this.#time.monoNow();
    const list = this.#list;
    let n = 0;
    while (n < list.length && list[n]!.dueMs <= now) n++;
    const due = list.splice(0, n);
    // Early (see due-timer.ts), or more to come: arm again.
    if (list.length > 0) this.#timer.arm(list[0]!.dueMs);
    if (due.length > 0) this.#fire(due);
  };
}
