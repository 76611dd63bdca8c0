// Implements the checks of FORMAT.md §6 over every file, read-only (`pq verify`).
/**
 * A full, read-only check of a store directory: every header, every frame of every segment
 * (CRC, bounds, seq order, seal), the chain of segments and the cursor. Unlike open, it reads the
 * sealed segments' records too, and it never writes, locks or deletes anything, so it can run on a
 * damaged store (or one in use: the active segment may then show a torn tail that is still being
 * written). Problems are what open or a read would report as corruption; notes are what open
 * would tidy (torn tails, stray tmp files, superseded segments).
 */
import { join } from 'node:path';
import type { QueueError } from '../errors.js';
import type { FileSystem } from './file-system.js';
import { CURSOR_FILE, SEG_FLAG_COMPACTED, SEGMENT_HEADER_BYTES, classifyEntry, parseSegmentName } from './format.js';
import { getDefaultFileSystem, readCursor, scanActive, type CursorRead } from './log-store.js';
import { decodeSegmentHeader, type SealInfo } from './segment.js';

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
  /** @default the node:fs FileSystem (when the package entry point is loaded) */
  readonly fs?: FileSystem;
  /** Called after each file with the bytes checked so far and the total. */
  readonly onProgress?: ((doneBytes: number, totalBytes: number) => void) | undefined;
}

const CHUNK_BYTES = 1024 * 1024;

export function verifyStore(dir: string, options: VerifyOptions = {}): VerifyResult {
  const fs = options.fs ?? getDefaultFileSystem();
  if (fs === undefined) throw new TypeError('No default FileSystem: import from the package entry point, or pass `fs`');
  const problems: VerifyProblem[] = [];
  const notes: string[] = [];
  let files = 0;
  let records = 0;
  let bytes = 0;
  const st = fs.stat(dir);
  if (st === null || !st.isDirectory) {
    problems.push({ file: dir, offset: 0, reason: st === null ? 'no such directory' : 'not a directory' });
    return { files, records, bytes, problems, notes };
  }
  const names = fs.readdir(dir).sort();
  const segs: { name: string; path: string; base: number; size: number }[] = [];
  let hasCursor = false;
  let total = 0;
  for (const n of names) {
    const kind = classifyEntry(n);
    const path = join(dir, n);
    if (kind === 'segment') {
      const size = fs.stat(path)?.size ?? 0;
      segs.push({ name: n, path, base: parseSegmentName(n)!, size });
      total += size;
    } else if (kind === 'cursor') {
      hasCursor = true;
      total += fs.stat(path)?.size ?? 0;
    } else if (kind === 'tmp') notes.push(`${n}: stray tmp file (deleted, unread, at the next open)`);
    else if (kind === 'torn') notes.push(`${n}: bytes cut off a torn tail by an earlier recovery`);
    else if (kind === 'foreign') problems.push({ file: path, offset: 0, reason: 'not a store file (open refuses a directory holding it)' });
  }
  segs.sort((a, b) => a.base - b.base);
  const problem = (e: unknown, file: string): void => {
    const q = e as QueueError;
    if (q !== null && typeof q === 'object' && (q.code === 'ERR_CORRUPT' || q.code === 'ERR_UNSUPPORTED_VERSION')) {
      problems.push({ file: q.file ?? file, offset: q.offset ?? 0, reason: q.message });
    } else {
      problems.push({ file, offset: 0, reason: `cannot read: ${(e as Error)?.message ?? String(e)}` });
    }
  };

  // Headers first: which segments a completed compaction superseded.
  const headers = new Map<string, { flags: number; replacesEndSeq: number }>();
  const hbuf = new Uint8Array(SEGMENT_HEADER_BYTES);
  for (const s of segs) {
    let fd = -1;
    try {
      fd = fs.open(s.path, 'read');
      let got = 0;
      while (got < Math.min(SEGMENT_HEADER_BYTES, s.size)) {
        const n = fs.read(fd, hbuf, got, SEGMENT_HEADER_BYTES - got, got);
        if (n === 0) break;
        got += n;
      }
      const h = decodeSegmentHeader(hbuf.subarray(0, got), s.size);
      if ('kind' in h) {
        problems.push({
          file: s.path,
          offset: h.kind === 'unsupported' ? 4 : h.offset,
          reason: h.kind === 'unsupported' ? `format version ${h.version} is newer than this reader` : h.reason,
        });
      } else {
        headers.set(s.name, h);
        if (h.baseSeq !== s.base) problems.push({ file: s.path, offset: 12, reason: 'header base seq does not match the file name' });
      }
    } catch (e) {
      problem(e, s.path);
    } finally {
      if (fd >= 0) fs.close(fd);
    }
  }
  const superseded = new Set<string>();
  for (const s of segs) {
    const h = headers.get(s.name);
    if (h === undefined || (h.flags & SEG_FLAG_COMPACTED) === 0) continue;
    for (const o of segs) if (o.base > s.base && o.base < h.replacesEndSeq) superseded.add(o.name);
  }
  for (const n of superseded) notes.push(`${n}: superseded by a compacted segment (deleted at the next open)`);
  const layout = segs.filter((s) => headers.has(s.name) && !superseded.has(s.name));

  // Every frame of every segment.
  let prevSeal: SealInfo | null = null;
  let dataNext = 1;
  for (let i = 0; i < layout.length; i++) {
    const s = layout[i]!;
    const last = i === layout.length - 1;
    files++;
    let fd = -1;
    try {
      fd = fs.open(s.path, 'read');
      if (prevSeal !== null && s.base !== prevSeal.endSeq) {
        problems.push({ file: s.path, offset: 0, reason: `segment gap: the previous segment ends at seq ${prevSeal.endSeq}, this one starts at ${s.base}` });
      }
      const scan = scanActive(fs, fd, s.path, s.base, s.size, 0, CHUNK_BYTES);
      records += scan.records;
      if (scan.row.verdict === 'torn') {
        if (last) notes.push(`${s.name}: torn tail of ${s.size - scan.validEnd} bytes at offset ${scan.validEnd} (cut at the next open)`);
        else problems.push({ file: s.path, offset: scan.validEnd, reason: `sealed segment damaged: ${scan.row.label}` });
      }
      if (!last && scan.seal === null && scan.row.verdict !== 'torn') {
        problems.push({ file: s.path, offset: scan.validEnd, reason: 'sealed segment does not end in a seal record' });
      }
      prevSeal = scan.seal;
      dataNext = scan.seal !== null ? scan.seal.endSeq : Math.max(s.base, scan.lastSeq + 1);
    } catch (e) {
      problem(e, s.path);
      prevSeal = null;
    } finally {
      if (fd >= 0) fs.close(fd);
    }
    bytes += s.size;
    options.onProgress?.(bytes, total);
  }

  // The cursor, and how it fits the data.
  const cursorPath = join(dir, CURSOR_FILE);
  if (hasCursor) {
    files++;
    let fd = -1;
    let cursor: CursorRead | null = null;
    try {
      fd = fs.open(cursorPath, 'read');
      const size = fs.size(fd);
      cursor = readCursor(fs, fd, cursorPath);
      bytes += size;
      if (cursor.row.verdict === 'torn') notes.push(`${CURSOR_FILE}: torn tail of ${size - cursor.validEnd} bytes at offset ${cursor.validEnd} (cut at the next open)`);
    } catch (e) {
      problem(e, cursorPath);
    } finally {
      if (fd >= 0) fs.close(fd);
    }
    if (cursor !== null && layout.length > 0) {
      if (layout[0]!.base > cursor.acks.lwm) {
        problems.push({ file: layout[0]!.path, offset: 0, reason: `missing segment: seqs from ${cursor.acks.lwm} to ${layout[0]!.base - 1} are unacked but no segment holds them` });
      }
      if (cursor.checkpointNextSeq > dataNext) {
        problems.push({ file: layout[layout.length - 1]!.path, offset: 0, reason: `data ends at seq ${dataNext - 1} but the cursor checkpoint covers up to ${cursor.checkpointNextSeq - 1}` });
      }
    }
  } else if (layout.length > 0) {
    problems.push({ file: cursorPath, offset: 0, reason: 'the cursor file is missing' });
  }
  options.onProgress?.(bytes, total);
  return { files, records, bytes, problems, notes };
}
