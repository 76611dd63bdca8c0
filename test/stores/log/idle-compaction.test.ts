/**
 * The delayed compaction round (`compactDelayMs`): segments pinned by an old unacked item are
 * rewritten on an idle queue, without a `compact()` call; one run reads a bounded number of bytes;
 * the timer never keeps a process alive, `close()` cancels it, and its failures are the store's.
 * Time is a `ManualClock` given to the store: the tests move it, they never sleep.
 */
import * as fs from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, test } from 'vitest';
import { LogStore } from '../../../src/stores/log/log-store.js';
import { Builder, type Clock } from '../../../src/core/builder.js';
import { CrashFileSystem, ManualClock } from '../../../src/testing/index.js';
import { FRAME_HEADER_BYTES, SEAL_FRAME_BYTES, SEGMENT_HEADER_BYTES } from '../../../src/stores/log/engine/format.js';
import { distUrl, type Lines, runModule } from '../../support/child-process.js';
import { cleanupDirs, enc, freshDir, openStore, readAllSeqs, WrappedFs } from './helpers.js';

afterAll(cleanupDirs);

/** A child that did not exit by itself (the failure this file looks for) is ended here. */
const children: Lines[] = [];
afterEach(async () => {
  for (const c of children.splice(0)) await c.kill();
});

const DELAY_MS = 1000;

/** Bytes of every file in `dir`, as the disk holds them. */
function dirBytes(dir: string): number {
  let bytes = 0;
  for (const n of fs.readdirSync(dir)) bytes += fs.statSync(join(dir, n)).size;
  return bytes;
}

function segmentBytes(store: LogStore): number {
  return store.inspect().segments.reduce((a, s) => a + s.bytes, 0);
}

const body = (i: number): string => `item-${i}-`.padEnd(128, 'x');

describe('an idle queue gives pinned segments back', () => {
  for (const pin of ['held reserved', 'delayed an hour'] as const) {
    test(`pinnedSegmentsOfAnIdleQueueAreRewrittenWithoutACompactCall (${pin})`, async () => {
      const dir = freshDir();
      const clock = new ManualClock();
      const store = await LogStore.open(dir, { segmentBytes: 4096, clock });
      const [tx, rx] = await new Builder(store).clock(clock).open();
      let held: Awaited<ReturnType<typeof rx.reserve>> = null;
      if (pin === 'held reserved') {
        await tx.push('the old item');
        held = await rx.reserve();
        expect(held!.seq).toBe(1);
      } else {
        await tx.push('the old item', { delayMs: 3_600_000 });
      }
      for (let i = 0; i < 3000; i++) await tx.push(body(i));
      for (let i = 0; i < 3000; i++) {
        const item = await rx.reserve();
        expect(item!.seq).toBe(i + 2);
        await item!.ack();
      }
      await store.settled();
      // What the queue left before this round existed: every segment pinned by the old item.
      const before = store.inspect();
      expect(before.count).toBe(1);
      expect(before.segments.length).toBeGreaterThan(80);
      expect(segmentBytes(store)).toBeGreaterThan(400_000);

      clock.advance(DELAY_MS);
      await store.settled();

      const after = store.inspect();
      const pinnedFrame = FRAME_HEADER_BYTES + 64 + enc('the old item').length; // with its metadata, if any
      expect(after.segments.length).toBe(2);
      expect(after.segments[0]!.compacted).toBe(true);
      expect(after.segments[0]!.bytes).toBeLessThanOrEqual(SEGMENT_HEADER_BYTES + SEAL_FRAME_BYTES + pinnedFrame);
      expect(segmentBytes(store)).toBeLessThanOrEqual(4096 + SEGMENT_HEADER_BYTES + SEAL_FRAME_BYTES + pinnedFrame);
      // The whole directory: about one segment, what the pinned item needs, the checkpointed cursor.
      expect(dirBytes(dir)).toBeLessThan(2 * 4096);
      console.log(
        `[idle-compaction] ${pin}: ${before.segments.length} segments (${before.bytesOnDisk} B on disk) -> ${after.segments.length} (${dirBytes(dir)} B), no compact() call`,
      );
      expect(readAllSeqs(store)).toEqual([1]);

      if (held !== null) {
        expect(held.settled).toBe(false);
        await held.ack();
      } else {
        clock.advance(3_600_000);
        const late = rx.tryReserve();
        expect(late === null ? null : new TextDecoder().decode(late.bytes)).toBe('the old item');
        await late!.ack();
      }
      await rx.close();
      const { store: again, count } = await openStore(dir, { segmentBytes: 4096, clock: new ManualClock() });
      expect(count).toBe(0);
      await again.close();
    }, 60_000);
  }

  test('aDelayedRunReadsAtMostItsBudgetAndArmsTheNextRunForTheRest', async () => {
    const dir = freshDir();
    const clock = new ManualClock();
    const wfs = new WrappedFs();
    const budget = 2048;
    const { store } = await openStore(dir, { segmentBytes: 512, preallocate: false, compactRunBytes: budget, clock, fs: wfs } as never);
    await store.append([{ seq: 1, bytes: enc('pinned') }], true);
    let seq = 2;
    for (let b = 0; b < 40; b++) {
      await store.append(
        Array.from({ length: 4 }, () => ({ seq: seq, bytes: enc(body(seq++).slice(0, 80)) })),
        false,
      );
    }
    await store.ack(
      Array.from({ length: seq - 2 }, (_, i) => i + 2),
      true,
    );
    await store.settled();
    let sealed = store.inspect().segments.filter((s) => s.sealed).length;
    expect(sealed).toBeGreaterThan(20);
    expect(clock.pendingTimers).toBe(1);
    let runs = 0;
    while (clock.pendingTimers > 0) {
      const readBefore = wfs.bytesRead;
      const run = store.inspect().segments.filter((s) => s.sealed);
      clock.advance(DELAY_MS);
      await store.settled();
      runs++;
      const now = store.inspect().segments.filter((s) => s.sealed).length;
      // Each run merges a prefix into one segment: at least two segments, no more than the budget.
      let allowed = 0;
      let taken = 0;
      for (const s of run) {
        if (taken >= 2 && allowed + s.bytes > budget) break;
        allowed += s.bytes;
        taken++;
      }
      expect(now, `run ${runs}`).toBe(sealed - taken + 1);
      expect(wfs.bytesRead - readBefore, `run ${runs}`).toBeLessThanOrEqual(allowed);
      sealed = now;
      expect(runs).toBeLessThan(40);
    }
    expect(runs).toBeGreaterThan(2);
    expect(sealed).toBe(1);
    expect(readAllSeqs(store)).toEqual([1]);
    await store.close();
  });

  test('aFirstSegmentLargerThanTheBudgetDoesNotStopTheRuns', async () => {
    const dir = freshDir();
    const clock = new ManualClock();
    const { store } = await openStore(dir, { segmentBytes: 512, preallocate: false, compactRunBytes: 1, clock } as never);
    await store.append([{ seq: 1, bytes: enc('pinned') }], true);
    let seq = 2;
    for (let b = 0; b < 12; b++)
      await store.append(
        Array.from({ length: 4 }, () => ({ seq, bytes: enc(body(seq++).slice(0, 80)) })),
        false,
      );
    await store.ack(
      Array.from({ length: seq - 2 }, (_, i) => i + 2),
      true,
    );
    await store.settled();
    const start = store.inspect().segments.filter((s) => s.sealed).length;
    for (let run = 1; clock.pendingTimers > 0; run++) {
      clock.advance(DELAY_MS);
      await store.settled();
      expect(store.inspect().segments.filter((s) => s.sealed).length).toBe(Math.max(1, start - run));
    }
    expect(store.inspect().segments.filter((s) => s.sealed).length).toBe(1);
    expect(readAllSeqs(store)).toEqual([1]);
    await store.close();
  });
});

describe('the delayed round timer', () => {
  async function pinnedStore(options: Record<string, unknown>): Promise<LogStore> {
    const { store } = await openStore(freshDir(), { segmentBytes: 512, preallocate: false, ...options } as never);
    await store.append([{ seq: 1, bytes: enc('pinned') }], true);
    for (let s = 2; s < 42; s += 4)
      await store.append(
        Array.from({ length: 4 }, (_, i) => ({ seq: s + i, bytes: enc(body(s + i).slice(0, 80)) })),
        false,
      );
    await store.ack(
      Array.from({ length: 40 }, (_, i) => i + 2),
      false,
    );
    return store;
  }

  test('theTimerIsUnrefdAndArmedOnceForManyAcks', async () => {
    const handles: { refed: boolean; cleared: boolean; ms: number }[] = [];
    const clock: Clock = {
      now: () => 0,
      setTimeout: (_fn, ms) => {
        const h = {
          refed: true,
          cleared: false,
          ms,
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
    const store = await pinnedStore({ clock, compactDelayMs: 2500 });
    await store.append([{ seq: 42, bytes: enc('more') }], false);
    await store.ack([42], false); // another ack: still one timer
    expect(handles.map((h) => [h.refed, h.cleared, h.ms])).toEqual([[false, false, 2500]]);
    await store.close();
    expect(handles.map((h) => h.cleared)).toEqual([true]);
  });

  test('closeCancelsTheDelayedRound', async () => {
    const clock = new ManualClock();
    const store = await pinnedStore({ clock });
    expect(clock.pendingTimers).toBe(1);
    const sealed = store.inspect().segments.length;
    await store.close();
    expect(clock.pendingTimers).toBe(0);
    expect(store.inspect().segments.length).toBe(sealed);
  });

  test('autoCompactFalseArmsNoTimer', async () => {
    const clock = new ManualClock();
    const store = await pinnedStore({ clock, autoCompact: false });
    expect(clock.pendingTimers).toBe(0);
    await store.close();
  });

  test('aStoreLeftOpenWithTheTimerArmedLetsItsProcessExit', async () => {
    // The delay is the longest there is: a timer that kept the process alive would hold it for
    // 24 days, and the test would time out instead of seeing the child exit.
    const dir = freshDir();
    const child = runModule(
      fs.mkdtempSync(join(dir, '..', 'child-')),
      'left-open.mjs',
      `
import { LogStore } from ${JSON.stringify(distUrl('index.js'))};
const store = await LogStore.open(process.argv[2], { segmentBytes: 512, preallocate: false, compactDelayMs: 2 ** 31 - 1 });
await store.open();
const enc = (s) => new TextEncoder().encode(s);
await store.append([{ seq: 1, bytes: enc('pinned') }], true);
for (let s = 2; s < 40; s++) await store.append([{ seq: s, bytes: enc('x'.repeat(80)) }], false);
await store.ack(Array.from({ length: 38 }, (_, i) => i + 2), false);
await store.settled();
console.log('sealed ' + store.inspect().segments.filter((s) => s.sealed).length);
`,
      [dir],
    );
    children.push(child);
    // 'close', not 'exit': 'exit' can come before the child's output is read.
    const code = await new Promise<number | null>((resolve) => child.child.on('close', resolve));
    expect(child.stderr).toBe('');
    expect(code).toBe(0);
    expect(Number(child.lines[0]!.split(' ')[1])).toBeGreaterThan(3);
  }, 30_000);

  test('delayedRoundOptionsAreValidated', async () => {
    const dir = freshDir();
    for (const bad of [-1, 1.5, 2 ** 31, Infinity, NaN])
      await expect(LogStore.open(dir, { compactDelayMs: bad })).rejects.toThrow(RangeError);
    await expect(LogStore.open(dir, { compactDelayMs: '5' as never })).rejects.toThrow(TypeError);
    await expect(LogStore.open(dir, { compactDelayMs: -1 })).rejects.toThrow(/`compactDelayMs`/);
    await expect(LogStore.open(dir, { clock: {} as never })).rejects.toThrow(TypeError);
    await expect(LogStore.open(dir, { clock: null as never })).rejects.toThrow(TypeError);
    expect(fs.existsSync(dir)).toBe(false); // invalid options create nothing
    const ok = await LogStore.open(dir, { compactDelayMs: 0, clock: new ManualClock() });
    await ok.close();
  });
});

describe('failures of the delayed round', () => {
  async function pinnedOnCrashDisk(fsys: CrashFileSystem, clock: ManualClock): Promise<LogStore> {
    const store = await LogStore.open('/q', { segmentBytes: 512, preallocate: false, fs: fsys, clock });
    await store.open();
    await store.append([{ seq: 1, bytes: enc('pinned') }], true);
    for (let s = 2; s < 42; s += 4)
      await store.append(
        Array.from({ length: 4 }, (_, i) => ({ seq: s + i, bytes: enc(body(s + i).slice(0, 80)) })),
        true,
      );
    await store.ack(
      Array.from({ length: 40 }, (_, i) => i + 2),
      true,
    );
    await store.settled();
    return store;
  }
  const isSegmentTmp = (c: { path: string }): boolean => /seg-\d+\.log\.tmp$/.test(c.path);

  test('anFsyncFailureInTheDelayedRoundFailsTheStore', async () => {
    const disk = new CrashFileSystem({ seed: 7 });
    const clock = new ManualClock();
    const store = await pinnedOnCrashDisk(disk, clock);
    const fault = disk.inject({ op: 'fsync', code: 'EIO', when: isSegmentTmp });
    clock.advance(DELAY_MS);
    await store.settled();
    expect(fault.firedCount).toBe(1);
    fault.remove();
    await expect(store.append([{ seq: 42, bytes: enc('late') }], true)).rejects.toMatchObject({ code: 'ERR_STORE_FAILED' });
    await expect(store.ack([1], true)).rejects.toMatchObject({ code: 'ERR_STORE_FAILED' });
    await store.close();
    const again = await LogStore.open('/q', { fs: disk, clock: new ManualClock() });
    await again.open();
    expect(readAllSeqs(again)).toEqual([1]);
    await again.close();
  });

  test('aFullDiskInTheDelayedRoundLosesNothingAndALaterRoundReclaims', async () => {
    const disk = new CrashFileSystem({ seed: 8 });
    const clock = new ManualClock();
    const store = await pinnedOnCrashDisk(disk, clock);
    const before = store.inspect().segments;
    const fault = disk.inject({ op: 'write', code: 'ENOSPC', when: isSegmentTmp });
    clock.advance(DELAY_MS);
    await store.settled();
    expect(fault.firedCount).toBe(1);
    expect(store.inspect().segments).toEqual(before);
    expect(disk.listFiles('/q').filter((f) => f.endsWith('.tmp'))).toEqual([]);
    // The store keeps working; the next ack arms the round again, and it reclaims the segments.
    await store.append([{ seq: 42, bytes: enc('late') }], true);
    await store.ack([42], false);
    expect(clock.pendingTimers).toBe(1);
    clock.advance(DELAY_MS);
    await store.settled();
    expect(store.inspect().segments.filter((s) => s.sealed).length).toBe(1);
    expect(readAllSeqs(store)).toEqual([1]);
    await store.close();
  });
});
