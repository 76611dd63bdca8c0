// Delayed delivery and priorities: push({ delayMs | notBefore | priority }), their order among the
// ready items (ready, then priority, then seq), across reopen, with the queue's clock injected.
import { afterEach, describe, expect, it } from 'vitest';
import { Builder, type Consumer, MemStore, QueueError } from '../../src/index.js';
import { firstContractStore } from '../support/stores.js';
import { ManualClock } from '../../src/testing/index.js';
import { schedulingStores } from '../support/scheduling-stores.js';

const dec = (b: Uint8Array) => new TextDecoder().decode(b);
const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0)) c();
});

/** Take every ready item now, acking each; their payloads in delivery order. */
async function takeAll(rx: Consumer): Promise<string[]> {
  const out: string[] = [];
  for (;;) {
    // An asynchronous store (LevelStore) may answer null while a read is out: wait when items are ready.
    const item = rx.tryReserve() ?? (rx.stats().ready > 0 ? await rx.reserve() : null);
    if (!item) return out;
    out.push(dec(item.bytes));
    await item.ack();
  }
}

/**
 * The next item, known to be ready: at once, or, over a store whose delivery records finish
 * asynchronously (LevelStore), once its record is stored.
 */
async function next(rx: Consumer) {
  return rx.tryReserve() ?? (await rx.reserve())!;
}

const unsupported = (p: Promise<unknown>) => expect(p).rejects.toSatisfy((e) => e instanceof QueueError && e.code === 'ERR_UNSUPPORTED');

describe.each(schedulingStores())('scheduling over %s', (_name, makeStore) => {
  it('aDelayedItemIsStoredAtOnceAndHandedOutOnlyOnceItsTimeCame', async () => {
    const clock = new ManualClock();
    const { store } = await makeStore(cleanups);
    const [tx, rx] = await new Builder(store).clock(clock).open();
    await tx.push('later', { delayMs: 1000 });
    await tx.push('now');
    expect(tx.stats()).toMatchObject({ ready: 1, delayed: 1 });
    expect(await takeAll(rx)).toEqual(['now']);
    clock.advance(999);
    expect(rx.tryReserve()).toBeNull();
    clock.advance(1);
    expect(await takeAll(rx)).toEqual(['later']);
    expect(tx.stats()).toMatchObject({ ready: 0, delayed: 0 });
    await tx.close();
  });

  it('aWaitingReserveIsServedWhenTheClockReachesTheNotBeforeTime', async () => {
    const clock = new ManualClock();
    const { store } = await makeStore(cleanups);
    const [tx, rx] = await new Builder(store).clock(clock).open();
    await tx.push('at', { notBefore: new Date(clock.now() + 5000) });
    const waiting = rx.reserve();
    let got: string | null | undefined;
    void waiting.then((item) => (got = item && dec(item.bytes)));
    await turn();
    expect(got).toBeUndefined();
    clock.advance(5000);
    const item = await waiting;
    expect(dec(item!.bytes)).toBe('at');
    await item!.ack();
    await tx.close();
  });

  it('readyItemsGoByPriorityThenSeqAndDelayedOnesJoinTheirPriorityWhenDue', async () => {
    const clock = new ManualClock();
    const { store } = await makeStore(cleanups);
    const [tx, rx] = await new Builder(store).clock(clock).open();
    await tx.push('p0-a');
    await tx.push('p5-a', { priority: 5 });
    await tx.push('p-3', { priority: -3 });
    await tx.push('p5-late', { priority: 5, delayMs: 100 });
    await tx.push('p0-b');
    await tx.pushMany(['p9-a', 'p9-b'], { priority: 9 });
    await tx.push('p5-b', { priority: 5 });
    expect(await takeAll(rx)).toEqual(['p9-a', 'p9-b', 'p5-a', 'p5-b', 'p0-a', 'p0-b', 'p-3']);
    clock.advance(100);
    expect(await takeAll(rx)).toEqual(['p5-late']);
    await tx.close();
  });

  it('aNackedItemGoesBackToItsPriorityAheadOfNewerItemsOfIt', async () => {
    const clock = new ManualClock();
    const { store } = await makeStore(cleanups);
    const [tx, rx] = await new Builder(store).clock(clock).open();
    await tx.pushMany(['h1', 'h2'], { priority: 1 });
    await tx.push('plain');
    const h1 = await next(rx);
    expect(dec(h1.bytes)).toBe('h1');
    await h1.nack();
    expect(await takeAll(rx)).toEqual(['h1', 'h2', 'plain']);
    await tx.close();
  });

  it('priorityIsStrictALowOneWaitsWhileHigherOnesKeepComing', async () => {
    const clock = new ManualClock();
    const { store } = await makeStore(cleanups);
    const [tx, rx] = await new Builder(store).clock(clock).open();
    await tx.push('low', { priority: -1 });
    const order: string[] = [];
    for (let round = 0; round < 50; round++) {
      await tx.push(`high-${round}`, { priority: 1 });
      const item = await next(rx);
      order.push(dec(item.bytes));
      await item.ack();
    }
    expect(order.every((t) => t.startsWith('high-'))).toBe(true);
    expect(await takeAll(rx)).toEqual(['low']);
    await tx.close();
  });

  it('scheduledItemsKeepTheirPriorityAndTimeAcrossReopen', async () => {
    const clock = new ManualClock();
    const { store, reopen } = await makeStore(cleanups);
    let [tx, rx] = await new Builder(store).clock(clock).open();
    await tx.push('plain-1');
    await tx.push('delayed', { delayMs: 60_000 });
    await tx.push('high', { priority: 3 });
    await tx.push('plain-2');
    await tx.push('delayed-high', { delayMs: 30_000, priority: 3 });
    await tx.close();
    [tx, rx] = await new Builder(await reopen()).clock(clock).open();
    expect(tx.stats()).toMatchObject({ ready: 3, delayed: 2 });
    expect(await takeAll(rx)).toEqual(['high', 'plain-1', 'plain-2']);
    clock.advance(30_000);
    expect(await takeAll(rx)).toEqual(['delayed-high']);
    await tx.close();
    // The time passes while the queue is closed: due at the next open.
    clock.advance(30_000);
    [tx, rx] = await new Builder(await reopen()).clock(clock).open();
    expect(await takeAll(rx)).toEqual(['delayed']);
    expect(tx.stats().ready + tx.stats().delayed).toBe(0);
    await tx.close();
  });

  it('aTimeAlreadyPastIsNoDelayTheItemKeepsItsSeqPlace', async () => {
    const clock = new ManualClock();
    const { store } = await makeStore(cleanups);
    const [tx, rx] = await new Builder(store).clock(clock).open();
    await tx.push('past', { notBefore: clock.now() - 1 });
    await tx.push('zero', { delayMs: 0 });
    await tx.push('next');
    expect(await takeAll(rx)).toEqual(['past', 'zero', 'next']);
    await tx.close();
  });

  it('aDelayedItemDueWhileTheConsumerLagsWaitsForTheOlderPlainItems', async () => {
    const clock = new ManualClock();
    const { store } = await makeStore(cleanups);
    const [tx, rx] = await new Builder(store).clock(clock).open();
    await tx.push('a');
    await tx.push('d', { delayMs: 10 });
    await tx.pushMany(['b', 'c']);
    clock.advance(10);
    expect(await takeAll(rx)).toEqual(['a', 'd', 'b', 'c']);
    await tx.close();
  });

  it('drainedWaitsForDelayedItemsToBeHandedOut', async () => {
    const clock = new ManualClock();
    const { store } = await makeStore(cleanups);
    const [tx, rx] = await new Builder(store).clock(clock).open();
    await tx.push('d', { delayMs: 50 });
    let drained = false;
    void rx.drained().then(() => (drained = true));
    await turn();
    expect(drained).toBe(false);
    clock.advance(50);
    const item = await next(rx);
    await item.ack();
    await turn();
    expect(drained).toBe(true);
    await tx.close();
  });
});

describe('scheduling: the clock drives leases and timeouts too', () => {
  it('aLeaseRunsOutWhenTheInjectedClockPassesIt', async () => {
    const clock = new ManualClock();
    const [tx, rx] = await new Builder(new MemStore()).clock(clock).leaseMs(1000).open();
    await tx.push('a');
    const stale = rx.tryReserve()!;
    expect(tx.stats().leased).toBe(1);
    expect(stale.leaseExpiresAt).toBe(clock.now() + 1000);
    clock.advance(1000);
    expect(tx.stats()).toMatchObject({ leased: 0, leaseExpired: 1, ready: 1 });
    await expect(stale.ack()).rejects.toSatisfy((e) => e instanceof QueueError && e.code === 'ERR_LEASE_EXPIRED');
    const again = rx.tryReserve()!;
    expect(again.deliveries).toBe(2);
    await again.ack();
    await tx.close();
  });

  it('aNackDelayIsMeasuredOnTheInjectedClock', async () => {
    const clock = new ManualClock();
    const [tx, rx] = await new Builder(new MemStore()).clock(clock).open();
    await tx.push('a');
    await rx.tryReserve()!.nack({ delayMs: 200 });
    expect(rx.tryReserve()).toBeNull();
    clock.advance(200);
    expect(dec(rx.tryReserve()!.bytes)).toBe('a');
    await tx.close();
  });
});

describe('scheduling: refusals', () => {
  const plainStore = firstContractStore;

  it('aPriorityOrADelayOverAStoreWithoutSchedulingRejectsAndStoresNothing', async () => {
    const [tx, rx] = await new Builder(plainStore()).open();
    await unsupported(tx.push('a', { priority: 1 }));
    await unsupported(tx.pushMany(['a'], { delayMs: 5 }));
    await unsupported(tx.push('a', { notBefore: Date.now() + 60_000 }));
    expect(tx.stats()).toMatchObject({ pushed: 0, ready: 0 });
    await tx.push('plain', { priority: 0 });
    expect(dec(rx.tryReserve()!.bytes)).toBe('plain');
    await tx.close();
  });

  it('badPushOptionsThrowTypedErrorsAndStoreNothing', async () => {
    const [tx] = await new Builder(new MemStore()).open();
    await expect(tx.push('a', { priority: 1.5 })).rejects.toThrow(RangeError);
    await expect(tx.push('a', { priority: 128 })).rejects.toThrow(RangeError);
    await expect(tx.push('a', { priority: -129 })).rejects.toThrow(RangeError);
    await expect(tx.push('a', { priority: '1' as unknown as number })).rejects.toThrow(TypeError);
    await expect(tx.push('a', { delayMs: -1 })).rejects.toThrow(RangeError);
    await expect(tx.push('a', { delayMs: Infinity })).rejects.toThrow(RangeError);
    await expect(tx.push('a', { delayMs: 1e16 })).rejects.toThrow(RangeError);
    // The limits README states: delayMs up to 1e15, a numeric notBefore a non-negative safe integer.
    await expect(tx.push('a', { delayMs: 1e15 + 1 })).rejects.toThrow(RangeError);
    await expect(tx.push('a', { notBefore: Number.MAX_SAFE_INTEGER + 2 })).rejects.toThrow(RangeError);
    await expect(tx.push('a', { notBefore: -1 })).rejects.toThrow(RangeError);
    await expect(tx.push('a', { notBefore: new Date(Number.NaN) })).rejects.toThrow(RangeError);
    await expect(tx.push('a', { notBefore: 1.5 })).rejects.toThrow(RangeError);
    await expect(tx.push('a', { notBefore: '2030-01-01' as unknown as number })).rejects.toThrow(TypeError);
    await expect(tx.push('a', { delayMs: 1, notBefore: 1 })).rejects.toThrow(TypeError);
    await expect(tx.pushMany(['a'], { priority: 300 })).rejects.toThrow(RangeError);
    await expect(tx.push('a', { prio: 1 } as never)).rejects.toThrow(TypeError);
    expect(tx.stats()).toMatchObject({ pushed: 0, pendingPushes: 0 });
    await tx.close();
  });

  it('aClockWithoutItsMethodsIsATypeError', () => {
    const b = new Builder(new MemStore());
    expect(() => b.clock({ now: () => 0 } as never)).toThrow(TypeError);
    expect(() => b.clock(null as never)).toThrow(TypeError);
  });
});

describe('scheduling: many items', () => {
  it('aQueueHoldingAQuarterMillionDelayedItemsClosesAndReopensWithThemAll', async () => {
    const clock = new ManualClock();
    const store = new MemStore();
    let [tx, rx] = await new Builder(store).clock(clock).open();
    const count = 250_000;
    await tx.pushMany(
      Array.from({ length: count }, (_, i) => `d${i}`),
      { delayMs: 60_000 },
    );
    expect(tx.stats().delayed).toBe(count);
    await tx.close();
    [tx, rx] = await new Builder(store).clock(clock).open();
    expect(tx.stats()).toMatchObject({ delayed: count, ready: 0 });
    clock.advance(60_000);
    expect(dec(rx.tryReserve()!.bytes)).toBe('d0');
    await tx.close();
  });
});
