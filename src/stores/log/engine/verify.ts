// Runs the checks of FORMAT.md §6 over every file, read-only (`pq verify`).
/**
 * A full, read-only check of a store directory: the recovery plan of open (every file-level check
 * of §6.2 and the tail rule of §6.1 over the active segment and the cursor), then every frame of
 * every segment with the same frame rules the reader and compaction use (`./store-walk.ts`),
 * going on past damage so that every damaged range is reported, with the seqs it cost, and every
 * intact record after it is counted. It never writes, locks or deletes anything, so it can run on
 * a damaged store or one in use: a store another process holds is read as a live writer's (the
 * tail table's `liveWriter`), whose active segment ends in a record still being written. Problems are what open or a read would report as corruption; notes are what open
 * would tidy. Problems that only follow from damage already reported are left out.
 */
import { FileWindow, FrameReader } from './frame-reader.js';
import { decodeSpoolHeader, spoolFileIds, SpoolFrames } from './spool-file.js';
import { basename, join } from 'node:path';
import type { OpenError } from '../../../contract/errors.js';
import type { FileSystem } from '../../../fs/file-system.js';
import {
  CURSOR_FILE,
  IDENTITY_FILE,
  LOCK_FILE,
  MAX_RANGES_PER_RECORD,
  SPOOL_DIR,
  SPOOL_HEADER_BYTES,
  SPOOL_SUFFIX,
  classifyEntry,
} from './format.js';
import type { RecoveryPlan } from './recovery-plan.js';
import { planBesideWriter } from './read-only.js';
import { FILE_CHECKS } from './recovery-checks.js';
import { liveHolder } from './store-dir.js';
import { StoreWalk, knownAcks, walkSegments, type DamagedRange, type SeqRange, type TailCut, type WalkSegment } from './store-walk.js';
import type { AckSet } from './cursor.js';

export interface VerifyProblem {
  readonly file: string;
  readonly offset: number;
  readonly reason: string;
  /** Damage inside a segment: where intact frames start again (the file's size when none follows). */
  readonly end?: number;
  /** Damage inside a segment: the unacked seqs whose records lay in the damaged bytes. */
  readonly lostSeqs?: readonly SeqRange[];
}

export interface VerifyResult {
  /** Store files checked (segments and cursor). */
  readonly files: number;
  /** Intact ITEM frames, those after damage included. */
  readonly records: number;
  /** Bytes read. */
  readonly bytes: number;
  readonly problems: VerifyProblem[];
  readonly notes: string[];
}

export interface VerifyOptions {
  /** @default the node:fs FileSystem, through the `persistent-queue` entry point */
  readonly fs?: FileSystem;
  /** Called after each file with the bytes checked so far and the total. */
  readonly onProgress?: ((doneBytes: number, totalBytes: number) => void) | undefined;
}

const CHUNK_BYTES = 1024 * 1024;

/** The reason given for a directory that holds no store file. */
export function notAStore(dir: string): string {
  return `${dir} is not a store: it holds no segment or cursor file`;
}

export function verifyStore(dir: string, options: VerifyOptions = {}): VerifyResult {
  const fs = options.fs;
  if (fs === undefined)
    throw new TypeError('Expected `fs` to be a FileSystem: this entry has no default (the `persistent-queue` entry uses node:fs)');
  const problems: VerifyProblem[] = [];
  const notes: string[] = [];
  let st;
  try {
    st = fs.stat(dir);
  } catch (e) {
    // Like a missing directory, an unreadable path is a problem of the result, not a throw.
    problems.push({ file: dir, offset: 0, reason: `cannot read: ${(e as Error)?.message ?? String(e)}` });
    return { files: 0, records: 0, bytes: 0, problems, notes };
  }
  if (st === null || !st.isDirectory) {
    problems.push({ file: dir, offset: 0, reason: st === null ? 'no such directory' : 'not a directory' });
    return { files: 0, records: 0, bytes: 0, problems, notes };
  }
  const problem = (e: unknown, file: string): void => {
    problems.push(toProblem(e, file));
  };
  let plan: RecoveryPlan;
  const planProblems: OpenError[] = [];
  // A live writer's active segment ends in its write in progress: read up to its last whole record.
  const holder = liveHolder(fs, dir);
  const liveWriter = holder !== null;
  try {
    plan = planFor(fs, dir, planProblems, liveWriter);
  } catch (e) {
    for (const p of planProblems) problem(p, dir);
    problem(e, dir);
    return { files: 0, records: 0, bytes: 0, problems, notes };
  }
  if (!plan.names.some((n) => classifyEntry(n) === 'segment' || classifyEntry(n) === 'cursor')) {
    // Open would make a new store here; verify says what the directory is.
    for (const p of planProblems) problem(p, dir);
    problems.push({ file: dir, offset: 0, reason: notAStore(dir) });
    return { files: 0, records: 0, bytes: 0, problems, notes };
  }
  for (const n of plan.names) {
    const kind = classifyEntry(n);
    if (kind === 'tmp') notes.push(`${n}: stray tmp file (deleted, unread, at the next open)`);
    else if (kind === 'torn') notes.push(`${n}: bytes cut off a torn tail by an earlier recovery`);
  }
  if (plan.identity === null && !plan.names.includes(IDENTITY_FILE))
    notes.push(`${IDENTITY_FILE}: missing (a store written before identities; the next open writes one)`);
  for (const n of plan.superseded) notes.push(`${n}: superseded by a compacted segment (deleted at the next open)`);
  for (const n of plan.stray)
    if (classifyEntry(n) === 'segment') notes.push(`${n}: a segment whose creation was interrupted (deleted at the next open)`);

  const segments = walkSegments(fs, dir, plan);
  const cursorBytes = plan.cursor !== null ? (fs.stat(join(dir, CURSOR_FILE))?.size ?? 0) : 0;
  const total = segments.reduce((sum, s) => sum + (fs.stat(s.path)?.size ?? 0), 0) + cursorBytes;
  // A damaged cursor is a problem of its own; the acks still known keep the lost seqs exact.
  const { acks, firstSeq, durableNextSeq } = knownAcks(fs, dir, plan, planProblems);
  const walk = new StoreWalk(fs, segments, { acks, firstSeq, durableNextSeq, chunkBytes: CHUNK_BYTES, liveWriter }, (w) =>
    options.onProgress?.(w.bytesDone, total),
  );
  if (holder !== null) notes.push(liveWriterNote(holder));
  for (const _ of walk.walk());
  const changed = liveWriter ? changedByWriter(fs, dir, walk.damages) : [];
  for (const d of changed)
    notes.push(
      `${basename(d.file)}: changed by the live writer while verify read it (deleted, or its preallocated zeros cut before a seal); the cursor acks every record verify had not seen acked there`,
    );
  problems.push(...storeProblems(dir, plan, planProblems, segments, walk, new Set(changed)));
  for (const t of walk.tails) notes.push(tailNote(segments.find((s) => s.path === t.file)!.name, t));
  let files = walk.files;
  if (plan.cursor !== null) {
    files++;
    const c = plan.cursor;
    // Beside a live writer the cursor's last record may be a write in progress, and the file may
    // be replaced by a checkpoint under the read (its size then is another file's): no tail of it
    // is called torn, as none of the active segment's is.
    if (c.row.verdict === 'torn' && holder === null && cursorBytes > c.validEnd) {
      notes.push(
        tailNote(CURSOR_FILE, {
          file: CURSOR_FILE,
          offset: c.validEnd,
          bytes: cursorBytes - c.validEnd,
          zeroBytes: c.tornZero ? cursorBytes - c.validEnd : 0,
        }),
      );
    }
  }
  const spool = checkSpool(fs, dir);
  files += spool.files;
  problems.push(...spool.problems);
  notes.push(...spool.notes);
  const bytes = walk.bytesDone + cursorBytes;
  options.onProgress?.(bytes, total);
  return { files, records: walk.records, bytes, problems, notes };
}

/**
 * The spool's files (FORMAT §14): a header that does not decode, or damage followed by valid
 * records, is a problem; a torn last record is a note (a producer writing, or one that died
 * mid-write, whose push never resolved).
 */
function checkSpool(fs: FileSystem, dir: string): { files: number; problems: VerifyProblem[]; notes: string[] } {
  const problems: VerifyProblem[] = [];
  const notes: string[] = [];
  const ids = spoolFileIds(fs, dir);
  for (const id of ids) {
    const path = join(dir, SPOOL_DIR, id + SPOOL_SUFFIX);
    let fd: number;
    try {
      fd = fs.open(path, 'read');
    } catch (e) {
      problems.push({ file: path, offset: 0, reason: `cannot read: ${(e as Error)?.message ?? String(e)}` });
      continue;
    }
    try {
      const size = fs.size(fd);
      const head = new Uint8Array(SPOOL_HEADER_BYTES);
      const header = decodeSpoolHeader(head.subarray(0, fs.read(fd, head, 0, head.length, 0)), size, id);
      if ('kind' in header) {
        problems.push({
          file: path,
          offset: header.kind === 'corrupt' ? header.offset : 0,
          reason: header.kind === 'corrupt' ? header.reason : `spool file version ${header.version} is newer than this release reads`,
        });
        continue;
      }
      const frames = new FrameReader(new FileWindow(fs, fd, size, CHUNK_BYTES), SPOOL_HEADER_BYTES, new SpoolFrames());
      let verdict = frames.next();
      while (verdict === 'record') {
        frames.accept();
        verdict = frames.next();
      }
      if (verdict === 'corrupt') problems.push({ file: path, offset: frames.offset, reason: frames.reason() });
      else if (verdict === 'torn')
        notes.push(
          `spool file ${id + SPOOL_SUFFIX}: ${size - frames.offset} byte(s) past its last whole record (a write in progress, or a producer that died mid-write)`,
        );
    } finally {
      fs.close(fd);
    }
  }
  return { files: ids.length, problems, notes };
}

/** The store's recovery plan as verify reads it, its problems collected into `problems`. */
function planFor(fs: FileSystem, dir: string, problems: OpenError[], liveWriter: boolean): RecoveryPlan {
  return planBesideWriter(fs, dir, { maxRangesPerRecord: MAX_RANGES_PER_RECORD, readAheadBytes: CHUNK_BYTES }, problems, liveWriter);
}

/**
 * Beside a live writer, the segments that changed under the walk (`DamagedRange.changed`) whose
 * records the walk could not read are all acked by the cursor as it is now: the writer deletes a
 * segment once every record in it is acked, and cuts the active segment's preallocated zeros
 * before sealing it; either may come between the plan and the walk's read. One whose records the
 * cursor does not ack now stays damage. The cursor is read again through a fresh plan; when that
 * fails, nothing is taken for the writer's doing.
 */
export function changedByWriter(fs: FileSystem, dir: string, damages: readonly DamagedRange[]): DamagedRange[] {
  const changed = damages.filter((d) => d.changed === true);
  if (changed.length === 0) return [];
  let acks: AckSet;
  try {
    const planProblems: OpenError[] = [];
    acks = knownAcks(fs, dir, planFor(fs, dir, planProblems, true), planProblems).acks;
  } catch {
    return [];
  }
  return changed.filter((d) => d.lostSeqs.every((r) => acks.ackedIn(r.first, r.last + 1) === r.last + 1 - r.first));
}

/** What verify and salvage say of a store another process had open as they read it. */
export function liveWriterNote(holder: { readonly pid: number | null }): string {
  const who = holder.pid !== null ? `process ${holder.pid}` : 'another process';
  return `${LOCK_FILE}: ${who} has the store open and is writing it: the active segment was read up to its last whole record (what follows is being written, not damage)`;
}

/** A problem found by the plan, or an error met while reading, as verify reports it. */
function toProblem(e: unknown, file: string): VerifyProblem {
  const q = e as OpenError;
  if (q !== null && typeof q === 'object' && (q.code === 'ERR_CORRUPT' || q.code === 'ERR_UNSUPPORTED_VERSION' || q.code === 'ERR_STORE')) {
    return { file: q.file ?? file, offset: q.offset ?? 0, reason: q.message };
  }
  return { file, offset: 0, reason: `cannot read: ${(e as Error)?.message ?? String(e)}` };
}

/**
 * The problems of a store once its segments were walked: the plan's, without those that only
 * follow from damage the walk reports, then each damaged range the walk found (one problem when
 * the plan saw the same damage first: a bad seal, the active segment's scan).
 */
export function storeProblems(
  dir: string,
  plan: RecoveryPlan,
  planProblems: readonly OpenError[],
  segments: readonly WalkSegment[],
  walk: StoreWalk,
  notDamage: ReadonlySet<DamagedRange> = new Set(),
): VerifyProblem[] {
  // When the plan's scan of the active segment met damage, the plan knows none of its data, so the
  // checkpoint looks ahead of the data (file check 15); the walk reports the damage and what it cost.
  const activeFailed = plan.activeScan === null && segments.at(-1)?.active === true;
  const knockOn = `(file check ${FILE_CHECKS.dataBehindCheckpoint.id})`;
  const problems = planProblems.filter((p) => !(activeFailed && p.message.includes(knockOn))).map((p) => toProblem(p, dir));
  for (const d of walk.damages) {
    if (notDamage.has(d)) continue;
    const damage = { end: d.end, lostSeqs: d.lostSeqs };
    const same = problems.findIndex((p) => p.file === d.file && p.offset === d.offset);
    if (same >= 0) problems[same] = { ...problems[same]!, ...damage };
    else
      problems.push({
        file: d.file,
        offset: d.offset,
        reason: d.budgetSpent ? `${d.reason}; no intact frame was found after it within the resync search's budget` : d.reason,
        ...damage,
      });
  }
  return problems;
}

/** What open will cut off the end of a file: preallocated zeros, a torn record, or a torn record and then zeros. */
function tailNote(name: string, t: TailCut): string {
  if (t.zeroBytes === t.bytes)
    return `${name}: ${t.bytes} zero bytes at offset ${t.offset} after the last record (preallocated space; trimmed at the next open)`;
  const torn = t.bytes - t.zeroBytes;
  const zeros = t.zeroBytes > 0 ? `, then ${t.zeroBytes} zero bytes of preallocated space` : '';
  return `${name}: torn tail of ${torn} bytes at offset ${t.offset}${zeros} (cut at the next open)`;
}
