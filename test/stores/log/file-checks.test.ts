/**
 * Every row of the recovery file-check table (FORMAT.md §6.2, `FILE_CHECKS` in
 * src/stores/log/engine/recovery-checks.ts), walked one by one: each case builds a directory that triggers the
 * row and checks the verdict. A failing row names itself (`file check N`) and changes no byte; a
 * tidying row opens and shows what it did. A last test checks that every row has a case here.
 */
import * as fs from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import {
  CURSOR_FILE,
  IDENTITY_FILE,
  ID_OFF_ID,
  SEG_OFF_VERSION,
  SEGMENT_HEADER_BYTES,
  segmentName,
  writeU16,
} from '../../../src/stores/log/engine/format.js';
import { FILE_CHECK_LIST, FILE_CHECKS, type FileCheckName } from '../../../src/stores/log/engine/recovery-checks.js';
import { encodeSegmentHeader } from '../../../src/stores/log/engine/segment.js';
import { LogStore } from '../../../src/stores/log/log-store.js';
import { cleanupDirs, crashCopy, expectOpenError, flipByte, freshDir, items, segFiles } from './helpers.js';

afterAll(cleanupDirs);

const OPTIONS = { segmentBytes: 256, preallocate: false, autoCompact: false };

/** A closed store with `n` items of 20 bytes in several segments (5 per segment). */
async function storeWith(n: number, acked: number[] = [], close = true): Promise<string> {
  const dir = freshDir();
  const store = await LogStore.open(dir, OPTIONS);
  await store.open();
  for (let seq = 1; seq <= n; seq++) await store.append(items(seq, ['abcdefghijklmnopqrst']), true);
  if (acked.length > 0) await store.ack(acked, true);
  if (!close) return crashCopy(dir);
  await store.close();
  return dir;
}

const seg = (dir: string, i: number): string => join(dir, segFiles(dir)[i]!);

function rewrite(path: string, edit: (b: Buffer) => void): void {
  const b = fs.readFileSync(path);
  edit(b);
  fs.writeFileSync(path, b);
}

async function fails(check: FileCheckName, dir: string, code = 'ERR_CORRUPT'): Promise<void> {
  const e = await expectOpenError(dir, code, OPTIONS);
  expect(e.message).toContain(`(file check ${FILE_CHECKS[check].id})`);
}

async function opens(dir: string): Promise<LogStore> {
  const store = await LogStore.open(dir, OPTIONS);
  await store.open();
  return store;
}

const cases: Record<FileCheckName, () => Promise<void>> = {
  foreignFile: async () => {
    const dir = await storeWith(2);
    fs.writeFileSync(join(dir, 'notes.txt'), 'mine');
    await fails('foreignFile', dir, 'ERR_STORE');
  },
  newerVersion: async () => {
    const dir = await storeWith(2);
    rewrite(seg(dir, 0), (b) => writeU16(b, SEG_OFF_VERSION, 99));
    await fails('newerVersion', dir, 'ERR_UNSUPPORTED_VERSION');
  },
  badSegmentHeader: async () => {
    const dir = await storeWith(7);
    flipByte(seg(dir, 0), 0);
    await fails('badSegmentHeader', dir);
  },
  baseSeqMismatch: async () => {
    const dir = await storeWith(7);
    rewrite(seg(dir, 1), (b) => {
      b.set(encodeSegmentHeader({ flags: 0, baseSeq: 5, replacesEndSeq: 0 }), 0);
    });
    await fails('baseSeqMismatch', dir);
  },
  interruptedCreation: async () => {
    // The roll sealed the first segment and a crash cut the creation of the next one short: its
    // header is a prefix (the item that went into it was never made durable by a checkpoint).
    const dir = await storeWith(6, [], false);
    const next = segFiles(dir)[1]!;
    fs.writeFileSync(join(dir, next), encodeSegmentHeader({ flags: 0, baseSeq: 6, replacesEndSeq: 0 }).subarray(0, 11));
    const store = await opens(dir);
    expect(store.recovery.strayFilesDeleted).toEqual([next]);
    expect(store.read({ after: 0, before: 100, limit: 100 }).map((i) => i.seq)).toEqual([1, 2, 3, 4, 5]);
    await store.close();
  },
  tornHeaderElsewhere: async () => {
    const dir = await storeWith(12);
    // The last segment looks like an interrupted creation, but its base is not the previous seal's end.
    const wrong = join(dir, segmentName(99));
    fs.writeFileSync(wrong, encodeSegmentHeader({ flags: 0, baseSeq: 99, replacesEndSeq: 0 }).subarray(0, 9));
    await fails('tornHeaderElsewhere', dir);
  },
  badCursor: async () => {
    const dir = await storeWith(3);
    flipByte(join(dir, CURSOR_FILE), 9);
    await fails('badCursor', dir);
  },
  superseded: async () => {
    // A compaction that crashed after its rename: the COMPACTED first segment replaces [1, 11),
    // and the segment it superseded is still there.
    const dir = await storeWith(12, [1, 2, 3, 4, 6, 7, 8, 9]);
    const second = segFiles(dir)[1]!;
    const kept = fs.readFileSync(join(dir, second));
    const store = await opens(dir);
    const result = await store.compact();
    expect(result.segmentsRewritten).toBe(2);
    await store.close();
    fs.writeFileSync(join(dir, second), kept);
    const again = await opens(dir);
    expect(again.recovery.supersededDeleted).toEqual([second]);
    expect(fs.existsSync(join(dir, second))).toBe(false);
    expect(again.read({ after: 0, before: 100, limit: 100 }).map((i) => i.seq)).toEqual([5, 10, 11, 12]);
    await again.close();
  },
  cursorMissing: async () => {
    const dir = await storeWith(3);
    fs.unlinkSync(join(dir, CURSOR_FILE));
    await fails('cursorMissing', dir);
  },
  noSegments: async () => {
    const dir = await storeWith(3);
    for (const f of segFiles(dir)) fs.unlinkSync(join(dir, f));
    await fails('noSegments', dir);
  },
  badSeal: async () => {
    const dir = await storeWith(12);
    const first = seg(dir, 0);
    flipByte(first, fs.statSync(first).size - 2);
    await fails('badSeal', dir);
  },
  chainBroken: async () => {
    const dir = await storeWith(17);
    fs.unlinkSync(seg(dir, 1));
    await fails('chainBroken', dir);
  },
  compactedUnsealed: async () => {
    const dir = await storeWith(3);
    rewrite(seg(dir, 0), (b) => b.set(encodeSegmentHeader({ flags: 1, baseSeq: 1, replacesEndSeq: 2 }), 0));
    await fails('compactedUnsealed', dir);
  },
  missingSegment: async () => {
    const dir = await storeWith(12);
    fs.unlinkSync(seg(dir, 0));
    await fails('missingSegment', dir);
  },
  dataBehindCheckpoint: async () => {
    const dir = await storeWith(3);
    // Cut the active segment back to its header: the checkpoint says seqs 1..3 were there.
    fs.truncateSync(seg(dir, 0), SEGMENT_HEADER_BYTES);
    await fails('dataBehindCheckpoint', dir);
  },
  strayTmp: async () => {
    const dir = await storeWith(2);
    fs.writeFileSync(join(dir, `${CURSOR_FILE}.tmp`), 'partial');
    const store = await opens(dir);
    expect(store.recovery.strayFilesDeleted).toEqual([`${CURSOR_FILE}.tmp`]);
    expect(fs.existsSync(join(dir, `${CURSOR_FILE}.tmp`))).toBe(false);
    await store.close();
  },
  sealedActive: async () => {
    // Crashed between sealing the first segment and creating the next: the last segment ends in a SEAL.
    const dir = await storeWith(6, [], false);
    fs.unlinkSync(join(dir, segFiles(dir)[1]!));
    const store = await opens(dir);
    const segments = store.inspect().segments;
    expect(segments.map((s) => [s.baseSeq, s.sealed])).toEqual([
      [1, true],
      [6, false],
    ]);
    await store.close();
  },
  acksPastData: async () => {
    const dir = freshDir();
    const s = await LogStore.open(dir, OPTIONS);
    await s.open();
    await s.append(items(1, ['a', 'b', 'c']), false);
    await s.ack([3], true); // the ACK is durable, the item it names is not
    const copy = crashCopy(dir);
    await s.close();
    fs.truncateSync(join(copy, segFiles(copy)[0]!), SEGMENT_HEADER_BYTES);
    // The checkpoint of the open knew no item, so losing them is a tolerated crash under `none`.
    const store = await opens(copy);
    expect(store.recovery.nextSeqRaisedFrom).toBe(1);
    expect(store.inspect().nextSeq).toBe(4);
    await store.close();
  },
  badIdentity: async () => {
    const dir = await storeWith(2);
    flipByte(join(dir, IDENTITY_FILE), ID_OFF_ID + 3);
    await fails('badIdentity', dir);
  },
  noIdentity: async () => {
    // A store written before identities: it gets one at its next writable open, kept from then on.
    const dir = await storeWith(2);
    fs.unlinkSync(join(dir, IDENTITY_FILE));
    const store = await opens(dir);
    expect(store.recovery.identityCreated).toBe(true);
    const id = store.storeId;
    expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    await store.close();
    const again = await opens(dir);
    expect(again.recovery.identityCreated).toBe(false);
    expect(again.storeId).toBe(id);
    await again.close();
  },
  emptyDirectory: async () => {
    const dir = freshDir();
    fs.mkdirSync(dir, { recursive: true });
    const store = await opens(dir);
    expect(segFiles(dir)).toEqual([segmentName(1)]);
    expect(fs.existsSync(join(dir, CURSOR_FILE))).toBe(true);
    await store.close();
  },
};

describe('recovery file checks (FORMAT.md §6.2), one case per row', () => {
  for (const [name, run] of Object.entries(cases)) {
    test(`row ${FILE_CHECKS[name as FileCheckName].id}: ${name}`, run);
  }

  test('everyRowOfTheTableHasACase', () => {
    expect(Object.keys(cases).sort()).toEqual(Object.keys(FILE_CHECKS).sort());
    expect(FILE_CHECK_LIST.map((c) => c.id)).toEqual(FILE_CHECK_LIST.map((_, i) => i + 1));
  });
});
