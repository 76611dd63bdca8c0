// Implements FORMAT.md §6 "Recovery decision table": the read-only half of recovery.
/**
 * Recovery, part one: read the directory and decide everything, without writing a byte. Open
 * applies the plan (`./recovery-apply.ts`); `verify` runs the same plan and reports what it found.
 * Every file-level decision names its row of `FILE_CHECKS` (FORMAT.md §6.2); the torn-tail
 * decisions are rows of the tail table (§6.1), taken by `FrameReader`.
 */
import { join } from 'node:path';
import { OpenError } from '../../../contract/errors.js';
import type { FileSystem } from '../../../fs/file-system.js';
import { assertStore } from './assert.js';
import {
  AckSet,
  decodeCheckpointBody,
  decodeCheckpointDeliveries,
  decodeCheckpointHeader,
  decodeCheckpointKeys,
  decodeCheckpointSchedules,
  decodeCheckpointSpool,
  type SpoolEntry,
} from './cursor.js';
import { ScheduleTable } from '../../../contract/schedule-table.js';
import type { ScheduleRecord } from './schedule-format.js';
import type { StoredKey } from '../../../contract/store.js';
import type { DeliveryRecord } from './delivery-format.js';
import { DeliveryState } from './delivery-state.js';
import {
  CUR_FLAG_CLEAN,
  CUR_OFF_VERSION,
  CURSOR_FILE,
  CURSOR_FORMAT_VERSION,
  CURSOR_V5_HEADER_BYTES,
  IDENTITY_FILE,
  RECORD_DEAD,
  RECORD_DROP,
  RECORD_MARK,
  RECORD_SCHEDULE,
  SEGMENT_FORMAT_VERSION,
  SEGMENT_VERSION_PLAIN,
  SEGMENT_VERSION_GROUPS,
  SEGMENT_VERSION_KEYED,
  SEGMENT_VERSION_SCHEDULED,
  SEAL_FRAME_BYTES,
  SEG_FLAG_COMPACTED,
  SEG_OFF_BASE_SEQ,
  SEG_OFF_VERSION,
  SEGMENT_HEADER_BYTES,
  classifyEntry,
  parseSegmentName,
  segmentName,
} from './format.js';
import { FileWindow, scanFrames } from './frame-reader.js';
import { CursorFrames, SegmentFrames } from './frame-rules.js';
import { closeQuietly, newSegment, type Segment } from './layout.js';
import { readIdentity } from './identity.js';
import { FILE_CHECKS, checkFailed, damageAt } from './recovery-checks.js';
import { decodeSegmentHeader, decodeTrailingSeal, encodeSegmentHeader, type SealInfo } from './segment.js';
import { readFully } from './segment-writer.js';
import type { TailRow } from './tail.js';

/** What the scan of the active segment found. */
export interface ActiveScan {
  readonly row: TailRow;
  readonly validEnd: number;
  /**
   * End of the last record the cursor checkpoint knows durable (seq below its `nextSeq`), or 0
   * when no record of this segment is known durable (then even the header may not be).
   */
  readonly durableEnd: number;
  /** The cut tail is all zeros (preallocated space, or F3 padding), not torn records. */
  readonly tornZero: boolean;
  readonly records: number;
  readonly firstSeq: number;
  readonly lastSeq: number;
  /** The lowest segment version that holds every record (1 while they are plain). */
  readonly need: number;
  readonly seal: SealInfo | null;
}

/** What was read of the cursor file. */
export interface CursorRead {
  readonly acks: AckSet;
  /** Offset where the record log starts (the checkpoint's size). */
  readonly logStart: number;
  /** Number of the last valid record (0 when none). */
  readonly lastRecord: number;
  readonly checkpointNextSeq: number;
  readonly maxAckEnd: number;
  readonly clean: boolean;
  readonly row: TailRow;
  readonly validEnd: number;
  readonly tornZero: boolean;
  /** The checkpoint's version (1, 2 or 3). */
  readonly version: number;
  /** The idempotency keys of a version-3 checkpoint (none before), each of a seq below `checkpointNextSeq`. */
  readonly keys: readonly StoredKey[];
  /** The spool table of a version-4 checkpoint (none before): records ingested per spool file. */
  readonly spool: readonly SpoolEntry[];
  /** The schedules of a version-5 checkpoint, with the SCHEDULE and UNSCHEDULE records after it applied (none before version 5). */
  readonly schedules: ScheduleTable;
  /** Delivery marks and dead letters of the checkpoint and the records, redrives not yet applied. */
  readonly deliveries: DeliveryState;
  /** REDRIVE moves in record order, judged once the data's next seq is known (`planRecovery`). */
  readonly redrives: readonly { readonly from: number; readonly seq: number }[];
}

export interface RecoveryPlan {
  /** Store file names found, sorted. */
  readonly names: readonly string[];
  /** Files to delete, never read: tmp files and an interrupted segment creation. */
  readonly stray: readonly string[];
  /** Segments a completed compaction replaced. */
  readonly superseded: readonly string[];
  readonly segments: Segment[];
  readonly activeScan: ActiveScan | null;
  readonly cursor: CursorRead | null;
  readonly acks: AckSet;
  /** The seq after the recovered data. */
  readonly dataNext: number;
  /** The next seq to use: above `dataNext` when ACK records reference seqs past the data. */
  readonly raiseTo: number;
  /** Delivery marks (of unacked items below `raiseTo`) and dead letters, redrives applied. */
  readonly deliveries: DeliveryState;
  /**
   * REDRIVE moves whose new seq is not below `raiseTo`: they never happened (the dead letter is
   * held). Their records must not outlive this open, or a later item given that seq would make
   * them look done: open writes a fresh checkpoint and fails rather than reuse the cursor.
   */
  readonly voidRedrives: number;
  /** The store's identity from its identity file (FORMAT §13), or null when it has none. */
  readonly identity: string | null;
}

export interface PlanOptions {
  readonly maxRangesPerRecord: number;
  readonly readAheadBytes: number;
  /**
   * Where problems go. Open leaves it out: the first problem throws. `verify` collects them and
   * the plan goes on as far as it can.
   */
  readonly onProblem?: (problem: OpenError) => void;
  /**
   * Leave the segments' descriptors open, as their `readFd`: a read-only open reads the files it
   * planned from even after another process deleted or replaced them (compaction).
   */
  readonly keepReadFds?: boolean;
  /**
   * Another process holds the store: the active segment is scanned as a live writer's (tail table
   * input `liveWriter`), whose tail is a write in progress, not torn. A read-only open sets it.
   */
  readonly liveWriter?: boolean;
}

interface Found {
  readonly name: string;
  readonly path: string;
  readonly base: number;
  readonly size: number;
  readonly fd: number;
  readonly flags: number;
  readonly replacesEndSeq: number;
  readonly version: number;
}

/** `ERR_STORE` when the directory holds an entry that no store writes (FORMAT §5). */
export function foreignEntryProblem(dir: string, names: readonly string[]): OpenError | null {
  const foreign = names.filter((n) => classifyEntry(n) === 'foreign').sort();
  if (foreign.length === 0) return null;
  const shown = `${foreign.slice(0, 3).join(', ')}${foreign.length > 3 ? ', ...' : ''}`;
  return checkFailed(
    FILE_CHECKS.foreignFile,
    join(dir, foreign[0]!),
    0,
    `Directory ${dir} holds files that are not part of a store (${shown})`,
  );
}

/** Read the directory `dir` and decide what recovery does. Writes nothing. */
export function planRecovery(fs: FileSystem, dir: string, opts: PlanOptions): RecoveryPlan {
  const report =
    opts.onProblem ??
    ((p: OpenError): never => {
      throw p;
    });
  const names = fs.readdir(dir).sort();
  const foreign = foreignEntryProblem(dir, names);
  if (foreign !== null) report(foreign);
  const segNames = names.filter((n) => classifyEntry(n) === 'segment');
  const stray = names.filter((n) => classifyEntry(n) === 'tmp');
  const fds: number[] = [];
  try {
    const collecting = opts.onProblem !== undefined;
    const headers = readHeaders(fs, dir, segNames, fds, report, collecting);
    let identity: string | null = null;
    try {
      identity = readIdentity(fs, dir, names, report);
    } catch (e) {
      report(e instanceof OpenError ? e : cannotRead(join(dir, IDENTITY_FILE), e, collecting));
    }
    const cursorPath = join(dir, CURSOR_FILE);
    let cursor: CursorRead | null = null;
    if (names.includes(CURSOR_FILE)) {
      try {
        const fd = fs.open(cursorPath, 'read');
        fds.push(fd);
        cursor = readCursor(fs, fd, cursorPath, opts.maxRangesPerRecord);
      } catch (e) {
        report(e instanceof OpenError ? e : cannotRead(cursorPath, e, collecting));
      }
    }
    for (const p of headers.problems) report(p);
    const { layout, superseded } = supersede(headers.found);
    const acks = cursor?.acks ?? new AckSet(1);
    const checkpointNextSeq = cursor?.checkpointNextSeq ?? 1;
    const emptyStore = layout.length === 0 || (layout.length === 1 && layout[0]!.base === 1 && layout[0]!.size === SEGMENT_HEADER_BYTES);
    if (!names.includes(CURSOR_FILE) && !emptyStore) {
      report(checkFailed(FILE_CHECKS.cursorMissing, cursorPath, 0, 'the cursor file is missing but the store holds data'));
    }
    if (cursor !== null && layout.length === 0 && !(acks.lwm === 1 && checkpointNextSeq === 1 && acks.starts.length === 0)) {
      report(checkFailed(FILE_CHECKS.noSegments, join(dir, segmentName(acks.lwm)), 0, 'no segment files, but the cursor describes data'));
    }
    const segments = sealedSegments(fs, layout, report, collecting);
    let activeScan: ActiveScan | null = null;
    if (layout.length > 0) {
      const f = layout[layout.length - 1]!;
      const compacted = (f.flags & SEG_FLAG_COMPACTED) !== 0;
      try {
        activeScan = scanActive(
          fs,
          { fd: f.fd, path: f.path, base: f.base, size: f.size, compacted, version: f.version },
          { durableNextSeq: checkpointNextSeq, chunkBytes: opts.readAheadBytes, liveWriter: opts.liveWriter === true },
        );
        segments.push(
          newSegment({
            base: f.base,
            name: f.name,
            path: f.path,
            bytes: activeScan.validEnd,
            seal: activeScan.seal,
            compacted,
            version: f.version,
          }),
        );
        if (activeScan.seal === null && compacted) {
          report(checkFailed(FILE_CHECKS.compactedUnsealed, f.path, activeScan.validEnd, 'a compacted segment must end in a seal record'));
        }
      } catch (e) {
        report(e as OpenError);
      }
    }
    const last = segments[segments.length - 1];
    if (headers.tornCreated !== null) {
      // Only the segment a roll was creating: the one after a sealed segment, or the very first.
      const expected = last === undefined ? 1 : last.seal?.endSeq;
      if (expected !== headers.tornCreated.base) {
        report(
          checkFailed(
            FILE_CHECKS.tornHeaderElsewhere,
            join(dir, headers.tornCreated.name),
            0,
            'segment header is incomplete, and it is not the segment a roll was creating',
          ),
        );
      } else stray.push(headers.tornCreated.name);
    }
    const dataNext = last === undefined ? 1 : last.seal !== null ? last.seal.endSeq : Math.max(last.base, (activeScan?.lastSeq ?? 0) + 1);
    // A cursor file that could not be read (reported above) says nothing the data can be checked against.
    const cursorKnown = cursor !== null || !names.includes(CURSOR_FILE);
    if (cursorKnown) crossCheck(segments, acks, checkpointNextSeq, dataNext, cursorPath, report);
    // ACK records past the data can only come from an unsynced crash under `none`: those items
    // are gone. Raise nextSeq past them so a seq is never reused (a stale ACK record would
    // otherwise ack a new item on a later recovery), and mark the skipped seqs acked.
    const raiseTo = cursor !== null && cursor.maxAckEnd > dataNext ? cursor.maxAckEnd : dataNext;
    const { deliveries, voidRedrives } = judgeDeliveries(cursor, acks, dataNext, raiseTo);
    if (opts.keepReadFds === true) keepDescriptors(segments, headers.found, fds);
    return { names, stray, superseded, segments, activeScan, cursor, acks, dataNext, raiseTo, deliveries, voidRedrives, identity };
  } finally {
    for (const fd of fds) closeQuietly(fs, fd);
  }
}

/**
 * Redrives, judged against the recovered next seq: a move whose new seq is below it is done (its
 * item reached the segments, or a later record of the cursor refers to it: the dead letter is
 * gone); any other never happened. Then marks are kept only for items unacked below it, and the
 * delivered-below bound is not left above it.
 */
function judgeDeliveries(
  cursor: CursorRead | null,
  acks: AckSet,
  dataNext: number,
  raiseTo: number,
): { deliveries: DeliveryState; voidRedrives: number } {
  const deliveries = cursor?.deliveries ?? new DeliveryState();
  let voidRedrives = 0;
  const done: number[] = [];
  for (const m of cursor?.redrives ?? []) {
    if (m.seq < raiseTo) done.push(m.from);
    else voidRedrives++;
  }
  if (done.length > 0) deliveries.dropDead(done);
  // Seqs from `dataNext` on hold no item (the raise acks them at open): their marks go too.
  deliveries.pruneMarks(acks, dataNext);
  if (deliveries.deliveredBelow > raiseTo) deliveries.deliveredBelow = raiseTo;
  return { deliveries, voidRedrives };
}

/** Hand the descriptors of the planned segments over to them; the others are closed as usual. */
function keepDescriptors(segments: Segment[], found: readonly Found[], fds: number[]): void {
  for (const seg of segments) {
    const f = found.find((x) => x.name === seg.name)!;
    seg.readFd = f.fd;
    fds.splice(fds.indexOf(f.fd), 1);
  }
}

/** Pass 1: every segment header, versions first. */
function readHeaders(
  fs: FileSystem,
  dir: string,
  segNames: readonly string[],
  fds: number[],
  report: (p: OpenError) => void,
  collecting: boolean,
) {
  const found: Found[] = [];
  const problems: OpenError[] = [];
  let tornCreated: { name: string; base: number } | null = null;
  const hbuf = new Uint8Array(SEGMENT_HEADER_BYTES);
  for (const name of segNames) {
    const path = join(dir, name);
    let fd: number;
    let size: number;
    let n: number;
    try {
      fd = fs.open(path, 'read');
      fds.push(fd);
      size = fs.size(fd);
      n = readFully(fs, fd, hbuf, 0, Math.min(SEGMENT_HEADER_BYTES, size), 0);
    } catch (e) {
      report(cannotRead(path, e, collecting));
      continue;
    }
    const h = decodeSegmentHeader(hbuf.subarray(0, n), size);
    const base = parseSegmentName(name)!;
    if ('kind' in h) {
      if (h.kind === 'unsupported') {
        report(
          checkFailed(
            FILE_CHECKS.newerVersion,
            path,
            SEG_OFF_VERSION,
            `Segment ${name} has format version ${h.version}; this version reads up to ${SEGMENT_FORMAT_VERSION}`,
          ),
        );
        continue;
      }
      // A crash while the last segment was being created, before its header was durable, leaves
      // it empty, torn or zero-filled (F1/F3/F4). The writer fsyncs the header before any record
      // goes in, so such a file holds nothing.
      if (name === segNames[segNames.length - 1] && isTornSegmentCreation(hbuf.subarray(0, n), size, base)) {
        tornCreated = { name, base };
        continue;
      }
      problems.push(checkFailed(FILE_CHECKS.badSegmentHeader, path, h.offset, h.reason));
      continue;
    }
    if (h.baseSeq !== base) {
      problems.push(
        checkFailed(FILE_CHECKS.baseSeqMismatch, path, SEG_OFF_BASE_SEQ, `header base seq ${h.baseSeq} does not match the file name`),
      );
    }
    found.push({ name, path, base: h.baseSeq, size, fd, flags: h.flags, replacesEndSeq: h.replacesEndSeq, version: h.version });
  }
  return { found, problems, tornCreated };
}

/** Pass 2: a COMPACTED segment supersedes every segment whose base lies in the range it replaces. */
function supersede(found: Found[]): { layout: Found[]; superseded: string[] } {
  found.sort((a, b) => a.base - b.base);
  const superseded = new Set<string>();
  for (const f of found) {
    if ((f.flags & SEG_FLAG_COMPACTED) === 0) continue;
    for (const g of found) if (g.base > f.base && g.base < f.replacesEndSeq) superseded.add(g.name);
  }
  return { layout: found.filter((f) => !superseded.has(f.name)), superseded: [...superseded] };
}

/** Every segment but the last is sealed: read its trailing SEAL (not its records) and check the chain. */
function sealedSegments(fs: FileSystem, layout: readonly Found[], report: (p: OpenError) => void, collecting: boolean): Segment[] {
  const segments: Segment[] = [];
  const tbuf = new Uint8Array(SEAL_FRAME_BYTES);
  for (let i = 0; i < layout.length - 1; i++) {
    const f = layout[i]!;
    const at = f.size - SEAL_FRAME_BYTES;
    const compacted = (f.flags & SEG_FLAG_COMPACTED) !== 0;
    // When problems are collected (`verify`), a segment with a bad seal stays in the layout
    // without one, so that its frames are still checked and the checks after it are not thrown off.
    const keepUnsealed = (): void => {
      if (collecting)
        segments.push(newSegment({ base: f.base, name: f.name, path: f.path, bytes: f.size, seal: null, compacted, version: f.version }));
    };
    if (f.size < SEGMENT_HEADER_BYTES + SEAL_FRAME_BYTES) {
      report(checkFailed(FILE_CHECKS.badSeal, f.path, f.size, 'sealed segment too short for its seal record'));
      keepUnsealed();
      continue;
    }
    let seal: SealInfo | null;
    try {
      readFully(fs, f.fd, tbuf, 0, SEAL_FRAME_BYTES, at);
      seal = decodeTrailingSeal(tbuf);
    } catch (e) {
      report(cannotRead(f.path, e, collecting));
      keepUnsealed();
      continue;
    }
    if (seal === null || (seal.recordCount > 0 && seal.firstSeq < f.base)) {
      report(
        checkFailed(
          FILE_CHECKS.badSeal,
          f.path,
          at,
          seal === null ? 'sealed segment does not end in a valid seal record' : 'seal range below the base seq',
        ),
      );
      keepUnsealed();
      continue;
    }
    const next = layout[i + 1]!;
    if (next.base !== seal.endSeq) {
      report(
        checkFailed(
          FILE_CHECKS.chainBroken,
          next.path,
          0,
          `segment gap: the previous segment ends at seq ${seal.endSeq}, this one starts at ${next.base}`,
        ),
      );
    }
    segments.push(newSegment({ base: f.base, name: f.name, path: f.path, bytes: f.size, seal, compacted, version: f.version }));
  }
  return segments;
}

/** Pass 4: the cursor against the data. Marks the seqs sealed segments hold no record of as acked. */
function crossCheck(
  segments: readonly Segment[],
  acks: AckSet,
  checkpointNextSeq: number,
  dataNext: number,
  cursorPath: string,
  report: (p: OpenError) => void,
): void {
  const first = segments[0];
  const last = segments[segments.length - 1];
  if (first !== undefined && first.base > acks.lwm) {
    report(
      checkFailed(
        FILE_CHECKS.missingSegment,
        first.path,
        0,
        `missing segment: seqs from ${acks.lwm} to ${first.base - 1} are unacked but no segment holds them`,
      ),
    );
  }
  if (last !== undefined && checkpointNextSeq > dataNext) {
    report(
      checkFailed(
        FILE_CHECKS.dataBehindCheckpoint,
        last.path,
        last.bytes,
        `data ends at seq ${dataNext - 1} but the cursor checkpoint covers up to ${checkpointNextSeq - 1}`,
      ),
    );
  }
  // Seqs with no record in a sealed segment (before its first or after its last item) are acked
  // by definition: that keeps "unacked count = nextSeq - lwm - acked ranges" exact.
  for (const s of segments) {
    if (s.seal === null || s.seal.endSeq <= acks.lwm) continue;
    if (s.seal.recordCount === 0) acks.add(s.base, s.seal.endSeq);
    else {
      acks.add(s.base, s.seal.firstSeq);
      acks.add(s.seal.lastSeq + 1, s.seal.endSeq);
    }
  }
  // Every range came through AckSet.add from decoded, checked records: an inconsistent set is a
  // bug here, not damage on disk.
  const problem = acks.check();
  assertStore(problem === null, `recovered ack set of ${cursorPath}: ${problem}`);
}

/**
 * An I/O error reading `path`. Open lets it through as it is (it becomes `ERR_STORE` with the
 * error as `cause`, never corruption); `verify` reports it and goes on with the next file.
 */
function cannotRead(path: string, e: unknown, collecting: boolean): OpenError {
  if (!collecting) throw e;
  return new OpenError('ERR_STORE', `cannot read ${path}: ${(e as Error)?.message ?? String(e)}`, { cause: e, file: path });
}

/**
 * True when `bytes` (the whole file, `size` bytes) is what a crash can leave of a segment header
 * being created for `base`, of either version a roll writes (FORMAT §8): no longer than a header,
 * a prefix of the header, then only zeros.
 */
function isTornSegmentCreation(bytes: Uint8Array, size: number, base: number): boolean {
  return (
    isTornHeader(bytes, size, base, SEGMENT_VERSION_PLAIN) ||
    isTornHeader(bytes, size, base, SEGMENT_VERSION_SCHEDULED) ||
    isTornHeader(bytes, size, base, SEGMENT_VERSION_KEYED) ||
    isTornHeader(bytes, size, base, SEGMENT_VERSION_GROUPS)
  );
}

function isTornHeader(bytes: Uint8Array, size: number, base: number, version: number): boolean {
  if (size > SEGMENT_HEADER_BYTES || bytes.length !== size) return false;
  const want = encodeSegmentHeader({ flags: 0, baseSeq: base, replacesEndSeq: 0, version });
  let i = 0;
  while (i < size && bytes[i] === want[i]) i++;
  if (i === SEGMENT_HEADER_BYTES) return false; // a complete, valid header is not torn
  for (; i < size; i++) if (bytes[i] !== 0) return false;
  return true;
}

/**
 * Scan a segment from its first record with the tail table (FORMAT.md §6.1). Throws on a corrupt
 * verdict. `liveWriter`: another process may be appending to it right now (a read-only open).
 */
export function scanActive(
  fs: FileSystem,
  file: {
    readonly fd: number;
    readonly path: string;
    readonly base: number;
    readonly size: number;
    readonly compacted: boolean;
    readonly version: number;
  },
  scan: { readonly durableNextSeq: number; readonly chunkBytes: number; readonly liveWriter?: boolean },
): ActiveScan {
  const { fd, path, base, size, compacted, version } = file;
  const { durableNextSeq, chunkBytes, liveWriter = false } = scan;
  const rules = new SegmentFrames(base, compacted, version, null, durableNextSeq);
  const belowDurable = (): boolean => Math.max(base, rules.lastSeq + 1) < durableNextSeq;
  const result = scanFrames(new FileWindow(fs, fd, size, chunkBytes), SEGMENT_HEADER_BYTES, rules, belowDurable, liveWriter);
  if (result.row.verdict === 'corrupt') throw damageAt(path, result.validEnd, result.reason);
  return {
    row: result.row,
    validEnd: result.validEnd,
    durableEnd: rules.durableEnd,
    tornZero: result.inputs?.restZero ?? false,
    records: rules.records,
    firstSeq: rules.firstSeq,
    lastSeq: rules.lastSeq,
    need: rules.need,
    seal: rules.seal,
  };
}

/** Read the cursor file: checkpoint, then its records with the tail table. */
export function readCursor(fs: FileSystem, fd: number, path: string, maxRangesPerRecord: number): CursorRead {
  const size = fs.size(fd);
  const hbuf = new Uint8Array(CURSOR_V5_HEADER_BYTES);
  const n = readFully(fs, fd, hbuf, 0, Math.min(CURSOR_V5_HEADER_BYTES, size), 0);
  const h = decodeCheckpointHeader(hbuf.subarray(0, n), size);
  if ('kind' in h) {
    if (h.kind === 'unsupported') {
      throw checkFailed(
        FILE_CHECKS.newerVersion,
        path,
        CUR_OFF_VERSION,
        `Cursor file has format version ${h.version}; this version reads up to ${CURSOR_FORMAT_VERSION}`,
      );
    }
    throw checkFailed(FILE_CHECKS.badCursor, path, h.offset, h.reason);
  }
  const ckBytes = h.checkpointBytes;
  const body = new Uint8Array(ckBytes);
  readFully(fs, fd, body, 0, ckBytes, 0);
  const acks = decodeCheckpointBody(body, h);
  if ('kind' in acks) throw checkFailed(FILE_CHECKS.badCursor, path, acks.offset, acks.reason);
  const deliveries = decodeCheckpointDeliveries(body, h, acks);
  if ('kind' in deliveries) throw checkFailed(FILE_CHECKS.badCursor, path, deliveries.offset, deliveries.reason);
  const keys = decodeCheckpointKeys(body, h);
  if ('kind' in keys) throw checkFailed(FILE_CHECKS.badCursor, path, keys.offset, keys.reason);
  const spool = decodeCheckpointSpool(body, h);
  if ('kind' in spool) throw checkFailed(FILE_CHECKS.badCursor, path, spool.offset, spool.reason);
  const stored = decodeCheckpointSchedules(body, h);
  if ('kind' in stored) throw checkFailed(FILE_CHECKS.badCursor, path, stored.offset, stored.reason);
  const schedules = new ScheduleTable();
  for (const s of stored) schedules.put(s);
  const onSchedule = (r: ScheduleRecord): void => {
    if (r.type === RECORD_SCHEDULE) schedules.put(r.schedule);
    else schedules.drop(r.name);
  };
  const redrives: { from: number; seq: number }[] = [];
  const onDelivery = (r: DeliveryRecord): void => {
    if (r.type === RECORD_MARK) deliveries.mark(r.below, r.marks);
    else if (r.type === RECORD_DEAD) {
      // Written only for held items: a dead letter already held (which no writer writes) is kept once.
      deliveries.addDead(r.dead.filter((d) => !deliveries.holdsDead(d.seq)));
    } else if (r.type === RECORD_DROP) deliveries.dropDead(r.seqs);
    else redrives.push(...r.moves);
  };
  const rules = new CursorFrames(maxRangesPerRecord, (s, e) => acks.add(s, e), h.version, onDelivery, onSchedule);
  const result = scanFrames(new FileWindow(fs, fd, size, 64 * 1024), ckBytes, rules, () => false);
  if (result.row.verdict === 'corrupt') throw damageAt(path, result.validEnd, result.reason);
  return {
    acks,
    logStart: ckBytes,
    lastRecord: rules.lastRecord,
    checkpointNextSeq: h.nextSeq,
    maxAckEnd: rules.maxAckEnd,
    clean: (h.flags & CUR_FLAG_CLEAN) !== 0 && !rules.sawRecord,
    row: result.row,
    validEnd: result.validEnd,
    tornZero: result.inputs?.restZero ?? false,
    version: h.version,
    deliveries,
    redrives,
    keys,
    spool,
    schedules,
  };
}
