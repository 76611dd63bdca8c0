// The one timer behind a list of things due at a time (due-list.ts, schedule.ts): armed for the
// earliest due time, cleared and armed again as that changes.
import { type TimeSource, refTimer, unrefTimer } from '../lib/clock.js';

/** setTimeout's longest delay (2^31 − 1 ms); a longer wait is armed again when it fires. */
const TIMER_MS_MAX = 2_147_483_647;

export class DueTimer {
  readonly #time: TimeSource;
  /** The clock due times are read on: monotonic for lengths, the wall clock for not-before times. */
  readonly #now: () => number;
  readonly #fire: () => void;
  #handle: unknown;
  #dueMs = Infinity;
  /** Whether the timer keeps the process alive. */
  #held: boolean;

  constructor(time: TimeSource, now: () => number, fire: () => void, held: boolean) {
    this.#time = time;
    this.#now = now;
    this.#fire = fire;
    this.#held = held;
  }

  /** The due time the timer is armed for; Infinity when it is not. */
  get dueMs(): number {
    return this.#dueMs;
  }

  arm(dueMs: number): void {
    this.disarm();
    this.#dueMs = dueMs;
    const waitMs = Math.min(TIMER_MS_MAX, Math.max(0, Math.ceil(dueMs - this.#now())));
    this.#handle = this.#time.setTimeout(this.#onTimer, waitMs);
    if (!this.#held) unrefTimer(this.#handle);
  }

  disarm(): void {
    if (this.#handle !== undefined) this.#time.clearTimeout(this.#handle);
    this.#handle = undefined;
    this.#dueMs = Infinity;
  }

  /** Keep the process alive while armed, or not. */
  hold(held: boolean): void {
    if (held === this.#held) return;
    this.#held = held;
    if (this.#handle === undefined) return;
    if (held) refTimer(this.#handle);
    else unrefTimer(this.#handle);
  }

  // The owner reads its clock again when this fires: a timer may fire a fraction of a millisecond
  // early, and a wait longer than setTimeout allows fires early on purpose, so it arms again.
  readonly #onTimer = (): void => {
    this.#handle = undefined;
    this.#dueMs = Infinity;
    this.#fire();
  };
}
