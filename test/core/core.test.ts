import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import { Builder, Durability, MemStore, OpenError, QueueError, type Reserved, isQueueError } from '../../src/index.js';
import type { StoredItem } from '../../src/contract/store.js';
import { RecordingStore, tick } from '../support/stores.js';
import { FlushScheduler, TURN_STORE_CALLS } from '../../src/core/flush.js';

const enc = (s: string) => new TextEncoder().encode(s);
const dec = (b: Uint8Array) => new TextDecoder().decode(b);
const code = (c: string) => (e: unknown) => e instanceof QueueError && e.code === c;

async function openMem(capacity = Infinity, durability: 'sync' | 'group' | 'none' = 'group', configure?: (b: Builder) => void) {
  const store = new RecordingStore();
  const builder = new Builder(store).capacity(capacity).durability(durability);
  configure?.(builder);
  const [tx, rx] = await builder.open();
  return { store, tx, rx };
}

describe('push and reserve', () => {
  it('deliversInFifoOrderWithIncreasingSeqs', async () => {
    const { tx, rx } = await openMem();
    const seqs = await Promise.all(['a', 'b', 'c'].map((s) => tx.push(s)));
    expect(seqs).toEqual([1, 2, 3]);
    const got: string[] = [];
    for (let i = 0; i < 3; i++) {
      const item = rx.tryReserve()!;
      expect(item.seq).toBe(seqs[i]);
      expect(item.deliveries).toBe(1);
      got.push(dec(item.bytes));
      await item.ack();
    }
    expect(got).toEqual(['a', 'b', 'c']);
    expect(rx.tryReserve()).toBeNull();
    await rx.close();
  });

  it('storesStringsAsUtf8AndCopiesByteInputDuringTheCall', async () => {
    const { tx, rx } = await openMem();
    const buf = enc('mutable');
    const pushed = tx.push(buf);
    buf.fill(0); // the caller reuses its buffer before the batch is written
    await pushed;
    await tx.push('héllo ✓');
    expect(dec(rx.tryReserve()!.bytes)).toBe('mutable');
    expect(dec(rx.tryReserve()!.bytes)).toBe('héllo ✓');
    await rx.close();
  });

  it('reserveWaitsForTheNextPush', async () => {
    const { tx, rx } = await openMem();
    const waiting = rx.reserve();
    await tick();
    await tx.push('late');
    const item = await waiting;
    expect(dec(item!.bytes)).toBe('late');
    await rx.close();
  });

  it('itemsBecomeVisibleOnlyOnceTheirPushIsStored', async () => {
    const { store, tx, rx } = await openMem();
    store.hold = true;
    const p = tx.push('x');
    await store.heldCount(1);
    expect(rx.tryReserve()).toBeNull();
    expect(rx.stats().ready).toBe(0);
    store.releaseAll();
    await p;
    expect(dec(rx.tryReserve()!.bytes)).toBe('x');
    await rx.close();
  });

  it('pushManyStoresOneBatchBehindOneWait', async () => {
    const { store, tx, rx } = await openMem(Infinity, 'sync');
    const seqs = await tx.pushMany(['1', enc('2'), '3']);
    expect(seqs).toEqual([1, 2, 3]);
    expect(store.calls).toEqual([{ op: 'append', seqs: [1, 2, 3], sync: true }]);
    expect(await tx.pushMany([])).toEqual([]);
    expect(rx.stats().ready).toBe(3);
    await rx.close();
  });

  it('tryReserveReadsFromAnAsynchronousStoreWithoutLosingItems', async () => {
    const store = new RecordingStore();
    store.asyncReads = true;
    const [tx, rx] = await new Builder(store).open();
    await tx.pushMany(['a', 'b']);
    expect(rx.tryReserve()).toBeNull(); // the read is in flight
    const a = await rx.reserve();
    expect(dec(a!.bytes)).toBe('a');
    expect(dec(rx.tryReserve()!.bytes)).toBe('b');
    await rx.close();
  });
});

describe('durability policies and group commit', () => {
  it('groupBatchesPushesIssuedWhileASyncIsInFlight', async () => {
    const { store, tx } = await openMem(Infinity, 'group');
    store.hold = true;
    const first = tx.push('1');
    await store.heldCount(1);
    const rest = [tx.push('2'), tx.push('3'), tx.push('4')];
    await tick();
    // Only one store call may be in flight; the later pushes wait to form the next batch.
    expect(store.calls.length).toBe(1);
    store.releaseAll();
    await first;
    await store.heldCount(1);
    store.releaseAll();
    expect(await Promise.all(rest)).toEqual([2, 3, 4]);
    expect(store.calls).toEqual([
      { op: 'append', seqs: [1], sync: true },
      { op: 'append', seqs: [2, 3, 4], sync: true },
    ]);
    await tx.close();
  });

  it('aPushIssuedDuringASyncWaitsForTheNextSync', async () => {
    const { store, tx } = await openMem(Infinity, 'group');
    store.hold = true;
    const first = tx.push('1');
    await store.heldCount(1);
    let secondDone = false;
    const second = tx.push('2').then(() => (secondDone = true));
    store.releaseAll();
    await first;
    await store.heldCount(1); // the next batch's append (write + sync) is now in flight
    await tick();
    expect(secondDone).toBe(false);
    store.releaseAll();
    await second;
    expect(secondDone).toBe(true);
    await tx.close();
  });

  it('syncGivesEachPushItsOwnSyncedAppend', async () => {
    const { store, tx } = await openMem(Infinity, 'sync');
    await Promise.all(['a', 'b', 'c'].map((p) => tx.push(p)));
    expect(store.calls).toEqual([
      { op: 'append', seqs: [1], sync: true },
      { op: 'append', seqs: [2], sync: true },
      { op: 'append', seqs: [3], sync: true },
    ]);
    await tx.close();
  });

  it('noneBatchesWithoutSync', async () => {
    const { store, tx, rx } = await openMem(Infinity, Durability.None);
    await Promise.all(['a', 'b'].map((p) => tx.push(p)));
    const items = [rx.tryReserve()!, rx.tryReserve()!];
    await Promise.all(items.map((i) => i.ack()));
    expect(store.calls).toEqual([
      { op: 'append', seqs: [1, 2], sync: false },
      { op: 'ack', seqs: [1, 2], sync: false },
    ]);
    await tx.close();
  });

  it('acksUnderSyncAreEachSyncedAndUnderGroupShareOneCall', async () => {
    for (const durability of ['sync', 'group'] as const) {
      const { store, tx, rx } = await openMem(Infinity, durability, (b) => b.ackDurability(durability));
      await tx.pushMany(['a', 'b', 'c']);
      store.calls = [];
      const items = [rx.tryReserve()!, rx.tryReserve()!, rx.tryReserve()!];
      await Promise.all(items.map((i) => i.ack()));
      const expected =
        durability === 'sync'
          ? [[1], [2], [3]].map((seqs) => ({ op: 'ack', seqs, sync: true }))
          : [{ op: 'ack', seqs: [1, 2, 3], sync: true }];
      expect(store.calls).toEqual(expected);
      await tx.close();
    }
  });

  it('defaultsToGroup', async () => {
    const [tx] = await new Builder(new MemStore()).open();
    expect(tx.stats().durability).toBe('group');
    expect(tx.stats().capacity).toBe(Infinity);
    await tx.close();
  });
});

describe('capacity', () => {
  it('pushWaitsAtCapacityAndOnlyAnAckFreesASlot', async () => {
    const { tx, rx } = await openMem(2);
    await tx.push('1');
    await tx.push('2');
    let third = false;
    const p3 = tx.push('3').then((seq) => ((third = true), seq));
    await tick();
    expect(third).toBe(false);
    expect(tx.stats().pendingPushes).toBe(1);
    const one = rx.tryReserve()!;
    await one.nack(); // a nack does not free a slot
    await tick();
    expect(third).toBe(false);
    const again = rx.tryReserve()!;
    expect(again.seq).toBe(1);
    await again.ack();
    expect(await p3).toBe(3);
    expect(third).toBe(true);
    await tx.close();
  });

  it('waitingPushesAreAdmittedInFifoOrder', async () => {
    const { tx, rx } = await openMem(1);
    await tx.push('first');
    const order: string[] = [];
    const a = tx.pushMany(['a1', 'a2'].slice(0, 1)).then(() => order.push('a'));
    const b = tx.push('b').then(() => order.push('b'));
    await (await rx.reserve())!.ack();
    await a;
    await (await rx.reserve())!.ack();
    await b;
    expect(order).toEqual(['a', 'b']);
    await tx.close();
  });

  it('aBatchLargerThanTheCapacityIsARangeError', async () => {
    const { tx, rx } = await openMem(2);
    await expect(tx.pushMany(['1', '2', '3'])).rejects.toBeInstanceOf(RangeError);
    expect(rx.stats()).toMatchObject({ ready: 0, pendingPushes: 0 });
    await tx.close();
  });
});

describe('nack, dispose and dropped reservations', () => {
  it('aNackedItemIsRedeliveredBeforeNewerItemsWithDeliveriesPlusOne', async () => {
    const { tx, rx } = await openMem();
    await tx.pushMany(['1', '2', '3']);
    const one = rx.tryReserve()!;
    const two = rx.tryReserve()!;
    await two.nack();
    await one.nack();
    const order = [rx.tryReserve()!, rx.tryReserve()!, rx.tryReserve()!];
    expect(order.map((i) => [dec(i.bytes), i.deliveries])).toEqual([
      ['1', 2],
      ['2', 2],
      ['3', 1],
    ]);
    expect(order[0]!.seq).toBe(one.seq);
    await rx.close();
  });

  it('settlingTwiceRejectsWithErrAlreadySettled', async () => {
    const { tx, rx } = await openMem();
    await tx.pushMany(['1', '2']);
    const a = rx.tryReserve()!;
    await a.ack();
    await expect(a.ack()).rejects.toSatisfy(code('ERR_ALREADY_SETTLED'));
    await expect(a.nack()).rejects.toSatisfy(code('ERR_ALREADY_SETTLED'));
    const b = rx.tryReserve()!;
    await b.nack();
    await expect(b.ack()).rejects.toSatisfy(code('ERR_ALREADY_SETTLED'));
    expect(rx.stats()).toMatchObject({ ready: 1, inFlight: 0 });
    await rx.close();
  });

  it('awaitUsingNacksAnUnsettledItemAtScopeExit', async () => {
    const { tx, rx } = await openMem();
    await tx.push('job');
    {
      await using item = await rx.reserve();
      expect(item!.deliveries).toBe(1);
    }
    {
      await using item = await rx.reserve();
      expect(item!.deliveries).toBe(2);
      await item!.ack();
    } // disposing a settled item does nothing
    expect(rx.stats()).toMatchObject({ ready: 0, inFlight: 0 });
    await rx.close();
  });

  it('aReservationDroppedUnsettledIsReturnedToTheQueue', async () => {
    const gc = (globalThis as { gc?: () => void }).gc;
    expect(gc, 'run with --expose-gc').toBeTypeOf('function');
    const { tx, rx } = await openMem();
    await tx.push('dropped');
    (() => {
      rx.tryReserve(); // reserved and dropped on the floor
    })();
    expect(rx.stats()).toMatchObject({ ready: 0, inFlight: 1 });
    for (let i = 0; i < 50 && rx.stats().inFlight > 0; i++) {
      gc!();
      await tick();
    }
    expect(rx.stats()).toMatchObject({ ready: 1, inFlight: 0 });
    // A redelivery waits for its delivery mark to be stored: reserve() waits for it.
    const again = (await rx.reserve())!;
    expect(dec(again.bytes)).toBe('dropped');
    expect(again.deliveries).toBe(2);
    await rx.close();
  });
});

describe('abort signals', () => {
  it('anAbortedPushWaitingForCapacityRejectsWithTheReasonAndLeavesNoTrace', async () => {
    const { store, tx, rx } = await openMem(1);
    await tx.push('1');
    const ac = new AbortController();
    const p = tx.push('never', { signal: ac.signal });
    await tick();
    const reason = new Error('stop');
    ac.abort(reason);
    await expect(p).rejects.toBe(reason);
    expect(tx.stats().pendingPushes).toBe(0);
    await (await rx.reserve())!.ack();
    expect(await tx.push('2')).toBe(2); // no seq was spent on the aborted push
    expect(store.calls.filter((c) => c.op === 'append').flatMap((c) => c.seqs)).toEqual([1, 2]);
    await tx.close();
  });

  it('anAlreadyAbortedSignalRejectsAtOnce', async () => {
    const { tx, rx } = await openMem();
    const ac = new AbortController();
    ac.abort(new Error('gone'));
    await expect(tx.push('x', { signal: ac.signal })).rejects.toThrow('gone');
    await expect(rx.reserve({ signal: ac.signal })).rejects.toThrow('gone');
    expect(rx.stats().ready).toBe(0);
    await tx.close();
  });

  it('anAbortedReserveStopsWaitingAndTakesNothing', async () => {
    const { tx, rx } = await openMem();
    const ac = new AbortController();
    const r = rx.reserve({ signal: ac.signal });
    ac.abort();
    await expect(r).rejects.toMatchObject({ name: 'AbortError' });
    await tx.push('kept');
    expect(dec(rx.tryReserve()!.bytes)).toBe('kept');
    await tx.close();
  });
});

describe('close', () => {
  it('closeSettlesEveryWaiter', async () => {
    const { store, tx, rx } = await openMem(1);
    await tx.push('held');
    const item = rx.tryReserve()!;
    const waitingReserve = rx.reserve();
    const blockedPush = tx.push('blocked');
    store.hold = true;
    await tick();
    const closing = tx.close();
    expect(await waitingReserve).toBeNull();
    await expect(blockedPush).rejects.toSatisfy(code('ERR_CLOSED'));
    await closing;
    await expect(item.ack()).rejects.toSatisfy(code('ERR_CLOSED'));
    await expect(tx.push('after')).rejects.toSatisfy(code('ERR_CLOSED'));
    expect(await rx.reserve()).toBeNull();
    expect(rx.tryReserve()).toBeNull();
    expect(rx.stats().closed).toBe(true);
    await rx.close(); // idempotent
  });

  it('closeWaitsForAdmittedPushesToBeStored', async () => {
    const store = new RecordingStore();
    let [tx, rx] = await new Builder(store).open();
    store.hold = true;
    const p = tx.push('in flight');
    await store.heldCount(1);
    const closing = rx.close();
    const q = tx.push('too late');
    store.releaseAll();
    expect(await p).toBe(1);
    await expect(q).rejects.toSatisfy(code('ERR_CLOSED'));
    await closing;
    store.hold = false;
    [tx, rx] = await new Builder(store).open();
    expect(dec(rx.tryReserve()!.bytes)).toBe('in flight');
    expect(rx.tryReserve()).toBeNull();
    await tx[Symbol.asyncDispose]();
    expect(tx.stats().closed).toBe(true);
  });

  it('unsettledReservationsReturnToTheStoreAtClose', async () => {
    const store = new MemStore();
    let [tx, rx] = await new Builder(store).open();
    await tx.pushMany(['a', 'b']);
    rx.tryReserve();
    await rx.close();
    [tx, rx] = await new Builder(store).open();
    expect(rx.stats().ready).toBe(2);
    expect(dec((await rx.reserve())!.bytes)).toBe('a');
    await rx.close();
  });

  it('aStoreBacksOneOpenQueueAtATime', async () => {
    const store = new MemStore();
    const [tx] = await new Builder(store).open();
    await expect(new Builder(store).open()).rejects.toSatisfy((e: unknown) => e instanceof OpenError && e.code === 'ERR_LOCKED');
    await tx.close();
    const [tx2] = await new Builder(store).open();
    await tx2.close();
  });
});

describe('store failures', () => {
  it('aFailedAppendFailsTheQueueFailStop', async () => {
    const { store, tx, rx } = await openMem();
    await tx.push('ok');
    const item = rx.tryReserve()!;
    const cause = Object.assign(new Error('EIO: i/o error, fsync'), { code: 'EIO' });
    store.failNextAppend = cause;
    const failed = tx.push('lost');
    await expect(failed).rejects.toSatisfy(code('ERR_STORE_FAILED'));
    await expect(failed).rejects.toHaveProperty('cause', cause);
    await expect(tx.push('later')).rejects.toSatisfy(code('ERR_STORE_FAILED'));
    await expect(item.ack()).rejects.toSatisfy(code('ERR_STORE_FAILED'));
    await expect(rx.reserve()).rejects.toSatisfy(code('ERR_STORE_FAILED'));
    expect(() => rx.tryReserve()).toThrow(QueueError);
    await tx.close(); // close still releases the store
    const [tx2, rx2] = await new Builder(store).open();
    expect(dec((await rx2.reserve())!.bytes)).toBe('ok');
    await tx2.close();
  });

  it('aFailedAckFailsTheQueue', async () => {
    const { store, tx, rx } = await openMem();
    await tx.push('x');
    store.failNextAck = new Error('EIO');
    await expect(rx.tryReserve()!.ack()).rejects.toSatisfy(code('ERR_STORE_FAILED'));
    await expect(tx.push('y')).rejects.toSatisfy(code('ERR_STORE_FAILED'));
    await tx.close();
  });

  it('aFullStoreFailsOnlyThatBatchAndSeqsAreReused', async () => {
    const { store, tx, rx } = await openMem();
    store.failNextAppend = new QueueError('ERR_STORE_FULL', 'no space');
    await expect(tx.push('nope')).rejects.toSatisfy(code('ERR_STORE_FULL'));
    expect(await tx.push('yes')).toBe(1);
    expect(dec(rx.tryReserve()!.bytes)).toBe('yes');
    await tx.close();
  });

  it('aFullStoreOnAckReturnsTheItemAsReady', async () => {
    const { store, tx, rx } = await openMem();
    await tx.push('x');
    store.failNextAck = new QueueError('ERR_STORE_FULL', 'no space');
    await expect(rx.tryReserve()!.ack()).rejects.toSatisfy(code('ERR_STORE_FULL'));
    const again = (await rx.reserve())!;
    expect(dec(again.bytes)).toBe('x');
    await again.ack();
    expect(rx.stats()).toMatchObject({ ready: 0, inFlight: 0 });
    await tx.close();
  });

  it('aReadThatFailsFailsTheCallThatMetIt', async () => {
    const store = new RecordingStore();
    const [tx, rx] = await new Builder(store).open();
    await tx.push('a');
    const cause = Object.assign(new Error('EMFILE: too many open files'), { code: 'EMFILE' });
    store.read = () => {
      throw cause;
    };
    expect(() => rx.tryReserve()).toThrow(expect.objectContaining({ code: 'ERR_STORE_FAILED', cause }));
    await expect(rx.reserve()).rejects.toSatisfy(code('ERR_STORE_FAILED'));
    await tx.close();
  });

  it('aCorruptReadFailsEveryLaterReserveButNotTheProducer', async () => {
    const store = new RecordingStore();
    const [tx, rx] = await new Builder(store).open();
    await tx.push('a');
    const damage = new QueueError('ERR_CORRUPT', 'damaged', { file: 'seg', offset: 42 });
    store.read = () => {
      throw damage;
    };
    expect(() => rx.tryReserve()).toThrow(damage);
    await expect(rx.reserve()).rejects.toBe(damage);
    expect(await tx.push('b')).toBe(2);
    await tx.close();
  });

  it('anOpenFailureIsAnOpenErrorAndReleasesTheStore', async () => {
    const store = new MemStore();
    let calls = 0;
    store.open = async () => {
      calls++;
      throw new Error('disk gone');
    };
    await expect(new Builder(store).open()).rejects.toSatisfy(
      (e: unknown) => e instanceof OpenError && e.code === 'ERR_STORE' && (e.cause as Error).message === 'disk gone',
    );
    await expect(new Builder(store).open()).rejects.toBeInstanceOf(OpenError);
    expect(calls).toBe(2);
  });

  it('anItemOverTheStoreLimitIsErrTooLarge', async () => {
    const [tx, rx] = await new Builder(new MemStore({ maxItemBytes: 4 })).open();
    await expect(tx.push('12345')).rejects.toSatisfy(code('ERR_TOO_LARGE'));
    await expect(tx.pushMany(['1', '12345'])).rejects.toSatisfy(code('ERR_TOO_LARGE'));
    expect(await tx.push('1234')).toBe(1);
    expect(rx.stats().ready).toBe(1);
    await tx.close();
  });
});

describe('process and iteration', () => {
  it('processAcksOnResolveNacksOnThrowAndStopsOnAbort', async () => {
    // A retry delay of 0: the thrown item comes back at once, ahead of newer items.
    const { tx, rx } = await openMem(Infinity, 'group', (b) => b.retry({ kind: 'fixed', delayMs: 0 }));
    await tx.pushMany(['ok', 'flaky', 'ok2']);
    const seen: string[] = [];
    const ac = new AbortController();
    let failedOnce = false;
    const done = rx.process(
      async (item: Reserved) => {
        const text = dec(item.bytes);
        seen.push(`${text}#${item.deliveries}`);
        if (text === 'flaky' && !failedOnce) {
          failedOnce = true;
          throw new Error('transient');
        }
        if (seen.length === 4) ac.abort();
      },
      { signal: ac.signal },
    );
    await done;
    expect(seen).toEqual(['ok#1', 'flaky#1', 'flaky#2', 'ok2#1']);
    expect(rx.stats()).toMatchObject({ ready: 0, inFlight: 0 });
    await tx.close();
  });

  it('processRespectsConcurrencyAndEndsAtClose', async () => {
    const { tx, rx } = await openMem();
    await tx.pushMany(Array.from({ length: 20 }, (_, i) => `j${i}`));
    let running = 0;
    let peak = 0;
    let handled = 0;
    const done = rx.process(
      async () => {
        running++;
        peak = Math.max(peak, running);
        await tick();
        running--;
        if (++handled === 20) void tx.close();
      },
      { concurrency: 3 },
    );
    await done;
    expect(peak).toBe(3);
    expect(handled).toBe(20);
  });

  it('stoppingOneProcessWithdrawsOnlyItsOwnWaitingWorkers', async () => {
    // Three waiters' groups share the queue's waiting list: process A's workers, process B's,
    // and a plain reserve() behind them. Stopping A takes out its workers alone, in place.
    const { tx, rx } = await openMem();
    const a = new AbortController();
    const b = new AbortController();
    const seenByA: string[] = [];
    const seenByB: string[] = [];
    const doneA = rx.process(async (item: Reserved) => void seenByA.push(dec(item.bytes)), { concurrency: 3, signal: a.signal });
    const doneB = rx.process(async (item: Reserved) => void seenByB.push(dec(item.bytes)), { concurrency: 2, signal: b.signal });
    await tick();
    const plain = rx.reserve();
    a.abort();
    await doneA;
    await tx.pushMany(['x', 'y', 'z']);
    const item = await plain;
    expect(item).not.toBeNull();
    expect(dec(item!.bytes)).toBe('z');
    await item!.ack();
    await tick();
    expect(seenByA).toEqual([]);
    expect(seenByB.sort()).toEqual(['x', 'y']);
    b.abort();
    await doneB;
    expect(rx.stats()).toMatchObject({ ready: 0, inFlight: 0 });
    await tx.close();
  });

  it('forAwaitYieldsItemsUntilClose', async () => {
    const { tx, rx } = await openMem();
    await tx.pushMany(['a', 'b', 'c']);
    const got: string[] = [];
    for await (const item of rx) {
      got.push(dec(item.bytes));
      await item.ack();
      if (got.length === 3) void rx.close();
    }
    expect(got).toEqual(['a', 'b', 'c']);
  });

  it('forAwaitBreakEndsTheIterator_andTheRestStaysQueued', async () => {
    const { tx, rx } = await openMem();
    await tx.pushMany(['a', 'b', 'c']);
    const it = rx[Symbol.asyncIterator]();
    expect(it[Symbol.asyncIterator]()).toBe(it);
    for await (const item of { [Symbol.asyncIterator]: () => it }) {
      expect(dec(item.bytes)).toBe('a');
      await item.ack();
      break;
    }
    // After the break the iterator is done and reserves nothing more.
    await expect(it.next()).resolves.toEqual({ value: undefined, done: true });
    expect(rx.stats().ready).toBe(2);
    expect(dec(rx.tryReserve()!.bytes)).toBe('b');
    await rx.close();
  });

  it('forAwaitEndsWithTheErrorOfAFailedQueue_thenIsDone', async () => {
    const store = new RecordingStore();
    const [tx, rx] = await new Builder(store).open();
    await tx.push('a');
    const it = rx[Symbol.asyncIterator]();
    const first = await it.next();
    expect(first.done).toBe(false);
    // The ack's store call fails: the queue fails (fail-stop), and the next step rejects with it.
    store.failNextAck = new Error('disk gone');
    await expect((first.value as Reserved).ack()).rejects.toMatchObject({ code: 'ERR_STORE_FAILED' });
    await expect(it.next()).rejects.toMatchObject({ code: 'ERR_STORE_FAILED' });
    await expect(it.next()).resolves.toEqual({ value: undefined, done: true });
  });

  it('forAwaitEndsWhenTheConsumerCloses_andLaterStepsAreDone', async () => {
    const { tx, rx } = await openMem();
    await tx.push('a');
    const it = rx[Symbol.asyncIterator]();
    const waiting = it.next();
    await (await waiting).value!.ack();
    const pending = it.next();
    await rx.close();
    await expect(pending).resolves.toEqual({ value: undefined, done: true });
    await expect(it.next()).resolves.toEqual({ value: undefined, done: true });
  });
});

describe('bad input throws a typed error and changes nothing', () => {
  it('builder', () => {
    expect(() => new Builder({} as never)).toThrow(TypeError);
    const b = new Builder(new MemStore());
    expect(() => b.capacity(0)).toThrow(RangeError);
    expect(() => b.capacity(-1)).toThrow(RangeError);
    expect(() => b.capacity(1.5)).toThrow(RangeError);
    expect(() => b.capacity('8' as never)).toThrow(/Expected `capacity` to be a positive integer, got `"8"` \(string\)/);
    expect(() => b.durability('fast' as never)).toThrow(RangeError);
    expect(() => b.durability(1 as never)).toThrow(TypeError);
    expect(() => b.storeCallsPerTurn(0)).toThrow(RangeError);
    expect(() => b.storeCallsPerTurn(2.5)).toThrow(RangeError);
    expect(() => b.storeCallsPerTurn(-Infinity)).toThrow(RangeError);
    expect(() => b.storeCallsPerTurn('4' as never)).toThrow(/Expected `storeCallsPerTurn` to be a positive integer, got `"4"` \(string\)/);
    expect(() => b.storeCallsPerTurn('Auto' as never)).toThrow(TypeError);
    expect(() => new MemStore({ maxItemBytes: 0 })).toThrow(RangeError);
    expect(() => new MemStore(5 as never)).toThrow(TypeError);
  });

  it('producer, consumer and their options', async () => {
    const { store, tx, rx } = await openMem();
    await expect(tx.push(123 as never)).rejects.toBeInstanceOf(TypeError);
    await expect(tx.push(null as never)).rejects.toBeInstanceOf(TypeError);
    await expect(tx.push('x', 5 as never)).rejects.toBeInstanceOf(TypeError);
    await expect(tx.push('x', { signal: 'no' as never })).rejects.toBeInstanceOf(TypeError);
    await expect(tx.pushMany(null as never)).rejects.toBeInstanceOf(TypeError);
    await expect(tx.pushMany('abc' as never)).rejects.toBeInstanceOf(TypeError);
    await expect(tx.pushMany(['ok', 7] as never)).rejects.toThrow(/payloads\[1\]/);
    await expect(rx.reserve({ signal: {} as never })).rejects.toBeInstanceOf(TypeError);
    await expect(rx.process('no' as never)).rejects.toBeInstanceOf(TypeError);
    await expect(rx.process(() => {}, { concurrency: 0 })).rejects.toBeInstanceOf(RangeError);
    await expect(rx.process(() => {}, { concurrency: 2.5 })).rejects.toBeInstanceOf(RangeError);
    expect(store.calls).toEqual([]);
    expect(rx.stats()).toMatchObject({ ready: 0, inFlight: 0, pendingPushes: 0 });
    await tx.close();
  });
});

describe('a push of bytes without options', () => {
  const bytesOf = (s: string) => enc(s);

  it('plainBytePushesAndOtherPushesMadeInOneRunGetSeqsInCallOrder', async () => {
    const { store, tx, rx } = await openMem();
    const done = [
      tx.push(bytesOf('a')),
      tx.push('b'),
      tx.pushMany([bytesOf('c'), bytesOf('d')]),
      tx.push(bytesOf('e'), { priority: 0 }),
      tx.push(bytesOf('f')),
    ];
    expect(await Promise.all(done)).toEqual([1, 2, [3, 4], 5, 6]);
    expect(store.calls.filter((c) => c.op === 'append')).toEqual([{ op: 'append', seqs: [1, 2, 3, 4, 5, 6], sync: true }]);
    const got: string[] = [];
    for (let item = rx.tryReserve(); item !== null; item = rx.tryReserve()) {
      got.push(`${item.seq}:${dec(item.bytes)}`);
      await item.ack();
    }
    expect(got).toEqual(['1:a', '2:b', '3:c', '4:d', '5:e', '6:f']);
    await tx.close();
  });

  it('plainBytePushesWaitForCapacityInFifoOrderBehindABatch', async () => {
    const { tx, rx } = await openMem(2);
    expect(await tx.push(bytesOf('x'))).toBe(1);
    const order: string[] = [];
    const batch = tx.pushMany([bytesOf('m1'), bytesOf('m2')]).then((seqs) => order.push(`m${seqs.join(',')}`));
    // It would fit beside `x`, but it waits behind the batch at the head.
    const one = tx.push(bytesOf('y')).then((seq) => order.push(`y${seq}`));
    await tick();
    expect(tx.stats().pendingPushes).toBe(2);
    await rx.tryReserve()!.ack();
    await batch;
    await rx.tryReserve()!.ack();
    await one;
    expect(order).toEqual(['m2,3', 'y4']);
    await tx.close();
  });

  it('aPlainBytePushOverTheByteCapacityOrTheStoresLimitIsRefusedAtTheCallAndChangesNothing', async () => {
    const store = new RecordingStore({ maxItemBytes: 8 });
    const [tx, rx] = await new Builder(store).capacityBytes(6).open();
    await expect(tx.push(new Uint8Array(7))).rejects.toBeInstanceOf(RangeError);
    await expect(tx.push(new Uint8Array(9))).rejects.toSatisfy(code('ERR_TOO_LARGE'));
    // The same refusals as a push that goes the long way (a string of the same length).
    await expect(tx.push('1234567')).rejects.toBeInstanceOf(RangeError);
    await expect(tx.push('123456789')).rejects.toSatisfy(code('ERR_TOO_LARGE'));
    expect(store.calls).toEqual([]);
    expect(rx.stats()).toMatchObject({ ready: 0, pendingPushes: 0 });
    // A push that fits waits for bytes the way any push does.
    expect(await tx.push(new Uint8Array(4))).toBe(1);
    let second = false;
    const next = tx.push(new Uint8Array(4)).then((seq) => ((second = true), seq));
    await tick();
    expect(second).toBe(false);
    await rx.tryReserve()!.ack();
    expect(await next).toBe(2);
    await tx.close();
  });

  it('plainBytePushesAreRejectedWhenTheirBatchFailsOrTheQueueClosesWhileTheyWait', async () => {
    const full = await openMem();
    full.store.failNextAppend = new QueueError('ERR_STORE_FULL', 'no space');
    await expect(full.tx.push(bytesOf('nope'))).rejects.toSatisfy(code('ERR_STORE_FULL'));
    expect(await full.tx.push(bytesOf('yes'))).toBe(1);
    full.store.failNextAppend = new Error('EIO');
    await expect(full.tx.push(bytesOf('lost'))).rejects.toSatisfy(code('ERR_STORE_FAILED'));
    await full.tx.close();

    const { tx } = await openMem(1);
    await tx.push(bytesOf('held'));
    const waiting = tx.push(bytesOf('waits'));
    await tick();
    await tx.close();
    await expect(waiting).rejects.toSatisfy(code('ERR_CLOSED'));
  });

  it('theItemAStoreReceivesHoldsDataOnlySoAStoreMayCloneIt', async () => {
    // A store may keep or clone the items it is handed (into another thread, an IndexedDB).
    class CloningStore extends MemStore {
      fields: string[][] = [];
      override append(items: readonly StoredItem[], sync: boolean): Promise<void> {
        for (const item of items)
          this.fields.push(Object.keys(item).filter((k) => typeof (item as unknown as Record<string, unknown>)[k] === 'function'));
        return super.append(
          items.map((item) => structuredClone(item)),
          sync,
        );
      }
    }
    const store = new CloningStore();
    const [tx, rx] = await new Builder(store).open();
    expect(await Promise.all([tx.push(bytesOf('a')), tx.push(bytesOf('b'), {}), tx.push(bytesOf('c'))])).toEqual([1, 2, 3]);
    expect(store.fields).toEqual([[], [], []]);
    const got: string[] = [];
    for (let item = rx.tryReserve(); item !== null; item = rx.tryReserve()) {
      got.push(dec(item.bytes));
      await item.ack();
    }
    expect(got).toEqual(['a', 'b', 'c']);
    await tx.close();
  });

  it('aDetachedBufferIsRefusedByARejectionAsWithOptions', async () => {
    const { store, tx, rx } = await openMem();
    const buffer = new ArrayBuffer(8);
    const view = new Uint8Array(buffer);
    structuredClone(buffer, { transfer: [buffer] });
    let plain: Promise<number> | undefined;
    expect(() => {
      plain = tx.push(view);
    }).not.toThrow();
    await expect(plain).rejects.toBeInstanceOf(TypeError);
    await expect(tx.push(view, {})).rejects.toBeInstanceOf(TypeError);
    expect(store.calls).toEqual([]);
    expect(rx.stats()).toMatchObject({ ready: 0, pendingPushes: 0 });
    await tx.close();
  });
});

describe('payload copies', () => {
  it('aLargeNodeBufferPayloadIsCopiedNotViewed', async () => {
    const { tx, rx } = await openMem();
    for (const size of [100, 4096, 70_000]) {
      const buf = Buffer.alloc(size, 1); // Buffer#slice returns a view: the copy must not use it
      await tx.push(buf);
      buf.fill(2);
      const item = rx.tryReserve()!;
      expect(
        item.bytes.every((b) => b === 1),
        `${size} bytes`,
      ).toBe(true);
      await item.ack();
    }
    await tx.close();
  });
});

describe('process(), reads and close under hostile handlers and faults', () => {
  it('aHandlerThatAlwaysThrowsDoesNotStarveTheEventLoop', async () => {
    // Retried at once (the default waits): only the turn a worker yields after a failure protects the loop.
    const { tx, rx } = await openMem(Infinity, 'group', (b) => b.retry({ kind: 'fixed', delayMs: 0 }));
    await tx.push('poison');
    const ac = new AbortController();
    let deliveries = 0;
    // If the nack/redeliver cycle never yielded, this macrotask would never run and the test would time out.
    setImmediate(() => ac.abort());
    await rx.process(
      () => {
        // A guard so that a regression fails instead of hanging the whole run.
        if (++deliveries === 100_000) ac.abort();
        throw new Error('always');
      },
      { signal: ac.signal },
    );
    expect(deliveries).toBeGreaterThan(0);
    expect(deliveries).toBeLessThan(100_000);
    expect(rx.stats()).toMatchObject({ ready: 1, inFlight: 0 });
    await tx.close();
  });

  it('aBatchStoredDuringAnAsynchronousReadIsNotSkipped', async () => {
    const store = new RecordingStore();
    const held: (() => void)[] = [];
    const read = store.read.bind(store);
    store.read = (range) => {
      const items = read(range) as readonly StoredItem[];
      return new Promise((resolve) => held.push(() => resolve(items)));
    };
    const [tx, rx] = await new Builder(store).open();
    await tx.push('1');
    const first = rx.reserve(); // the read for seq 1 is now in flight
    await tick();
    await tx.push('2'); // stored while that read is out: not in its answer
    held.shift()!();
    const one = (await first)!;
    expect(one.seq).toBe(1);
    await tx.push('3');
    const next = rx.reserve();
    for (let i = 0; i < 3; i++) {
      await tick();
      while (held.length > 0) held.shift()!();
    }
    const two = (await next)!;
    expect(two.seq).toBe(2);
    await tx.close();
  });

  it('anAckRejectedAsFullDoesNotStopProcess', async () => {
    const { store, tx, rx } = await openMem();
    await tx.pushMany(['a', 'b']);
    store.failNextAck = new QueueError('ERR_STORE_FULL', 'no space');
    const seen: string[] = [];
    const done = rx.process(async (item) => {
      seen.push(`${dec(item.bytes)}#${item.deliveries}`);
      if (seen.length === 3) void tx.close();
    });
    await done;
    expect(seen).toEqual(['a#1', 'a#2', 'b#1']);
  });

  it('closeWaitsForAnAsynchronousReadInFlight', async () => {
    const store = new RecordingStore();
    const order: string[] = [];
    let release!: () => void;
    const read = store.read.bind(store);
    store.read = (range) => {
      order.push('read');
      void read(range);
      return new Promise((_resolve, reject) => {
        release = () => {
          order.push('read done');
          reject(new Error('EIO while closing'));
        };
      });
    };
    const close = store.close.bind(store);
    store.close = async () => {
      order.push('store closed');
      return close();
    };
    const [tx, rx] = await new Builder(store).open();
    await tx.push('x');
    expect(rx.tryReserve()).toBeNull();
    const closing = tx.close();
    await tick();
    release();
    await closing;
    expect(order).toEqual(['read', 'read done', 'store closed']);
    await expect(tx.push('y')).rejects.toSatisfy(code('ERR_CLOSED'));
  });

  it('theCoreNeverChangesTheArrayItHandedToTheStore', async () => {
    const store = new RecordingStore();
    const kept: StoredItem[][] = [];
    const append = store.append.bind(store);
    store.append = (items, sync) => {
      kept.push(items as StoredItem[]);
      return append(items, sync);
    };
    const [tx, rx] = await new Builder(store).open();
    await tx.push('a');
    rx.tryReserve(); // the consumer is now caught up: the next batches are handed over directly
    await tx.pushMany(['b', 'c']);
    rx.tryReserve();
    await tx.pushMany(['d']);
    rx.tryReserve();
    rx.tryReserve();
    expect(kept.map((batch) => batch.map((i) => i?.seq))).toEqual([[1], [2, 3], [4]]);
    await tx.close();
  });

  it('queuesDoNotSharePayloadMemory', async () => {
    const a = await openMem();
    const b = await openMem();
    await a.tx.push(enc('from a')); // bytes, not strings: byte payloads are copied into slabs
    await b.tx.push(enc('from b'));
    expect(a.rx.tryReserve()!.bytes.buffer).not.toBe(b.rx.tryReserve()!.bytes.buffer);
    await a.tx.close();
    await b.tx.close();
  });

  it('aFailedQueueCountsNoPendingAcksAndRejectsAnEmptyPushMany', async () => {
    const { store, tx, rx } = await openMem(Infinity, 'sync');
    await tx.pushMany(['1', '2', '3']);
    const items = [rx.tryReserve()!, rx.tryReserve()!, rx.tryReserve()!];
    store.failNextAck = new Error('EIO');
    const acks = items.map((i) => i.ack().catch((e: unknown) => e));
    for (const e of await Promise.all(acks)) expect(e).toMatchObject({ code: 'ERR_STORE_FAILED' });
    expect(rx.stats()).toMatchObject({ pendingAcks: 0 });
    await expect(tx.pushMany([])).rejects.toSatisfy(code('ERR_STORE_FAILED'));
    await tx.close();
  });

  // Each step of open() that can fail after the store opened: the store is closed again and free,
  // so the next Builder over it opens once the fault is gone.
  it.each([
    ['an invalid recovery', (s: MemStore, open: MemStore['open']) => (s.open = async () => ({ ...(await open.call(s)), count: -1 }))],
    [
      'keys that are not keys',
      (s: MemStore, open: MemStore['open']) => (s.open = async () => ({ ...(await open.call(s)), keys: [{ key: 5 }] as never })),
    ],
    [
      'no scheduledFrom',
      (s: MemStore, open: MemStore['open']) => (s.open = async () => ({ ...(await open.call(s)), scheduledFrom: undefined })),
    ],
    [
      'schedules that are not schedules',
      (s: MemStore, open: MemStore['open']) => (s.open = async () => ({ ...(await open.call(s)), schedules: [{ name: '' }] as never })),
    ],
    ['a failing first delivery bound', (s: MemStore) => (s.markDelivered = async () => Promise.reject(new Error('disk gone')))],
  ])('aStepOfOpenThatFailsOn %s closesTheStoreAndLeavesItFreeForTheNextOpen', async (_what, fault) => {
    const store = new MemStore();
    const [tx0] = await new Builder(store).open();
    await tx0.push('kept');
    await tx0.close();
    const { open, markDelivered, close } = store;
    let closes = 0;
    store.close = async function (this: MemStore) {
      closes++;
      return close.call(this);
    };
    fault(store, open);
    await expect(new Builder(store).open()).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_STORE'));
    expect(closes).toBe(1);
    store.open = open;
    store.markDelivered = markDelivered;
    const [tx, rx] = await new Builder(store).open();
    expect(new TextDecoder().decode(rx.tryReserve()!.bytes)).toBe('kept');
    await tx.close();
  });

  it('anInvalidRecoveryFromAStoreIsAnOpenError', async () => {
    const store = new MemStore();
    store.open = async () => ({ nextSeq: 0, count: 5 });
    await expect(new Builder(store).open()).rejects.toSatisfy((e: unknown) => e instanceof OpenError && e.code === 'ERR_STORE');
  });
});

/**
 * 64 producers that push again as soon as a push resolves (20 each), and a consumer that acks each
 * item as soon as it gets it, with at most 64 acks in flight: all of it runs in microtasks and
 * never yields on its own. Returns the items per append call and per ack call.
 */
async function chainedEndToEnd(configure?: (b: Builder) => void): Promise<{ appends: number; acks: number }> {
  const { store, tx, rx } = await openMem(Infinity, 'none', configure);
  const producers = Array.from({ length: 64 }, async (_, p) => {
    for (let i = 0; i < 20; i++) await tx.push(`${p}:${i}`);
  });
  let consumed = 0;
  const consumer = (async () => {
    // The consumer waits for the ack it issued 64 items ago.
    const ring: (Promise<void> | undefined)[] = new Array(64);
    while (consumed < 64 * 20) {
      const item = rx.tryReserve() ?? (await rx.reserve());
      const slot = consumed % ring.length;
      if (ring[slot]) await ring[slot];
      ring[slot] = item!.ack();
      consumed++;
    }
    await Promise.all(ring);
  })();
  await Promise.all([...producers, consumer]);
  await tick();
  const appends = store.calls.filter((c) => c.op === 'append');
  const acks = store.calls.filter((c) => c.op === 'ack');
  expect(appends.reduce((n, c) => n + c.seqs.length, 0)).toBe(64 * 20);
  expect(acks.reduce((n, c) => n + c.seqs.length, 0)).toBe(64 * 20);
  await tx.close();
  return { appends: (64 * 20) / appends.length, acks: (64 * 20) / acks.length };
}

describe('batching across a turn of the event loop', () => {
  it('operationsChainedInMicrotasksStillShareStoreCalls', async () => {
    const perCall = await chainedEndToEnd();
    expect(perCall.appends).toBeGreaterThan(8);
    // Measured: 7.8 acks per call with the per-turn budget, 4.2 without it (each store call
    // carried what one microtask produced).
    expect(perCall.acks).toBeGreaterThan(6);
  });
});

describe('a store that finishes during the call (Store.done)', () => {
  /** A MemStore whose append and ack calls are recorded; `wrap` may replace what a call returns. */
  async function openDone(wrap: (call: () => Promise<void>, op: 'append' | 'ack') => Promise<void> = (call) => call()) {
    const store = new MemStore();
    const calls: { op: 'append' | 'ack'; seqs: number[] }[] = [];
    const append = store.append.bind(store);
    const ack = store.ack.bind(store);
    store.append = (items, sync) => {
      calls.push({ op: 'append', seqs: items.map((i) => i.seq) });
      return wrap(() => append(items, sync), 'append');
    };
    store.ack = (seqs, sync) => {
      calls.push({ op: 'ack', seqs: [...seqs] });
      return wrap(() => ack(seqs, sync), 'ack');
    };
    const [tx, rx] = await new Builder(store).durability('none').open();
    return { store, calls, tx, rx };
  }

  it('eachPushAndAckGoesToTheStoreDuringTheCall_onceAStoreCallReturnedDone', async () => {
    const { calls, tx, rx } = await openDone();
    // The first call waits a microtask: nothing is known of the store yet.
    await tx.push('a');
    expect(calls).toEqual([{ op: 'append', seqs: [1] }]);
    const pushed = [tx.push('b'), tx.push('c')];
    // Stored before any microtask ran: each its own call, each ready at once.
    expect(calls.slice(1)).toEqual([
      { op: 'append', seqs: [2] },
      { op: 'append', seqs: [3] },
    ]);
    expect(await Promise.all(pushed)).toEqual([2, 3]);
    const items = [rx.tryReserve()!, rx.tryReserve()!, rx.tryReserve()!];
    expect(items.map((i) => dec(i.bytes))).toEqual(['a', 'b', 'c']);
    await items[0]!.ack();
    const acks = [items[1]!.ack(), items[2]!.ack()];
    expect(calls.slice(3)).toEqual([
      { op: 'ack', seqs: [1] },
      { op: 'ack', seqs: [2] },
      { op: 'ack', seqs: [3] },
    ]);
    await Promise.all(acks);
    expect(rx.stats()).toMatchObject({ ready: 0, inFlight: 0 });
    await rx.close();
  });

  it('aCallThatReturnsAnotherPromiseIsWaitedFor_andBatchesGatherAgain', async () => {
    let slow = false;
    const { calls, tx, rx } = await openDone((call) => (slow ? call().then(() => undefined) : call()));
    await tx.push('a');
    slow = true;
    const pushed = [tx.push('b'), tx.push('c'), tx.push('d')];
    // b went at once; its call did not return done, so c and d wait for it and gather.
    expect(calls.map((c) => c.seqs)).toEqual([[1], [2]]);
    expect(rx.tryReserve()?.seq).toBe(1);
    expect(rx.tryReserve()).toBeNull();
    expect(await Promise.all(pushed)).toEqual([2, 3, 4]);
    expect(calls.map((c) => c.seqs)).toEqual([[1], [2], [3, 4]]);
    await rx.close();
  });

  it('aRefusedCallRejectsOnlyItsOperation_andNothingIsLost', async () => {
    let refuse: 'append' | 'ack' | undefined;
    const { tx, rx } = await openDone((call, op) => {
      if (op !== refuse) return call();
      refuse = undefined;
      return Promise.reject(new QueueError('ERR_STORE_FULL', 'no room'));
    });
    await tx.push('a');
    refuse = 'append';
    await expect(tx.push('b')).rejects.toSatisfy(code('ERR_STORE_FULL'));
    // The refused batch's seq is used again by the next push.
    expect(await tx.push('c')).toBe(2);
    const first = rx.tryReserve()!;
    refuse = 'ack';
    await expect(first.ack()).rejects.toSatisfy(code('ERR_STORE_FULL'));
    // Not acked: the item is ready again, before the later one.
    const again = rx.tryReserve()!;
    expect([again.seq, dec(again.bytes), again.deliveries]).toEqual([1, 'a', 2]);
    await again.ack();
    const second = rx.tryReserve()!;
    expect([second.seq, dec(second.bytes)]).toEqual([2, 'c']);
    await second.ack();
    expect(rx.stats()).toMatchObject({ ready: 0, inFlight: 0 });
    await rx.close();
  });

  it.each(['push', 'ack'] as const)('manyBatchesFinishedDuringTheCallCompleteInALoopNotByRecursion_%s', async (op) => {
    // Under sync each operation is its own batch, and without a budget nothing defers: 20 000 of
    // them queued behind the first call are completed one after another within one flush.
    const n = 20_000;
    const unhandled: unknown[] = [];
    const onUnhandled = (error: unknown) => void unhandled.push(error);
    process.on('unhandledRejection', onUnhandled);
    try {
      const [tx, rx] = await new Builder(new MemStore())
        .capacity(n)
        .durability('sync')
        .ackDurability('sync')
        .storeCallsPerTurn(Infinity)
        .open();
      let ops: Promise<unknown>[];
      if (op === 'push') {
        ops = Array.from({ length: n }, (_, i) => tx.push(`${i}`));
      } else {
        await tx.pushMany(Array.from({ length: n }, (_, i) => `${i}`));
        const items = Array.from({ length: n }, () => rx.tryReserve()!);
        ops = items.map((item) => item.ack());
      }
      const settled = await Promise.allSettled(ops);
      expect(settled.filter((r) => r.status === 'rejected')).toEqual([]);
      await tick();
      expect(unhandled).toEqual([]);
      expect(rx.stats()).toMatchObject(op === 'push' ? { ready: n, pendingPushes: 0 } : { ready: 0, inFlight: 0 });
      await rx.close();
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });

  it('aPushWithASignalLeavesNoListenerBehindOnceStored', async () => {
    const { tx, rx } = await openDone();
    await tx.push('a');
    const controller = new AbortController();
    expect(await tx.push('b', { signal: controller.signal })).toBe(2);
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(0);
    controller.abort();
    expect(rx.stats().ready).toBe(2);
    await rx.close();
  });
});

describe('storeCallsPerTurn', () => {
  // A serial producer chains its pushes in promise callbacks: without a budget every push would be
  // a store call in the same turn. Counts the store calls made before the next turn begins.
  async function appendsInFirstTurn(budget: number | undefined): Promise<{ firstTurn: number; total: number }> {
    const store = new MemStore();
    let appends = 0;
    const counting = new Proxy(store, {
      get(target, prop) {
        if (prop === 'append') {
          return (items: never, sync: boolean) => {
            appends++;
            return target.append(items, sync);
          };
        }
        const value = Reflect.get(target, prop) as unknown;
        return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    });
    const builder = new Builder(counting).durability('none');
    if (budget !== undefined) builder.storeCallsPerTurn(budget);
    const [tx] = await builder.open();
    let firstTurn = -1;
    setImmediate(() => (firstTurn = appends));
    for (let i = 0; i < 40; i++) await tx.push(`item ${i}`);
    await new Promise((resolve) => setImmediate(resolve));
    const total = appends;
    await tx.close();
    return { firstTurn, total };
  }

  it('boundsTheStoreCallsAPipelineMakesPerTurnSixteenByDefault', async () => {
    expect(await appendsInFirstTurn(undefined)).toEqual({ firstTurn: 16, total: 40 });
    expect(await appendsInFirstTurn(4)).toEqual({ firstTurn: 4, total: 40 });
    expect(await appendsInFirstTurn(1)).toEqual({ firstTurn: 1, total: 40 });
    expect(await appendsInFirstTurn(Infinity)).toEqual({ firstTurn: 40, total: 40 });
  });

  it('oneCallPerTurnGathersOperationsChainedInMicrotasksIntoLargerBatches', async () => {
    const one = await chainedEndToEnd((b) => b.storeCallsPerTurn(1));
    const sixteen = await chainedEndToEnd((b) => b.storeCallsPerTurn(16));
    // Measured: 7.8 acks per call with 16, 64 with 1; appends batch fully either way here
    // (64 producers, no capacity bound).
    expect(one.acks).toBeGreaterThan(sixteen.acks * 2);
    expect(one.appends).toBeGreaterThanOrEqual(sixteen.appends);
  });

  it('theDefaultGathersLikeOneCallPerTurnUnderChainedCallers', async () => {
    const auto = await chainedEndToEnd();
    const sixteen = await chainedEndToEnd((b) => b.storeCallsPerTurn(16));
    expect(auto.acks).toBeGreaterThan(sixteen.acks * 2);
    // 'auto' named is the default.
    const named = await chainedEndToEnd((b) => b.storeCallsPerTurn('auto'));
    expect(named.acks).toBeGreaterThan(sixteen.acks * 2);
  });
});

describe('FlushScheduler under auto', () => {
  const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

  /** Spend this turn's budget so that the next flush waits a turn; that flush hands over `handed` operations. */
  async function deferredFlushHanding(scheduler: FlushScheduler, state: { handed: number }, handed: number): Promise<void> {
    while (scheduler.admit()) {
      // A call the budget allows.
    }
    state.handed = handed;
    await turn();
    await turn();
  }

  it('dropsToOneWhenAWaitGatheredSeveral_andGrowsBackForASerialCaller', async () => {
    const state = { handed: 0 };
    const scheduler = new FlushScheduler(() => state.handed, 'auto');
    expect(scheduler.budget).toBe(TURN_STORE_CALLS);
    // A lone operation per deferred flush at the start: the budget stays where it is.
    await deferredFlushHanding(scheduler, state, 1);
    expect(scheduler.budget).toBe(TURN_STORE_CALLS);
    await deferredFlushHanding(scheduler, state, 5);
    expect(scheduler.budget).toBe(1);
    const seen: number[] = [];
    for (let i = 0; i < 16; i++) {
      await deferredFlushHanding(scheduler, state, 1);
      seen.push(scheduler.budget);
    }
    // It doubles after four lone deferred flushes in a row, up to the cap.
    expect(seen).toEqual([1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 4, 8, 8, 8, 8, 16]);
    // Several operations again: straight back to one.
    await deferredFlushHanding(scheduler, state, 2);
    expect(scheduler.budget).toBe(1);
  });

  it('aFixedBudgetNeverMoves', async () => {
    const state = { handed: 0 };
    const scheduler = new FlushScheduler(() => state.handed, 16);
    await deferredFlushHanding(scheduler, state, 9);
    expect(scheduler.budget).toBe(16);
  });
});

describe('a waiting consumer keeps the process alive', () => {
  /** Timers that keep the event loop alive now (unref'd ones are not listed). */
  const heldTimers = (): number => process.getActiveResourcesInfo().filter((t) => t === 'Timeout').length;

  it('aWaitingReserveForAwaitOrProcessHoldsTheProcessAndNothingElseDoes', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    const base = heldTimers();
    // reserve(): held while it waits, released once served.
    const waiting = rx.reserve();
    expect(heldTimers(), 'a waiting reserve() holds the process').toBe(base + 1);
    await tx.push('a');
    await (await waiting)!.ack();
    expect(heldTimers(), 'served: nothing holds the process').toBe(base);
    // A reserve withdrawn by its signal releases it too.
    const stop = new AbortController();
    const aborted = rx.reserve({ signal: stop.signal });
    expect(heldTimers()).toBe(base + 1);
    stop.abort();
    await expect(aborted).rejects.toThrow();
    expect(heldTimers(), 'aborted: nothing holds the process').toBe(base);
    // for await: held while the loop waits for the next item.
    const iterator = rx[Symbol.asyncIterator]();
    const next = iterator.next();
    expect(heldTimers(), 'a waiting for-await step holds the process').toBe(base + 1);
    await tx.push('b');
    const step = await next;
    await step.value!.ack();
    await iterator.return!();
    expect(heldTimers()).toBe(base);
    // process(): held while its workers wait, released when its signal aborts.
    const end = new AbortController();
    const running = rx.process(async () => {}, { concurrency: 4, signal: end.signal });
    await tick();
    expect(heldTimers(), 'process() workers waiting hold the process').toBe(base + 1);
    end.abort();
    await running;
    expect(heldTimers(), 'process() stopped: nothing holds the process').toBe(base);
    // close() releases it for good, with a reserve still waiting.
    const last = rx.reserve();
    expect(heldTimers()).toBe(base + 1);
    await tx.close();
    expect(await last).toBeNull();
    expect(heldTimers(), 'closed: nothing holds the process').toBe(base);
  });
});

describe('what the queue tells those who serve it', () => {
  it('aRunningProcessLoopCountsAsAConsumerEvenBetweenItsItems', async () => {
    let surface: import('../../src/contract/owner-surface.js').OwnerSurface | undefined;
    class Serving extends MemStore {
      attach(s: import('../../src/contract/owner-surface.js').OwnerSurface): void {
        surface = s;
      }
    }
    const [tx, rx] = await new Builder(new Serving()).open();
    expect(surface!.consuming).toBe(false);
    const stop = new AbortController();
    let handled = 0;
    const running = rx.process(
      async () => {
        handled++;
      },
      { signal: stop.signal },
    );
    await tx.push('a');
    while (handled === 0) await tick();
    // Between items: nothing in flight, and for a moment no reserve waiting, yet a consumer runs.
    expect(surface!.consuming).toBe(true);
    stop.abort();
    await running;
    expect(surface!.consuming).toBe(false);
    await tx.close();
  });
});
