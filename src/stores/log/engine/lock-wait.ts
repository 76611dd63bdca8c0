/**
 * Waiting for a store that another opener holds (`lockTimeoutMs`, `signal`). A CLI started by cron,
 * a git hook or a shell loop often finds the previous run still holding the store for a few
 * milliseconds; failing at once with `ERR_LOCKED` makes every such caller write its own retry
 * loop. This is SQLite's busy_timeout: try, and while the store is held, try again after a short
 * pause that grows, until the deadline, then give up with the last `ERR_LOCKED`.
 *
 * Neither lock can be waited on directly (a held `flock` is taken non-blocking, and a pid lock
 * file has nothing to wait on), so this polls. Between attempts nothing is held and nothing is
 * written: giving up, by time or by abort, leaves the store as it was.
 */
import { OpenError } from '../../../contract/errors.js';
import { expectation, optionalSignal } from '../../../lib/validate.js';

/** The first pause after a refused attempt; each next one doubles, up to {@link POLL_MAX_MS}. */
const POLL_FIRST_MS = 5;
/** The longest pause: a holder that lets go is noticed within this long. */
const POLL_MAX_MS = 100;

/** `lockTimeoutMs`: a non-negative integer, or `Infinity` (wait until the holder lets go or `signal` aborts). */
export function lockTimeoutOption(value: unknown): number {
  const what = 'a non-negative integer or Infinity';
  if (value === undefined) return 0;
  if (typeof value !== 'number') throw new TypeError(expectation('lockTimeoutMs', what, value));
  if (value !== Infinity && !(Number.isSafeInteger(value) && value >= 0)) throw new RangeError(expectation('lockTimeoutMs', what, value));
  return value;
}

/** `signal`: an AbortSignal or undefined. */
export function lockSignalOption(value: unknown): AbortSignal | undefined {
  return optionalSignal('signal', value);
}

/** Time as the wait sees it; tests substitute it so that no test sleeps. */
export interface WaitClock {
  now(): number;
  /** Resolve after `ms`; reject with the signal's reason as soon as `signal` aborts. */
  sleep(ms: number, signal: AbortSignal | undefined): Promise<void>;
}

const realClock: WaitClock = {
  now: () => performance.now(),
  sleep: (ms, signal) =>
    new Promise<void>((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      const onAbort = (): void => {
        clearTimeout(timer);
        reject(signal!.reason);
      };
      const timer = setTimeout(() => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      }, ms);
      signal?.addEventListener('abort', onAbort, { once: true });
    }),
};

const isLocked = (e: unknown): e is OpenError => e instanceof OpenError && e.code === 'ERR_LOCKED';

/**
 * One open's wait. Its deadline is fixed when it is made, so the in-process claim and the process
 * lock share one budget: `lockTimeoutMs` bounds the whole wait of an open, not each step.
 */
export class LockWait {
  readonly #timeoutMs: number;
  readonly #signal: AbortSignal | undefined;
  readonly #clock: WaitClock;
  readonly #startedMs: number;

  constructor(options: { readonly lockTimeoutMs: number; readonly signal: AbortSignal | undefined }, clock: WaitClock = realClock) {
    this.#timeoutMs = options.lockTimeoutMs;
    this.#signal = options.signal;
    this.#clock = clock;
    this.#startedMs = clock.now();
  }

  /**
   * Throw the signal's reason when it has aborted, as the queue's own `signal` options do (an
   * `abort()` without a reason gives a DOMException named `AbortError`).
   */
  throwIfAborted(): void {
    this.#signal?.throwIfAborted();
  }

  /** True when `e` is what this wait threw because its signal aborted. */
  isAbort(e: unknown): boolean {
    return this.#signal?.aborted === true && e === this.#signal.reason;
  }

  /**
   * Run `attempt` until it does not throw `OpenError` `ERR_LOCKED`. Past the deadline the last
   * `ERR_LOCKED` is thrown (unchanged when there was no wait at all, else saying how long it
   * waited); an abort rejects with the signal's reason. Any other error is thrown at once.
   */
  async retry<T>(attempt: () => T): Promise<T> {
    let pauseMs = POLL_FIRST_MS;
    for (;;) {
      this.throwIfAborted();
      try {
        return attempt();
      } catch (e) {
        if (!isLocked(e)) throw e;
        const waitedMs = this.#clock.now() - this.#startedMs;
        const leftMs = this.#timeoutMs - waitedMs;
        if (leftMs <= 0) throw this.#timeoutMs === 0 ? e : gaveUp(e, waitedMs);
        await this.#clock.sleep(Math.min(pauseMs, leftMs), this.#signal);
        pauseMs = Math.min(POLL_MAX_MS, pauseMs * 2);
      }
    }
  }
}

/** The last refusal, saying how long the open waited; `cause` (with the holder's pid) is kept. */
function gaveUp(last: OpenError, waitedMs: number): OpenError {
  return new OpenError('ERR_LOCKED', `${last.message}; gave up after waiting ${Math.round(waitedMs)} ms (lockTimeoutMs)`, {
    cause: last.cause,
    file: last.file,
  });
}
