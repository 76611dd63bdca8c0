/**
 * LogStore and `features.scheduling` (FORMAT.md §3.1, §8): every item keeps its priority and
 * not-before time through reads from disk, reopen, compaction and salvage; plain items are written
 * exactly as before, so a store that never schedules keeps version-1 segments; `scheduledFrom`
 * comes from the segment headers; damage in a scheduled record is corruption as in a plain one.
 */
import * as fs from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, test } from 'vitest';
import {
  FRAME_HEADER_BYTES,
  FRAME_OFF_META_BYTES,
  RECORD_ITEM,
  SEG_OFF_VERSION,
  SEGMENT_HEADER_BYTES,
  SEGMENT_VERSION_PLAIN,
  SEGMENT_VERSION_SCHEDULED,
  readU16,
  readU32,
} from '../../src/log/format.js';
import { encodeFrame } from '../../src/log/frame.js';
import { encodeSegmentHeader } from '../../src/log/segment.js';
import { LogStore, salvageStore, verifyStore } from '../../src/log-store.js';
import { PRIORITY_MAX, PRIORITY_MIN, isScheduled, type StoredItem } from '../../src/store.js';
import { cleanupDirs, dec, enc, expectOpenError, fixCrc, flipByte, freshDir, hashDir, segFiles } from './helpers.js';
import type { LogStoreOptions } from '../../src/log-store.js';
import type { StoreRecovery } from '../../src/store.js';

afterEach(cleanupDirs);

const ALL = { after: 0, before: Number.MAX_SAFE_INTEGER, limit: 1_000_000 };
/** A not-before time far in the future, and one that needs every byte of the i64. */
const LATER = 4_102_444_800_000;

/** Open, and call the Store's open(): the store and everything it reported. */
async function openStore(dir: string, options?: LogStoreOptions): Promise<StoreRecovery & { store: LogStore }> {
  const store = await LogStore.open(dir, options);
  return { store, ...(await store.open()) };
}

/** Items from `first` on, given as `[text, priority, notBefore]`; zeros are left out, as the queue leaves them out. */
function batch(first: number, specs: readonly (readonly [string, number, number])[]): StoredItem[] {
  return specs.map(([text, priority, notBefore], i) => ({
    seq: first + i,
    bytes: enc(text),
    ...(priority !== 0 ? { priority } : {}),
    ...(notBefore !== 0 ? { notBefore } : {}),
  }));
}

/** What `read` returned, with absent fields as 0: `[seq, text, priority, notBefore]`. */
function shape(got: readonly StoredItem[]): [number, string, number, number][] {
  return got.map((i) => [i.seq, dec(i.bytes), i.priority ?? 0, i.notBefore ?? 0]);
}

function expected(items: readonly StoredItem[]): [number, string, number, number][] {
  return items.map((i) => [i.seq, dec(i.bytes), i.priority ?? 0, i.notBefore ?? 0]);
}

function segmentVersion(path: string): number {
  return readU16(fs.readFileSync(path), SEG_OFF_VERSION);
}

const MIXED: readonly (readonly [string, number, number])[] = [
  ['plain', 0, 0],
  ['top', PRIORITY_MAX, 0],
  ['bottom', PRIORITY_MIN, 0],
  ['later', 0, LATER],
  ['both', -1, Number.MAX_SAFE_INTEGER],
  ['before the epoch', 5, -Number.MAX_SAFE_INTEGER],
  ['plain again', 0, 0],
];

describe('scheduled items', () => {
  test('scheduledAndPlainItemsReadBackExactlyFromCacheDiskAndReopen', async () => {
    const dir = freshDir();
    const { store } = await openStore(dir, { tailCacheBytes: 0 });
    const items = batch(1, MIXED);
    await store.append(items.slice(0, 3), true);
    await store.append(items.slice(3), true);
    // tailCacheBytes 0: every read decodes the frames on disk.
    const got = store.read(ALL);
    expect(shape(got)).toEqual(expected(items));
    // Plain items carry no fields at all; scheduled ones only their non-zero ones.
    expect(Object.keys(got[0]!).sort()).toEqual(['bytes', 'seq']);
    expect(Object.keys(got[1]!).sort()).toEqual(['bytes', 'priority', 'seq']);
    expect(Object.keys(got[3]!).sort()).toEqual(['bytes', 'notBefore', 'seq']);
    await store.close();
    const again = await openStore(dir);
    expect(shape(again.store.read(ALL))).toEqual(expected(items));
    expect(again.store.read(ALL).map(isScheduled)).toEqual([false, true, true, true, true, true, false]);
    await again.store.close();
  });

  test('theTailCacheReturnsTheItemsAsAppended', async () => {
    const dir = freshDir();
    const { store } = await openStore(dir);
    const items = batch(1, MIXED);
    await store.append(items, false);
    expect(shape(store.read(ALL))).toEqual(expected(items));
    await store.close();
  });

  test('invalidSchedulingFieldsRejectWithTypedErrorsAndChangeNothing', async () => {
    const dir = freshDir();
    const { store } = await openStore(dir);
    await store.append(batch(1, [['a', 0, 0]]), true);
    const before = hashDir(dir);
    const bad: [Partial<StoredItem>, ErrorConstructor][] = [
      [{ priority: PRIORITY_MAX + 1 }, RangeError],
      [{ priority: PRIORITY_MIN - 1 }, RangeError],
      [{ priority: 1.5 }, RangeError],
      [{ priority: '1' as unknown as number }, TypeError],
      [{ notBefore: 2 ** 53 }, RangeError],
      [{ notBefore: Number.NaN }, RangeError],
      [{ notBefore: 1n as unknown as number }, TypeError],
    ];
    for (const [fields, type] of bad) {
      const items: StoredItem[] = [{ seq: 2, bytes: enc('ok') }, { seq: 3, bytes: enc('bad'), ...fields }];
      await expect(store.append(items, true), JSON.stringify(fields, (_k, v: unknown) => (typeof v === 'bigint' ? `${v}n` : v))).rejects.toThrow(type);
    }
    expect(hashDir(dir)).toEqual(before);
    // The store still works, and seq 2 was never taken.
    await store.append(batch(2, [['b', 3, 0]]), true);
    expect(shape(store.read(ALL))).toEqual([
      [1, 'a', 0, 0],
      [2, 'b', 3, 0],
    ]);
    await store.close();
  });
});

describe('segment versions and scheduledFrom', () => {
  test('aPlainStoreWritesVersion1SegmentsByteForByteAsBefore', async () => {
    const dir = freshDir();
    const { store, scheduledFrom } = await openStore(dir);
    expect(scheduledFrom).toBe(1);
    await store.append(batch(1, [['hello', 0, 0], ['hi', 0, 0]]), true);
    await store.close();
    // Header and frames exactly as FORMAT.md §9's example (before its SEAL): version 1, no metadata.
    const want = new Uint8Array(SEGMENT_HEADER_BYTES + 2 * FRAME_HEADER_BYTES + 7);
    want.set(encodeSegmentHeader({ flags: 0, baseSeq: 1, replacesEndSeq: 0 }), 0);
    let at = encodeFrame(want, SEGMENT_HEADER_BYTES, 1, RECORD_ITEM, enc('hello'));
    at = encodeFrame(want, at, 2, RECORD_ITEM, enc('hi'));
    expect(at).toBe(want.length);
    expect(Buffer.from(fs.readFileSync(join(dir, segFiles(dir)[0]!))).equals(Buffer.from(want))).toBe(true);
    const again = await openStore(dir);
    expect(again.scheduledFrom).toBe(3);
    await again.store.close();
  });

  test('aScheduledItemInANewStoreReplacesItsEmptyVersion1Segment', async () => {
    const dir = freshDir();
    const { store } = await openStore(dir);
    expect(segmentVersion(join(dir, segFiles(dir)[0]!))).toBe(SEGMENT_VERSION_PLAIN);
    await store.append(batch(1, [['first', 2, 0]]), true);
    expect(segFiles(dir)).toEqual(['seg-00000000000000000001.log']);
    expect(segmentVersion(join(dir, segFiles(dir)[0]!))).toBe(SEGMENT_VERSION_SCHEDULED);
    expect(fs.readdirSync(dir).filter((n) => n.endsWith('.tmp'))).toEqual([]);
    await store.append(batch(2, [['second', 0, 0]]), true);
    expect(shape(store.read(ALL))).toEqual([
      [1, 'first', 2, 0],
      [2, 'second', 0, 0],
    ]);
    await store.close();
    const again = await openStore(dir);
    expect(again.scheduledFrom).toBe(1);
    expect(shape(again.store.read(ALL))[0]).toEqual([1, 'first', 2, 0]);
    await again.store.close();
  });

  test('theFirstScheduledItemRollsToAVersion2SegmentThatStartsAtIt', async () => {
    const dir = freshDir();
    const { store } = await openStore(dir);
    await store.append(batch(1, [['a', 0, 0], ['b', 0, 0]]), true);
    // A batch that starts plain: the whole batch goes into the new segment.
    await store.append(batch(3, [['c', 0, 0], ['d', 9, 0]]), true);
    const files = segFiles(dir);
    expect(files).toEqual(['seg-00000000000000000001.log', 'seg-00000000000000000003.log']);
    expect(files.map((f) => segmentVersion(join(dir, f)))).toEqual([SEGMENT_VERSION_PLAIN, SEGMENT_VERSION_SCHEDULED]);
    expect(store.inspect().segments.map((s) => s.version)).toEqual([SEGMENT_VERSION_PLAIN, SEGMENT_VERSION_SCHEDULED]);
    // A plain item in a version-2 segment is still a plain frame: no metadata.
    const b = fs.readFileSync(join(dir, files[1]!));
    expect(readU16(b, SEGMENT_HEADER_BYTES + FRAME_OFF_META_BYTES)).toBe(0);
    expect(readU32(b, SEGMENT_HEADER_BYTES + 4)).toBe(1);
    await store.close();
    const again = await openStore(dir);
    expect(again.scheduledFrom).toBe(3);
    expect(shape(again.store.read(ALL)).map((r) => r[2])).toEqual([0, 0, 0, 9]);
    await again.store.close();
  });

  test('scheduledFromIsNeverAboveTheLowestUnackedScheduledItemAndMayStayLower', async () => {
    const dir = freshDir();
    const opts = { segmentBytes: 256, autoCompact: false };
    const { store } = await openStore(dir, opts);
    let seq = 1;
    const append = async (n: number, priority: number): Promise<void> => {
      const items: StoredItem[] = [];
      for (let i = 0; i < n; i++) items.push({ seq: seq++, bytes: enc(`item ${seq}`), ...(priority !== 0 ? { priority } : {}) });
      await store.append(items, true);
    };
    await append(8, 0); // plain segments
    await append(1, 4); // seq 9: rolls to version 2
    await append(12, 0); // more segments; they stay version 2 while the previous held one
    await store.close();
    let r = await openStore(dir, opts);
    const from1 = r.scheduledFrom!;
    expect(from1).toBeLessThanOrEqual(9);
    expect(from1).toBeGreaterThan(1); // the plain backlog before it is not read again
    // Acking everything below it raises the bound to the low-water mark, still at most 9.
    await r.store.ack([1, 2, 3, 4, 5, 6, 7, 8], true);
    await r.store.close();
    r = await openStore(dir, opts);
    expect(r.scheduledFrom).toBe(9);
    // Acking the scheduled item itself: the bound may stay (the queue finds nothing to schedule).
    await r.store.ack([9], true);
    await r.store.close();
    r = await openStore(dir, opts);
    const from3 = r.scheduledFrom!;
    expect(from3).toBeGreaterThanOrEqual(10);
    expect(from3).toBeLessThanOrEqual(r.nextSeq);
    await r.store.close();
  });

  test('aStoreThatStopsSchedulingGoesBackToVersion1Segments', async () => {
    const dir = freshDir();
    const opts = { segmentBytes: 256, autoCompact: false };
    const { store } = await openStore(dir, opts);
    await store.append(batch(1, [['s', 1, 0]]), true);
    let seq = 2;
    for (let k = 0; k < 20; k++) await store.append(batch(seq++, [['plain item of some length', 0, 0]]), true);
    const versions = store.inspect().segments.map((s) => s.version);
    // The new store's empty first segment was replaced by a version-2 one for the scheduled item;
    // the segment after it stays version 2 (its predecessor held one), the rest are version 1.
    expect(versions.length).toBeGreaterThan(3);
    expect(versions.slice(0, 3)).toEqual([SEGMENT_VERSION_SCHEDULED, SEGMENT_VERSION_SCHEDULED, SEGMENT_VERSION_PLAIN]);
    expect(new Set(versions.slice(2))).toEqual(new Set([SEGMENT_VERSION_PLAIN]));
    expect(segFiles(dir).map((f) => segmentVersion(join(dir, f)))).toEqual(versions);
    await store.close();
  });
});
