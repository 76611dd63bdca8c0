// LogStore's `blockingSync` option: every fsync and fdatasync runs on the calling thread through the
// FileSystem's synchronous calls, with the same durability and the same fail-stop as the default.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Builder, QueueError } from '../../../src/index.js';
import { LogStore } from '../../../src/stores/log/log-store.js';
import { nodeFileSystem } from '../../../src/fs/node-fs.js';
import type { FileSystem } from '../../../src/fs/file-system.js';
import { CrashFileSystem } from '../../../src/testing/index.js';
import { cleanupDirs, freshDir } from './helpers.js';

afterEach(() => cleanupDirs());

/** node:fs with counted synchronous syncs, and asynchronous ones that must not be called. */
function countingFs(): { fs: FileSystem; counts: { fdatasyncSync: number; fsyncSync: number; async: number } } {
  const counts = { fdatasyncSync: 0, fsyncSync: 0, async: 0 };
  const fs: FileSystem = {
    ...nodeFileSystem,
    fdatasync(fd) {
      counts.async++;
      return nodeFileSystem.fdatasync(fd);
    },
    fsync(fd) {
      counts.async++;
      return nodeFileSystem.fsync(fd);
    },
    fdatasyncSync(fd) {
      counts.fdatasyncSync++;
      nodeFileSystem.fdatasyncSync!(fd);
    },
    fsyncSync(fd) {
      counts.fsyncSync++;
      nodeFileSystem.fsyncSync!(fd);
    },
  };
  return { fs, counts };
}

describe('blockingSync', () => {
  it('refusesANonBooleanAndAFileSystemWithoutSynchronousSyncs_creatingNothing', async () => {
    const dir = join(freshDir(), 'q');
    await expect(LogStore.open(dir, { blockingSync: 'yes' as unknown as boolean })).rejects.toThrow(TypeError);
    const { fdatasyncSync: _a, fsyncSync: _b, ...asyncOnly } = nodeFileSystem;
    await expect(LogStore.open(dir, { blockingSync: true, fs: asyncOnly as FileSystem })).rejects.toThrow(/fdatasyncSync and fsyncSync/);
    expect(existsSync(dir)).toBe(false);
    // The same FileSystem is fine without the option ('auto' then syncs in the threadpool).
    const store = await LogStore.open(dir, { fs: asyncOnly as FileSystem });
    await store.close();
  });

  it.each(['sync', 'group'] as const)('syncsEveryPushAndAckOnTheCallingThread_under_%s', async (policy) => {
    const dir = join(freshDir(), 'q');
    const { fs, counts } = countingFs();
    const store = await LogStore.open(dir, { fs, blockingSync: true });
    const [tx, rx] = await new Builder(store).durability(policy).ackDurability(policy).open();
    // Creating the store's identity file at the first open is not on the push path and stays asynchronous.
    counts.async = 0;
    const before = counts.fdatasyncSync;
    for (let i = 0; i < 20; i++) await tx.push(new Uint8Array([i]));
    const pushSyncs = counts.fdatasyncSync - before;
    // Serial pushes: one data sync each, under both policies.
    expect(pushSyncs).toBeGreaterThanOrEqual(20);
    for (let i = 0; i < 20; i++) {
      const item = (await rx.tryReserve())!;
      expect(item.bytes[0]).toBe(i);
      await item.ack();
    }
    expect(counts.fdatasyncSync - before - pushSyncs).toBeGreaterThanOrEqual(20);
    await rx.close();
    // No sync of a push, an ack or the close went to the threadpool (directory fsyncs open the directory themselves).
    expect(counts.async).toBe(0);
    const again = await LogStore.open(dir);
    const [, rx2] = await new Builder(again).open();
    expect(rx2.stats().ready).toBe(0);
    await rx2.close();
  });

  it('byDefaultASyncOfOneOperationRunsOnTheCallingThreadAndABatchInTheThreadpool', async () => {
    const dir = join(freshDir(), 'q');
    const { fs, counts } = countingFs();
    const store = await LogStore.open(dir, { fs });
    const [tx, rx] = await new Builder(store).durability('sync').open();
    expect(rx.stats().ackDurability).toBe('sync');
    counts.async = 0;
    const before = counts.fdatasyncSync;
    // One push at a time, one ack at a time: each sync covers one operation.
    for (let i = 0; i < 10; i++) await tx.push(new Uint8Array([i]));
    for (let i = 0; i < 10; i++) await (await rx.reserve())!.ack();
    expect(counts.fdatasyncSync - before, 'serial pushes and acks synced on the calling thread').toBeGreaterThanOrEqual(20);
    expect(counts.async, 'none of them in the threadpool').toBe(0);
    // A batch of several pushes syncs in the threadpool.
    const blocking = counts.fdatasyncSync;
    await tx.pushMany([new Uint8Array([1]), new Uint8Array([2]), new Uint8Array([3])]);
    expect(counts.fdatasyncSync).toBe(blocking);
    expect(counts.async).toBeGreaterThanOrEqual(1);
    await tx.close();
    // false: nothing on the calling thread.
    const { fs: fs2, counts: counts2 } = countingFs();
    const [tx2] = await new Builder(await LogStore.open(join(freshDir(), 'q'), { fs: fs2, blockingSync: false })).durability('sync').open();
    for (let i = 0; i < 5; i++) await tx2.push(new Uint8Array([i]));
    expect(counts2.fdatasyncSync).toBe(0);
    await tx2.close();
    await expect(LogStore.open(join(freshDir(), 'q'), { blockingSync: 'often' as never })).rejects.toThrow(TypeError);
  });

  it('byDefaultABatchSyncRunsOnTheCallingThreadWhileTheLoopIsIdle_andInTheThreadpoolWhileItIsBusy', async () => {
    // Each flush in the threadpool takes a few more milliseconds, through which the loop waits idle.
    const slowed = (): ReturnType<typeof countingFs> => {
      const { fs, counts } = countingFs();
      const fdatasync = fs.fdatasync.bind(fs);
      fs.fdatasync = (fd) => fdatasync(fd).then(() => new Promise<void>((resolve) => setTimeout(resolve, 5)));
      return { fs, counts };
    };
    const batches = async (tx: { pushMany(items: Uint8Array[]): Promise<unknown> }, counts: { fdatasyncSync: number; async: number }) => {
      const before = { ...counts };
      for (let i = 0; i < 80; i++) await tx.pushMany([new Uint8Array([i]), new Uint8Array([i, i])]);
      return { onThread: counts.fdatasyncSync - before.fdatasyncSync, threadpool: counts.async - before.async };
    };
    const idle = slowed();
    const [tx] = await new Builder(await LogStore.open(join(freshDir(), 'q'), { fs: idle.fs })).durability('group').open();
    const quiet = await batches(tx, idle.counts);
    expect(quiet.onThread, 'batches synced on the calling thread once the loop was seen idle').toBeGreaterThan(0);
    expect(quiet.threadpool, 'until the loop was measured').toBeGreaterThan(0);
    await tx.close();
    // The same pushes while other callbacks keep the loop busy: every batch stays in the threadpool.
    const busy = slowed();
    const [tx2] = await new Builder(await LogStore.open(join(freshDir(), 'q'), { fs: busy.fs })).durability('group').open();
    let serving = true;
    let served = 0;
    const serve = (): void => {
      if (!serving) return;
      for (let i = 0; i < 200_000; i++) served += i % 3;
      setImmediate(serve);
    };
    setImmediate(serve);
    const loaded = await batches(tx2, busy.counts);
    serving = false;
    expect(served).toBeGreaterThan(0);
    expect(loaded).toEqual({ onThread: 0, threadpool: 80 });
    await tx2.close();
    // An idle loop again, with a consumer. One that keeps up (each batch taken and acked before
    // the next) leaves the loop idle through each flush: batches block beside it. One that falls
    // behind (two items pushed for every one it takes) needs the loop to catch up: once it trails
    // by more than two batches, no batch blocks beside it.
    // (The consumer's own syncs of the cursor file are not batches of pushes: only the segments'
    // syncs are counted.)
    const consumed = slowed();
    const segments = new Set<number>();
    const open = consumed.fs.open.bind(consumed.fs);
    consumed.fs.open = (path, mode, ...rest) => {
      const fd = open(path, mode, ...rest);
      if (path.endsWith('.log')) segments.add(fd);
      return fd;
    };
    let segmentsOnThread = 0;
    const onThread = consumed.fs.fdatasyncSync!.bind(consumed.fs);
    consumed.fs.fdatasyncSync = (fd) => {
      if (segments.has(fd)) segmentsOnThread++;
      onThread(fd);
    };
    const [tx3, rx3] = await new Builder(await LogStore.open(join(freshDir(), 'q'), { fs: consumed.fs })).durability('group').open();
    await batches(tx3, consumed.counts);
    for (let i = 0; i < 80 * 2; i++) await (await rx3.reserve())!.ack();
    /**
     * 40 batches of two, each followed by two items taken and acked; returns the segments' syncs on
     * the calling thread from the fourth batch on (the first ones follow what came before).
     */
    const keepingUp = async (): Promise<number> => {
      for (let i = 0; i < 40; i++) {
        if (i === 3) segmentsOnThread = 0;
        await tx3.pushMany([new Uint8Array([i]), new Uint8Array([i, i])]);
        for (let k = 0; k < 2; k++) await (await rx3.reserve())!.ack();
      }
      return segmentsOnThread;
    };
    expect(await keepingUp(), 'batches blocked beside a consumer that keeps up').toBeGreaterThan(0);
    // Three items behind, under two batches of two: it still keeps up.
    await tx3.pushMany([new Uint8Array([1]), new Uint8Array([2]), new Uint8Array([3])]);
    expect(await keepingUp(), 'three items behind').toBeGreaterThan(0);
    // An item held back for an hour: the items handed out past it are what the consumer reached.
    await tx3.push(new Uint8Array([9]), { delayMs: 3_600_000 });
    expect(await keepingUp(), 'beside a delayed item').toBeGreaterThan(0);
    for (let i = 0; i < 40; i++) {
      // Counted once it trails by more than two batches (four items).
      if (i === 6) segmentsOnThread = 0;
      await tx3.pushMany([new Uint8Array([i]), new Uint8Array([i, i])]);
      await (await rx3.reserve())!.ack();
    }
    expect(segmentsOnThread, 'no batch blocked beside a consumer that fell behind').toBe(0);
    await tx3.close();
  });

  it('aFailedBlockingSyncFailsTheStore_andTheFailedPushIsNotResolved', async () => {
    const fs = new CrashFileSystem({ seed: 7 });
    const store = await LogStore.open('/q', { fs, blockingSync: true, preallocate: false });
    const [tx] = await new Builder(store).durability('sync').open();
    await tx.push(new Uint8Array([1]));
    fs.inject({ op: 'fdatasync', code: 'EIO', nth: 1 });
    const failed = await tx.push(new Uint8Array([2])).then(
      () => null,
      (e: unknown) => e,
    );
    expect(failed).toBeInstanceOf(QueueError);
    expect((failed as QueueError).code).toBe('ERR_STORE_FAILED');
    // Fail-stop: no later operation succeeds, even though the next sync would.
    await expect(tx.push(new Uint8Array([3]))).rejects.toMatchObject({ code: 'ERR_STORE_FAILED' });
    expect(fs.stats().syncFailureCount).toBe(1);
  });

  it('aPushUnderSyncIsDurableWhenItResolves_powerLossRightAfter', async () => {
    const fs = new CrashFileSystem({ seed: 11 });
    const store = await LogStore.open('/q', { fs, blockingSync: true });
    const [tx] = await new Builder(store).durability('sync').open();
    const seqs: number[] = [];
    for (let i = 0; i < 10; i++) seqs.push(await tx.push(new Uint8Array([i, i])));
    // The disk loses everything that no sync covered; every resolved push was covered.
    const after = fs.crash({ unsynced: 'lose' });
    const reopened = await LogStore.open('/q', { fs: after });
    const [, rx] = await new Builder(reopened).open();
    const got: number[] = [];
    for (let item = rx.tryReserve(); item; item = rx.tryReserve()) got.push(item.seq);
    expect(got).toEqual(seqs);
    await rx.close();
  });
});
