// Time as the queue reads it: the wall clock for not-before times (they are stored and outlive
// the process), a monotonic clock for lengths measured within one process (leases, retry delays),
// and the timers that wake the queue when something falls due. A test injects one object
// (`Builder.clock`) that answers all three, so that it moves time itself and never sleeps.
import { expectation } from './validate.js';

/**
 * A clock the queue reads instead of the system's (`Builder.clock`). `now()` is milliseconds
 * since the Unix epoch; `setTimeout` calls `fn` once the clock has moved `ms` forward and returns
 * a handle `clearTimeout` cancels. The handle may have an `unref()` method, as Node's timers do.
 */
export interface Clock {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

/**
 * The clock the queue uses inside, built from the system's or an injected {@link Clock}. No entry
 * point exports it, but it is not marked internal: the emitted declarations of the leases and timers
 * name it (docs/internals/package.md, "The published package").
 */
export interface TimeSource {
  /** Milliseconds since the Unix epoch: what not-before times are compared with. */
  wallNow(): number;
  /** A clock that never steps back, for lengths within this process (leases, retries). */
  monoNow(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

/**
 * The system's clocks. Leases and retry delays are measured with `performance.now()`, so that a
 * wall-clock step neither ends a lease early nor holds a retry back; not-before times are wall
 * clock times by nature, so a step moves them.
 */
export const systemTime: TimeSource = {
  wallNow: () => Date.now(),
  monoNow: () => performance.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

/** The time source of an injected clock: every reading comes from it. */
export function timeOf(clock: Clock): TimeSource {
  return {
    wallNow: () => clock.now(),
    monoNow: () => clock.now(),
    setTimeout: (fn, ms) => clock.setTimeout(fn, ms),
    clearTimeout: (handle) => clock.clearTimeout(handle),
  };
}

/** Validate a {@link Clock} given to the builder. */
export function checkClock(clock: unknown): Clock {
  const c = clock as Partial<Clock> | null;
  if (
    c === null ||
    typeof c !== 'object' ||
    typeof c.now !== 'function' ||
    typeof c.setTimeout !== 'function' ||
    typeof c.clearTimeout !== 'function'
  ) {
    throw new TypeError(expectation('clock', 'an object with now(), setTimeout(fn, ms) and clearTimeout(handle)', clock));
  }
  return c as Clock;
}

/** Let a timer handle not keep the process alive, when it can (Node's handles can). */
export function unrefTimer(handle: unknown): void {
  (handle as { unref?: () => void } | null)?.unref?.();
}

/** Let a timer handle keep the process alive again. */
export function refTimer(handle: unknown): void {
  (handle as { ref?: () => void } | null)?.ref?.();
}

/** setInterval's longest period: the keep-alive timer never needs to fire. */
const KEEP_ALIVE_MS = 2_147_483_647;

/**
 * Keeps the process alive while a consumer waits for an item (`reserve()`, `for await`,
 * `process()`), as a worker of a job queue does: a daemon whose queue is idle must not exit with
 * the store unclosed. One timer of the system's, made at the first wait and toggled with
 * ref/unref after that (cheaper than a timer per wait); `close()` and a failure release it. It is
 * the system's timer whatever clock the queue reads: it holds the event loop, it measures nothing.
 */
export class KeepAlive {
  #handle: ReturnType<typeof setInterval> | undefined;
  #held = false;

  hold(held: boolean): void {
    if (held === this.#held) return;
    this.#held = held;
    if (held) {
      if (this.#handle === undefined) this.#handle = setInterval(noop, KEEP_ALIVE_MS);
      else refTimer(this.#handle);
    } else if (this.#handle !== undefined) unrefTimer(this.#handle);
  }

  /** For good: the queue closed or failed. */
  release(): void {
    this.#held = false;
    if (this.#handle !== undefined) clearInterval(this.#handle);
    this.#handle = undefined;
  }
}

function noop(): void {}
