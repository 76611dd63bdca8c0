/**
 * Frame validity is defined once. The consumer reader, compaction and `verify` read a sealed
 * segment through the same frame reader and rules, so each damaged input below is rejected by all
 * three with the same error: same file, same offset, same reason.
 */
import * as fs from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { QueueError } from '../../../src/contract/errors.js';
import {
  FRAME_HEADER_BYTES,
  FRAME_OFF_LENGTH,
  FRAME_OFF_TYPE,
  RECORD_SEAL,
  SEAL_FRAME_BYTES,
  SEAL_OFF_RECORD_COUNT,
  SEGMENT_HEADER_BYTES,
  readU32,
  writeU32,
} from '../../../src/stores/log/engine/format.js';
import { encodeSealFrame } from '../../../src/stores/log/engine/segment.js';
import { LogStore, verifyStore } from '../../../src/stores/log/log-store.js';
import { cleanupDirs, crashCopy, fixCrc, flipByte, freshDir, items, segFiles } from './helpers.js';

afterAll(cleanupDirs);

/** Items of 20 bytes: a frame is 40 bytes, a SEAL frame too, so a SEAL can replace an ITEM in place. */
const PAYLOAD = 'abcdefghijklmnopqrst';
const FRAME = FRAME_HEADER_BYTES + PAYLOAD.length;
const frameAt = (i: number): number => SEGMENT_HEADER_BYTES + i * FRAME;
const OPTIONS = { segmentBytes: 256, preallocate: false, autoCompact: false };

/** A closed store of 12 items in several sealed segments. */
async function sealedStore(): Promise<string> {
  const dir = freshDir();
  const store = await LogStore.open(dir, OPTIONS);
  await store.open();
  for (let seq = 1; seq <= 12; seq++) await store.append(items(seq, [PAYLOAD]), true);
  await store.close();
  expect(segFiles(dir).length).toBeGreaterThan(2);
  return dir;
}

function message(e: unknown): string {
  expect(e).toBeInstanceOf(QueueError);
  expect((e as QueueError).code).toBe('ERR_CORRUPT');
  return (e as QueueError).message;
}

async function readerError(dir: string): Promise<string> {
  const store = await LogStore.open(crashCopy(dir), OPTIONS);
  await store.open();
  let after = 0;
  try {
    for (;;) {
      const got = store.read({ after, before: Number.MAX_SAFE_INTEGER, limit: 1000 });
      if (got.length === 0) throw new Error('the reader met no damage');
      after = got[got.length - 1]!.seq;
    }
  } catch (e) {
    return message(e);
  } finally {
    await store.close();
  }
}

async function compactionError(dir: string): Promise<string> {
  const store = await LogStore.open(crashCopy(dir), OPTIONS);
  await store.open();
  // Acked records in the sealed run make the forced compaction rewrite it, from the first segment.
  await store.ack([5, 6, 7], true);
  const e = await store.compact().then(
    () => new Error('compaction met no damage'),
    (x: unknown) => x,
  );
  await store.close();
  return message(e);
}

function verifyError(dir: string): string {
  const result = verifyStore(crashCopy(dir));
  expect(result.problems.length, JSON.stringify(result.problems)).toBeGreaterThan(0);
  return result.problems[0]!.reason;
}

async function sameErrorEverywhere(damage: (firstSegment: string) => void): Promise<string> {
  const dir = await sealedStore();
  damage(join(dir, segFiles(dir)[0]!));
  const fromReader = await readerError(dir);
  expect(await compactionError(dir)).toBe(fromReader);
  expect(verifyError(dir)).toBe(fromReader);
  return fromReader;
}

describe('the reader, compaction and verify reject the same damage with the same error', () => {
  test('crcMismatchInASealedRecord', async () => {
    const why = await sameErrorEverywhere((seg) => flipByte(seg, frameAt(1) + FRAME_HEADER_BYTES + 3));
    expect(why).toMatch(new RegExp(`damaged at offset ${frameAt(1)}: damaged frame followed by valid data \\(tail table row 2\\)`));
  });

  test('lengthBitFlippedWithTheCrcReforged', async () => {
    const why = await sameErrorEverywhere((seg) => {
      const b = fs.readFileSync(seg);
      writeU32(b, frameAt(1) + FRAME_OFF_LENGTH, readU32(b, frameAt(1) + FRAME_OFF_LENGTH) ^ 0x40);
      fs.writeFileSync(seg, b);
      fixCrc(seg, frameAt(1));
    });
    expect(why).toMatch(/tail table row/);
  });

  test('sealCountReforgedDoesNotMatchTheRecords', async () => {
    const why = await sameErrorEverywhere((seg) => {
      const b = fs.readFileSync(seg);
      const sealAt = b.length - SEAL_FRAME_BYTES;
      const countAt = sealAt + FRAME_HEADER_BYTES + SEAL_OFF_RECORD_COUNT;
      writeU32(b, countAt, readU32(b, countAt) - 1);
      fs.writeFileSync(seg, b);
      fixCrc(seg, sealAt);
    });
    expect(why).toMatch(/valid CRC, impossible content \(tail table row 8\)/);
  });

  test('aSealBeforeTheEndOfASealedSegment', async () => {
    const why = await sameErrorEverywhere((seg) => {
      // Record 2 becomes a SEAL that is right about the records before it, but is not the
      // segment's seal (whose end seq the next segment starts at).
      const b = fs.readFileSync(seg);
      b.set(encodeSealFrame({ recordCount: 1, firstSeq: 1, lastSeq: 1, endSeq: 2 }), frameAt(1));
      fs.writeFileSync(seg, b);
      expect(b[frameAt(1) + FRAME_OFF_TYPE]).toBe(RECORD_SEAL);
    });
    expect(why).toMatch(new RegExp(`damaged at offset ${frameAt(1)}: valid CRC, impossible content \\(tail table row 8\\)`));
  });
});
