// Items nacked with a delay, waiting for their time: in memory only, ordered by due time, behind
// one timer. When an item's time comes the core puts it back among the ready items by seq.
import type { Entry } from './entry.js';

/** setTimeout's longest delay (2^31 − 1 ms); a longer wait is armed again when it fires. */
const TIMER_MS_MAX = 2_147_483_647;

interface Waiting {
  readonly entry: Entry;
  /** `performance.now()` at which the entry is ready again. */
  readonly dueMs: number;
}

/**
 * The entries waiting for a retry, sorted by due time (ties keep nack order), and the one timer
 * armed for the earliest. Few items wait at once (each was delivered and failed), so a sorted
 * array with a binary search is enough. The clock is monotonic (`performance.now()`), read at each
 * call, so a wall-clock step neither fires a retry early nor holds it back.
 */
export class DelayedItems {
  readonly #release: (entries: Entry[]) => void;
  #waiting: Waiting[] = [];
  #timer: ReturnType<typeof setTimeout> | undefined;
  /** The due time the timer is armed for. */
  #timerDueMs = Infinity;

  /** `release` gets the entries whose time came, in due order. */
  constructor(release: (entries: Entry[]) => void) {
    this.#release = release;
  }

  get size(): number {
    return this.#waiting.length;
  }

  add(entry: Entry, delayMs: number): void {
    const dueMs = performance.now() + delayMs;
    const list = this.#waiting;
    let lo = 0;
    let hi = list.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (list[mid]!.dueMs <= dueMs) lo = mid + 1;
      else hi = mid;
    }
    list.splice(lo, 0, { entry, dueMs });
    if (dueMs < this.#timerDueMs) this.#arm(dueMs);
  }

  /** The waiting entries, in due order. */
  entries(): Entry[] {
    return this.#waiting.map((w) => w.entry);
  }

  /** Forget every waiting entry and the timer (close: the items stay stored, unacked). */
  clear(): void {
    this.#waiting = [];
    this.#disarm();
  }

  #arm(dueMs: number): void {
    this.#disarm();
    this.#timerDueMs = dueMs;
    const waitMs = Math.min(TIMER_MS_MAX, Math.max(0, Math.ceil(dueMs - performance.now())));
    // Not unref'd: an item waiting for its retry is work still to do, as a pending reserve is.
    this.#timer = setTimeout(this.#fire, waitMs);
  }

  #disarm(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#timerDueMs = Infinity;
  }

  readonly #fire = (): void => {
    this.#timer = undefined;
    this.#timerDueMs = Infinity;
    const now = performance.now();
    const list = this.#waiting;
    let n = 0;
    while (n < list.length && list[n]!.dueMs <= now) n++;
    const due = list.splice(0, n).map((w) => w.entry);
    // A timer may fire a fraction of a millisecond before the monotonic clock reaches its due
    // time, and a wait longer than setTimeout allows fires early on purpose: arm again.
    if (list.length > 0) this.#arm(list[0]!.dueMs);
    if (due.length > 0) this.#release(due);
  };
}
