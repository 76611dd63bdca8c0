// Edges of scheduling: exact delivery counts at a clean close when first deliveries come out of
// seq order, a store that forgets scheduledFrom, a failed read met while comparing with the
// read-ahead, the schedule's timer and who it keeps alive, several reservations returned at once,
// appends that finish while the queue closes, and the ManualClock itself.
import { afterEach, describe, expect, it } from 'vitest';
import { Builder, MemStore, QueueError, type ReadRange, type StoredItem, type StoreRecovery } from '../../src/index.js';
import { firstContractStore } from '../support/stores.js';
import { type Clock, ManualClock } from '../../src/testing/index.js';
import { schedulingStores } from '../support/scheduling-stores.js';

const dec = (b: Uint8Array) => new TextDecoder().decode(b);
const code = (c: string) => (e: unknown) => e instanceof QueueError && e.code === c;

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0)) c();
});

describe.each(schedulingStores())('a clean close stores exact delivery counts over %s', (_name, makeStore) => {
  it('aDelayedItemPassedByANewerOneCountsNoDeliveryAfterReopen', async () => {
    const clock = new ManualClock();
    const { store, reopen } = await makeStore(cleanups);
    let [tx, rx] = await new Builder(store).clock(clock).open();
    await tx.push('later', { delayMs: 60_000 });
    await tx.push('now');
    const now = (await rx.reserve())!;
    expect(dec(now.bytes)).toBe('now');
    await now.ack();
    await tx.close();
    [tx, rx] = await new Builder(await reopen()).clock(clock).maxDeliveries(1).open();
    clock.advance(60_000);
    const later = (await rx.reserve())!;
    expect([dec(later.bytes), later.deliveries]).toEqual(['later', 1]);
    await later.ack();
    expect(rx.stats().deadLetters).toBe(0);
    await tx.close();
  });

  it('plainItemsPassedByAPriorityOneAreNotCountedAndTheHeldOneIs', async () => {
    const clock = new ManualClock();
    const { store, reopen } = await makeStore(cleanups);
    let [tx, rx] = await new Builder(store).clock(clock).open();
    await tx.pushMany(['p1', 'p2', 'p3']);
    await tx.push('urgent', { priority: 5 });
    await tx.push('held', { priority: 3 });
    const urgent = (await rx.reserve())!;
    expect(dec(urgent.bytes)).toBe('urgent');
    await urgent.ack();
    // Left in flight at close: handed out once, so counted once.
    const held = (await rx.reserve())!;
    expect(dec(held.bytes)).toBe('held');
    await tx.close();
    [tx, rx] = await new Builder(await reopen()).clock(clock).maxDeliveries(2).open();
    const seen: [string, number][] = [];
    for (let i = 0; i < 4; i++) {
      const item = (await rx.reserve())!;
      seen.push([dec(item.bytes), item.deliveries]);
      await item.ack();
    }
    expect(seen).toEqual([
      ['held', 2],
      ['p1', 1],
      ['p2', 1],
      ['p3', 1],
    ]);
    expect(rx.stats().deadLetters).toBe(0);
    await tx.close();
  });
});

/** A MemStore whose reads can be made to fail, and whose open can leave out scheduledFrom. */
class TestStore extends MemStore {
  failReads = false;
  dropScheduledFrom = false;
  override async open(): Promise<StoreRecovery> {
    const r = await super.open();
    if (!this.dropScheduledFrom) return r;
    const { scheduledFrom: _dropped, ...rest } = r;
    return rest;
  }
  override read(range: ReadRange): readonly StoredItem[] | Promise<readonly StoredItem[]> {
    if (this.failReads) throw new QueueError('ERR_CORRUPT', 'damaged for the test');
    return super.read(range);
  }
}

describe('scheduling edges', () => {
  it('aSchedulingStoreWhoseOpenLeavesOutScheduledFromIsRefusedAtOpen', async () => {
    const store = new TestStore();
    const [tx] = await new Builder(store).open();
    await tx.push('high', { priority: 3 });
    await tx.close();
    store.dropScheduledFrom = true;
    await expect(new Builder(store).open()).rejects.toSatisfy(code('ERR_STORE'));
    // Nothing was lost: the store opens again once it says where its scheduled items are.
    store.dropScheduledFrom = false;
    const [tx2, rx2] = await new Builder(store).open();
    expect(dec(rx2.tryReserve()!.bytes)).toBe('high');
    await tx2.close();
  });

  it('aReadThatFailsWhileADueItemWaitsFailsTheReserveAndHandsOutNothing', async () => {
    const clock = new ManualClock();
    const store = new TestStore();
    const [tx, rx] = await new Builder(store).clock(clock).open();
    await tx.push('p1');
    await tx.push('d', { delayMs: 10 });
    await tx.push('p2');
    clock.advance(10);
    store.failReads = true;
    expect(() => rx.tryReserve()).toThrow(expect.objectContaining({ code: 'ERR_CORRUPT' }));
    expect(rx.stats().inFlight).toBe(0);
    store.failReads = false;
    await tx.close();
  });

  it('severalReservationsReturnedAtOnceKeepSeqOrderForAWaitingConsumer', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    const fork = rx.fork();
    await tx.pushMany(['one', 'two']);
    const one = fork.tryReserve()!;
    const two = fork.tryReserve()!;
    await one.nack();
    const again = fork.tryReserve()!;
    expect(again.seq).toBe(one.seq);
    const waiting = rx.reserve();
    await fork.close();
    expect(two.settled).toBe(true);
    const got = (await waiting)!;
    expect(dec(got.bytes)).toBe('one');
    await tx.close();
  });

  it('anAppendThatFinishesWhileTheQueueClosesLeavesNoTimerNorItemBehind', async () => {
    const clock = new ManualClock();
    const store = new MemStore();
    const [tx] = await new Builder(store).clock(clock).open();
    const pushed = tx.push('late', { delayMs: 5000 });
    await tx.close();
    await pushed;
    expect(tx.stats().delayed).toBe(0);
    expect(clock.pendingTimers).toBe(0);
    // The item is in the store, for the next open.
    const [tx2] = await new Builder(store).clock(clock).open();
    expect(tx2.stats().delayed).toBe(1);
    await tx2.close();
  });

  it('anOpenThatFailsAfterTheScheduleWasReadLeavesNoTimer', async () => {
    class FailingMarks extends MemStore {
      fail = false;
      override markDelivered(below: number, marks: Parameters<MemStore['markDelivered']>[1], sync: boolean): void {
        if (this.fail) throw new Error('disk gone');
        super.markDelivered(below, marks, sync);
      }
    }
    const clock = new ManualClock();
    const store = new FailingMarks();
    const [tx] = await new Builder(store).clock(clock).open();
    await tx.push('later', { delayMs: 5000 });
    await tx.close();
    store.fail = true;
    await expect(new Builder(store).clock(clock).open()).rejects.toThrow(/disk gone/);
    expect(clock.pendingTimers).toBe(0);
  });

  it('theScheduleTimerKeepsTheProcessAliveOnlyWhileAConsumerWaits', async () => {
    // A clock whose timer handles record ref() and unref(), as Node's do.
    const handles: { refed: boolean; fn: () => void; cleared: boolean }[] = [];
    const clock: Clock = {
      now: () => 1_000,
      setTimeout: (fn) => {
        const h = {
          refed: true,
          fn,
          cleared: false,
          ref() {
            h.refed = true;
          },
          unref() {
            h.refed = false;
          },
        };
        handles.push(h);
        return h;
      },
      clearTimeout: (h) => {
        (h as { cleared: boolean }).cleared = true;
      },
    };
    const live = () => handles.filter((h) => !h.cleared);
    const [tx, rx] = await new Builder(new MemStore()).clock(clock).open();
    await tx.push('later', { delayMs: 60_000 });
    expect(live().map((h) => h.refed)).toEqual([false]);
    const stop = new AbortController();
    const waiting = rx.reserve({ signal: stop.signal });
    expect(live().map((h) => h.refed)).toEqual([true]);
    stop.abort();
    await expect(waiting).rejects.toBeDefined();
    expect(live().map((h) => h.refed)).toEqual([false]);
    const fork = rx.fork();
    const forkWaiting = fork.reserve();
    expect(live().map((h) => h.refed)).toEqual([true]);
    await fork.close();
    expect(await forkWaiting).toBeNull();
    expect(live().map((h) => h.refed)).toEqual([false]);
    await tx.close();
  });

  it('anEmptyPushManyWithAPriorityOverAStoreWithoutSchedulingRejects', async () => {
    const plain = firstContractStore();
    const [tx] = await new Builder(plain).open();
    await expect(tx.pushMany([], { priority: 1 })).rejects.toSatisfy(code('ERR_UNSUPPORTED'));
    expect(await tx.pushMany([])).toEqual([]);
    await tx.close();
  });

  it('aManualClockAdvancedFromInsideATimerNeverStepsBack', () => {
    const clock = new ManualClock(0);
    const seen: number[] = [];
    clock.setTimeout(() => {
      clock.advance(100);
      seen.push(clock.now());
    }, 5);
    clock.advance(10);
    expect(seen).toEqual([105]);
    expect(clock.now()).toBe(105);
  });
});
