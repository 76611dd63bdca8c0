// Rate limits: Builder.rateLimit({ max, perMs, by }) hands out at most `max` items in any window
// of `perMs` on the queue's clock, by every consumer together, for the whole queue or per group;
// item.rateLimited(ms) returns an item without counting its delivery and pauses its window; bad
// input is a typed error that changes nothing.
import { describe, expect, it } from 'vitest';
import { Builder, MemStore, QueueError, type Reserved } from '../../src/index.js';
import { ManualClock } from '../../src/testing/index.js';

const dec = (b: Uint8Array) => new TextDecoder().decode(b);

/** Take every item ready now and ack it; their texts in hand-out order. */
async function takeAll(rx: { tryReserve(): Reserved | null }): Promise<string[]> {
  const out: string[] = [];
  for (let item = rx.tryReserve(); item !== null; item = rx.tryReserve()) {
    out.push(dec(item.bytes));
    await item.ack();
  }
  return out;
}

describe('a rate limit for the queue', () => {
  it('handsOutAtMostMaxInAWindowOfPerMsOnTheQueuesClock', async () => {
    const clock = new ManualClock();
    const [tx, rx] = await new Builder(new MemStore()).clock(clock).rateLimit({ max: 3, perMs: 1000 }).open();
    await tx.pushMany(['1', '2', '3', '4', '5', '6', '7', '8']);
    expect(await takeAll(rx)).toEqual(['1', '2', '3']);
    expect(rx.stats()).toMatchObject({ ready: 5, rateLimited: 5 });
    clock.advance(999);
    expect(await takeAll(rx)).toEqual([]);
    clock.advance(1);
    expect(await takeAll(rx)).toEqual(['4', '5', '6']);
    await tx.close();
  });

  it('countsASlidingWindowNotAlignedOnes', async () => {
    const clock = new ManualClock();
    const [tx, rx] = await new Builder(new MemStore()).clock(clock).rateLimit({ max: 2, perMs: 100 }).open();
    await tx.pushMany(['a', 'b', 'c', 'd', 'e']);
    const one = async (): Promise<string | null> => {
      const item = rx.tryReserve();
      if (item !== null) await item.ack();
      return item === null ? null : dec(item.bytes);
    };
    expect(await one()).toBe('a');
    clock.advance(60);
    expect(await one()).toBe('b');
    // Hand-outs at 0 and 60: at 100 the first has left the window, the second has not, so one
    // fits (windows aligned on multiples of 100 would let two go).
    clock.advance(40);
    expect(await takeAll(rx)).toEqual(['c']);
    clock.advance(50);
    expect(await takeAll(rx)).toEqual([]);
    clock.advance(10);
    expect(await takeAll(rx)).toEqual(['d']);
    await tx.close();
  });

  it('holdsAcrossForksAndWaitingConsumersAreServedWhenTheWindowOpens', async () => {
    const clock = new ManualClock();
    const [tx, rx] = await new Builder(new MemStore()).clock(clock).rateLimit({ max: 1, perMs: 50 }).open();
    const fork = rx.fork();
    await tx.pushMany(['a', 'b', 'c']);
    expect(dec(rx.tryReserve()!.bytes)).toBe('a');
    expect(fork.tryReserve()).toBeNull();
    const waiting = fork.reserve();
    clock.advance(50);
    expect(dec((await waiting)!.bytes)).toBe('b');
    await tx.close();
  });
});

describe('a rate limit by group', () => {
  it('holdsBackOnlyTheGroupsWhoseWindowIsFullAndTheItemsWithoutAGroupShareOne', async () => {
    const clock = new ManualClock();
    const [tx, rx] = await new Builder(new MemStore()).clock(clock).rateLimit({ max: 1, perMs: 100, by: 'group' }).open();
    await tx.pushMany(['a1', 'a2', 'a3'], { group: 'a' });
    await tx.pushMany(['b1', 'b2'], { group: 'b' });
    await tx.pushMany(['x1', 'x2']);
    expect(await takeAll(rx)).toEqual(['a1', 'b1', 'x1']);
    expect(rx.stats()).toMatchObject({ ready: 4, rateLimited: 4 });
    clock.advance(100);
    expect(await takeAll(rx)).toEqual(['a2', 'b2', 'x2']);
    clock.advance(100);
    expect(await takeAll(rx)).toEqual(['a3']);
    await tx.close();
  });

  it('aProcessWithGroupConcurrencyAndARateByGroupRunsEachTenantWithinBoth', async () => {
    const clock = new ManualClock();
    const [tx, rx] = await new Builder(new MemStore()).clock(clock).rateLimit({ max: 2, perMs: 1000, by: 'group' }).open();
    for (const tenant of ['t1', 't2'])
      await tx.pushMany(
        [1, 2, 3, 4, 5].map((n) => `${tenant}-${n}`),
        { group: tenant },
      );
    const seen: string[] = [];
    const stop = new AbortController();
    const running = rx.process(
      async (item) => {
        seen.push(dec(item.bytes));
      },
      { concurrency: 4, groupConcurrency: 1, signal: stop.signal },
    );
    const turns = async () => {
      for (let i = 0; i < 20; i++) await new Promise<void>((resolve) => setImmediate(resolve));
    };
    await turns();
    expect([...seen].sort()).toEqual(['t1-1', 't1-2', 't2-1', 't2-2']);
    clock.advance(1000);
    await turns();
    expect([...seen].sort()).toEqual(['t1-1', 't1-2', 't1-3', 't1-4', 't2-1', 't2-2', 't2-3', 't2-4']);
    stop.abort();
    await running;
    await tx.close();
  });
});

describe('item.rateLimited(ms)', () => {
  it('returnsTheItemAfterMsWithoutCountingTheDeliverySoMaxDeliveriesNeverMovesIt', async () => {
    const clock = new ManualClock();
    const [tx, rx] = await new Builder(new MemStore()).clock(clock).maxDeliveries(1).open();
    await tx.push('call the api');
    for (let attempt = 0; attempt < 5; attempt++) {
      const item = (await rx.reserve())!;
      expect(item.deliveries).toBe(1);
      await item.rateLimited(250);
      expect(rx.stats()).toMatchObject({ ready: 0, delayed: 1, deadLettering: 0 });
      expect(rx.tryReserve()).toBeNull();
      clock.advance(250);
    }
    expect(await rx.deadLetters.count()).toBe(0);
    await tx.close();
  });

  it('pausesItsGroupsWindowUnderALimitByGroupAndOnlyThat', async () => {
    const clock = new ManualClock();
    const [tx, rx] = await new Builder(new MemStore()).clock(clock).rateLimit({ max: 10, perMs: 1000, by: 'group' }).open();
    await tx.pushMany(['a1', 'a2'], { group: 'a' });
    await tx.push('b1', { group: 'b' });
    const a1 = rx.tryReserve()!;
    await a1.rateLimited(300);
    // a2 waits with a1 (the tenant's API said no); b goes.
    expect(await takeAll(rx)).toEqual(['b1']);
    // a1 waits in its paused window as a ready item, ahead of a2, not on a timer of its own.
    expect(rx.stats()).toMatchObject({ rateLimited: 2, delayed: 0 });
    clock.advance(300);
    expect(await takeAll(rx)).toEqual(['a1', 'a2']);
    await tx.close();
  });

  it('pausesTheQueueUnderALimitForTheQueue', async () => {
    const clock = new ManualClock();
    const [tx, rx] = await new Builder(new MemStore()).clock(clock).rateLimit({ max: 10, perMs: 1000 }).open();
    await tx.pushMany(['a', 'b']);
    await rx.tryReserve()!.rateLimited(100);
    expect(rx.tryReserve()).toBeNull();
    expect(rx.stats()).toMatchObject({ ready: 2, rateLimited: 2, delayed: 0 });
    clock.advance(100);
    expect(await takeAll(rx)).toEqual(['a', 'b']);
    await tx.close();
  });
});

describe('a throttled item keeps its place', () => {
  it('aThrottledItemWaitingInItsGroupsPausedWindowGoesBeforeTheItemBehindItToAWaitingConsumer', async () => {
    const clock = new ManualClock();
    const [tx, rx] = await new Builder(new MemStore()).clock(clock).rateLimit({ max: 10, perMs: 1000, by: 'group' }).open();
    await tx.pushMany(['a1', 'a2'], { group: 'a' });
    const a1 = rx.tryReserve({ groupConcurrency: 1 })!;
    // A consumer waits for the group's next item while a1 is out.
    const next = rx.reserve({ groupConcurrency: 1 });
    await a1.rateLimited(300);
    clock.advance(300);
    const got = (await next)!;
    expect(dec(got.bytes)).toBe('a1');
    expect(got.deliveries).toBe(1);
    await got.ack();
    expect(await takeAll(rx)).toEqual(['a2']);
    await tx.close();
  });
});

describe('bad input', () => {
  it('aRateLimitThatIsNotMaxPerMsAndByIsATypedError', async () => {
    const builder = new Builder(new MemStore());
    for (const [options, type] of [
      [undefined, TypeError],
      [null, TypeError],
      [{ perMs: 10 }, TypeError],
      [{ max: 0, perMs: 10 }, RangeError],
      [{ max: 1.5, perMs: 10 }, RangeError],
      [{ max: 1_000_001, perMs: 10 }, RangeError],
      [{ max: 1, perMs: 0 }, RangeError],
      [{ max: 1, perMs: 2 ** 31 }, RangeError],
      [{ max: 1, perMs: '10' }, TypeError],
      [{ max: 1, perMs: 10, by: 'tenant' }, RangeError],
      [{ max: 1, perMs: 10, by: 1 }, TypeError],
      [{ max: 1, perMs: 10, burst: 2 }, TypeError],
    ] as const) {
      expect(() => builder.rateLimit(options as never), JSON.stringify(options)).toThrow(type);
    }
    // Nothing was set: the queue hands out at any rate.
    const [tx, rx] = await builder.open();
    await tx.pushMany(['1', '2', '3']);
    expect(await takeAll(rx)).toEqual(['1', '2', '3']);
    await tx.close();
  });

  it('aRetryAfterThatIsNotAFiniteNumberOfMsIsATypedErrorAndTheItemStaysReserved', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    await tx.push('x');
    const item = rx.tryReserve()!;
    for (const [ms, type] of [
      [-1, RangeError],
      [Number.NaN, RangeError],
      [Infinity, RangeError],
      ['5', TypeError],
      [undefined, TypeError],
    ] as const) {
      await expect(item.rateLimited(ms as never), String(ms)).rejects.toThrow(type);
    }
    expect(item.settled).toBe(false);
    expect(rx.stats()).toMatchObject({ inFlight: 1, delayed: 0 });
    await item.ack();
    await expect(item.rateLimited(10)).rejects.toSatisfy((e) => e instanceof QueueError && e.code === 'ERR_ALREADY_SETTLED');
    await tx.close();
  });
});
