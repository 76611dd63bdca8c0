// nack({ delayMs }), the retry policy of process(), onError, the handler's signal and timeoutMs.
// Time is faked (setTimeout and performance.now); setImmediate stays real, so the workers' turns run.
import diagnosticsChannel from 'node:diagnostics_channel';
import { getEventListeners } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Builder, LogStore, MemStore, QueueError, channels, type Reserved } from '../../src/index.js';
import { retryDelays } from '../../src/core/retry.js';
import { Prng, formatSeed, seedFromEnv, withReproduction } from '../../src/testing/index.js';

const dec = (b: Uint8Array) => new TextDecoder().decode(b);
const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

/** A promise and its resolver, to await an event instead of sleeping. */
function signalled<T = void>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((res) => (resolve = res));
  return { promise, resolve };
}

function fakeTime(): void {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
}

afterEach(() => {
  vi.useRealTimers();
});

describe('nack({ delayMs })', () => {
  beforeEach(fakeTime);

  it('aDelayedItemDoesNotHoldBackNewerItemsAndComesBackBySeqWhenItsTimeComes', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    await tx.pushMany(['a', 'b', 'c', 'd']);
    await rx.tryReserve()!.nack({ delayMs: 1000 });
    expect(rx.stats()).toMatchObject({ ready: 3, delayed: 1, inFlight: 0, nacked: 1 });
    const b = rx.tryReserve()!;
    expect(dec(b.bytes)).toBe('b');
    await b.ack();
    vi.advanceTimersByTime(999);
    expect(rx.stats()).toMatchObject({ ready: 2, delayed: 1 });
    vi.advanceTimersByTime(1);
    expect(rx.stats()).toMatchObject({ ready: 3, delayed: 0 });
    // Ready again by seq: 'a' (seq 1) before 'c' and 'd', which were ready all along.
    const again = rx.tryReserve()!;
    expect([dec(again.bytes), again.deliveries]).toEqual(['a', 2]);
    expect(dec(rx.tryReserve()!.bytes)).toBe('c');
    expect(rx.stats()).toMatchObject({ redelivered: 1, retried: 0 });
    await rx.close();
  });

  it('aWaitingReserveGetsTheDelayedItemWhenItsTimeComes', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    await tx.push('x');
    await rx.tryReserve()!.nack({ delayMs: 50 });
    let got: Reserved | null | undefined;
    void rx.reserve().then((item) => (got = item));
    await turn();
    expect(got).toBeUndefined();
    vi.advanceTimersByTime(50);
    await turn();
    expect(got?.seq).toBe(1);
    await rx.close();
  });

  it('itemsWithDifferentDelaysComeBackInDueOrderAndAZeroDelayIsImmediate', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    await tx.pushMany(['1', '2', '3']);
    const [one, two, three] = [rx.tryReserve()!, rx.tryReserve()!, rx.tryReserve()!];
    await one.nack({ delayMs: 300 });
    await two.nack({ delayMs: 100 });
    await three.nack({ delayMs: 0 });
    expect(rx.stats()).toMatchObject({ ready: 1, delayed: 2 });
    expect(rx.tryReserve()!.seq).toBe(3);
    vi.advanceTimersByTime(100);
    expect(rx.tryReserve()!.seq).toBe(2);
    expect(rx.tryReserve()).toBeNull();
    vi.advanceTimersByTime(200);
    expect(rx.tryReserve()!.seq).toBe(1);
    await rx.close();
  });

  it('closeDoesNotWaitForDelayedItemsAndAReopenedQueueHasThemReadyAtOnce', async () => {
    const store = new MemStore();
    const [tx, rx] = await new Builder(store).open();
    await tx.pushMany(['later', 'other']);
    await rx.tryReserve()!.nack({ delayMs: 3_600_000 });
    await rx.close(); // no timer advanced: close must not wait for the delay
    expect(vi.getTimerCount()).toBe(0);
    const [, rx2] = await new Builder(store).open();
    expect(rx2.stats()).toMatchObject({ ready: 2, delayed: 0 });
    expect(dec((await rx2.reserve())!.bytes)).toBe('later');
    await rx2.close();
  });

  it('drainedWaitsForDelayedItemsAndOnIdleForTheirAcks', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    await tx.push('x');
    await rx.tryReserve()!.nack({ delayMs: 10 });
    // Nothing is ready, yet the delayed item is still to be handed out: not drained.
    expect(rx.stats()).toMatchObject({ ready: 0, delayed: 1 });
    let drained = false;
    void rx.drained().then(() => (drained = true));
    await turn();
    expect(drained).toBe(false);
    vi.advanceTimersByTime(10);
    const item = rx.tryReserve()!;
    await turn();
    expect(drained).toBe(true);
    await item.ack();
    await rx.onIdle();
    await rx.close();
  });

  it('badOptionsRejectWithATypedErrorAndLeaveTheItemInFlight', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    await tx.push('x');
    const item = rx.tryReserve()!;
    await expect(item.nack({ delayMs: -1 })).rejects.toBeInstanceOf(RangeError);
    await expect(item.nack({ delayMs: Number.NaN })).rejects.toBeInstanceOf(RangeError);
    await expect(item.nack({ delayMs: Infinity })).rejects.toBeInstanceOf(RangeError);
    await expect(item.nack({ delayMs: '5' as never })).rejects.toThrow(
      /Expected `options.delayMs` to be a finite number of ms, 0 or more, got `"5"` \(string\)/,
    );
    await expect(item.nack({ delay: 5 } as never)).rejects.toBeInstanceOf(TypeError);
    await expect(item.nack(5 as never)).rejects.toBeInstanceOf(TypeError);
    expect(item.settled).toBe(false);
    expect(rx.stats()).toMatchObject({ inFlight: 1, delayed: 0, nacked: 0 });
    await item.ack();
    await rx.close();
  });

  it('aDelayLongerThanATimerAllowsIsArmedAgainNotFiredEarly', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    await tx.push('x');
    const days = 40 * 24 * 3600 * 1000; // past setTimeout's 2^31 − 1 ms
    await rx.tryReserve()!.nack({ delayMs: days });
    vi.advanceTimersByTime(2 ** 31);
    expect(rx.stats()).toMatchObject({ ready: 0, delayed: 1 });
    vi.advanceTimersByTime(days - 2 ** 31);
    expect(rx.stats()).toMatchObject({ ready: 1, delayed: 0 });
    await rx.close();
  });
});

describe('the retry policy', () => {
  it('builderRefusesBadPoliciesWithATypedError', () => {
    const b = new Builder(new MemStore());
    expect(() => b.retry(undefined as never)).toThrow(TypeError);
    expect(() => b.retry({} as never)).toThrow(TypeError);
    expect(() => b.retry({ kind: 'linear' } as never)).toThrow(RangeError);
    expect(() => b.retry({ kind: 'fixed' } as never)).toThrow(TypeError);
    expect(() => b.retry({ kind: 'fixed', delayMs: -5 })).toThrow(RangeError);
    expect(() => b.retry({ kind: 'fixed', delayMs: 5, baseMs: 1 } as never)).toThrow(/Unknown option/);
    expect(() => b.retry({ kind: 'exponential', baseMs: 100, maxMs: 50 })).toThrow(RangeError);
    expect(() => b.retry({ kind: 'exponential', factor: 0.5 })).toThrow(RangeError);
    expect(() => b.retry({ kind: 'exponential', jitter: 2 })).toThrow(RangeError);
    expect(() => b.retry({ kind: 'exponential', jitter: '0.1' as never })).toThrow(TypeError);
    expect(() => b.retry({ kind: 'exponential', random: 4 as never })).toThrow(TypeError);
    expect(() => b.retry({ kind: 'custom', delayMs: 5 as never })).toThrow(TypeError);
    expect(b.retry({ kind: 'exponential' })).toBe(b);
    expect(b.retry(() => 1)).toBe(b);
  });

  it('exponentialGrowsByFactorUpToTheCapAndJitterTakesOffAtMostItsShare', async () => {
    const seed = seedFromEnv(0x5eed_0001);
    const prng = new Prng(seed);
    await withReproduction(
      () => `SEED=${formatSeed(seed)} npx vitest run test/core/retry.test.ts -t exponentialGrows`,
      () => {
        const plain = retryDelays({ kind: 'exponential', baseMs: 10, maxMs: 1000, factor: 3, jitter: 0 });
        expect([1, 2, 3, 4, 5, 6, 1000].map((n) => plain(n, undefined))).toEqual([10, 30, 90, 270, 810, 1000, 1000]);
        const jittered = retryDelays({ kind: 'exponential', baseMs: 10, maxMs: 1000, factor: 3, jitter: 0.25, random: () => prng.float() });
        for (let n = 1; n <= 200; n++) {
          const nominal = Math.min(1000, 10 * 3 ** (n - 1));
          const d = jittered(n, undefined);
          expect(d).toBeGreaterThanOrEqual(nominal * 0.75);
          expect(d).toBeLessThanOrEqual(nominal);
        }
        // The same seed gives the same delays.
        const again = new Prng(seed);
        const a = retryDelays({ kind: 'exponential', jitter: 1, random: () => again.float() });
        const b2 = new Prng(seed);
        const b = retryDelays({ kind: 'exponential', jitter: 1, random: () => b2.float() });
        const first = [1, 2, 3].map((n) => a(n, undefined));
        expect([1, 2, 3].map((n) => b(n, undefined))).toEqual(first);
        expect(new Set(first).size).toBe(3);
      },
    );
  });

  it('theDefaultIsExponentialFrom100msTo30s', () => {
    const half = retryDelays({ kind: 'exponential', random: () => 0 });
    expect([1, 2, 3, 9, 10, 50].map((n) => half(n, undefined))).toEqual([100, 200, 400, 25_600, 30_000, 30_000]);
    const most = retryDelays({ kind: 'exponential', random: () => 0.999_999 });
    expect(most(1, undefined)).toBeCloseTo(50, 3);
  });

  it('aCustomFunctionGetsDeliveriesAndTheErrorAndItsAnswerIsChecked', () => {
    const seen: unknown[] = [];
    const fn = retryDelays((deliveries: number, error: unknown) => {
      seen.push([deliveries, (error as Error).message]);
      return deliveries * 7;
    });
    expect(fn(3, new Error('boom'))).toBe(21);
    expect(seen).toEqual([[3, 'boom']]);
    expect(() => retryDelays({ kind: 'custom', delayMs: () => -1 })(1, null)).toThrow(RangeError);
    expect(() => retryDelays(() => 'soon' as never)(1, null)).toThrow(TypeError);
  });
});

describe('process() and the retry policy', () => {
  beforeEach(fakeTime);

  it('aFixedDelayRedeliversOnlyOnceItHasPassedAndNewerItemsRunMeanwhile', async () => {
    const [tx, rx] = await new Builder(new MemStore()).retry({ kind: 'fixed', delayMs: 1000 }).open();
    await tx.pushMany(['flaky', 'b', 'c']);
    const seen: string[] = [];
    const third = signalled();
    const fourth = signalled();
    const done = rx.process(async (item) => {
      seen.push(`${dec(item.bytes)}#${item.deliveries}`);
      if (seen.length === 3) third.resolve();
      if (seen.length === 4) fourth.resolve();
      if (item.deliveries === 1 && dec(item.bytes) === 'flaky') throw new Error('transient');
    });
    await third.promise;
    await turn();
    expect(seen).toEqual(['flaky#1', 'b#1', 'c#1']);
    expect(rx.stats()).toMatchObject({ delayed: 1, retried: 1, nacked: 1, acked: 2 });
    vi.advanceTimersByTime(999);
    await turn();
    expect(seen).toHaveLength(3);
    vi.advanceTimersByTime(1);
    await fourth.promise;
    expect(seen[3]).toBe('flaky#2');
    await rx.close();
    await done;
  });

  it('underDefaultOptionsAnAlwaysThrowingHandlerIsRedeliveredABoundedNumberOfTimes', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    await tx.push('poison');
    await tx.pushMany(Array.from({ length: 100 }, (_, i) => `good ${i}`));
    let poison = 0;
    let good = 0;
    const allGood = signalled();
    const done = rx.process(async (item) => {
      if (dec(item.bytes) === 'poison') {
        poison++;
        throw new Error('always');
      }
      if (++good === 100) allGood.resolve();
    });
    await allGood.promise;
    // Ten simulated minutes: at most one delivery per 50 ms at first, one per 15 s at the cap.
    for (let i = 0; i < 600; i++) {
      vi.advanceTimersByTime(1000);
      await turn();
    }
    // Delays of at least 50, 100, 200 ... 15000 ms (jitter takes off at most half): well under 60 deliveries in 600 s.
    expect(poison).toBeGreaterThanOrEqual(10);
    expect(poison).toBeLessThan(60);
    expect(rx.stats()).toMatchObject({ retried: poison, delayed: 1 });
    await rx.close();
    await done;
  });

  it('aRetryFunctionThatThrowsStopsProcessWithItsErrorAndTheItemIsReadyAgain', async () => {
    const [tx, rx] = await new Builder(new MemStore()).retry(() => -1).open();
    await tx.push('x');
    const error = await rx
      .process(() => {
        throw new Error('handler');
      })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RangeError);
    expect(rx.stats()).toMatchObject({ ready: 1, inFlight: 0, delayed: 0 });
    await rx.close();
  });
});

describe('process() reports handler errors', () => {
  beforeEach(fakeTime);

  it('onErrorGetsEveryErrorWithSeqAndDeliveries', async () => {
    const [tx, rx] = await new Builder(new MemStore()).retry({ kind: 'fixed', delayMs: 0 }).open();
    await tx.pushMany(['a', 'b']);
    const reported: unknown[] = [];
    const done = rx.process(
      (item) => {
        if (item.deliveries < 3) throw new Error(`${dec(item.bytes)} failed ${item.deliveries}`);
        if (item.seq === 2) void rx.close();
      },
      { onError: (error, info) => reported.push([(error as Error).message, info]) },
    );
    await done;
    // Retried at once, the failed item is the lowest ready seq again.
    expect(reported).toEqual([
      ['a failed 1', { seq: 1, deliveries: 1 }],
      ['a failed 2', { seq: 1, deliveries: 2 }],
      ['b failed 1', { seq: 2, deliveries: 1 }],
      ['b failed 2', { seq: 2, deliveries: 2 }],
    ]);
  });

  it('anOnErrorThatThrowsOrRejectsBecomesAWarningAndProcessingGoesOn', async () => {
    const warnings: Error[] = [];
    const onWarning = (w: Error) => warnings.push(w);
    process.on('warning', onWarning);
    try {
      const [tx, rx] = await new Builder(new MemStore()).retry({ kind: 'fixed', delayMs: 0 }).open();
      await tx.pushMany(['a', 'b', 'c']);
      let calls = 0;
      const done = rx.process(
        (item) => {
          if (item.deliveries === 1 && item.seq < 3) throw new Error('handler');
          if (item.seq === 3) void rx.close();
        },
        {
          onError: () => {
            if (++calls === 1) throw new Error('logger down');
            return Promise.reject(new Error('logger rejected'));
          },
        },
      );
      await done;
      await turn();
      expect(calls).toBe(2);
      // a and b failed once each and were acked on their second delivery; c reached its handler.
      expect(rx.stats()).toMatchObject({ acked: 2, retried: 2 });
      const ours = warnings.filter((w) => (w as Error & { code?: string }).code === 'PQ_ON_ERROR_FAILED');
      expect(ours.map((w) => [w.name, w.message])).toEqual([
        ['PersistentQueueWarning', 'process() onError threw: logger down'],
        ['PersistentQueueWarning', 'process() onError threw: logger rejected'],
      ]);
    } finally {
      process.off('warning', onWarning);
    }
  });

  it('badProcessOptionsRejectWithATypedError', async () => {
    const [, rx] = await new Builder(new MemStore()).open();
    await expect(rx.process(() => {}, { onError: 'log' as never })).rejects.toBeInstanceOf(TypeError);
    await expect(rx.process(() => {}, { timeoutMs: 0 })).rejects.toBeInstanceOf(RangeError);
    await expect(rx.process(() => {}, { timeoutMs: -1 })).rejects.toBeInstanceOf(RangeError);
    await expect(rx.process(() => {}, { timeoutMs: '5' as never })).rejects.toBeInstanceOf(TypeError);
    await expect(rx.process(() => {}, { concurency: 4 } as never)).rejects.toThrow(/Unknown option in `options`: `concurency`/);
    expect(rx.stats()).toMatchObject({ inFlight: 0 });
    await rx.close();
  });
});

describe("the handler's signal and timeoutMs", () => {
  beforeEach(fakeTime);

  it('aHandlerThatRunsPastTimeoutMsIsAbortedAndRetriedAndItsLateAckIsRefused', async () => {
    const [tx, rx] = await new Builder(new MemStore()).retry({ kind: 'fixed', delayMs: 0 }).open();
    await tx.push('slow');
    const started = signalled<{ item: Reserved; signal: AbortSignal }>();
    const second = signalled<Reserved>();
    const reported: unknown[] = [];
    const done = rx.process(
      (item, { signal }) => {
        if (item.deliveries === 1) {
          started.resolve({ item, signal });
          return new Promise(() => {}); // never settles
        }
        second.resolve(item);
        return undefined;
      },
      { timeoutMs: 5000, onError: (error, info) => reported.push([(error as Error).name, info]) },
    );
    const first = await started.promise;
    expect(first.signal.aborted).toBe(false);
    vi.advanceTimersByTime(4999);
    await turn();
    expect(first.signal.aborted).toBe(false);
    vi.advanceTimersByTime(1);
    expect(first.signal.aborted).toBe(true);
    expect((first.signal.reason as Error).name).toBe('TimeoutError');
    const again = await second.promise;
    expect(again.deliveries).toBe(2);
    expect(reported).toEqual([['TimeoutError', { seq: 1, deliveries: 1 }]]);
    // The first run's handle is settled: its late ack neither acks the redelivery nor settles twice.
    await expect(first.item.ack()).rejects.toSatisfy((e: unknown) => e instanceof QueueError && e.code === 'ERR_ALREADY_SETTLED');
    await turn();
    expect(rx.stats()).toMatchObject({ retried: 1, acked: 1, ready: 0, inFlight: 0 });
    await rx.close();
    await done;
  });

  it('handlerSignalsAbortWhenProcessIsStoppedAndAOneArgumentHandlerStillWorks', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    await tx.pushMany(['a', 'b']);
    const stop = new AbortController();
    const running = signalled<AbortSignal>();
    const done = rx.process(
      (_item, context) => {
        running.resolve(context.signal);
        return new Promise<void>((resolve) => context.signal.addEventListener('abort', () => resolve()));
      },
      { signal: stop.signal },
    );
    const signal = await running.promise;
    stop.abort(new Error('shutting down'));
    expect(signal.aborted).toBe(true);
    expect((signal.reason as Error).message).toBe('shutting down');
    await done;
    const seen: number[] = [];
    const stop2 = new AbortController();
    await rx.process(
      (item: Reserved) => {
        seen.push(item.seq);
        stop2.abort();
      },
      { signal: stop2.signal },
    );
    expect(seen).toEqual([2]);
    await rx.close();
  });
});

describe('process() and the signals and closes around it', () => {
  it('sixtyFourWorkersAddOneListenerToTheCallersSignalAndNoWarning', async () => {
    const warnings: Error[] = [];
    const onWarning = (w: Error) => warnings.push(w);
    process.on('warning', onWarning);
    try {
      const [tx, rx] = await new Builder(new MemStore()).open();
      const stop = new AbortController();
      const done = rx.process(async () => {}, { concurrency: 64, signal: stop.signal });
      await tx.push('one');
      await turn();
      // Every worker but one is waiting for an item now.
      expect(getEventListeners(stop.signal, 'abort')).toHaveLength(1);
      stop.abort();
      await done;
      expect(getEventListeners(stop.signal, 'abort')).toHaveLength(0);
      await turn();
      expect(warnings.filter((w) => w.name === 'MaxListenersExceededWarning')).toEqual([]);
      expect(rx.stats()).toMatchObject({ acked: 1, inFlight: 0 });
      await rx.close();
    } finally {
      process.off('warning', onWarning);
    }
  });

  it('theStoreCanBeOpenedAgainAsSoonAsProcessResolvesAfterClose', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'pq-process-'));
    try {
      const [tx, rx] = await new Builder(await LogStore.open(dir)).durability('none').open();
      await tx.pushMany(['a', 'b', 'c']);
      await rx.process(async (item) => {
        if (item.seq === 2) void rx.close();
      });
      // process() resolved: the queue's close() has finished and the store is released.
      const store = await LogStore.open(dir);
      const [tx2, rx2] = await new Builder(store).open();
      expect(rx2.stats().ready).toBeGreaterThanOrEqual(1);
      await tx2.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('diagnostics of delayed retries', () => {
  beforeEach(fakeTime);

  it('retryIsPublishedWhenADelayedItemIsHandedOutAgainAndDeadLetterNever', async () => {
    const seen: [string, unknown][] = [];
    const subs = (['nack', 'retry', 'deadLetter'] as const).map((key) => {
      const fn = (m: unknown) => seen.push([key, m]);
      diagnosticsChannel.subscribe(channels[key], fn);
      return () => diagnosticsChannel.unsubscribe(channels[key], fn);
    });
    try {
      const [tx, rx] = await new Builder(new MemStore()).retry({ kind: 'fixed', delayMs: 100 }).open();
      const id = rx.stats().queueId;
      await tx.push('poison');
      let deliveries = 0;
      const third = signalled();
      const done = rx.process(() => {
        if (++deliveries === 3) third.resolve();
        throw new Error('always');
      });
      for (let i = 0; i < 3 && deliveries < 3; i++) {
        await turn();
        const nacks = seen.filter(([k]) => k === 'nack').length;
        expect(seen.filter(([k]) => k === 'retry')).toHaveLength(Math.max(0, nacks - 1));
        vi.advanceTimersByTime(100);
      }
      await third.promise;
      const ours = seen.filter(([, m]) => (m as { queueId: number }).queueId === id);
      expect(ours.map(([k, m]) => `${k}:${(m as { deliveries: number }).deliveries}`)).toEqual([
        'nack:1',
        'retry:2',
        'nack:2',
        'retry:3',
        'nack:3',
      ]);
      await rx.close();
      await done;
      expect(seen.filter(([k]) => k === 'deadLetter')).toEqual([]);
    } finally {
      for (const unsubscribe of subs) unsubscribe();
    }
  });
});
