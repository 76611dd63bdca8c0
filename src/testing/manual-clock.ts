// A clock that moves only when told to, for tests of delays, leases and retries that never sleep.
import { expectation } from '../lib/validate.js';
import type { Clock } from '../lib/clock.js';

interface ManualTimer {
  readonly id: number;
  readonly dueMs: number;
  readonly fn: () => void;
}

/**
 * A {@link Clock} for `Builder.clock`: `now()` stays where it is until `advance(ms)` or `set(ms)`
 * moves it, and then the timers that fell due run, in due order (ties in the order they were
 * set), each one seeing `now()` at its own due time. A timer set by a timer that runs during an
 * advance runs in the same advance when it falls due within it.
 */
export class ManualClock implements Clock {
  #nowMs: number;
  #timers: ManualTimer[] = [];
  #nextId = 1;

  /** @param startMs where the clock starts, in ms since the Unix epoch. @default 1_700_000_000_000 */
  constructor(startMs = 1_700_000_000_000) {
    if (typeof startMs !== 'number' || !Number.isSafeInteger(startMs) || startMs < 0) {
      throw new RangeError(expectation('startMs', 'a non-negative safe integer', startMs));
    }
    this.#nowMs = startMs;
  }

  now(): number {
    return this.#nowMs;
  }

  setTimeout(fn: () => void, ms: number): unknown {
    const timer: ManualTimer = { id: this.#nextId++, dueMs: this.#nowMs + Math.max(0, ms), fn };
    this.#timers.push(timer);
    return timer.id;
  }

  clearTimeout(handle: unknown): void {
    const i = this.#timers.findIndex((t) => t.id === handle);
    if (i >= 0) this.#timers.splice(i, 1);
  }

  /** Timers set and not yet run or cleared. */
  get pendingTimers(): number {
    return this.#timers.length;
  }

  /** Move the clock `ms` forward, running every timer that falls due on the way. */
  advance(ms: number): void {
    if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0)
      throw new RangeError(expectation('ms', 'a non-negative finite number', ms));
    this.#runUntil(this.#nowMs + ms);
  }

  /** Move the clock to `ms` since the epoch (never back), running the timers due by then. */
  set(ms: number): void {
    if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < this.#nowMs) {
      throw new RangeError(expectation('ms', `a time at or after now (${this.#nowMs})`, ms));
    }
    this.#runUntil(ms);
  }

  #runUntil(targetMs: number): void {
    for (;;) {
      let next: ManualTimer | undefined;
      for (const t of this.#timers) if (t.dueMs <= targetMs && (next === undefined || t.dueMs < next.dueMs)) next = t;
      if (next === undefined) break;
      this.#timers.splice(this.#timers.indexOf(next), 1);
      this.#nowMs = Math.max(this.#nowMs, next.dueMs);
      next.fn();
    }
    this.#nowMs = Math.max(this.#nowMs, targetMs);
  }
}
