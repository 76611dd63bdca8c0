/**
 * Edge cases of the engine that once failed: acks too large for one record, the pid lock,
 * descriptor lifetimes, reads during a roll, failed opens, fsyncgate, the bounded resync search
 * and a full disk. Each test fails on the code before its fix.
 */
import * as nodeFs from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { AckSet, decodeCheckpointBody, decodeCheckpointHeader, encodeCheckpoint } from '../../../src/stores/log/engine/cursor.js';
import {
  CURSOR_HEADER_BYTES,
  FRAME_HEADER_BYTES,
  MAX_RANGES_PER_RECORD,
  RANGE_BYTES,
  RECORD_ACK,
  readU32,
} from '../../../src/stores/log/engine/format.js';
import type { LockHandle } from '../../../src/fs/file-system.js';
import { LogStore, type LogStoreOptions } from '../../../src/stores/log/log-store.js';
import { pidFileLock, type PidLockEnv } from '../../../src/fs/pid-lock.js';
import { createNodeFileSystem } from '../../../src/fs/node-fs.js';
import { resyncCounters } from '../../../src/stores/log/engine/frame-reader.js';
import { CrashFileSystem } from '../../../src/testing/index.js';
import { cleanupDirs, errno, freshDir, items, openStore, readAllTexts, WrappedFs } from './helpers.js';

afterAll(cleanupDirs);

const all = { after: 0, before: Number.MAX_SAFE_INTEGER, limit: 1e9 };

describe('more acked ranges than one record holds', () => {
  // An ACK record is bounded by MAX_RANGES_PER_RECORD ranges on read. One ack() of more holes
  // wrote one longer record, which recovery then cut as a torn tail: synced acks were undone.
  test('anAckOfMoreRangesThanOneRecordHoldsSurvivesACrash', async () => {
    const fs = new CrashFileSystem({ seed: 1 });
    // The bound is lowered for this store (writer and reader alike) so the split is exercised
    // with a few items instead of 2^21.
    const options = { fs, preallocate: false, maxRangesPerRecord: 4 } as LogStoreOptions;
    const store = await LogStore.open('/q', options);
    await store.open();
    const n = 40;
    await store.append(
      Array.from({ length: n }, (_, i) => ({ seq: i + 1, bytes: new Uint8Array([i]) })),
      true,
    );
    const odd = Array.from({ length: n / 2 }, (_, i) => 2 * i + 1); // 20 holes -> 20 ranges
    await store.ack(odd, true);
    const after = fs.crash(); // power loss: only what was synced survives
    const reopened = await LogStore.open('/q', { ...options, fs: after });
    const { count } = await reopened.open();
    expect(reopened.recovery.tornBytes).toBe(0);
    expect(count).toBe(n / 2);
    expect(reopened.read(all).map((i) => i.seq)).toEqual(odd.map((s) => s + 1));
    await reopened.close();
  });

  test('anAckSplitIntoSeveralRecordsIsWrittenWithOneWrite', async () => {
    const fs = new CrashFileSystem({ seed: 1 });
    const options = { fs, preallocate: false, maxRangesPerRecord: 4 } as LogStoreOptions;
    const store = await LogStore.open('/q', options);
    await store.open();
    await store.append(
      Array.from({ length: 20 }, (_, i) => ({ seq: i + 1, bytes: new Uint8Array([i]) })),
      true,
    );
    const start = fs.traceLength;
    await store.ack([1, 3, 5, 7, 9, 11, 13, 15, 17], true); // 9 ranges -> 3 records
    const writes = fs.trace().filter((e) => e.index >= start && e.kind === 'write' && e.path.includes('cursor.pqc'));
    expect(writes).toHaveLength(1);
    expect(writes[0]!.length).toBe(3 * FRAME_HEADER_BYTES + 9 * RANGE_BYTES);
    const bytes = fs.readFile('/q/cursor.pqc');
    let at = store.inspect().cursorBytes - writes[0]!.length!;
    const payloads: number[] = [];
    for (let k = 0; k < 3; k++) {
      expect(bytes[at + 16]).toBe(RECORD_ACK);
      const len = readU32(bytes, at + 4);
      payloads.push(len / RANGE_BYTES);
      at += FRAME_HEADER_BYTES + len;
    }
    expect(payloads).toEqual([4, 4, 1]);
    await store.close();
  });

  // A checkpoint with more ranges than MAX_RANGES_PER_RECORD was written but refused at open.
  test('aCheckpointWithMoreRangesThanOneRecordHoldsDecodes', () => {
    const acks = new AckSet(1);
    const n = MAX_RANGES_PER_RECORD + 1;
    for (let i = 0; i < n; i++) {
      acks.starts.push(2 + 2 * i);
      acks.ends.push(3 + 2 * i);
    }
    acks.ackedAbove = n;
    const nextSeq = 3 + 2 * n;
    const buf = encodeCheckpoint(acks, nextSeq, 0);
    expect(buf.length).toBe(CURSOR_HEADER_BYTES + n * RANGE_BYTES);
    const h = decodeCheckpointHeader(buf.subarray(0, CURSOR_HEADER_BYTES), buf.length);
    expect('kind' in h).toBe(false);
    const decoded = decodeCheckpointBody(buf, h as Exclude<typeof h, { kind: string }>);
    expect('kind' in decoded).toBe(false);
    expect((decoded as AckSet).starts.length).toBe(n);
    // The bound that remains is the file: a count that runs past it is still refused.
    const short = decodeCheckpointHeader(buf.subarray(0, CURSOR_HEADER_BYTES), buf.length - 1);
    expect(short).toMatchObject({ kind: 'corrupt' });
  });
});

describe('the pid lock (no fs-ext)', () => {
  // The pid lock whether or not fs-ext is installed.
  const pidFs = createNodeFileSystem('pidfile');

  // A container restarts node with the same pid every time (often 1): a LOCK left by a killed
  // previous incarnation holds our own pid and was taken for a live holder forever.
  test('aStaleLockHoldingOurOwnPidIsTakenOver', async () => {
    const dir = freshDir();
    const { store } = await openStore(dir, { fs: pidFs });
    await store.append(items(1, ['kept']), true);
    await store.close();
    nodeFs.writeFileSync(join(dir, 'LOCK'), `${process.pid}\n`);
    const { store: again } = await openStore(dir, { fs: pidFs });
    expect(readAllTexts(again)).toEqual(['kept']);
    // The lock is really held: a second lock attempt of this process on the same file is refused.
    expect(() => pidFileLock(join(dir, 'LOCK'))).toThrow(/held/);
    await again.close();
    expect(nodeFs.existsSync(join(dir, 'LOCK'))).toBe(false);
  });

  // Two processes that both saw the same stale LOCK both replaced it and both read their own pid
  // back (the second rename landing between the first one's rename and read-back). Replayed here
  // deterministically: process B runs its whole takeover right after A has seen the stale holder.
  test('twoProcessesTakingOverOneStaleLockNeverBothHoldIt', () => {
    const dir = freshDir();
    nodeFs.mkdirSync(dir, { recursive: true });
    const lockPath = join(dir, 'LOCK');
    nodeFs.writeFileSync(lockPath, '4000000\n'); // a dead pid
    const live = new Set([111, 222]);
    const isAlive = (pid: number): boolean => live.has(pid);
    let b: LockHandle | Error | null = null;
    const tryLock = (env: PidLockEnv): LockHandle | Error => {
      try {
        return pidFileLock(lockPath, env);
      } catch (e) {
        return e as Error;
      }
    };
    const a = tryLock({
      pid: 111,
      isAlive,
      afterStaleSeen: () => {
        if (b === null) b = tryLock({ pid: 222, isAlive });
      },
    });
    const held = [a, b].filter((x) => x !== null && !(x instanceof Error));
    expect(held).toHaveLength(1);
    const refused = [a, b].find((x) => x instanceof Error) as (Error & { code?: string }) | undefined;
    expect(refused?.code).toBe('ELOCKED');
    // The file names the one holder.
    const holderPid = Number.parseInt(nodeFs.readFileSync(lockPath, 'utf8'), 10);
    expect(held[0] === a ? 111 : 222).toBe(holderPid);
    // No helper files are left behind.
    expect(nodeFs.readdirSync(dir).sort()).toEqual(['LOCK']);
    for (const h of held) (h as LockHandle).release();
    expect(nodeFs.readdirSync(dir)).toEqual([]);
  });
});

/** Records every close of a descriptor that is not open (a double close would close someone else's fd). */
class FdCheckingFs extends WrappedFs {
  readonly openFds = new Set<number>();
  readonly badCloses: number[] = [];
  failNextCreate: string | null = null;
  override open(p: string, mode: 'read' | 'readWrite' | 'create', fm?: number): number {
    if (mode === 'create' && this.failNextCreate !== null && p.endsWith('.log')) {
      const code = this.failNextCreate;
      this.failNextCreate = null;
      throw errno(code);
    }
    const fd = super.open(p, mode, fm);
    this.openFds.add(fd);
    return fd;
  }
  override close(fd: number): void {
    if (!this.openFds.delete(fd)) this.badCloses.push(fd);
    super.close(fd);
  }
}

describe('descriptors', () => {
  // A transient EMFILE while a roll created the next segment failed the store, but `writeFd` still
  // named the old segment's fd, which the roll had already closed: close() closed that number
  // again, by then another store's active segment.
  test('aFailedSegmentCreationDuringARollClosesNoDescriptorTwice', async () => {
    const fs = new FdCheckingFs();
    const { store } = await openStore(freshDir(), { fs, segmentBytes: 256, preallocate: false });
    const big = new Uint8Array(100);
    await store.append([{ seq: 1, bytes: big }], true);
    fs.failNextCreate = 'EMFILE';
    await expect(
      store.append(
        [
          { seq: 2, bytes: big },
          { seq: 3, bytes: big },
        ],
        true,
      ),
    ).rejects.toMatchObject({ code: 'ERR_STORE_FAILED' });
    await store.close().catch(() => undefined);
    expect(fs.badCloses).toEqual([]);
    expect([...fs.openFds]).toEqual([]);
  });

  test('aFailedHeaderWriteDuringARollLeaksNoDescriptor', async () => {
    const fs = new FdCheckingFs();
    const { store } = await openStore(freshDir(), { fs, segmentBytes: 256, preallocate: false });
    const big = new Uint8Array(100);
    await store.append([{ seq: 1, bytes: big }], true);
    fs.onWrite = (_fd, length, position) => (position === 0 && length === 32 ? errno('EIO') : null);
    await expect(
      store.append(
        [
          { seq: 2, bytes: big },
          { seq: 3, bytes: big },
        ],
        true,
      ),
    ).rejects.toMatchObject({ code: 'ERR_STORE_FAILED' });
    fs.onWrite = null;
    await store.close().catch(() => undefined);
    expect(fs.badCloses).toEqual([]);
    expect([...fs.openFds]).toEqual([]);
  });
});

describe('reads during a roll', () => {
  // The reader met the SEAL frame of the active segment while the roll's fdatasync was pending
  // (in-memory seal not set yet), or of the last segment before the next one existed, and
  // reported ERR_CORRUPT on healthy data.
  test('aReadThatMeetsTheSealOfARollInProgressIsCaughtUp', async () => {
    const fs = new CrashFileSystem({ seed: 1 });
    const options = { fs, segmentBytes: 460, tailCacheBytes: 0 };
    const p = (s: number): Uint8Array => new Uint8Array(20).fill(s);
    const first = await LogStore.open('/q', options);
    await first.open();
    for (let s = 1; s <= 10; s++) await first.append([{ seq: s, bytes: p(s) }], true);
    await first.ack([6, 7, 8, 9, 10], true);
    const fs2 = fs.processCrash();
    const store = await LogStore.open('/q', { ...options, fs: fs2 });
    const r = await store.open();
    expect(store.read({ after: 0, before: r.nextSeq, limit: 5 }).map((i) => i.seq)).toEqual([1, 2, 3, 4, 5]);
    const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));
    fs2.pauseSyncs(); // hold the roll's seal fdatasync
    const pending = store.append(
      [
        { seq: 11, bytes: p(11) },
        { seq: 12, bytes: p(12) },
      ],
      true,
    );
    await turn();
    expect(fs2.pausedSyncCount).toBeGreaterThan(0);
    expect(store.read({ after: 5, before: 11, limit: 5 })).toEqual([]);
    fs2.resumeSyncs();
    await turn();
    fs2.pauseSyncs(); // now inside the creation of the next segment
    await turn();
    expect(store.inspect().segments.length).toBe(1);
    expect(store.inspect().segments[0]!.sealed).toBe(true);
    expect(store.read({ after: 5, before: 11, limit: 5 })).toEqual([]);
    while (fs2.pausedSyncCount > 0) {
      fs2.resumeSyncs();
      await turn();
    }
    fs2.resumeSyncs();
    await pending;
    expect(store.read({ after: 5, before: 13, limit: 5 }).map((i) => i.seq)).toEqual([11, 12]);
    expect(store.read({ after: 0, before: 13, limit: 10 }).map((i) => i.seq)).toEqual([1, 2, 3, 4, 5, 11, 12]);
    await store.close();
  });
});

describe('a failed open changes nothing', () => {
  // The lock was taken before the foreign-file check: opening a LevelDB directory (empty LOCK)
  // took its LOCK over and the release deleted it.
  test('openingADirectoryThatIsNotAStoreLeavesItsLockFileAlone', async () => {
    const dir = freshDir();
    nodeFs.mkdirSync(dir, { recursive: true });
    nodeFs.writeFileSync(join(dir, 'LOCK'), '');
    nodeFs.writeFileSync(join(dir, 'CURRENT'), 'MANIFEST-000001\n');
    nodeFs.writeFileSync(join(dir, '000003.log'), 'x');
    const before = nodeFs.statSync(join(dir, 'LOCK'));
    await expect(LogStore.open(dir)).rejects.toMatchObject({ name: 'OpenError', code: 'ERR_STORE' });
    const after = nodeFs.statSync(join(dir, 'LOCK'), { throwIfNoEntry: false });
    expect(after?.ino).toBe(before.ino);
    expect(after?.size).toBe(0);
    expect(nodeFs.readdirSync(dir).sort()).toEqual(['000003.log', 'CURRENT', 'LOCK']);
  });
});

describe('fsyncgate (F5) then close, reopen in the same OS, power loss', () => {
  // After a failed fdatasync the instance fails; reopening in the same OS read the failed batch
  // back from the page cache (clean there, but not on disk), "fsynced the recovered tail" (nothing
  // dirty, so nothing written) and wrote a checkpoint claiming it durable. A power loss then lost
  // it under later acknowledged appends: false ERR_CORRUPT, or lost data.
  test('aTailThatAFailedSyncLeftInThePageCacheIsMadeDurableAtReopen', async () => {
    const outcomes: string[] = [];
    const p = (s: number): Uint8Array => new Uint8Array(16).fill(s);
    for (let seed = 1; seed <= 24; seed++) {
      const fs = new CrashFileSystem({ seed });
      const options = { fs, segmentBytes: 1 << 20, tailCacheBytes: 0, preallocate: seed % 2 === 0 };
      let store = await LogStore.open('/q', options);
      await store.open();
      for (let s = 1; s <= 5; s++) await store.append([{ seq: s, bytes: p(s) }], true);
      const fault = fs.inject({ op: 'fdatasync', code: 'EIO' });
      await expect(
        store.append(
          [
            { seq: 6, bytes: p(6) },
            { seq: 7, bytes: p(7) },
          ],
          true,
        ),
      ).rejects.toMatchObject({ code: 'ERR_STORE_FAILED' });
      fault.remove();
      await store.close().catch(() => undefined);
      store = await LogStore.open('/q', options); // same OS: the page cache still holds 6 and 7
      const { nextSeq: n } = await store.open();
      await store.append(
        [
          { seq: n, bytes: p(n) },
          { seq: n + 1, bytes: p(n + 1) },
        ],
        true,
      );
      await store.close();
      const after = fs.crash(); // power loss
      try {
        const s3 = await LogStore.open('/q', { ...options, fs: after });
        await s3.open();
        const seqs = s3.read(all).map((i) => i.seq);
        await s3.close();
        if (!(seqs.includes(n) && seqs.includes(n + 1))) outcomes.push(`seed ${seed}: lost ${n}, ${n + 1} (read ${seqs.join(',')})`);
      } catch (e) {
        outcomes.push(`seed ${seed}: ${(e as { code?: string }).code} ${(e as Error).message}`);
      }
    }
    expect(outcomes).toEqual([]);
  });
});

describe('the resync search is bounded', () => {
  // A damaged active segment with a plausible frame header every 20 bytes, each claiming a length
  // that runs to EOF with a wrong CRC: the resync search hashed the rest of the file at every
  // candidate (quadratic: 4.7 s for 512 KiB). Bounded now by twice the file size.
  test('aHostileActiveSegmentOpensWithinABoundedNumberOfCrcBytes', async () => {
    const dir = freshDir();
    const { store } = await openStore(dir, { preallocate: false });
    await store.close();
    const seg = nodeFs.readdirSync(dir).find((n) => n.startsWith('seg-'))!;
    const header = nodeFs.readFileSync(join(dir, seg)).subarray(0, 32);
    const size = 512 * 1024;
    const buf = Buffer.alloc(size, 0x55);
    header.copy(buf, 0);
    for (let pos = 32, i = 0; pos + 20 <= size; pos += 20, i++) {
      buf.writeUInt32LE(0xdeadbeef, pos); // a wrong CRC
      buf.writeUInt32LE(size - pos - 20, pos + 4); // a length that runs exactly to EOF
      buf.writeUInt32LE(1 + i, pos + 8); // seqs that increase
      buf.writeUInt32LE(0, pos + 12);
      buf[pos + 16] = 1; // ITEM
      buf[pos + 17] = 0;
      buf.writeUInt16LE(0, pos + 18);
    }
    nodeFs.writeFileSync(join(dir, seg), buf);
    resyncCounters.crcBytes = 0;
    await expect(LogStore.open(dir)).rejects.toMatchObject({ code: 'ERR_CORRUPT', message: /resync/ });
    expect(resyncCounters.crcBytes).toBeLessThanOrEqual(2 * size + 64 * 1024);
  });
});

describe('a full disk', () => {
  // With the disk full, close() could not write its checkpoint (tmp file: ENOSPC) and failed, and
  // every reopen failed too (the open checkpoint hit ENOSPC): the store was wedged until an
  // operator freed space by hand.
  test('aStoreOnAFullDiskClosesAndReopensWithItsExistingCursor', async () => {
    const fs = new CrashFileSystem({ seed: 1 });
    const options = { fs, segmentBytes: 4096, cursorCheckpointBytes: 256, tailCacheBytes: 0, preallocate: false };
    const store = await LogStore.open('/q', options);
    await store.open();
    const payload = new Uint8Array(100);
    for (let seq = 1; seq <= 100; seq++) await store.append([{ seq, bytes: payload }], true);
    await store.ack([1, 2], true);
    await store.settled();
    fs.setDiskBytesMax(fs.usedBytes() + 50); // room for a few ACK records, not for a checkpoint
    await expect(store.append([{ seq: 101, bytes: payload }], true)).rejects.toMatchObject({ code: 'ERR_STORE_FULL' });
    await store.ack([3], true);
    await store.close();
    const again = await LogStore.open('/q', options);
    const { count, nextSeq } = await again.open();
    expect({ count, nextSeq }).toEqual({ count: 97, nextSeq: 101 });
    expect(again.read({ after: 0, before: 101, limit: 3 }).map((i) => i.seq)).toEqual([4, 5, 6]);
    await again.close();
    // Nothing was lost or invented across a power loss either.
    const after = fs.crash();
    const third = await LogStore.open('/q', { ...options, fs: after });
    expect((await third.open()).count).toBe(97);
    await third.close();
  });
});

describe('two syncs of one file in flight together', () => {
  afterAll(cleanupDirs);

  // Of two fsyncs of one file running at once, Linux tells only one of a writeback error; the
  // other returns success. Here the first fdatasync fails late and the second succeeds at once.
  test('aSyncThatSucceedsBesideOneThatFailsReportsTheFailure', async () => {
    const fs = new WrappedFs();
    const dir = freshDir();
    const { store, nextSeq: s } = await openStore(dir, { fs, preallocate: false });
    let calls = 0;
    fs.fdatasync = (fd: number) => {
      calls++;
      if (calls === 1) return new Promise<void>((_, reject) => setTimeout(() => reject(errno('EIO')), 20));
      return fs.inner.fdatasync(fd);
    };
    const first = store.append(items(s, ['a']), true);
    const second = store.append(items(s + 1, ['b']), true);
    const outcomes = await Promise.allSettled([first, second]);
    expect(outcomes.map((o) => o.status)).toEqual(['rejected', 'rejected']);
    expect((outcomes[1] as PromiseRejectedResult).reason).toMatchObject({ code: 'ERR_STORE_FAILED' });
    await store.close();
  });
});
