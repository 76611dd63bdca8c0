/** LogStore behaviour through the Store contract: acks, rolls, compaction, failures, locking, bounds. */
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { LogStore } from '../../../src/stores/log/log-store.js';
import {
  cleanupDirs,
  crashCopy,
  enc,
  errno,
  freshDir,
  items,
  openStore,
  readAllSeqs,
  readAllTexts,
  segFiles,
  WrappedFs,
} from './helpers.js';

afterAll(cleanupDirs);

const payload128 = (seq: number): Uint8Array => {
  const b = new Uint8Array(128);
  b.fill(seq & 0xff);
  b[0] = seq >>> 8;
  return b;
};

async function pushMany(store: LogStore, first: number, n: number, batch = 64): Promise<void> {
  for (let s = first; s < first + n; s += batch) {
    const k = Math.min(batch, first + n - s);
    await store.append(
      Array.from({ length: k }, (_, i) => ({ seq: s + i, bytes: payload128(s + i) })),
      false,
    );
  }
}

describe('acks', () => {
  test('outOfOrderAcksSurviveACrash', async () => {
    const dir = freshDir();
    const { store } = await openStore(dir);
    await store.append(items(1, ['1', '2', '3', '4', '5']), true);
    await store.ack([5], true);
    await store.ack([3], true);
    const copy = crashCopy(dir); // the process dies here: no clean close
    await store.close();
    const { store: s2, count, nextSeq } = await openStore(copy);
    expect(s2.recovery.cleanShutdown).toBe(false);
    expect(readAllTexts(s2)).toEqual(['1', '2', '4']);
    expect([count, nextSeq]).toEqual([3, 6]);
    await s2.close();
  });

  test('outOfOrderAcksSurviveACleanClose', async () => {
    const dir = freshDir();
    const { store } = await openStore(dir);
    await store.append(items(1, ['1', '2', '3', '4', '5']), false);
    await store.ack([5, 3], false);
    await store.close();
    const { store: s2, count } = await openStore(dir);
    expect(s2.recovery.cleanShutdown).toBe(true);
    expect(readAllTexts(s2)).toEqual(['1', '2', '4']);
    expect(count).toBe(3);
    await s2.close();
  });

  test('readHonoursAfterBeforeAndLimit', async () => {
    const dir = freshDir();
    const { store } = await openStore(dir, { segmentBytes: 256, tailCacheBytes: 0 });
    for (let i = 1; i <= 30; i++) await store.append(items(i, [`i${i}`]), false);
    await store.ack([4, 5, 6], false);
    expect(store.read({ after: 2, before: 9, limit: 3 }).map((i) => i.seq)).toEqual([3, 7, 8]);
    expect(store.read({ after: 20, before: 31, limit: 2 }).map((i) => i.seq)).toEqual([21, 22]);
    expect(store.read({ after: 0, before: 4, limit: 10 }).map((i) => i.seq)).toEqual([1, 2, 3]); // seek back
    expect(store.read({ after: 30, before: 100, limit: 10 })).toEqual([]);
    await store.close();
  });

  test('checkpointKeepsTheCursorSmall', async () => {
    const dir = freshDir();
    const { store } = await openStore(dir, { cursorCheckpointBytes: 4096 });
    await pushMany(store, 1, 2000);
    for (let s = 1; s <= 2000; s++) await store.ack([s], false);
    await store.settled();
    expect(store.inspect().cursorBytes).toBeLessThan(4096 + 64);
    expect(store.inspect().count).toBe(0);
    await store.close();
  });
});

describe('segments and compaction', () => {
  test('segmentsRollAndReadBackInOrder', async () => {
    const dir = freshDir();
    const { store } = await openStore(dir, { segmentBytes: 1024, tailCacheBytes: 0 });
    await pushMany(store, 1, 300, 7);
    const names = segFiles(dir);
    expect(names.length).toBeGreaterThan(30);
    expect(names).toEqual([...names].sort());
    await store.close();
    const { store: s2, count, nextSeq } = await openStore(dir, { segmentBytes: 1024 });
    expect([count, nextSeq]).toEqual([300, 301]);
    const got = s2.read({ after: 0, before: 1e9, limit: 1e6 });
    expect(got.map((i) => i.seq)).toEqual(Array.from({ length: 300 }, (_, i) => i + 1));
    expect(got.every((i) => Buffer.from(i.bytes).equals(Buffer.from(payload128(i.seq))))).toBe(true);
    await s2.close();
  });

  test('fullyAckedBacklogShrinksToAboutOneSegment', async () => {
    const dir = freshDir();
    const segmentBytes = 64 * 1024;
    const { store } = await openStore(dir, { segmentBytes });
    await pushMany(store, 1, 20_000);
    expect(store.inspect().bytesOnDisk).toBeGreaterThan(2_000_000);
    for (let s = 1; s <= 20_000; s += 100)
      await store.ack(
        Array.from({ length: 100 }, (_, i) => s + i),
        false,
      );
    await store.settled();
    const stats = store.inspect();
    expect(stats.segments.length).toBe(1);
    expect(stats.bytesOnDisk).toBeLessThanOrEqual(segmentBytes + 4096);
    await store.close();
    const { store: s2, count } = await openStore(dir, { segmentBytes });
    expect(count).toBe(0);
    await s2.close();
  });

  test('pinnedSegmentsAreCompactedOnDemand', async () => {
    const dir = freshDir();
    const { store } = await openStore(dir, { segmentBytes: 4096, autoCompact: false });
    await pushMany(store, 1, 600, 8);
    const pinned = [2, 350];
    const rest = Array.from({ length: 600 }, (_, i) => i + 1).filter((s) => !pinned.includes(s));
    await store.ack(rest, true);
    await store.settled();
    const before = store.inspect();
    expect(before.segments.length).toBeGreaterThan(10); // seq 2 pins everything
    const r = await store.compact();
    expect(r.bytesReclaimed).toBeGreaterThan(before.bytesOnDisk / 2);
    const after = store.inspect();
    expect(after.segments.length).toBeLessThanOrEqual(2);
    expect(after.segments[0]!.compacted).toBe(true);
    expect(readAllSeqs(store)).toEqual(pinned);
    await store.close();
    const { store: s2, count } = await openStore(dir, { segmentBytes: 4096 });
    expect(count).toBe(2);
    expect(readAllSeqs(s2)).toEqual(pinned);
    expect(s2.read({ after: 2, before: 1e9, limit: 10 }).map((i) => i.bytes[1])).toEqual([350 & 0xff]);
    // The pinned items can be acked later and the compacted segment then goes away.
    await s2.ack([2, 350], true);
    await s2.compact();
    expect(s2.inspect().segments.length).toBe(1);
    await s2.close();
  });

  test('autoCompactionReclaimsPinnedSegments', async () => {
    const dir = freshDir();
    const { store } = await openStore(dir, { segmentBytes: 4096 });
    await store.append([{ seq: 1, bytes: payload128(1) }], true); // the long-lived item
    for (let s = 2; s <= 3000; s += 50) {
      const n = Math.min(50, 3001 - s);
      await store.append(
        Array.from({ length: n }, (_, i) => ({ seq: s + i, bytes: payload128(s + i) })),
        false,
      );
      await store.ack(
        Array.from({ length: n }, (_, i) => s + i),
        false,
      );
      await store.settled();
    }
    const stats = store.inspect();
    // Without compaction seq 1 would pin ~100 segments.
    expect(stats.segments.length).toBeLessThan(10);
    expect(readAllSeqs(store)).toEqual([1]);
    await store.close();
  });
});

describe('failures', () => {
  test('enospcRejectsTheBatchAndKeepsWorking', async () => {
    const dir = freshDir();
    const wfs = new WrappedFs();
    const { store } = await openStore(dir, { fs: wfs, preallocate: false });
    await store.append(items(1, ['a', 'b']), true);
    const size = fs.statSync(join(dir, segFiles(dir)[0]!)).size;
    let fail = true;
    wfs.onWrite = () => (fail ? ((fail = false), errno('ENOSPC')) : null);
    await expect(store.append(items(3, ['c', 'd']), true)).rejects.toMatchObject({ code: 'ERR_STORE_FULL' });
    expect(fs.statSync(join(dir, segFiles(dir)[0]!)).size).toBe(size); // the partial write was cut off
    await store.append(items(3, ['c2', 'd2']), true); // the same seqs again
    expect(readAllTexts(store)).toEqual(['a', 'b', 'c2', 'd2']);
    await store.close();
    const { store: s2 } = await openStore(dir);
    expect(readAllTexts(s2)).toEqual(['a', 'b', 'c2', 'd2']);
    await s2.close();
  });

  test('fsyncFailureFailsTheInstance', async () => {
    const dir = freshDir();
    const wfs = new WrappedFs();
    const { store } = await openStore(dir, { fs: wfs });
    await store.append(items(1, ['a']), true);
    wfs.onFdatasync = () => errno('EIO');
    const e = await store.append(items(2, ['b']), true).catch((x: unknown) => x);
    expect(e).toMatchObject({ code: 'ERR_STORE_FAILED' });
    expect((e as Error).cause).toMatchObject({ code: 'EIO' });
    wfs.onFdatasync = null; // even when the disk recovers, the instance stays failed (no retry)
    await expect(store.append(items(3, ['c']), true)).rejects.toMatchObject({ code: 'ERR_STORE_FAILED' });
    await expect(store.ack([1], true)).rejects.toMatchObject({ code: 'ERR_STORE_FAILED' });
    expect(() => store.read({ after: 0, before: 10, limit: 10 })).toThrow(expect.objectContaining({ code: 'ERR_STORE_FAILED' }));
    await store.close(); // releases the lock
    const { store: s2 } = await openStore(dir);
    expect(readAllTexts(s2).slice(0, 1)).toEqual(['a']);
    await s2.close();
  });

  test('writeFailureOtherThanEnospcFailsTheInstance', async () => {
    const dir = freshDir();
    const wfs = new WrappedFs();
    const { store } = await openStore(dir, { fs: wfs });
    wfs.onWrite = () => errno('EIO');
    await expect(store.append(items(1, ['a']), false)).rejects.toMatchObject({ code: 'ERR_STORE_FAILED' });
    wfs.onWrite = null;
    await expect(store.append(items(1, ['a']), false)).rejects.toMatchObject({ code: 'ERR_STORE_FAILED' });
    await store.close();
  });

  test('contractViolationFailsTheInstanceClearly', async () => {
    const dir = freshDir();
    const { store } = await openStore(dir);
    await expect(store.append(items(5, ['x']), false)).rejects.toMatchObject({ code: 'ERR_STORE_FAILED', message: /expected 1/ });
    await store.close();
  });
});

describe('open', () => {
  test('openDoesNotReadTheBacklog', async () => {
    const measure = async (n: number): Promise<number> => {
      const dir = freshDir();
      const opts = { segmentBytes: 64 * 1024 };
      const { store } = await openStore(dir, opts);
      await pushMany(store, 1, n);
      await store.close();
      const wfs = new WrappedFs();
      const { store: s2, count } = await openStore(dir, { ...opts, fs: wfs });
      expect(count).toBe(n);
      await s2.close();
      return wfs.bytesRead;
    };
    const small = await measure(10);
    const big = await measure(30_000); // ~4.4 MB in ~70 segments
    // Open reads headers, seals, the active segment and the cursor: bounded by one segment plus
    // a few bytes per segment, whatever the backlog.
    expect(big).toBeLessThan(64 * 1024 + 100 * 128);
    expect(small).toBeLessThan(4096);
  });

  test('secondOpenInTheSameProcessIsLockedAndLeavesTheFirstIntact', async () => {
    const dir = freshDir();
    const { store } = await openStore(dir);
    await expect(LogStore.open(dir)).rejects.toMatchObject({
      name: 'OpenError',
      code: 'ERR_LOCKED',
      message: new RegExp(`${process.pid}`),
    });
    await store.append(items(1, ['still mine']), true);
    await store.close();
    const { store: s2 } = await openStore(dir);
    expect(readAllTexts(s2)).toEqual(['still mine']);
    await s2.close();
  });

  test('lockHeldByAnotherLiveProcessThenTakenOverWhenItDies', async () => {
    const dir = freshDir();
    const { store } = await openStore(dir);
    await store.close();
    // A child process that holds the lock file the way a LogStore would, then waits.
    const child = spawn(
      process.execPath,
      [
        '-e',
        `require('fs').writeFileSync(${JSON.stringify(join(dir, 'LOCK'))}, String(process.pid)); process.stdout.write('ready'); setInterval(() => {}, 1000);`,
      ],
      {
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    await new Promise<void>((resolve) => child.stdout!.once('data', () => resolve()));
    await expect(LogStore.open(dir)).rejects.toMatchObject({ code: 'ERR_LOCKED', message: new RegExp(`pid ${child.pid}`) });
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
    const { store: s2 } = await openStore(dir); // the stale lock of a dead pid is taken over
    await s2.close();
    expect(fs.existsSync(join(dir, 'LOCK'))).toBe(false);
  });

  test('secondStoreOpenCallRejectsAndClosedStoreNeedsANewOpen', async () => {
    const dir = freshDir();
    const store = await LogStore.open(dir);
    await store.open();
    await expect(store.open()).rejects.toMatchObject({ code: 'ERR_LOCKED', message: /already backs an open queue/ });
    await store.close();
    await expect(store.open()).rejects.toMatchObject({ code: 'ERR_STORE', message: /LogStore.open/ });
    await expect(store.append(items(1, ['x']), false)).rejects.toMatchObject({ code: 'ERR_CLOSED' });
  });

  test('optionsAreValidated', async () => {
    const dir = freshDir();
    await expect(LogStore.open(dir, { segmentBytes: 0 })).rejects.toThrow(RangeError);
    await expect(LogStore.open(dir, { segmentBytes: 'big' as never })).rejects.toThrow(TypeError);
    await expect(LogStore.open(dir, { segmentBytes: 100 })).rejects.toThrow(/segmentBytes/);
    await expect(LogStore.open(dir, { maxItemBytes: 2 ** 30 })).rejects.toThrow(RangeError);
    await expect(LogStore.open(dir, { compactionLiveRatio: 2 })).rejects.toThrow(RangeError);
    await expect(LogStore.open(dir, { fs: {} as never })).rejects.toThrow(TypeError);
    await expect(LogStore.open('' as string)).rejects.toThrow(TypeError);
    // A misspelt option is refused by name instead of being ignored.
    await expect(LogStore.open(dir, { segmentByte: 4096 } as never)).rejects.toThrow(/Unknown option in `options`: `segmentByte`/);
    expect(fs.existsSync(dir)).toBe(false); // invalid options create nothing
  });

  test('payloadsAreReturnedAsCopies', async () => {
    const dir = freshDir();
    const { store } = await openStore(dir, { tailCacheBytes: 0 });
    await store.append(
      [
        { seq: 1, bytes: enc('abc') },
        { seq: 2, bytes: enc('def') },
      ],
      false,
    );
    const [a] = store.read({ after: 0, before: 10, limit: 1 });
    a!.bytes.fill(0);
    expect(readAllTexts(store)).toEqual(['abc', 'def']);
    await store.close();
  });
});
