// Things due at a time, in memory, sorted by due time behind one timer: the retries waiting for
// their delay (delayed.ts) and the leases of reservations (leases.ts).
import { type TimeSource, unrefTimer } from './clock.js';

/** setTimeout's longest delay (2^31 − 1 ms); a longer wait is armed again when it fires. */
const TIMER_MS_MAX = 2_147_483_647;

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
  readonly #unref: boolean;
  readonly #time: TimeSource;
  #list: T[] = [];
  #timer: unknown;
  /** The due time the timer is armed for. */
  #timerDueMs = Infinity;

  /** `fire` gets the items whose time came, in due order, already out of the list. `unref`: the timer does not keep the process alive. */
  constructor(fire: (due: T[]) => void, unref: boolean, time: TimeSource) {
    this.#fire = fire;
    this.#unref = unref;
    this.#time = time;
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
    let lo = 0;
    let hi = list.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (list[mid]!.dueMs <= item.dueMs) lo = mid + 1;
      else hi = mid;
    }
    list.splice(lo, 0, item);
    if (item.dueMs < this.#timerDueMs) this.#arm(item.dueMs);
  }

  /** Take `item` out (its `dueMs` must be the one it was added with). */
  remove(item: T): void {
    const list = this.#list;
    // The first item due at or after this one's time, then forward over the ties.
    let lo = 0;
    let hi = list.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (list[mid]!.dueMs < item.dueMs) lo = mid + 1;
      else hi = mid;
    }
    for (let i = lo; i < list.length && list[i]!.dueMs === item.dueMs; i++) {
      if (list[i] === item) {
        list.splice(i, 1);
        break;
      }
    }
    if (list.length === 0) this.#disarm();
  }

  /** Forget every item and the timer. */
  clear(): void {
    this.#list = [];
    this.#disarm();
  }

  #arm(dueMs: number): void {
    this.#disarm();
    this.#timerDueMs = dueMs;
    const waitMs = Math.min(TIMER_MS_MAX, Math.max(0, Math.ceil(dueMs - this.#time.monoNow())));
    this.#timer = this.#time.setTimeout(this.#onTimer, waitMs);
    if (this.#unref) unrefTimer(this.#timer);
  }

  #disarm(): void {
    if (this.#timer !== undefined) this.#time.clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#timerDueMs = Infinity;
  }

  readonly #onTimer = (): void => {
    this.#timer = undefined;
    this.#timerDueMs = Infinity;
    const now = this.#time.monoNow();
    const list = this.#list;
    let n = 0;
    while (n < list.length && list[n]!.dueMs <= now) n++;
    const due = list.splice(0, n);
    // A timer may fire a fraction of a millisecond before the monotonic clock reaches its due
    // time, and a wait longer than setTimeout allows fires early on purpose: arm again.
    if (list.length > 0) this.#arm(list[0]!.dueMs);
    if (due.length > 0) this.#fire(due);
  };
}
