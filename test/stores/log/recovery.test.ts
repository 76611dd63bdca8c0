/**
 * Byte-surgery tests, one per row of the recovery decision table (FORMAT.md §6) and per file-level
 * check. Each names the claim it proves, asserts what is read, the bytes cut, the error code, and
 * that a failed open leaves every file byte-identical.
 */
import * as fs from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import {
  CURSOR_FILE,
  FRAME_HEADER_BYTES,
  FRAME_OFF_LENGTH,
  FRAME_OFF_SEQ,
  SEAL_FRAME_BYTES,
  SEG_OFF_VERSION,
  SEGMENT_FORMAT_VERSION,
  SEGMENT_HEADER_BYTES,
  CUR_OFF_VERSION,
  writeU32,
  writeU64,
} from '../../../src/stores/log/engine/format.js';
import { LogStore } from '../../../src/stores/log/log-store.js';
import {
  appendBytes,
  cleanupDirs,
  crashCopy,
  expectOpenError,
  fixCrc,
  flipByte,
  freshDir,
  hashDir,
  items,
  openStore,
  readAllSeqs,
  readAllTexts,
  segFiles,
  truncateBy,
} from './helpers.js';

afterAll(cleanupDirs);

/** Each item `item-N` (N < 10) is a 26-byte frame: 20-byte header + 6-byte payload. */
const FRAME = FRAME_HEADER_BYTES + 6;
const frameAt = (i: number): number => SEGMENT_HEADER_BYTES + i * FRAME;

/** A store with items 1..n written after the open's checkpoint, snapshotted as after a process crash. */
async function crashedWith(n: number, options = {}): Promise<string> {
  const dir = freshDir();
  const { store } = await openStore(dir, { preallocate: false, ...options });
  await store.append(
    items(
      1,
      Array.from({ length: n }, (_, i) => `item-${i + 1}`),
    ),
    false,
  );
  const copy = crashCopy(dir);
  await store.close();
  return copy;
}

const seg1 = (dir: string): string => join(dir, segFiles(dir)[0]!);
/** Byte surgery counts from the end of the data: no preallocated zeros (they have their own test). */
const NP = { preallocate: false };

describe('active segment tail (decision table rows)', () => {
  test('partialHeaderAtEofIsCutAndKept', async () => {
    const dir = await crashedWith(3);
    truncateBy(seg1(dir), FRAME - 10); // 10 bytes of the third frame's header remain
    const { store, nextSeq, count } = await openStore(dir, NP);
    expect(readAllTexts(store)).toEqual(['item-1', 'item-2']);
    expect([nextSeq, count]).toEqual([3, 2]);
    expect(store.recovery.tornBytes).toBe(10);
    expect(store.recovery.tornFiles).toHaveLength(1);
    expect(fs.readFileSync(store.recovery.tornFiles[0]!)).toHaveLength(10);
    expect(fs.statSync(seg1(dir)).size).toBe(frameAt(2));
    await store.close();
  });

  test('truncatedTrailingFrameIsIgnored', async () => {
    const dir = await crashedWith(3);
    truncateBy(seg1(dir), 3); // the last frame's length now runs past EOF
    const { store, nextSeq } = await openStore(dir, NP);
    expect(readAllTexts(store)).toEqual(['item-1', 'item-2']);
    expect(nextSeq).toBe(3);
    expect(store.recovery.tornBytes).toBe(FRAME - 3);
    await store.close();
  });

  test('zeroTailIsCutWithoutSideFile', async () => {
    const dir = await crashedWith(3);
    appendBytes(seg1(dir), new Uint8Array(100));
    const { store, nextSeq } = await openStore(dir, NP);
    expect(readAllTexts(store)).toEqual(['item-1', 'item-2', 'item-3']);
    expect(nextSeq).toBe(4);
    expect(store.recovery.tornBytes).toBe(0);
    expect(store.recovery.zeroTailBytes).toBe(100);
    expect(store.recovery.tornFiles).toEqual([]);
    expect(fs.statSync(seg1(dir)).size).toBe(frameAt(3));
    await store.close();
  });

  test('crcMismatchInLastFrameIsTornTail', async () => {
    const dir = await crashedWith(3);
    flipByte(seg1(dir), frameAt(2) + FRAME - 1); // last payload byte of item 3
    const { store } = await openStore(dir, NP);
    expect(readAllTexts(store)).toEqual(['item-1', 'item-2']);
    expect(store.recovery.tornBytes).toBe(FRAME);
    await store.close();
  });

  test('crcMismatchFollowedByValidDataRejects', async () => {
    const dir = await crashedWith(3);
    flipByte(seg1(dir), frameAt(1) + FRAME - 1); // item 2's payload; item 3 stays valid
    const e = await expectOpenError(dir, 'ERR_CORRUPT');
    expect(e.file).toBe(seg1(dir));
    expect(e.offset).toBe(frameAt(1));
  });

  test('flippedLengthBeforeValidDataRejects', async () => {
    const dir = await crashedWith(3);
    // Re-forge the CRC over a huge length so the length bound itself is what fails.
    const b = fs.readFileSync(seg1(dir));
    writeU32(b, frameAt(1) + FRAME_OFF_LENGTH, 0x7fff_0000);
    fs.writeFileSync(seg1(dir), b);
    fixCrc(seg1(dir), frameAt(1));
    const e = await expectOpenError(dir, 'ERR_CORRUPT');
    expect(e.offset).toBe(frameAt(1));
  });

  test('validCrcWithSeqOutOfOrderRejects', async () => {
    const dir = await crashedWith(3);
    const b = fs.readFileSync(seg1(dir));
    writeU64(b, frameAt(1) + FRAME_OFF_SEQ, 1); // item 2 claims seq 1
    fs.writeFileSync(seg1(dir), b);
    fixCrc(seg1(dir), frameAt(1));
    const e = await expectOpenError(dir, 'ERR_CORRUPT');
    expect(e.offset).toBe(frameAt(1));
  });

  test('tornTailBelowDurablePointRejects', async () => {
    const dir = freshDir();
    const { store } = await openStore(dir, NP);
    await store.append(items(1, ['item-1', 'item-2', 'item-3']), true);
    await store.close(); // the CLEAN checkpoint says seqs 1..3 are durable
    truncateBy(seg1(dir), 3);
    const e = await expectOpenError(dir, 'ERR_CORRUPT');
    expect(e.offset).toBe(frameAt(2));
  });

  test('checkpointPastTheDataRejects', async () => {
    const dir = freshDir();
    const { store } = await openStore(dir, NP);
    await store.append(items(1, ['item-1', 'item-2', 'item-3']), true);
    await store.close();
    truncateBy(seg1(dir), FRAME); // a clean cut: no torn frame, but item 3 is gone
    await expectOpenError(dir, 'ERR_CORRUPT');
  });

  test('preallocatedZerosAreAZeroTail', async () => {
    const dir = freshDir();
    const { store } = await openStore(dir, { segmentBytes: 1 << 20 });
    await store.append(items(1, ['item-1', 'item-2', 'item-3']), true);
    const copy = crashCopy(dir);
    await store.close();
    expect(fs.statSync(seg1(copy)).size).toBe(1 << 20); // preallocated up to segmentBytes
    expect(fs.statSync(seg1(dir)).size).toBe(frameAt(3)); // a clean close trims the zeros
    const { store: s2, nextSeq } = await openStore(copy);
    expect(readAllTexts(s2)).toEqual(['item-1', 'item-2', 'item-3']);
    expect(nextSeq).toBe(4);
    expect(s2.recovery.tornBytes).toBe(0);
    expect(s2.recovery.zeroTailBytes).toBe((1 << 20) - frameAt(3));
    expect(s2.recovery.tornFiles).toEqual([]);
    await s2.append(items(4, ['item-4']), true);
    await s2.close();
    const { store: s3 } = await openStore(copy);
    expect(readAllTexts(s3)).toEqual(['item-1', 'item-2', 'item-3', 'item-4']);
    await s3.close();
  });

  test('reopenAndAppendAfterTornTail', async () => {
    const dir = await crashedWith(3);
    truncateBy(seg1(dir), 5);
    let { store, nextSeq } = await openStore(dir, NP);
    expect(nextSeq).toBe(3);
    await store.append(items(3, ['new-3', 'new-4']), true);
    await store.close();
    ({ store, nextSeq } = await openStore(dir, NP));
    expect(readAllTexts(store)).toEqual(['item-1', 'item-2', 'new-3', 'new-4']);
    expect(nextSeq).toBe(5);
    expect(store.recovery.tornBytes).toBe(0);
    await store.close();
  });
});

describe('sealed segments', () => {
  async function rolled(): Promise<string> {
    const dir = freshDir();
    const { store } = await openStore(dir, { ...NP, segmentBytes: 256 });
    for (let i = 1; i <= 24; i++) await store.append(items(i, [`item-${String(i).padStart(2, '0')}`]), false);
    await store.close();
    expect(segFiles(dir).length).toBeGreaterThanOrEqual(3);
    return dir;
  }

  test('bitFlipInSealedSegmentSurfacesOnRead', async () => {
    const dir = await rolled();
    const first = seg1(dir);
    flipByte(first, SEGMENT_HEADER_BYTES + 2 * (FRAME_HEADER_BYTES + 7) + FRAME_HEADER_BYTES + 3); // item 3's payload
    const { store, count } = await openStore(dir, { ...NP, segmentBytes: 256 }); // open does not read records
    expect(count).toBe(24);
    const got = store.read({ after: 0, before: 100, limit: 100 });
    expect(got.map((i) => i.seq)).toEqual([1, 2]); // nothing at or after the damage
    let err: { code?: string; file?: string; offset?: number } = {};
    try {
      store.read({ after: 2, before: 100, limit: 100 });
    } catch (e) {
      err = e as typeof err;
    }
    expect(err.code).toBe('ERR_CORRUPT');
    expect(err.file).toBe(first);
    expect(err.offset).toBe(SEGMENT_HEADER_BYTES + 2 * (FRAME_HEADER_BYTES + 7));
    await store.close();
  });

  test('crcMismatchInSealedSegmentSealRejects', async () => {
    const dir = await rolled();
    const first = seg1(dir);
    flipByte(first, fs.statSync(first).size - 2);
    const e = await expectOpenError(dir, 'ERR_CORRUPT');
    expect(e.file).toBe(first);
    expect(e.offset).toBe(fs.statSync(first).size - SEAL_FRAME_BYTES);
  });

  test('truncatedSealedSegmentRejects', async () => {
    const dir = await rolled();
    truncateBy(seg1(dir), 1);
    await expectOpenError(dir, 'ERR_CORRUPT');
  });

  test('segmentGapRejects', async () => {
    const dir = await rolled();
    const names = segFiles(dir);
    fs.unlinkSync(join(dir, names[1]!));
    const e = await expectOpenError(dir, 'ERR_CORRUPT');
    expect(e.file).toBe(join(dir, names[2]!));
    expect(e.message).toMatch(/gap/);
  });

  test('missingFirstSegmentRejects', async () => {
    const dir = await rolled();
    fs.unlinkSync(seg1(dir));
    const e = await expectOpenError(dir, 'ERR_CORRUPT');
    expect(e.message).toMatch(/missing segment/);
  });

  test('newerVersionInSegmentIsUnsupportedAndChangesNothing', async () => {
    const dir = await rolled();
    const b = fs.readFileSync(seg1(dir));
    b[SEG_OFF_VERSION] = SEGMENT_FORMAT_VERSION + 1; // the header CRC is now wrong too: the version is checked first
    fs.writeFileSync(seg1(dir), b);
    const e = await expectOpenError(dir, 'ERR_UNSUPPORTED_VERSION');
    expect(e.file).toBe(seg1(dir));
  });

  test('corruptSegmentHeaderRejects', async () => {
    const dir = await rolled();
    flipByte(seg1(dir), 13); // base seq byte, header CRC catches it
    await expectOpenError(dir, 'ERR_CORRUPT');
  });

  test('interruptedCompactionIsFinishedAtOpen', async () => {
    const dir = freshDir();
    const { store } = await openStore(dir, { ...NP, segmentBytes: 256, autoCompact: false });
    for (let i = 1; i <= 30; i++) await store.append(items(i, [`item-${String(i).padStart(2, '0')}`]), false);
    await store.ack(
      Array.from({ length: 29 }, (_, i) => i + 2),
      true,
    ); // only seq 1 stays
    await store.settled();
    const saved = new Map(segFiles(dir).map((n) => [n, fs.readFileSync(join(dir, n))]));
    const r = await store.compact();
    expect(r.segmentsRewritten).toBeGreaterThanOrEqual(2);
    await store.close();
    // Put the superseded segments back, as if the unlinks after the rename were lost (F4).
    const after = new Set(segFiles(dir));
    let restored = 0;
    for (const [n, b] of saved) {
      if (!after.has(n)) {
        fs.writeFileSync(join(dir, n), b);
        restored++;
      }
    }
    expect(restored).toBeGreaterThan(0);
    const { store: s2, count } = await openStore(dir, { ...NP, segmentBytes: 256 });
    expect(s2.recovery.supersededDeleted).toHaveLength(restored);
    expect(count).toBe(1);
    expect(readAllTexts(s2)).toEqual(['item-01']);
    await s2.close();
  });
});

describe('cursor file', () => {
  async function withAcks(): Promise<string> {
    const dir = freshDir();
    const { store } = await openStore(dir, NP);
    await store.append(items(1, ['item-1', 'item-2', 'item-3', 'item-4', 'item-5']), true);
    await store.ack([5, 3], true);
    await store.close();
    return dir;
  }

  test('zeroLengthCursorRejects', async () => {
    const dir = await withAcks();
    fs.truncateSync(join(dir, CURSOR_FILE), 0);
    const e = await expectOpenError(dir, 'ERR_CORRUPT');
    expect(e.file).toBe(join(dir, CURSOR_FILE));
  });

  test('zeroedCursorRejects', async () => {
    const dir = await withAcks();
    const p = join(dir, CURSOR_FILE);
    fs.writeFileSync(p, new Uint8Array(fs.statSync(p).size));
    await expectOpenError(dir, 'ERR_CORRUPT');
  });

  test('newerVersionInCursorIsUnsupported', async () => {
    const dir = await withAcks();
    const p = join(dir, CURSOR_FILE);
    const b = fs.readFileSync(p);
    b[CUR_OFF_VERSION] = 9;
    fs.writeFileSync(p, b);
    await expectOpenError(dir, 'ERR_UNSUPPORTED_VERSION');
  });

  test('missingCursorWithDataRejects', async () => {
    const dir = await withAcks();
    fs.unlinkSync(join(dir, CURSOR_FILE));
    await expectOpenError(dir, 'ERR_CORRUPT');
  });

  test('tornAckRecordIsCutAndItsAckRedelivered', async () => {
    const dir = freshDir();
    const { store } = await openStore(dir, NP);
    await store.append(items(1, ['item-1', 'item-2', 'item-3']), true);
    await store.ack([2], false);
    const copy = crashCopy(dir);
    await store.close();
    truncateBy(join(copy, CURSOR_FILE), 4);
    const { store: s2, count } = await openStore(copy, NP);
    expect(count).toBe(3);
    expect(readAllTexts(s2)).toEqual(['item-1', 'item-2', 'item-3']);
    expect(s2.recovery.tornBytes).toBe(FRAME_HEADER_BYTES + 16 - 4);
    await s2.close();
  });

  test('ackPastTheDataRaisesNextSeq', async () => {
    const dir = freshDir();
    const { store } = await openStore(dir, NP);
    await store.append(items(1, ['item-1', 'item-2', 'item-3', 'item-4', 'item-5']), false);
    await store.ack([5], false);
    const copy = crashCopy(dir);
    await store.close();
    truncateBy(seg1(copy), 2 * FRAME); // items 4 and 5 never reached the disk
    let { store: s2, nextSeq, count } = await openStore(copy, NP);
    expect(nextSeq).toBe(6);
    expect(count).toBe(3);
    expect(s2.recovery.nextSeqRaisedFrom).toBe(4);
    await s2.append(items(6, ['item-6']), true);
    await s2.close();
    ({ store: s2, nextSeq, count } = await openStore(copy, NP));
    expect(readAllSeqs(s2)).toEqual([1, 2, 3, 6]);
    expect([nextSeq, count]).toEqual([7, 4]);
    await s2.close();
  });
});

describe('directory', () => {
  test('strayTmpFilesAreDeletedUnread', async () => {
    const dir = freshDir();
    const { store } = await openStore(dir, NP);
    await store.append(items(1, ['item-1']), true);
    await store.close();
    fs.writeFileSync(join(dir, 'cursor.pqc.tmp'), 'garbage');
    fs.writeFileSync(join(dir, 'seg-00000000000000000001.log.tmp'), 'garbage');
    const { store: s2 } = await openStore(dir, NP);
    expect([...s2.recovery.strayFilesDeleted].sort()).toEqual(['cursor.pqc.tmp', 'seg-00000000000000000001.log.tmp']);
    expect(fs.existsSync(join(dir, 'cursor.pqc.tmp'))).toBe(false);
    expect(readAllTexts(s2)).toEqual(['item-1']);
    await s2.close();
  });

  test('foreignFileRejects', async () => {
    const dir = freshDir();
    const { store } = await openStore(dir, NP);
    await store.close();
    fs.writeFileSync(join(dir, 'notes.txt'), 'mine');
    const e = await expectOpenError(dir, 'ERR_STORE');
    expect(e.message).toMatch(/notes\.txt/);
  });

  test('pathThatIsAFileRejects', async () => {
    const dir = freshDir();
    fs.mkdirSync(join(dir, '..'), { recursive: true });
    fs.writeFileSync(dir, 'x');
    await expect(LogStore.open(dir)).rejects.toMatchObject({ name: 'OpenError', code: 'ERR_STORE' });
  });

  test('newStoreUsesPrivateModes', async () => {
    const dir = freshDir();
    const { store } = await openStore(dir, NP);
    await store.close();
    expect(fs.statSync(dir).mode & 0o777).toBe(0o700);
    for (const n of fs.readdirSync(dir)) expect(fs.statSync(join(dir, n)).mode & 0o777, n).toBe(0o600);
    expect(hashDir(dir)).toBeTruthy();
  });
});
