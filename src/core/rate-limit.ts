// Rate limits (`Builder.rateLimit`): at most `max` hand-outs in any window of `perMs` on the queue's
// clock, for the whole queue or for each group, and the pauses a handler asks for when an API says
// "too many requests" (`item.rateLimited(ms)`). Each window is a sliding log of its last `max`
// hand-out times, so the bound holds in every window, not only in aligned ones. Under a limit by
// group, an item whose window is full waits aside ("parked", as for a group's concurrency) while
// the items of other groups go; under a limit for the queue nothing can go, and nothing is moved.
import { expectation, knownKeys, optionsObject, positiveInteger } from '../lib/validate.js';
import type { TimeSource } from '../lib/clock.js';
import { DueTimer } from './due-timer.js';
import type { Entry } from './entry.js';
import { type EntryHeap, entryHeap } from './groups.js';
import { unpinned } from '../lib/bytes.js';
import { lowerBound } from '../lib/lower-bound.js';

/** What a rate limit counts by. */
export type RateLimitBy = 'queue' | 'group';

/** `Builder.rateLimit(options)`. */
export interface RateLimitOptions {
  /** Most hand-outs in any window of `perMs`: a positive integer up to 1,000,000. */
  max: number;
  /** The window, in ms on the queue's clock: a positive integer up to 2^31 − 1. */
  perMs: number;
  /**
   * `'queue'`: one window for every hand-out of the queue. `'group'`: one window per group (items
   * without a group share one window of their own).
   * @default 'queue'
   */
  by?: RateLimitBy;
}

/** A validated rate limit. */
export interface RateLimit {
  readonly max: number;
  readonly perMs: number;
  readonly by: RateLimitBy;
}

/** Largest `max`: each window keeps up to this many hand-out times (8 bytes each). */
export const RATE_MAX_LIMIT = 1_000_000;
const TIMER_MS_MAX = 2 ** 31 - 1;
/** The window of the items without a group, under a limit by group (a group name is never empty). */
const NO_GROUP = '';

/** Validate `Builder.rateLimit`'s options. */
export function rateLimitOf(options: unknown): RateLimit {
  if (options === undefined) throw new TypeError(expectation('options', 'an object { max, perMs, by? }', options));
  const o = optionsObject('options', options);
  knownKeys('options', o, ['max', 'perMs', 'by']);
  const max = positiveInteger('options.max', o.max);
  if (max > RATE_MAX_LIMIT) throw new RangeError(expectation('options.max', `a positive integer up to ${RATE_MAX_LIMIT}`, max));
  const perMs = positiveInteger('options.perMs', o.perMs);
  if (perMs > TIMER_MS_MAX) throw new RangeError(expectation('options.perMs', `a positive integer of ms up to ${TIMER_MS_MAX}`, perMs));
  const by = o.by ?? 'queue';
  if (typeof by !== 'string') throw new TypeError(expectation('options.by', "'queue' or 'group'", by));
  if (by !== 'queue' && by !== 'group') throw new RangeError(expectation('options.by', "'queue' or 'group'", by));
  return { max, perMs, by };
}

/** One window: the times of its last hand-outs, oldest first, in a ring of at most `max`. */
class Window {
  #times: number[] = [];
  #head = 0;
  /** No hand-out before this time (a pause asked for by `rateLimited`). */
  pausedUntil = 0;
  /** Items parked for this window (by group only). */
  parked: EntryHeap | undefined;

  /** When the next hand-out may be, at or after `now`: `now` when one may go at once. */
  nextAt(now: number, limit: RateLimit): number {
    let at = now;
    if (this.#times.length === limit.max) {
      const free = this.#times[this.#head]! + limit.perMs;
      if (free > at) at = free;
    }
    return Math.max(this.pausedUntil, at);
  }

  /** Hand-outs left in the window at `now` (0 while paused). */
  room(now: number, limit: RateLimit): number {
    if (this.pausedUntil > now) return 0;
    // The times are in ascending order from the head (the clock is monotonic): count those that
    // left the window by a binary search.
    const times = this.#times;
    const n = times.length;
    const edge = now - limit.perMs;
    const head = this.#head;
    return limit.max - (n - lowerBound(0, n, (i) => times[(head + i) % n]! <= edge));
  }

  record(now: number, limit: RateLimit): void {
    const times = this.#times;
    if (times.length < limit.max) times.push(now);
    else {
      times[this.#head] = now;
      this.#head = (this.#head + 1) % times.length;
    }
  }

  /** Nothing in this window can matter any more at `now`: it may be forgotten. */
  idle(now: number, limit: RateLimit): boolean {
    if (this.parked !== undefined || this.pausedUntil > now) return false;
    const times = this.#times;
    return times.length === 0 || times[(this.#head + times.length - 1) % times.length]! <= now - limit.perMs;
  }
}

export class RateLimiter {
  readonly limit: RateLimit;
  readonly #time: TimeSource;
  /** By group: a window per group with a hand-out in the last `perMs`, a pause, or parked items. */
  readonly #windows = new Map<string, Window>();
  /** By queue: the one window, held apart so that a hand-out looks nothing up. */
  readonly #queue = new Window();
  #parkedCount = 0;
  /** Told when items whose window opened were put back (by group), or when the queue's window opened. */
  readonly #opened: (entries: Entry[]) => void;
  readonly #timer: DueTimer;
  /** Hand-outs since the windows were last swept of the ones that no longer matter. */
  #sinceSweep = 0;
  /** The entry `allows` last looked at and its window: the hand-out that follows looks nothing up again. */
  #lastEntry: Entry | undefined = undefined;
  #lastWindow: Window | undefined = undefined;

  constructor(limit: RateLimit, time: TimeSource, opened: (entries: Entry[]) => void) {
    this.limit = limit;
    this.#time = time;
    this.#opened = opened;
    // On the monotonic clock, as leases and retries: a wall-clock step neither opens a window early nor holds one shut.
    this.#timer = new DueTimer(time, time.monoNow, this.#onTimer, false);
  }

  get byGroup(): boolean {
    return this.limit.by === 'group';
  }

  /** Items parked for their group's window. */
  get parked(): number {
    return this.#parkedCount;
  }

  #window(key: string): Window {
    if (this.limit.by === 'queue') return this.#queue;
    let w = this.#windows.get(key);
    if (w === undefined) {
      w = new Window();
      this.#windows.set(key, w);
    }
    return w;
  }

  #keyOf(entry: Entry): string {
    return this.limit.by === 'group' ? (entry.group ?? NO_GROUP) : NO_GROUP;
  }

  /** Under a limit for the queue: its window is full or paused now (the timer is armed for when it opens). */
  queueShut(): boolean {
    const now = this.#time.monoNow();
    const at = this.#queue.nextAt(now, this.limit);
    if (at <= now) return false;
    if (at < this.#timer.dueMs) this.#timer.arm(at);
    return true;
  }

  /** Under a limit by group: whether `entry` may be handed out now. */
  allows(entry: Entry): boolean {
    const w = this.#windows.get(this.#keyOf(entry));
    this.#lastEntry = entry;
    this.#lastWindow = w;
    if (w === undefined) return true;
    const now = this.#time.monoNow();
    return w.nextAt(now, this.limit) <= now;
  }

  /** Under a limit by group: set `entry` aside until its window has room; the timer is armed for then. */
  park(entry: Entry): void {
    const w = this.#window(this.#keyOf(entry));
    entry.bytes = unpinned(entry.bytes);
    (w.parked ??= entryHeap()).push(entry);
    this.#parkedCount++;
    const at = w.nextAt(this.#time.monoNow(), this.limit);
    if (at < this.#timer.dueMs) this.#timer.arm(at);
  }

  /** `entry` is handed out: count it in its window. */
  handedOut(entry: Entry): void {
    const now = this.#time.monoNow();
    // Only a sweep deletes windows, and it forgets the last one looked at: a window found by
    // `allows` for this entry is still the map's.
    const w = entry === this.#lastEntry && this.#lastWindow !== undefined ? this.#lastWindow : this.#window(this.#keyOf(entry));
    this.#lastEntry = undefined;
    this.#lastWindow = undefined;
    w.record(now, this.limit);
    // Windows of groups long quiet are forgotten now and then, so that memory follows the active groups.
    if (this.limit.by === 'group' && ++this.#sinceSweep >= 4096) this.#sweep(now);
  }

  /** `item.rateLimited(ms)`: the item's window (the queue's, or its group's) hands out nothing for `ms`. */
  pause(entry: Entry, ms: number): void {
    const w = this.#window(this.#keyOf(entry));
    const until = this.#time.monoNow() + ms;
    if (until > w.pausedUntil) w.pausedUntil = until;
  }

  /**
   * Ms until the window that `group`'s items count in (its group's, under a limit by group; the
   * queue's otherwise) has room for a hand-out: 0 when it has room now.
   */
  waitMs(group: string | undefined): number {
    const w = this.limit.by === 'queue' ? this.#queue : this.#windows.get(group ?? NO_GROUP);
    if (w === undefined) return 0;
    const now = this.#time.monoNow();
    return Math.max(0, w.nextAt(now, this.limit) - now);
  }

  /** Under a limit by group: items of `group` parked for its window. */
  parkedOf(group: string): number {
    return this.#windows.get(group)?.parked?.size ?? 0;
  }

  /** Under a limit by group: each group with items parked for its window, and how many (the items without a group left out). */
  *parkedGroups(): Generator<[group: string, parked: number]> {
    for (const [key, w] of this.#windows) if (key !== NO_GROUP && w.parked !== undefined && w.parked.size > 0) yield [key, w.parked.size];
  }

  /** Under a limit for the queue: the window is full or paused now. */
  get closed(): boolean {
    if (this.limit.by !== 'queue') return false;
    const now = this.#time.monoNow();
    return this.#queue.nextAt(now, this.limit) > now;
  }

  /** Keep the process alive while a consumer waits and a window is still to open. */
  hold(held: boolean): void {
    this.#timer.hold(held);
  }

  /** The parked items (for the exact counts a clean close stores). */
  entries(): Entry[] {
    const out: Entry[] = [];
    for (const w of this.#windows.values()) if (w.parked !== undefined) for (const entry of w.parked.values()) out.push(entry);
    return out;
  }

  /** Forget the parked items and the timer (close, failure: the items stay stored); the windows stay, as the hand-outs happened. */
  clear(): void {
    for (const w of this.#windows.values()) w.parked = undefined;
    this.#parkedCount = 0;
    this.#timer.disarm();
  }

  #sweep(now: number): void {
    this.#sinceSweep = 0;
    this.#lastEntry = undefined;
    this.#lastWindow = undefined;
    for (const [key, w] of this.#windows) if (w.idle(now, this.limit)) this.#windows.delete(key);
  }

  /**
   * The parked items whose window opened by now, taken out, before the timer for them has run (a
   * take between the time and the timer must not pass them over for later items of their group).
   */
  due(): Entry[] {
    if (this.#parkedCount === 0 || this.#timer.dueMs > this.#time.monoNow()) return NONE;
    return this.#release();
  }

  readonly #onTimer = (): void => {
    this.#opened(this.#release());
  };

  /** Take out the parked items whose window has room now, and arm the timer for the rest. */
  #release(): Entry[] {
    const now = this.#time.monoNow();
    const back: Entry[] = [];
    let next = Infinity;
    if (this.limit.by === 'group') {
      for (const w of this.#windows.values()) {
        const parked = w.parked;
        if (parked === undefined) continue;
        // As many as the window has room for: more would only be parked again.
        for (let room = w.room(now, this.limit); room > 0 && parked.size > 0; room--) back.push(parked.pop()!);
        if (parked.size === 0) w.parked = undefined;
        else next = Math.min(next, w.nextAt(now, this.limit));
      }
      this.#parkedCount -= back.length;
    } else if (this.#queue.nextAt(now, this.limit) > now) next = this.#queue.nextAt(now, this.limit);
    // Early (see due-timer.ts): armed again for what is still shut.
    if (next !== Infinity) this.#timer.arm(next);
    else this.#timer.disarm();
    return back;
  }
}

const NONE: Entry[] = [];
