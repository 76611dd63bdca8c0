// LogStore's idempotency keys on disk: segment and cursor versions (a store that never sees a key
// writes what it wrote before), keys of acked items across deletion and compaction, expiry at the
// next checkpoint, what open reads to find them, and damaged key metadata as corruption.
import * as nodeFs from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { LogStore } from '../../../src/stores/log/log-store.js';
import { Builder } from '../../../src/core/builder.js';
import { crc32c32 } from '../../../src/stores/log/engine/crc.js';
import {
  CUR_OFF_CRC,
  CUR_OFF_VERSION,
  CURSOR_FORMAT_VERSION,
  CURSOR_FILE,
  CURSOR_HEADER_BYTES,
  CURSOR_V3_HEADER_BYTES,
  FRAME_HEADER_BYTES,
  META_TAG_KEYED_AT,
  SEG_OFF_VERSION,
  SEGMENT_HEADER_BYTES,
  readU16,
  writeU32,
} from '../../../src/stores/log/engine/format.js';
import type { StoredItem } from '../../../src/contract/store.js';
import { CrashFileSystem, ManualClock } from '../../../src/testing/index.js';
import { cleanupDirs, enc, expectOpenError, fixCrc, freshDir, openStore, readAllSeqs, segFiles } from './helpers.js';

afterAll(cleanupDirs);

const T = 1_800_000_000_000;
const keyed = (seq: number, text: string, key: string, keyedAt = T): StoredItem => ({ seq, bytes: enc(text), key, keyedAt });
const segVersions = (dir: string) => segFiles(dir).map((n) => readU16(nodeFs.readFileSync(join(dir, n)), SEG_OFF_VERSION));
const cursorVersion = (dir: string) => readU16(nodeFs.readFileSync(join(dir, CURSOR_FILE)), CUR_OFF_VERSION);

describe('versions', () => {
  test('aQueueThatNeverPushesAKeyWritesVersion1SegmentsAndAVersion2Cursor', async () => {
    const dir = freshDir();
    const [tx, rx] = await new Builder(await LogStore.open(dir, { segmentBytes: 256 })).open();
    for (let i = 0; i < 20; i++) await tx.push(`plain ${i}`);
    await (await rx.reserve())!.ack();
    await tx.close();
    expect(new Set(segVersions(dir))).toEqual(new Set([1]));
    expect(cursorVersion(dir)).toBe(2);
    const store = await LogStore.open(dir);
    expect((await store.open()).keys).toEqual([]);
    await store.close();
  });

  test('theFirstKeyedItemMakesTheActiveSegmentAndTheNextCheckpointVersion3', async () => {
    const dir = freshDir();
    const { store, nextSeq: s } = await openStore(dir, { segmentBytes: 4096 });
    await store.append([{ seq: s, bytes: enc('plain') }], true);
    expect(segVersions(dir)).toEqual([1]);
    await store.append([keyed(s + 1, 'k', 'order-1')], true);
    // A header is never rewritten in place: the store rolled to a version-3 segment.
    expect(segVersions(dir)).toEqual([1, 3]);
    expect(cursorVersion(dir)).toBe(1);
    await store.close();
    expect(cursorVersion(dir)).toBe(3);
    const again = await LogStore.open(dir);
    expect((await again.open()).keys).toEqual([{ key: 'order-1', seq: s + 1, keyedAt: T }]);
    expect(readAllSeqs(again)).toEqual([s, s + 1]);
    await again.close();
  });

  test('aCursorOfAVersionAboveTheNewestIsRefusedAndNothingChanges', async () => {
    const dir = freshDir();
    const { store, nextSeq: s } = await openStore(dir);
    await store.append([keyed(s, 'a', 'k')], true);
    await store.close();
    const path = join(dir, CURSOR_FILE);
    const b = nodeFs.readFileSync(path);
    expect(readU16(b, CUR_OFF_VERSION)).toBe(3);
    b.writeUInt16LE(CURSOR_FORMAT_VERSION + 1, CUR_OFF_VERSION);
    nodeFs.writeFileSync(path, b);
    const e = await expectOpenError(dir, 'ERR_UNSUPPORTED_VERSION');
    expect(e.message).toMatch(new RegExp(`version ${CURSOR_FORMAT_VERSION + 1}`));
  });
});

describe('keys of acked items', () => {
  test('surviveTheDeletionAndCompactionOfTheirSegmentsAndACrash', async () => {
    const fs = new CrashFileSystem({ seed: 7 });
    const opts = { fs, segmentBytes: 256, autoCompact: false, cursorCheckpointBytes: 1 << 20 };
    const store = await LogStore.open('/q', opts);
    const { nextSeq: s } = await store.open();
    const all: StoredItem[] = [];
    for (let i = 0; i < 30; i++) all.push(keyed(s + i, `item ${i} ${'x'.repeat(20)}`, `key-${i}`, T + i));
    for (const it of all) await store.append([it], true);
    await store.ack(
      all.slice(0, 25).map((i) => i.seq),
      true,
    );
    const result = await store.compact();
    expect(result.segmentsDeleted + result.segmentsRewritten).toBeGreaterThan(0);
    // A power loss right after: the frames of the acked items are gone, their keys are not.
    const crashed = await LogStore.open('/q', { ...opts, fs: fs.crash() });
    const r = await crashed.open();
    expect(r.keys!.map((k) => [k.key, k.seq, k.keyedAt])).toEqual(all.map((i) => [i.key, i.seq, i.keyedAt]));
    expect(readAllSeqs(crashed)).toEqual(all.slice(25).map((i) => i.seq));
    await crashed.close();
  });

  test('olderThanKeepKeysFromLeaveAtTheNextCheckpoint', async () => {
    const dir = freshDir();
    const { store, nextSeq: s } = await openStore(dir);
    await store.append([keyed(s, 'a', 'old', T), keyed(s + 1, 'b', 'new', T + 10)], true);
    await store.ack([s], true);
    store.keepKeysFrom(T + 5);
    await store.close();
    const again = await LogStore.open(dir);
    expect((await again.open()).keys).toEqual([{ key: 'new', seq: s + 1, keyedAt: T + 10 }]);
    again.keepKeysFrom(T + 11);
    await again.close();
    const third = await LogStore.open(dir);
    expect((await third.open()).keys).toEqual([]);
    // A store that held keys stays version 3 (no version is ever lowered in place).
    expect(cursorVersion(dir)).toBe(3);
    await third.close();
  });

  test('aRetriedPushAfterACleanReopenResolvesWithTheSeqOfAnItemLongAcked', async () => {
    const dir = freshDir();
    const clock = new ManualClock(T);
    let [tx, rx] = await new Builder(await LogStore.open(dir, { segmentBytes: 256 })).clock(clock).open();
    const seq = await tx.push('charge card 42', { key: 'charge-42' });
    for (let i = 0; i < 30; i++) await tx.push(`filler ${i}`);
    for (let i = 0; i < 31; i++) await (await rx.reserve())!.ack();
    await tx.close();
    [tx, rx] = await new Builder(await LogStore.open(dir, { segmentBytes: 256 })).clock(clock).open();
    expect(await tx.push('charge card 42', { key: 'charge-42' })).toBe(seq);
    expect(rx.stats().ready).toBe(0);
    await tx.close();
  });
});

describe('open', () => {
  test('aCleanlyClosedStoreReadsNoRecordOfItsSealedSegmentsForItsKeys', async () => {
    const fs = new CrashFileSystem({ seed: 3 });
    const store = await LogStore.open('/q', { fs, segmentBytes: 4096 });
    const { nextSeq: s } = await store.open();
    let seq = s;
    for (let i = 0; i < 200; i++)
      await store.append([i % 2 === 0 ? keyed(seq++, 'x'.repeat(100), `k${i}`) : { seq: seq++, bytes: new Uint8Array(100) }], false);
    await store.close();
    const segmentBytes = store.inspect().segments.reduce((n, g) => n + g.bytes, 0);
    const before = fs.stats().readBytes;
    const again = await LogStore.open('/q', { fs, segmentBytes: 4096 });
    const r = await again.open();
    expect(r.keys!.length).toBe(100);
    // Headers, seals, the active segment and the cursor: far less than the segments hold.
    expect(fs.stats().readBytes - before).toBeLessThan(segmentBytes / 4);
    await again.close();
  });
});

describe('open after a crash', () => {
  test('readsTheKeyedFramesOfAboutOneSegmentHoweverManyWereWrittenSinceTheLastOpen', async () => {
    const fs = new CrashFileSystem({ seed: 4 });
    const opts = { fs, segmentBytes: 4096, preallocate: false };
    const store = await LogStore.open('/q', opts);
    const { nextSeq: s } = await store.open();
    // About 30 segments of keyed items and no ack: only the rolls start a checkpoint.
    for (let i = 0; i < 900; i++) await store.append([keyed(s + i, 'x'.repeat(100), `key-${i}`, T + i)], i % 10 === 9);
    await store.settled();
    const written = store.inspect().segments.reduce((n, g) => n + g.bytes, 0);
    const crashed = fs.crash();
    const before = crashed.stats().readBytes;
    const again = await LogStore.open('/q', { ...opts, fs: crashed });
    const r = await again.open();
    expect(r.keys!.length).toBeGreaterThan(890);
    expect(crashed.stats().readBytes - before).toBeLessThan(Math.max(written / 4, 5 * 4096) + r.keys!.length * 40);
    await again.close();
  });
});

describe('damage', () => {
  test('aKeyWithoutItsTimeIsCorruption', async () => {
    const dir = freshDir();
    const { store, nextSeq: s } = await openStore(dir);
    await store.append([keyed(s, 'a', 'k')], true);
    await store.close();
    const path = join(dir, segFiles(dir).at(-1)!);
    const b = nodeFs.readFileSync(path);
    const frame = SEGMENT_HEADER_BYTES;
    // The metadata area: key entry (2 + 1 bytes), then the keyed-at entry, whose tag becomes unknown.
    const tagAt = frame + FRAME_HEADER_BYTES + 3;
    expect(b[tagAt]).toBe(META_TAG_KEYED_AT);
    b[tagAt] = 99;
    nodeFs.writeFileSync(path, b);
    fixCrc(path, frame);
    await expectOpenError(dir, 'ERR_CORRUPT');
  });

  test('aKeyEntryOfTheCheckpointThatIsNotUtf8IsCorruption', async () => {
    const dir = freshDir();
    const { store, nextSeq: s } = await openStore(dir);
    await store.append([keyed(s, 'a', 'k')], true);
    await store.close();
    const path = join(dir, CURSOR_FILE);
    const b = nodeFs.readFileSync(path);
    // The only key entry follows the version-3 header (no ranges): seq, keyedAt, keyBytes 1, 'k'.
    const keyAt = CURSOR_V3_HEADER_BYTES + 17;
    expect(b[keyAt]).toBe(0x6b);
    b[keyAt] = 0xff;
    writeU32(b, CUR_OFF_CRC, crc32c32(b.subarray(CURSOR_HEADER_BYTES, b.length), crc32c32(b.subarray(0, CUR_OFF_CRC))));
    nodeFs.writeFileSync(path, b);
    const e = await expectOpenError(dir, 'ERR_CORRUPT');
    expect(e.message).toMatch(/key entry 0 is not UTF-8/);
  });
});
