/**
 * The wait for a held store (`lockTimeoutMs`, `signal`) on a clock the test drives: the pauses,
 * the deadline, what is thrown when it gives up. No test here sleeps; the real-time behaviour
 * against real holders is in test/fs/lock.test.ts.
 */
import { describe, expect, test } from 'vitest';
import { OpenError } from '../../../src/contract/errors.js';
import { LockWait, type WaitClock } from '../../../src/stores/log/engine/lock-wait.js';

/** A clock whose sleeps pass at once and are recorded; `onSleep` may abort a signal. */
function fakeClock(onSleep: (ms: number) => void = () => {}): WaitClock & { sleeps: number[] } {
  let now = 1000;
  const sleeps: number[] = [];
  return {
    sleeps,
    now: () => now,
    sleep(ms, signal) {
      sleeps.push(ms);
      onSleep(ms);
      if (signal?.aborted) return Promise.reject(signal.reason);
      now += ms;
      return Promise.resolve();
    },
  };
}

const cause = Object.assign(new Error('LOCK is held by pid 4242'), { code: 'ELOCKED', pid: 4242 });
const locked = (): OpenError => new OpenError('ERR_LOCKED', 'Store /q is locked by another process (pid 4242)', { cause, file: '/q/LOCK' });

/** An attempt that is refused `refusals` times, then returns 'held'. */
function refusedTimes(refusals: number): { attempt: () => string; calls: () => number } {
  let calls = 0;
  return {
    attempt: () => {
      calls++;
      if (calls <= refusals) throw locked();
      return 'held';
    },
    calls: () => calls,
  };
}

describe('LockWait', () => {
  test('withoutATimeoutTheFirstRefusalIsThrownUnchanged', async () => {
    const clock = fakeClock();
    const first = locked();
    const wait = new LockWait({ lockTimeoutMs: 0, signal: undefined }, clock);
    await expect(
      wait.retry(() => {
        throw first;
      }),
    ).rejects.toBe(first);
    expect(clock.sleeps).toEqual([]);
  });

  test('pausesDoubleFromFiveMsUpToOneHundredUntilTheHolderLetsGo', async () => {
    const clock = fakeClock();
    const { attempt, calls } = refusedTimes(8);
    const wait = new LockWait({ lockTimeoutMs: 10_000, signal: undefined }, clock);
    await expect(wait.retry(attempt)).resolves.toBe('held');
    expect(calls()).toBe(9);
    expect(clock.sleeps).toEqual([5, 10, 20, 40, 80, 100, 100, 100]);
  });

  test('theLastPauseEndsAtTheDeadlineThenTheRefusalSaysHowLongItWaited', async () => {
    const clock = fakeClock();
    const wait = new LockWait({ lockTimeoutMs: 50, signal: undefined }, clock);
    const e = (await wait.retry(refusedTimes(Infinity).attempt).catch((x: unknown) => x)) as OpenError;
    expect(clock.sleeps).toEqual([5, 10, 20, 15]);
    expect(e).toBeInstanceOf(OpenError);
    expect(e.code).toBe('ERR_LOCKED');
    expect(e.message).toBe('Store /q is locked by another process (pid 4242); gave up after waiting 50 ms (lockTimeoutMs)');
    expect(e.cause).toBe(cause); // the holder's pid stays reachable (pq prints it)
    expect(e.file).toBe('/q/LOCK');
  });

  test('anotherErrorIsThrownAtOnceWithoutWaiting', async () => {
    const clock = fakeClock();
    const other = new OpenError('ERR_CORRUPT', 'bad');
    const wait = new LockWait({ lockTimeoutMs: 10_000, signal: undefined }, clock);
    await expect(
      wait.retry(() => {
        throw other;
      }),
    ).rejects.toBe(other);
    const io = Object.assign(new Error('EACCES'), { code: 'EACCES' });
    await expect(
      wait.retry(() => {
        throw io;
      }),
    ).rejects.toBe(io);
    expect(clock.sleeps).toEqual([]);
  });

  test('anAbortDuringAPauseRejectsWithTheSignalsReasonAndStopsTrying', async () => {
    const controller = new AbortController();
    const reason = new Error('the user pressed ctrl-c');
    const clock = fakeClock((ms) => {
      if (ms === 20) controller.abort(reason);
    });
    const { attempt, calls } = refusedTimes(Infinity);
    const wait = new LockWait({ lockTimeoutMs: Infinity, signal: controller.signal }, clock);
    const e = await wait.retry(attempt).catch((x: unknown) => x);
    expect(e).toBe(reason);
    expect(wait.isAbort(e)).toBe(true);
    expect(wait.isAbort(locked())).toBe(false);
    expect(calls()).toBe(3);
  });

  test('anAbortedSignalIsThrownBeforeTheFirstAttempt', async () => {
    const controller = new AbortController();
    controller.abort();
    const { attempt, calls } = refusedTimes(0);
    const wait = new LockWait({ lockTimeoutMs: 0, signal: controller.signal }, fakeClock());
    expect(() => wait.throwIfAborted()).toThrow(expect.objectContaining({ name: 'AbortError' }));
    await expect(wait.retry(attempt)).rejects.toMatchObject({ name: 'AbortError' });
    expect(calls()).toBe(0);
  });

  test('theDeadlineIsSharedByEveryStepOfOneOpen', async () => {
    const clock = fakeClock();
    const wait = new LockWait({ lockTimeoutMs: 40, signal: undefined }, clock);
    await expect(wait.retry(refusedTimes(2).attempt)).resolves.toBe('held'); // 5 + 10 ms spent
    await expect(wait.retry(refusedTimes(Infinity).attempt)).rejects.toMatchObject({ message: /gave up after waiting 40 ms/ });
    expect(clock.sleeps).toEqual([5, 10, 5, 10, 10]);
  });
});
