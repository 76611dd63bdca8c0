/** verifyStore: a full read-only check (`pq verify`). */
import * as fs from 'node:fs';
import { join } from 'node:path';
import { afterAll, expect, test } from 'vitest';
import { SEGMENT_HEADER_BYTES, FRAME_HEADER_BYTES } from '../../../src/stores/log/engine/format.js';
import { verifyStore } from '../../../src/stores/log/engine/verify.js';
import { salvageStore } from '../../../src/stores/log/engine/salvage.js';
import { nodeFileSystem } from '../../../src/stores/log/log-store.js';
import {
  WrappedFs,
  appendBytes,
  cleanupDirs,
  crashCopy,
  errno,
  flipByte,
  freshDir,
  hashDir,
  items,
  openStore,
  segFiles,
} from './helpers.js';

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

test('aDirectoryWithoutASegmentOrCursorFileIsNotAStore', () => {
  const empty = freshDir();
  fs.mkdirSync(empty, { recursive: true });
  let r = verifyStore(empty, { fs: nodeFileSystem });
  expect(r.problems).toEqual([{ file: empty, offset: 0, reason: `${empty} is not a store: it holds no segment or cursor file` }]);
  fs.writeFileSync(join(empty, 'LOCK'), '123');
  expect(verifyStore(empty, { fs: nodeFileSystem }).problems.map((p) => p.reason)).toEqual([expect.stringMatching(/is not a store/)]);
  // Foreign files stay a problem of their own.
  fs.writeFileSync(join(empty, 'notes.txt'), 'x');
  r = verifyStore(empty, { fs: nodeFileSystem });
  expect(r.problems.map((p) => p.reason)).toEqual([
    expect.stringMatching(/not part of a store \(notes\.txt\)/),
    expect.stringMatching(/is not a store/),
  ]);
  expect(fs.readdirSync(empty).sort()).toEqual(['LOCK', 'notes.txt']);
});

test('thePreallocatedZeroTailOfACrashedActiveSegmentIsANoteNotATornTail', async () => {
  const dir = freshDir();
  const { store } = await openStore(dir);
  await store.append(items(1, ['a', 'b']), true); // a synced batch preallocates zeros ahead
  const copy = crashCopy(dir);
  await store.close();
  const r = verifyStore(copy, { fs: nodeFileSystem });
  expect(r.problems).toEqual([]);
  expect(r.records).toBe(2);
  expect(r.notes).toEqual([
    expect.stringMatching(/^seg-\d+\.log: \d+ zero bytes at offset \d+ after the last record \(preallocated space/),
  ]);
  expect(r.notes.join('\n')).not.toMatch(/torn/);
});

test('aTornRecordFollowedByPreallocatedZerosIsToldApartFromTheZeros', async () => {
  const dir = freshDir();
  const { store } = await openStore(dir);
  await store.append(items(1, ['a', 'b']), true);
  const copy = crashCopy(dir);
  await store.close();
  const seg = join(copy, segFiles(copy)[0]!);
  const size = fs.statSync(seg).size;
  const end = SEGMENT_HEADER_BYTES + 2 * (FRAME_HEADER_BYTES + 1);
  // The first 7 bytes of a third frame made it to disk; the preallocated zeros follow.
  const fd = fs.openSync(seg, 'r+');
  fs.writeSync(fd, Uint8Array.from([9, 9, 9, 9, 1, 0, 0]), 0, 7, end);
  fs.closeSync(fd);
  const r = verifyStore(copy, { fs: nodeFileSystem });
  expect(r.problems).toEqual([]);
  expect(r.notes).toEqual([
    `${segFiles(copy)[0]}: torn tail of 5 bytes at offset ${end}, then ${size - end - 5} zero bytes of preallocated space (cut at the next open)`,
  ]);
});

test('aFlippedByteInRecordTwoOfFiveCountsTheFourIntactRecordsAndReportsNoFollowOnProblem', async () => {
  const dir = freshDir();
  const { store } = await openStore(dir, { preallocate: false });
  for (let seq = 1; seq <= 5; seq++) await store.append(items(seq, [`item-${seq}`]), true);
  await store.close();
  const seg = join(dir, segFiles(dir)[0]!);
  const second = SEGMENT_HEADER_BYTES + FRAME_HEADER_BYTES + 6;
  flipByte(seg, second + FRAME_HEADER_BYTES + 3);
  const before = hashDir(dir);
  const r = verifyStore(dir, { fs: nodeFileSystem });
  expect(r.records).toBe(4);
  expect(r.problems).toEqual([
    {
      file: seg,
      offset: second,
      end: second + FRAME_HEADER_BYTES + 6,
      lostSeqs: [{ first: 2, last: 2 }],
      reason: expect.stringMatching(/damaged at offset \d+: damaged frame followed by valid data \(tail table row 2\)$/),
    },
  ]);
  expect(hashDir(dir)).toEqual(before);
});

test('aPermissionErrorAnywhereIsAProblemOfTheResultNeverAThrow', async () => {
  const dir = freshDir();
  const { store } = await openStore(dir);
  await store.close();
  for (const op of ['stat', 'readdir', 'open'] as const) {
    const denied = new WrappedFs(nodeFileSystem);
    denied[op] = () => {
      throw errno('EACCES');
    };
    const r = verifyStore(dir, { fs: denied });
    expect(r.problems.length, op).toBeGreaterThan(0);
    expect(
      r.problems.every((p) => /EACCES/.test(p.reason)),
      op,
    ).toBe(true);
  }
});

/**
 * A FileSystem beside a live writer (its lock names process 4242) whose `act` lands at the open of
 * `target` numbered `at` (counted from 1; 0: never): before that open (`'open'`), or once the
 * opener has taken the file's size (`'size'`). `opens` counts the opens of `target`, `acts` the
 * writer's changes made.
 */
class LiveWriterFs extends WrappedFs {
  opens = 0;
  acts = 0;
  #sizedFd = -1;
  constructor(
    readonly target: string,
    readonly at: number,
    readonly when: 'open' | 'size',
    readonly act: () => void,
  ) {
    super(nodeFileSystem);
  }
  override lockHolder() {
    return { pid: 4242 };
  }
  override open(p: string, mode: 'read' | 'readWrite' | 'create', fm?: number) {
    const landing = p === this.target && ++this.opens === this.at;
    if (landing && this.when === 'open') this.#act();
    const fd = super.open(p, mode, fm);
    if (landing && this.when === 'size') this.#sizedFd = fd;
    return fd;
  }
  override size(fd: number) {
    const size = super.size(fd);
    if (fd === this.#sizedFd) {
      this.#sizedFd = -1;
      this.#act();
    }
    return size;
  }
  #act(): void {
    this.acts++;
    this.act();
  }
}

/**
 * Beside a live writer, which deletes a segment once every record in it is acked and cuts the
 * active segment's preallocated zeros before sealing it, a segment can change between the plan and
 * the walk's read. `after` is the store as the writer left it: its cursor is put in place when the
 * walk comes to `first`, which is then deleted (`delete`) or, once the walk has opened it and
 * taken its size, cut to its header (`cut`).
 */
function writerMidRead(first: string, after: string, dir: string, change: 'delete' | 'cut', at: number): LiveWriterFs {
  return new LiveWriterFs(first, at, change === 'delete' ? 'open' : 'size', () => {
    if (change === 'delete') fs.rmSync(first);
    else fs.truncateSync(first, SEGMENT_HEADER_BYTES);
    fs.copyFileSync(join(after, 'cursor.pqc'), join(dir, 'cursor.pqc'));
  });
}

interface WriterCase {
  readonly what: string;
  readonly change: 'delete' | 'cut';
  readonly ackedNow: boolean;
  readonly dir: string;
  readonly first: string;
  readonly firstName: string;
  readonly secondBase: number;
  /** A FileSystem on which the writer's change lands at the open of the first segment numbered `at` (0: never). */
  readonly writer: (at: number) => LiveWriterFs;
}

/**
 * Each case of a segment changed by a live writer under a read (deleted or cut; its records acked
 * by the cursor then or not): a rolled store, and the store as the writer left it in `${dir}-after`.
 */
async function* writerCases(): AsyncGenerator<WriterCase> {
  for (const change of ['delete', 'cut'] as const)
    for (const ackedNow of [true, false]) {
      const dir = await rolled();
      const [firstName, secondName] = segFiles(dir);
      const first = join(dir, firstName!);
      const secondBase = Number(/\d{20}/.exec(secondName!)![0]);
      const after = `${dir}-after`;
      fs.cpSync(dir, after, { recursive: true });
      if (ackedNow) {
        // The writer acks the first segment's records (3 and 4 were acked already).
        const { store } = await openStore(after, { segmentBytes: 256, autoCompact: false });
        const seqs = Array.from({ length: secondBase - 1 }, (_, i) => i + 1).filter((s) => s !== 3 && s !== 4);
        await store.ack(seqs, true);
        await store.close();
      }
      const writer = (at: number): LiveWriterFs => writerMidRead(first, after, dir, change, at);
      yield {
        what: `${change}, ${ackedNow ? 'acked' : 'not acked'} now`,
        change,
        ackedNow,
        dir,
        first,
        firstName: firstName!,
        secondBase,
        writer,
      };
    }
}

/** The first segment as the writer left it: gone, or cut to its header. */
function expectChanged(c: WriterCase): void {
  expect(fs.existsSync(c.first) ? fs.statSync(c.first).size : -1, `${c.what}: the writer changed the first segment`).toBe(
    c.change === 'delete' ? -1 : SEGMENT_HEADER_BYTES,
  );
}

/** The unacked seqs the first segment held: what its loss costs. */
const lostOfFirst = (c: WriterCase) => [
  { first: 1, last: 2 },
  { first: 5, last: c.secondBase - 1 },
];

test('besideALiveWriterASegmentChangedDuringTheReadIsANoteWhenTheCursorAcksItsRecordsNow_andAProblemWhenNot', async () => {
  for await (const c of writerCases()) {
    const { what } = c;
    // A dry run counts the opens of the first segment: the walk's is the last.
    const dry = c.writer(0);
    expect(verifyStore(c.dir, { fs: dry }).problems, what).toEqual([]);
    const r = verifyStore(c.dir, { fs: c.writer(dry.opens) });
    expectChanged(c);
    if (c.ackedNow) {
      expect(r.problems, what).toEqual([]);
      expect(r.notes.join('\n'), what).toContain(`${c.firstName}: changed by the live writer while verify read it`);
    } else {
      // Unacked records were in it: damage, with the seqs it cost.
      expect(r.problems, what).toHaveLength(1);
      expect(r.problems[0], what).toMatchObject({ file: c.first, lostSeqs: lostOfFirst(c) });
      expect(r.notes.join('\n'), what).not.toContain('changed by the live writer');
    }
  }
});

test('salvageBesideALiveWriter_aSegmentChangedDuringTheReadCostsNothingWhenTheCursorAcksItsRecordsNow_andIsLostWhenNot', async () => {
  for await (const c of writerCases()) {
    const { what } = c;
    const dry = c.writer(0);
    expect((await salvageStore(c.dir, `${c.dir}-dry`, { fs: dry })).lost.count, what).toBe(0);
    const r = await salvageStore(c.dir, `${c.dir}-copy`, { fs: c.writer(dry.opens) });
    expectChanged(c);
    // The second segment's items are copied either way.
    expect(r.copied, what).toBe(24 - (c.secondBase - 1));
    if (c.ackedNow) {
      expect(r.lost, what).toEqual({ count: 0, seqs: [] });
      expect(r.damaged, what).toEqual([]);
      expect(r.notes.join('\n'), what).toContain(`${c.firstName}: changed by the live writer while salvage read it`);
    } else {
      expect(r.lost, what).toEqual({ count: c.secondBase - 3, seqs: lostOfFirst(c) });
      expect(r.damaged, what).toHaveLength(1);
      expect(r.damaged[0], what).toMatchObject({ file: c.first, lostSeqs: lostOfFirst(c) });
      expect(r.notes.join('\n'), what).not.toContain('changed by the live writer');
    }
  }
});

/**
 * A live writer rolls while verify or salvage plans: once the plan has taken the active segment's
 * size at its first open, the writer cuts the segment's preallocated zeros off at `dataEnd` (as
 * before every seal), and the plan's read past the new end comes up short.
 */
const rollMidPlan = (active: string, dataEnd: number): LiveWriterFs =>
  new LiveWriterFs(active, 1, 'size', () => fs.truncateSync(active, dataEnd));

test('besideALiveWriterThatCutsTheActiveSegmentsZerosWhileThePlanReadsIt_verifyAndSalvagePlanAgainAndFindNothingWrong', async () => {
  const dir = freshDir();
  const { store } = await openStore(dir);
  const texts = Array.from({ length: 40 }, (_, i) => `item-${i}`);
  await store.append(items(1, texts), true);
  // The directory as the writer has it: records, then the preallocated zeros ahead of them.
  const live = `${dir}-live`;
  fs.cpSync(dir, live, { recursive: true });
  await store.close();
  const [activeName] = segFiles(live);
  const active = join(live, activeName!);
  const dataEnd = SEGMENT_HEADER_BYTES + texts.reduce((n, t) => n + FRAME_HEADER_BYTES + t.length, 0);
  expect(fs.statSync(active).size, 'the copy holds preallocated zeros past its records').toBeGreaterThan(dataEnd + 1024 * 1024);
  const restore = (): void => fs.cpSync(join(dir, activeName!), active);
  // The plan opens the active segment first: the cut lands under that read.
  const v = rollMidPlan(active, dataEnd);
  const r = verifyStore(live, { fs: v });
  expect(v.acts, 'the writer cut the zeros under the plan').toBe(1);
  expect(r.problems).toEqual([]);
  expect(r.records).toBe(40);
  fs.truncateSync(active, 0);
  restore();
  const s = rollMidPlan(active, dataEnd);
  const copied = await salvageStore(live, `${dir}-copy`, { fs: s });
  expect(s.acts).toBe(1);
  expect(copied.lost).toEqual({ count: 0, seqs: [] });
  expect(copied.copied).toBe(40);
});
