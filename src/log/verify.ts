// Runs the checks of FORMAT.md §6 over every file, read-only (`pq verify`).
/**
 * A full, read-only check of a store directory: the recovery plan of open (every file-level check
 * of §6.2 and the tail rule of §6.1 over the active segment and the cursor), then every frame of
 * every sealed segment with the same frame rules the reader and compaction use. It never writes,
 * locks or deletes anything, so it can run on a damaged store or one in use (whose active segment
 * may then end in a record still being written). Problems are what open or a read would report as
 * corruption; notes are what open would tidy.
 */
import { join } from 'node:path';
import type { OpenError } from '../errors.js';
import type { FileSystem } from '../fs/file-system.js';
import { CURSOR_FILE, MAX_RANGES_PER_RECORD, SEGMENT_HEADER_BYTES, classifyEntry } from './format.js';
import { FileWindow, FrameReader } from './frame-reader.js';
import { MISSING_SEAL, SegmentFrames } from './frame-rules.js';
import type { Segment } from './layout.js';
import { damaged } from './reader.js';
import { planRecovery, type RecoveryPlan } from './recovery-plan.js';

export interface VerifyProblem {
  readonly file: string;
  readonly offset: number;
  readonly reason: string;
}

export interface VerifyResult {
  /** Store files checked (segments and cursor). */
  readonly files: number;
  /** ITEM frames checked. */
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

export function verifyStore(dir: string, options: VerifyOptions = {}): VerifyResult {
  const fs = options.fs;
  if (fs === undefined) throw new TypeError('Expected `fs` to be a FileSystem: this entry has no default (the `persistent-queue` entry uses node:fs)');
  const problems: VerifyProblem[] = [];
  const notes: string[] = [];
  const st = fs.stat(dir);
  if (st === null || !st.isDirectory) {
    problems.push({ file: dir, offset: 0, reason: st === null ? 'no such directory' : 'not a directory' });
    return { files: 0, records: 0, bytes: 0, problems, notes };
  }
  const problem = (e: unknown, file: string): void => {
    const q = e as OpenError;
    if (q !== null && typeof q === 'object' && (q.code === 'ERR_CORRUPT' || q.code === 'ERR_UNSUPPORTED_VERSION' || q.code === 'ERR_STORE')) {
      problems.push({ file: q.file ?? file, offset: q.offset ?? 0, reason: q.message });
    } else {
      problems.push({ file, offset: 0, reason: `cannot read: ${(e as Error)?.message ?? String(e)}` });
    }
  };
  let plan: RecoveryPlan;
  try {
    plan = planRecovery(fs, dir, { maxRangesPerRecord: MAX_RANGES_PER_RECORD, readAheadBytes: CHUNK_BYTES, onProblem: (p) => problem(p, dir) });
  } catch (e) {
    problem(e, dir);
    return { files: 0, records: 0, bytes: 0, problems, notes };
  }
  for (const n of plan.names) {
    const kind = classifyEntry(n);
    if (kind === 'tmp') notes.push(`${n}: stray tmp file (deleted, unread, at the next open)`);
    else if (kind === 'torn') notes.push(`${n}: bytes cut off a torn tail by an earlier recovery`);
  }
  for (const n of plan.superseded) notes.push(`${n}: superseded by a compacted segment (deleted at the next open)`);
  for (const n of plan.stray) if (classifyEntry(n) === 'segment') notes.push(`${n}: a segment whose creation was interrupted (deleted at the next open)`);

  const cursorBytes = plan.cursor !== null ? (fs.stat(join(dir, CURSOR_FILE))?.size ?? 0) : 0;
  const total = plan.segments.reduce((sum, s) => sum + s.bytes, 0) + cursorBytes;
  let bytes = 0;
  let records = 0;
  let files = 0;
  const active = plan.activeScan;
  for (let i = 0; i < plan.segments.length; i++) {
    const s = plan.segments[i]!;
    files++;
    if (i === plan.segments.length - 1 && active !== null) {
      records += active.records;
      const size = fs.stat(s.path)?.size ?? s.bytes;
      if (active.row.verdict === 'torn') notes.push(tailNote(s.name, size - active.validEnd, active.validEnd, active.tornZero));
    } else {
      try {
        records += verifySealed(fs, s);
      } catch (e) {
        problem(e, s.path);
      }
    }
    bytes += s.bytes;
    options.onProgress?.(bytes, total);
  }
  if (plan.cursor !== null) {
    files++;
    const size = cursorBytes;
    bytes += size;
    if (plan.cursor.row.verdict === 'torn') notes.push(tailNote(CURSOR_FILE, size - plan.cursor.validEnd, plan.cursor.validEnd, plan.cursor.tornZero));
  }
  options.onProgress?.(bytes, total);
  return { files, records, bytes, problems, notes };
}

function tailNote(name: string, cutBytes: number, offset: number, zero: boolean): string {
  return zero
    ? `${name}: ${cutBytes} zero bytes at offset ${offset} after the last record (preallocated space; trimmed at the next open)`
    : `${name}: torn tail of ${cutBytes} bytes at offset ${offset} (cut at the next open)`;
}

/** Every frame of a sealed segment, with the reader's rules; returns the ITEM count. */
function verifySealed(fs: FileSystem, s: Segment): number {
  const fd = fs.open(s.path, 'read');
  try {
    const rules = new SegmentFrames(s.base, s.compacted, s.seal);
    const frames = new FrameReader(new FileWindow(fs, fd, s.bytes, CHUNK_BYTES), SEGMENT_HEADER_BYTES, rules);
    for (;;) {
      const verdict = frames.next();
      if (verdict === 'record') {
        frames.accept();
        continue;
      }
      if (verdict === 'end' && rules.seal !== null) return rules.records;
      const reason = verdict === 'end' ? MISSING_SEAL : frames.reason();
      throw damaged(s, frames.offset, reason);
    }
  } finally {
    fs.close(fd);
  }
}
