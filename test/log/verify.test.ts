/** verifyStore: a full read-only check (`pq verify`). */
import * as fs from 'node:fs';
import { join } from 'node:path';
import { afterAll, expect, test } from 'vitest';
import { SEGMENT_HEADER_BYTES, FRAME_HEADER_BYTES } from '../../src/log/format.js';
import { verifyStore } from '../../src/log/verify.js';
import { nodeFileSystem } from '../../src/log-store.js';
import { appendBytes, cleanupDirs, crashCopy, flipByte, freshDir, hashDir, items, openStore, segFiles } from './helpers.js';

afterAll(cleanupDirs);

async function rolled(): Promise<string> {
  const dir = freshDir();
  const { store } = await openStore(dir, { segmentBytes: 256 });
  for (let i = 1; i <= 24; i++) await store.append(items(i, [`item-${String(i).padStart(2, '0')}`]), false);
  await store.ack([3, 4], true);
  await store.close();
  return dir;
}

test('aSoundStoreHasNoProblemsAndEveryRecordIsChecked', async () => {
  const dir = await rolled();
  const before = hashDir(dir);
  const r = verifyStore(dir, { fs: nodeFileSystem });
  expect(r.problems).toEqual([]);
  expect(r.records).toBe(24);
  expect(r.files).toBe(segFiles(dir).length + 1);
  expect(hashDir(dir)).toEqual(before);
});

test('aBitFlipInASealedRecordIsAProblemWithFileAndOffset', async () => {
  const dir = await rolled();
  const first = join(dir, segFiles(dir)[0]!);
  const frame = FRAME_HEADER_BYTES + 7;
  flipByte(first, SEGMENT_HEADER_BYTES + frame + FRAME_HEADER_BYTES + 2);
  const before = hashDir(dir);
  const r = verifyStore(dir, { fs: nodeFileSystem });
  expect(r.problems).toHaveLength(1);
  expect(r.problems[0]).toMatchObject({ file: first, offset: SEGMENT_HEADER_BYTES + frame });
  expect(hashDir(dir)).toEqual(before);
});

test('aTornActiveTailIsANoteAndAForeignFileAProblem', async () => {
  const dir = freshDir();
  const { store } = await openStore(dir, { preallocate: false });
  await store.append(items(1, ['a', 'b']), false);
  const copy = crashCopy(dir);
  await store.close();
  appendBytes(join(copy, segFiles(copy)[0]!), Uint8Array.from([1, 2, 3]));
  fs.writeFileSync(join(copy, 'notes.txt'), 'x');
  const r = verifyStore(copy, { fs: nodeFileSystem });
  expect(r.notes.some((n) => /torn tail of 3 bytes/.test(n))).toBe(true);
  expect(r.problems.map((p) => p.file)).toEqual([join(copy, 'notes.txt')]);
});

test('aSegmentGapIsAProblem', async () => {
  const dir = await rolled();
  fs.unlinkSync(join(dir, segFiles(dir)[1]!));
  const r = verifyStore(dir, { fs: nodeFileSystem });
  expect(r.problems.some((p) => /gap/.test(p.reason))).toBe(true);
});

test('aTruncatedSealedSegmentIsReportedWhereItsFramesEndWithoutFollowOnProblems', async () => {
  const dir = await rolled();
  const first = join(dir, segFiles(dir)[0]!);
  fs.truncateSync(first, fs.statSync(first).size - 10);
  const r = verifyStore(dir, { fs: nodeFileSystem });
  const reasons = r.problems.map((p) => p.reason).join('\n');
  // The bad seal and the frame that runs past the end are reported; nothing is said about
  // "missing" seqs, which are in the damaged segment.
  expect(reasons).toMatch(/file check 11/);
  expect(reasons).toMatch(/length runs past EOF/);
  expect(reasons).not.toMatch(/missing segment/);
  expect(r.files).toBe(segFiles(dir).length + 1);
});

test('anUnreadableCursorDoesNotInventProblemsInTheData', async () => {
  const dir = await rolled();
  flipByte(join(dir, 'cursor.pqc'), 9);
  const r = verifyStore(dir, { fs: nodeFileSystem });
  expect(r.problems.map((p) => p.reason).join('\n')).not.toMatch(/missing segment|cursor checkpoint covers/);
  expect(r.problems.length).toBe(1);
  expect(r.records).toBe(24);
});
