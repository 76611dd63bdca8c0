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
} from '../../../src/stores/log/engine/format.js';
import { encodeFrame } from '../../../src/stores/log/engine/frame.js';
import { encodeSegmentHeader } from '../../../src/stores/log/engine/segment.js';
import { LogStore, salvageStore, verifyStore } from '../../../src/stores/log/log-store.js';
import { isQueueError } from '../../../src/contract/errors.js';
import { PRIORITY_MAX, PRIORITY_MIN, isScheduled, type StoredItem } from '../../../src/contract/store.js';
import { WrappedFs, cleanupDirs, dec, enc, expectOpenError, fixCrc, flipByte, freshDir, hashDir, segFiles } from './helpers.js';
import type { LogStoreOptions } from '../../../src/stores/log/log-store.js';
import type { StoreRecovery } from '../../../src/contract/store.js';

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
  ['just after the epoch', 5, 1],
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
    const ro = await LogStore.open(dir, { readOnly: true });
    expect(shape(ro.read(ALL))).toEqual(expected(items));
    await ro.close();
  });

  test('theTailCacheReturnsTheItemsAsAppended', async () => {
    const dir = freshDir();
    const { store } = await openStore(dir);
    const items = batch(1, MIXED);
    await store.append(items, false);
    expect(shape(store.read(ALL))).toEqual(expected(items));
    await store.close();
  });

  test('invalidSchedulingFieldsRejectWithErrStoreAsEveryStoreDoesAndChangeNothing', async () => {
    const dir = freshDir();
    const { store } = await openStore(dir);
    await store.append(batch(1, [['a', 0, 0]]), true);
    const before = hashDir(dir);
    // The fields SqliteStore and LevelStore refuse too (src/contract/records/schedules.ts).
    const bad: Partial<StoredItem>[] = [
      { priority: PRIORITY_MAX + 1 },
      { priority: PRIORITY_MIN - 1 },
      { priority: 1.5 },
      { priority: '1' as unknown as number },
      { notBefore: -1 },
      { notBefore: -Number.MAX_SAFE_INTEGER },
      { notBefore: 2.5 },
      { notBefore: 2 ** 53 },
      { notBefore: Number.NaN },
      { notBefore: 1n as unknown as number },
    ];
    for (const fields of bad) {
      const items: StoredItem[] = [
        { seq: 2, bytes: enc('ok') },
        { seq: 3, bytes: enc('bad'), ...fields },
      ];
      const shown = JSON.stringify(fields, (_k, v: unknown) => (typeof v === 'bigint' ? `${v}n` : v));
      await expect(store.append(items, true), shown).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_STORE'));
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
    await store.append(
      batch(1, [
        ['hello', 0, 0],
        ['hi', 0, 0],
      ]),
      true,
    );
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
    await store.append(
      batch(1, [
        ['a', 0, 0],
        ['b', 0, 0],
      ]),
      true,
    );
    // A batch that starts plain: the whole batch goes into the new segment.
    await store.append(
      batch(3, [
        ['c', 0, 0],
        ['d', 9, 0],
      ]),
      true,
    );
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

  test('scheduledFromIsFoundWithoutReadingTheBacklog', async () => {
    // A plain backlog of many segments, then one scheduled item and more plain ones: open reads
    // what it read before (headers, seals, the active segment, the cursor), whatever the backlog.
    const measure = async (n: number): Promise<{ bytesRead: number; scheduledFrom: number }> => {
      const dir = freshDir();
      const opts = { segmentBytes: 64 * 1024 };
      const { store } = await openStore(dir, opts);
      const payload = new Uint8Array(128);
      for (let seq = 1; seq <= n; seq += 1000) {
        const items: StoredItem[] = [];
        for (let s = seq; s < seq + 1000 && s <= n; s++) items.push({ seq: s, bytes: payload });
        await store.append(items, false);
      }
      await store.append([{ seq: n + 1, bytes: payload, notBefore: LATER }], true);
      await store.close();
      const wfs = new WrappedFs();
      const again = await openStore(dir, { ...opts, fs: wfs });
      await again.store.close();
      return { bytesRead: wfs.bytesRead, scheduledFrom: again.scheduledFrom! };
    };
    const small = await measure(10);
    const big = await measure(30_000); // ~4.4 MB in ~70 segments
    expect(small.scheduledFrom).toBe(11);
    expect(big.scheduledFrom).toBe(30_001);
    expect(big.bytesRead).toBeLessThan(64 * 1024 + 100 * 128);
    expect(small.bytesRead).toBeLessThan(4096);
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

describe('compaction, salvage and verify', () => {
  /** Segments of 256 bytes: items 1..n, every third one scheduled, then acks of all but `keep`. */
  async function pinned(dir: string, n: number, keep: (seq: number) => boolean): Promise<{ store: LogStore; items: StoredItem[] }> {
    const { store } = await openStore(dir, { segmentBytes: 256, autoCompact: false });
    const items: StoredItem[] = [];
    for (let seq = 1; seq <= n; seq++) {
      const it: StoredItem = {
        seq,
        bytes: enc(`payload ${seq}`),
        ...(seq % 3 === 0 ? { priority: seq % 100, notBefore: LATER + seq } : {}),
      };
      items.push(it);
      await store.append([it], true);
    }
    const acked = items.map((i) => i.seq).filter((s) => !keep(s));
    if (acked.length > 0) await store.ack(acked, true);
    return { store, items: items.filter((i) => keep(i.seq)) };
  }

  test('compactionKeepsEveryFieldOfTheItemsItCopies', async () => {
    const dir = freshDir();
    const { store, items } = await pinned(dir, 40, (s) => s % 4 !== 1);
    const before = segFiles(dir).length;
    const result = await store.compact();
    expect(result.segmentsRewritten).toBeGreaterThan(0);
    expect(segFiles(dir).length).toBeLessThan(before);
    expect(shape(store.read(ALL))).toEqual(expected(items));
    const compacted = store.inspect().segments.filter((s) => s.compacted);
    expect(compacted.length).toBe(1);
    expect(compacted[0]!.version).toBe(SEGMENT_VERSION_SCHEDULED);
    expect(segmentVersion(join(dir, compacted[0]!.file))).toBe(SEGMENT_VERSION_SCHEDULED);
    await store.close();
    const again = await openStore(dir, { segmentBytes: 256, autoCompact: false });
    expect(shape(again.store.read(ALL))).toEqual(expected(items));
    expect(again.scheduledFrom).toBeLessThanOrEqual(Math.min(...items.filter(isScheduled).map((i) => i.seq)));
    await again.store.close();
  });

  test('compactionThatKeepsNoScheduledItemWritesAVersion1Segment', async () => {
    const dir = freshDir();
    // Only plain items stay unacked (every scheduled one, a multiple of 3, is acked).
    const { store, items } = await pinned(dir, 40, (s) => s % 3 !== 0 && s % 2 === 0);
    await store.compact();
    const segs = store.inspect().segments;
    const compacted = segs.filter((s) => s.compacted);
    expect(compacted.length).toBe(1);
    expect(compacted[0]!.version).toBe(SEGMENT_VERSION_PLAIN);
    expect(segmentVersion(join(dir, compacted[0]!.file))).toBe(SEGMENT_VERSION_PLAIN);
    expect(shape(store.read(ALL))).toEqual(expected(items));
    await store.close();
  });

  /**
   * Give the first ITEM frame of segment `path` the metadata area `meta` (and a valid CRC): no
   * writer puts one in a version-1 segment, where readers skip it whole.
   */
  function insertMetadata(path: string, meta: readonly number[]): void {
    const b = fs.readFileSync(path);
    const at = SEGMENT_HEADER_BYTES;
    expect(readU16(b, at + FRAME_OFF_META_BYTES)).toBe(0);
    const out = Buffer.concat([b.subarray(0, at + FRAME_HEADER_BYTES), Buffer.from(meta), b.subarray(at + FRAME_HEADER_BYTES)]);
    out.writeUInt16LE(meta.length, at + FRAME_OFF_META_BYTES);
    fs.writeFileSync(path, out);
    fixCrc(path, at);
  }

  test.each([
    ['a priority entry', [1, 1, 7]],
    ['a priority entry of the wrong length', [1, 2, 3, 0]],
  ])('compactionWritesAVersion1FrameWithMetadataPlainIntoAVersion2Segment (%s)', async (_what, meta) => {
    const dir = freshDir();
    const opts = { segmentBytes: 256, autoCompact: false };
    const { store } = await openStore(dir, opts);
    // Items 1..3 plain in the first (version-1) segment; item 4 scheduled, in a version-2 one; then enough to seal it.
    await store.append(
      batch(1, [
        ['one', 0, 0],
        ['two', 0, 0],
        ['three', 0, 0],
      ]),
      true,
    );
    await store.append(batch(4, [['four', 9, LATER]]), true);
    for (let seq = 5; seq <= 20; seq++) await store.append(batch(seq, [[`plain item ${seq}`, 0, 0]]), true);
    const segs = store.inspect().segments;
    expect(segs.slice(0, 2).map((s) => [s.version, s.sealed])).toEqual([
      [SEGMENT_VERSION_PLAIN, true],
      [SEGMENT_VERSION_SCHEDULED, true],
    ]);
    await store.close();
    insertMetadata(join(dir, segs[0]!.file), meta);

    const { store: again } = await openStore(dir, opts);
    // A version-1 segment's metadata is skipped whole: item 1 is plain before compaction.
    expect(shape(again.read(ALL)).slice(0, 1)).toEqual([[1, 'one', 0, 0]]);
    await again.ack([2, 3, ...Array.from({ length: 16 }, (_, k) => k + 5)], true);
    const result = await again.compact();
    expect(result.segmentsRewritten).toBeGreaterThan(1);
    const compacted = again.inspect().segments.filter((s) => s.compacted);
    expect(compacted.map((s) => s.version)).toEqual([SEGMENT_VERSION_SCHEDULED]);
    const want: [number, string, number, number][] = [
      [1, 'one', 0, 0],
      [4, 'four', 9, LATER],
    ];
    expect(shape(again.read(ALL))).toEqual(want);
    await again.close();

    // The copy is the plain frame version 1 writes, and the store is sound after a reopen.
    const seg = fs.readFileSync(join(dir, compacted[0]!.file));
    const plain = new Uint8Array(FRAME_HEADER_BYTES + 3);
    encodeFrame(plain, 0, 1, RECORD_ITEM, enc('one'));
    expect(Buffer.from(seg.subarray(SEGMENT_HEADER_BYTES, SEGMENT_HEADER_BYTES + plain.length)).equals(Buffer.from(plain))).toBe(true);
    expect(verifyStore(dir).problems).toEqual([]);
    const reopened = await openStore(dir, opts);
    expect(shape(reopened.store.read(ALL))).toEqual(want);
    await reopened.store.close();
  });

  test('salvageCopiesPriorityAndNotBefore', async () => {
    const dir = freshDir();
    const { store, items } = await pinned(dir, 20, (s) => s !== 4);
    await store.close();
    const dst = freshDir();
    const result = await salvageStore(dir, dst);
    expect(result.copied).toBe(items.length);
    const { store: copy } = await openStore(dst);
    const renumbered = items.map((it, k) => ({ ...it, seq: k + 1 }));
    expect(shape(copy.read(ALL))).toEqual(expected(renumbered));
    await copy.close();
  });

  test('verifyReadsVersion2SegmentsWithoutProblems', async () => {
    const dir = freshDir();
    const { store } = await pinned(dir, 20, () => true);
    await store.close();
    const report = verifyStore(dir);
    expect(report.problems).toEqual([]);
    expect(report.records).toBe(20);
  });
});

describe('damage in scheduled records', () => {
  /** Items 1 'a' (plain), 2 'b' (priority 7, not-before LATER), 3 'c' (plain), in one new store's first segment. */
  async function small(dir: string): Promise<string> {
    const { store } = await openStore(dir);
    await store.append(
      batch(1, [
        ['a', 0, 0],
        ['b', 7, LATER],
        ['c', 0, 0],
      ]),
      true,
    );
    await store.close();
    return join(dir, segFiles(dir)[0]!);
  }
  /** Offsets in the segment: item 2's frame follows item 1's (a header and one byte). */
  const FRAME2 = SEGMENT_HEADER_BYTES + FRAME_HEADER_BYTES + 1;
  const META2 = FRAME2 + FRAME_HEADER_BYTES;

  test('crcMismatchInAScheduledRecordFollowedByValidDataRejects', async () => {
    const dir = freshDir();
    const seg = await small(dir);
    flipByte(seg, META2 + 2); // the priority's value
    const e = await expectOpenError(dir, 'ERR_CORRUPT');
    expect(e.offset).toBe(FRAME2);
  });

  test('malformedMetadataWithAValidCrcRejects', async () => {
    const dir = freshDir();
    const seg = await small(dir);
    const b = fs.readFileSync(seg);
    b[META2 + 1] = 2; // the priority entry now claims 2 bytes: a known tag with the wrong length
    fs.writeFileSync(seg, b);
    fixCrc(seg, FRAME2);
    const e = await expectOpenError(dir, 'ERR_CORRUPT');
    expect(e.offset).toBe(FRAME2);
    expect(e.message).toMatch(/row 8/);
  });

  test('aNotBeforeOutsideTheSafeRangeWithAValidCrcRejects', async () => {
    const dir = freshDir();
    const seg = await small(dir);
    const b = fs.readFileSync(seg);
    // Entries: priority (2 + 1 bytes), then not-before (2 + 8): set its top byte to 0x7f.
    b[META2 + 3 + 2 + 7] = 0x7f;
    fs.writeFileSync(seg, b);
    fixCrc(seg, FRAME2);
    await expectOpenError(dir, 'ERR_CORRUPT');
  });

  test('aNegativeNotBeforeWithAValidCrcRejects', async () => {
    const dir = freshDir();
    const seg = await small(dir);
    const b = fs.readFileSync(seg);
    // Not-before -1: all eight bytes of the i64 set. A safe integer, but no store accepts it.
    b.fill(0xff, META2 + 3 + 2, META2 + 3 + 2 + 8);
    fs.writeFileSync(seg, b);
    fixCrc(seg, FRAME2);
    const e = await expectOpenError(dir, 'ERR_CORRUPT');
    expect(e.offset).toBe(FRAME2);
    expect(e.message).toMatch(/row 8/);
  });

  test('crcMismatchInASealedScheduledRecordIsCorruptionOnRead', async () => {
    const dir = freshDir();
    const { store } = await openStore(dir, { segmentBytes: 256, autoCompact: false });
    for (let seq = 1; seq <= 12; seq++) await store.append([{ seq, bytes: enc(`item number ${seq}`), priority: seq }], true);
    await store.close();
    const first = join(dir, segFiles(dir)[0]!);
    expect(segFiles(dir).length).toBeGreaterThan(1);
    flipByte(first, SEGMENT_HEADER_BYTES + FRAME_HEADER_BYTES + 2); // item 1's priority
    const { store: again } = await openStore(dir, { segmentBytes: 256, autoCompact: false });
    expect(() => again.read(ALL)).toThrow(expect.objectContaining({ code: 'ERR_CORRUPT', offset: SEGMENT_HEADER_BYTES }));
    await again.close();
    const report = verifyStore(dir);
    expect(report.problems.some((p) => p.file === first && p.offset === SEGMENT_HEADER_BYTES)).toBe(true);
  });
});

describe('stores written before scheduling', () => {
  /** Written by the release before this format change (commit d043820): 60 items in two version-1 segments, 2, 5 and 30 acked, closed cleanly. */
  const FIXTURE = join(import.meta.dirname, 'fixtures', 'segment-v1-store');

  function copyFixture(): string {
    const dir = freshDir();
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    for (const n of fs.readdirSync(FIXTURE)) fs.copyFileSync(join(FIXTURE, n), join(dir, n));
    return dir;
  }

  test('anOldStoreOpensUnchangedAndKeepsVersion1Segments', async () => {
    const dir = copyFixture();
    const original = hashDir(dir);
    const ro = await LogStore.open(dir, { readOnly: true });
    const seen = ro.read(ALL);
    await ro.close();
    expect(hashDir(dir)).toEqual(original);
    expect(seen.length).toBe(57);
    expect(seen.every((i) => !isScheduled(i) && i.priority === undefined && i.notBefore === undefined)).toBe(true);
    const { store, scheduledFrom, nextSeq } = await openStore(dir);
    expect(nextSeq).toBe(61);
    expect(scheduledFrom).toBe(nextSeq);
    expect(shape(store.read(ALL))).toEqual(shape(seen));
    await store.close();
    // Every segment byte for byte as the old release wrote it (the cursor gets its fresh checkpoint, as it always did).
    const after = hashDir(dir);
    for (const name of segFiles(FIXTURE)) expect(after[name], name).toBe(original[name]);
    // Plain items appended by this version keep the store in the old format.
    const more = await openStore(dir);
    await more.store.append(batch(61, [['new plain', 0, 0]]), true);
    await more.store.close();
    expect(segFiles(dir).map((f) => segmentVersion(join(dir, f)))).toEqual(segFiles(dir).map(() => SEGMENT_VERSION_PLAIN));
  });
});
