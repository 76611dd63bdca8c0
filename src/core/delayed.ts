// Items nacked with a delay, waiting for their time: in memory only, ordered by due time, behind
// one timer. When an item's time comes the core puts it back among the ready items by seq.
import type { TimeSource } from '../lib/clock.js';
import { DueList } from './due-list.js';
import type { Entry } from './entry.js';

interface Waiting {
  readonly entry: Entry;
  /** The monotonic time at which the entry is ready again. */
  readonly dueMs: number;
}

/**
 * The entries waiting for a retry, sorted by due time (ties keep nack order), behind one timer
 * (due-list.ts). The timer is not unref'd: an item waiting for its retry is work still to do, as a
 * pending reserve is.
 */
export class DelayedItems {
  readonly #list: DueList<Waiting>;
  readonly #time: TimeSource;

  /** `release` gets the entries whose time came, in due order. */
  constructor(release: (entries: Entry[]) => void, time: TimeSource) {
    this.#time = time;
    this.#list = new DueList((due) => release(due.map((w) => w.entry)), false, time);
  }

  get size(): number {
    return this.#list.size;
  }

  add(entry: Entry, delayMs: number): void {
    this.#list.add({ entry, dueMs: this.#time.monoNow() + delayMs });
  }

  /** The waiting entries, in due order. */
  entries(): Entry[] {
    return this.#list.items().map((w) => w.entry);
  }

  /** Forget every waiting entry and the timer (close: the items stay stored, unacked). */
  clear(): void {
    this.#list.clear();
  }
}
