/**
 * The ack policy (`Builder.ackDurability`): argument checks, what each policy hands the store,
 * and the lazy bound (count and time) on the real LogStore, its sync watched from outside. Time
 * is the test's: only setTimeout/clearTimeout are faked, so the store's own I/O runs for real.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { AckDurability, Builder, LogStore, MemStore, QueueError } from '../../src/index.js';
import type { AckDurability as AckPolicy, Durability } from '../../src/api/types.js';
import type { Store } from '../../src/contract/store.js';
import { RecordingStore } from '../support/stores.js';

const dirs: string[] = [];
afterEach(() => {
  vi.useRealTimers();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** A LogStore in a fresh directory whose `sync` calls are counted and whose last one can be awaited. */
async function watchedLogStore(): Promise<{ store: LogStore; syncs: { count: number; last: Promise<void> | undefined } }> {
  const dir = mkdtempSync(join(tmpdir(), 'pq-lazy-'));
  dirs.push(dir);
  const store = await LogStore.open(join(dir, 'q'));
  const syncs = { count: 0, last: undefined as Promise<void> | undefined };
  const sync = store.sync.bind(store);
  store.sync = () => {
    syncs.count++;
    syncs.last = sync();
    return syncs.last;
  };
  return { store, syncs };
}

async function ackSerially(rx: import('../../src/index.js').Consumer, n: number): Promise<void> {
  for (let i = 0; i < n; i++) await rx.tryReserve()!.ack();
}

describe('Builder.ackDurability arguments', () => {
  it('refusesBadPoliciesAndOptionsWithTypedErrorsAndKeepsThePreviousPolicy', async () => {
    const b = new Builder(new MemStore()).ackDurability('group');
    const bad: [unknown[], typeof TypeError | typeof RangeError][] = [
      [[1], TypeError],
      [[undefined], TypeError],
      [['never'], RangeError],
      [['none'], RangeError],
      [['group', {}], TypeError],
      [['sync', { maxDelayMs: 5 }], TypeError],
      [['lazy', null], TypeError],
      [['lazy', 'fast'], TypeError],
      [['lazy', { maxDelay: 5 }], TypeError],
      [['lazy', { maxDelayMs: '5' }], TypeError],
      [['lazy', { maxDelayMs: 0 }], RangeError],
      [['lazy', { maxDelayMs: 1.5 }], RangeError],
      [['lazy', { maxDelayMs: Infinity }], RangeError],
      [['lazy', { maxDelayMs: 2 ** 31 }], RangeError],
      [['lazy', { maxPending: 0 }], RangeError],
      [['lazy', { maxPending: -3 }], RangeError],
      [['lazy', { maxPending: 2n }], TypeError],
    ];
    for (const [args, type] of bad) {
      expect(
        () => (b.ackDurability as (...a: unknown[]) => Builder)(...args),
        JSON.stringify(args, (_k, v) => (typeof v === 'bigint' ? `${v}n` : v)),
      ).toThrow(type);
    }
    const [tx] = await b.open();
    expect(tx.stats().ackDurability).toBe('group');
    await tx.close();
  });

  it('namesThePoliciesAndDefaultsToLazy', async () => {
    expect(Object.values(AckDurability)).toEqual(['sync', 'group', 'lazy']);
    const [tx] = await new Builder(new MemStore()).open();
    expect(tx.stats().ackDurability).toBe('lazy');
    expect(tx.stats().unsyncedAcks).toBe(0);
    await tx.close();
  });

  it('theUnsetAckPolicyFollowsThePushPolicyAndAnExplicitOneWins', async () => {
    const cases: [Durability, AckPolicy | undefined, string][] = [
      ['sync', undefined, 'sync'],
      ['group', undefined, 'lazy'],
      ['none', undefined, 'none'],
      ['sync', 'lazy', 'lazy'],
      ['sync', 'group', 'group'],
      ['group', 'sync', 'sync'],
    ];
    for (const [durability, acks, expected] of cases) {
      const b = new Builder(new MemStore()).durability(durability);
      if (acks !== undefined) b.ackDurability(acks);
      const [tx] = await b.open();
      expect(tx.stats().ackDurability, `durability ${durability}, ackDurability ${acks}`).toBe(expected);
      await tx.close();
    }
    // Setting the push policy after the ack policy does not undo the explicit choice.
    const [tx] = await new Builder(new MemStore()).ackDurability('lazy').durability('sync').open();
    expect(tx.stats().ackDurability).toBe('lazy');
    await tx.close();
  });

  it('underSyncEachAckIsItsOwnSyncedStoreCall', async () => {
    const store = new RecordingStore();
    const [tx, rx] = await new Builder(store).durability('sync').open();
    await tx.push('a');
    await tx.push('b');
    store.calls = [];
    await rx.tryReserve()!.ack();
    await rx.tryReserve()!.ack();
    expect(store.calls).toEqual([
      { op: 'ack', seqs: [1], sync: true },
      { op: 'ack', seqs: [2], sync: true },
    ]);
    expect(tx.stats().unsyncedAcks).toBe(0);
    await tx.close();
  });

  it('underNoneNoAckIsSyncedAndAStoreWithoutSyncKeepsAcksUnderGroup', async () => {
    const [none] = await new Builder(new MemStore()).durability('none').ackDurability('lazy').open();
    expect(none.stats().ackDurability).toBe('none');
    await none.close();
    const store = new RecordingStore();
    // A Store without the optional method: the queue cannot sync written acks later.
    const plain: Store = {
      maxItemBytes: store.maxItemBytes,
      features: store.features,
      open: () => store.open(),
      append: (i, s) => store.append(i, s),
      ack: (q, s) => store.ack(q, s),
      read: (r) => store.read(r),
      close: () => store.close(),
    };
    const [tx, rx] = await new Builder(plain).open();
    expect(tx.stats().ackDurability).toBe('group');
    await tx.push('a');
    store.calls = [];
    await rx.tryReserve()!.ack();
    expect(store.calls).toEqual([{ op: 'ack', seqs: [1], sync: true }]);
    await tx.close();
  });
});

describe('lazy acks', () => {
  it('areStoredWithoutSyncAndResolveBeforeAnySync', async () => {
    const store = new RecordingStore();
    let syncs = 0;
    store.sync = () => {
      syncs++;
      return Promise.resolve();
    };
    const [tx, rx] = await new Builder(store).ackDurability('lazy', { maxDelayMs: 60_000, maxPending: 100 }).open();
    await tx.pushMany(['a', 'b']);
    store.calls = [];
    await ackSerially(rx, 2);
    expect(store.calls).toEqual([
      { op: 'ack', seqs: [1], sync: false },
      { op: 'ack', seqs: [2], sync: false },
    ]);
    expect(syncs).toBe(0);
    expect(rx.stats().unsyncedAcks).toBe(2);
    expect(rx.stats().acked).toBe(2);
    await tx.close();
    expect(syncs, 'close syncs what is left').toBe(1);
  });

  it('theCountBoundStartsASyncAtMaxPendingWrittenAcks', async () => {
    const { store, syncs } = await watchedLogStore();
    const [tx, rx] = await new Builder(store).ackDurability('lazy', { maxDelayMs: 60_000, maxPending: 3 }).open();
    await tx.pushMany(['1', '2', '3', '4', '5', '6', '7']);
    await ackSerially(rx, 2);
    expect(syncs.count).toBe(0);
    expect(rx.stats().unsyncedAcks).toBe(2);
    await ackSerially(rx, 1);
    expect(syncs.count).toBe(1);
    expect(rx.stats().unsyncedAcks, 'until the sync completes, its acks may still be redelivered').toBe(3);
    await syncs.last;
    expect(rx.stats().unsyncedAcks).toBe(0);
    await ackSerially(rx, 3);
    expect(syncs.count).toBe(2);
    await syncs.last;
    await ackSerially(rx, 1);
    expect(syncs.count).toBe(2);
    await tx.close();
    expect(syncs.count, 'close syncs the seventh').toBe(3);
  });

  it('acksWrittenWhileASyncRunsWaitForTheNextOneWhichStartsWhenTheBoundHasPassed', async () => {
    const { store, syncs } = await watchedLogStore();
    const [tx, rx] = await new Builder(store).ackDurability('lazy', { maxDelayMs: 60_000, maxPending: 2 }).open();
    await tx.pushMany(['1', '2', '3', '4', '5']);
    await ackSerially(rx, 2);
    const first = syncs.last;
    await ackSerially(rx, 2);
    expect(syncs.count, 'one sync in flight at a time').toBe(1);
    expect(rx.stats().unsyncedAcks).toBe(4);
    await first;
    expect(syncs.count, 'the bound passed meanwhile: the next sync starts as the first ends').toBe(2);
    await syncs.last;
    expect(rx.stats().unsyncedAcks).toBe(0);
    await tx.close();
  });

  it('theTimeBoundStartsASyncMaxDelayMsAfterTheFirstUnsyncedAck', async () => {
    const { store, syncs } = await watchedLogStore();
    const [tx, rx] = await new Builder(store).ackDurability('lazy', { maxDelayMs: 100, maxPending: 1000 }).open();
    await tx.pushMany(['1', '2', '3']);
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    await ackSerially(rx, 1);
    vi.advanceTimersByTime(60);
    await ackSerially(rx, 1);
    vi.advanceTimersByTime(39);
    expect(syncs.count).toBe(0);
    vi.advanceTimersByTime(1);
    expect(syncs.count, '100 ms after the first unsynced ack, not after the last').toBe(1);
    await syncs.last;
    expect(rx.stats().unsyncedAcks).toBe(0);
    vi.advanceTimersByTime(1000);
    expect(syncs.count, 'no ack waits: no timer, no sync').toBe(1);
    await ackSerially(rx, 1);
    vi.advanceTimersByTime(100);
    expect(syncs.count).toBe(2);
    await syncs.last;
    vi.useRealTimers();
    await tx.close();
    expect(syncs.count, 'nothing left for close to sync').toBe(2);
  });

  it('aFailedSyncFailsTheQueueAndCloseRejects', async () => {
    const store = new RecordingStore();
    store.sync = () => Promise.reject(new Error('EIO: i/o error, fdatasync'));
    const [tx, rx] = await new Builder(store).ackDurability('lazy', { maxDelayMs: 60_000, maxPending: 1 }).open();
    await tx.pushMany(['a', 'b']);
    await rx.tryReserve()!.ack();
    await expect(tx.push('c')).rejects.toMatchObject({ code: 'ERR_STORE_FAILED' });
    await tx.close();
    const other = new RecordingStore();
    other.sync = () => Promise.reject(new Error('EIO at close'));
    const [tx3, rx3] = await new Builder(other).ackDurability('lazy', { maxDelayMs: 60_000, maxPending: 100 }).open();
    await tx3.push('x');
    await rx3.tryReserve()!.ack();
    const closing = tx3.close();
    await expect(closing).rejects.toBeInstanceOf(QueueError);
    await expect(closing).rejects.toMatchObject({ code: 'ERR_STORE_FAILED' });
  });
});

describe('close after a failure', () => {
  it('waits for a lazy sync still running before it closes the store', async () => {
    const mem = new MemStore();
    const events: string[] = [];
    let releaseSync!: () => void;
    let failAppends = false;
    const append = mem.append.bind(mem);
    mem.append = (items, sync) => (failAppends ? Promise.reject(new Error('disk gone')) : append(items, sync));
    mem.sync = () => {
      events.push('sync start');
      return new Promise<void>((resolve) => {
        releaseSync = () => {
          events.push('sync end');
          resolve();
        };
      });
    };
    const close = mem.close.bind(mem);
    mem.close = () => {
      events.push('store.close');
      return close();
    };
    const [tx, rx] = await new Builder(mem).ackDurability('lazy', { maxDelayMs: 2 ** 31 - 1, maxPending: 1 }).open();
    await tx.push('a');
    await (await rx.reserve())!.ack(); // the count bound starts a sync, which stays pending
    failAppends = true;
    await tx.push('b').catch(() => undefined); // the queue fails
    const closed = tx.close().catch(() => undefined);
    await new Promise((r) => setTimeout(r, 5));
    expect(events).toEqual(['sync start']);
    releaseSync();
    await closed;
    expect(events).toEqual(['sync start', 'sync end', 'store.close']);
  });
});
