// Implements FORMAT.md §4 "Cursor file" (checkpoint of versions 1 to 5, ACK/OPENED records; the key entries are in ./key-format.ts, the schedule entries in ./schedule-format.ts).
import { crc32c32 } from './crc.js';
import {
  CUR_KNOWN_FLAGS,
  CUR_OFF_CRC,
  CUR_OFF_FLAGS,
  CUR_OFF_LWM,
  CUR_OFF_MAGIC,
  CUR_OFF_NEXT_SEQ,
  CUR_OFF_RANGE_COUNT,
  CUR_OFF_VERSION,
  CUR_OFF_CHECKPOINT_BYTES,
  CUR_OFF_DEAD_COUNT,
  CUR_OFF_DELIVERED_BELOW,
  CUR_OFF_MARK_COUNT,
  CUR_OFF_KEY_COUNT,
  CUR_OFF_KEYS_BYTES,
  CUR_OFF_SPOOL_COUNT,
  CUR_OFF_SCHEDULE_COUNT,
  CUR_OFF_SCHEDULES_BYTES,
  CURSOR_FORMAT_VERSION,
  CURSOR_HEADER_BYTES,
  CURSOR_MAGIC,
  CURSOR_V2_HEADER_BYTES,
  CURSOR_V3_HEADER_BYTES,
  CURSOR_VERSION_DELIVERIES,
  CURSOR_VERSION_KEYS,
  CURSOR_VERSION_PLAIN,
  CURSOR_VERSION_SPOOL,
  CURSOR_V4_HEADER_BYTES,
  CURSOR_V5_HEADER_BYTES,
  CURSOR_VERSION_SCHEDULES,
  SCHEDULE_ENTRY_FIXED_BYTES,
  SPOOL_ENTRY_BYTES,
  SPOOL_ID_BYTES,
  DEAD_ENTRY_FIXED_BYTES,
  KEY_ENTRY_FIXED_BYTES,
  MAX_KEY_BYTES_ON_DISK,
  MARK_ENTRY_FIXED_BYTES,
  RANGE_BYTES,
  readU16,
  readU32,
  readU64,
  writeU16,
  writeU32,
  writeU64,
} from './format.js';
import {
  deadEntryBytes,
  markEntryBytes,
  readDeadEntry,
  readMarkEntry,
  utf8,
  writeDeadEntry,
  writeMarkEntry,
  type EncodedDead,
  type EncodedMark,
} from './delivery-format.js';
import { DeliveryState } from './delivery-state.js';
import { encodeKeys, readKeys, writeKeys } from './key-format.js';
import type { StoredKey, StoredSchedule } from '../../../contract/store.js';
import { encodeSchedule, readSchedules, scheduleEntryBytes, writeScheduleEntry } from './schedule-format.js';
import { spoolIdBytes, spoolIdText } from './item-meta.js';
import { lowerBound } from '../../../lib/lower-bound.js';

/** One entry of a version-4 checkpoint's spool table (FORMAT §14.3). */
export interface SpoolEntry {
  /** The spool file's id, 32 hex digits. */
  readonly file: string;
  /** Records of it the store holds as items, `>= 1`. */
  readonly records: number;
}

/**
 * The set of acked seqs: a low-water mark (every seq below it is acked) plus sorted, disjoint,
 * non-adjacent ranges `[start, end)` above it. Sequential acks extend a range or the mark, so the
 * size tracks the number of holes (out-of-order acks), not the number of acks.
 */
export class AckSet {
  lwm: number;
  starts: number[] = [];
  ends: number[] = [];
  /** Sum of the ranges' lengths: acked seqs at or above `lwm`. */
  ackedAbove = 0;

  constructor(lwm = 1) {
    this.lwm = lwm;
  }

  clone(): AckSet {
    const c = new AckSet(this.lwm);
    c.starts = this.starts.slice();
    c.ends = this.ends.slice();
    c.ackedAbove = this.ackedAbove;
    return c;
  }

  has(seq: number): boolean {
    if (seq < this.lwm) return true;
    const i = this.indexAfter(seq) - 1; // last range with start <= seq
    return i >= 0 && seq < this.ends[i]!;
  }

  /** Index of the first range with start > seq. */
  private indexAfter(seq: number): number {
    const starts = this.starts;
    return lowerBound(0, starts.length, (i) => starts[i]! <= seq);
  }

  /** Mark `[start, end)` acked. Returns how many seqs were not acked before. */
  add(start: number, end: number): number {
    if (start < this.lwm) start = this.lwm;
    if (end <= start) return 0;
    const n = this.starts.length;
    // Fast path: in-order acks move the mark.
    if (start === this.lwm && (n === 0 || end < this.starts[0]!)) {
      this.lwm = end;
      return end - start;
    }
    // Fast path: extend or append after the last range.
    if (n > 0 && start >= this.ends[n - 1]!) {
      if (start === this.ends[n - 1]!) this.ends[n - 1] = end;
      else {
        this.starts.push(start);
        this.ends.push(end);
      }
      this.ackedAbove += end - start;
      return end - start;
    }
    // General case: merge with every range that overlaps or touches [start, end).
    let i = this.indexAfter(start) - 1;
    if (i < 0 || this.ends[i]! < start) i++;
    let j = i;
    let mergedStart = start;
    let mergedEnd = end;
    let covered = 0;
    while (j < n && this.starts[j]! <= end) {
      mergedStart = Math.min(mergedStart, this.starts[j]!);
      mergedEnd = Math.max(mergedEnd, this.ends[j]!);
      covered += this.ends[j]! - this.starts[j]!;
      j++;
    }
    this.starts.splice(i, j - i, mergedStart);
    this.ends.splice(i, j - i, mergedEnd);
    const added = mergedEnd - mergedStart - covered;
    this.ackedAbove += added;
    if (this.starts[0] === this.lwm) {
      this.lwm = this.ends[0]!;
      this.ackedAbove -= this.ends[0]! - this.starts[0]!;
      this.starts.shift();
      this.ends.shift();
    }
    return added;
  }

  /** Number of acked seqs in `[from, to)`. */
  ackedIn(from: number, to: number): number {
    if (to <= from) return 0;
    let count = Math.max(0, Math.min(to, this.lwm) - from);
    for (let i = Math.max(0, this.indexAfter(from) - 1); i < this.starts.length && this.starts[i]! < to; i++) {
      const s = Math.max(this.starts[i]!, from);
      const e = Math.min(this.ends[i]!, to);
      if (e > s) count += e - s;
    }
    return count;
  }

  /** Internal consistency, checked after decoding and before encoding (assertion as documentation). */
  check(): string | null {
    if (!Number.isSafeInteger(this.lwm) || this.lwm < 1) return `low-water mark ${this.lwm} out of range`;
    let prevEnd = this.lwm;
    let sum = 0;
    for (let i = 0; i < this.starts.length; i++) {
      const s = this.starts[i]!;
      const e = this.ends[i]!;
      if (!(s > prevEnd && e > s && Number.isSafeInteger(e))) return `acked range ${i} [${s}, ${e}) out of order`;
      sum += e - s;
      prevEnd = e;
    }
    if (sum !== this.ackedAbove) return 'acked count does not match the ranges';
    return null;
  }
}

export interface CheckpointHeader {
  readonly version: number;
  readonly flags: number;
  readonly lwm: number;
  readonly nextSeq: number;
  readonly rangeCount: number;
  /** Bytes of the whole checkpoint: where the record log starts. */
  readonly checkpointBytes: number;
  /** Where the ranges start: after the header of this version. */
  readonly rangesAt: number;
  /** Version 2 and 3 (1 and 0 in version 1). */
  readonly deliveredBelow: number;
  readonly markCount: number;
  readonly deadCount: number;
  /** Version 3 only (0 before): key entries, where they start (after the ranges) and their bytes. */
  readonly keyCount: number;
  readonly keysAt: number;
  readonly keysBytes: number;
  /** Version 4 only (0 before): spool entries, after the dead letters. */
  readonly spoolCount: number;
  /** Version 5 only (0 before): schedule entries, where they start (after the keys) and their bytes. */
  readonly scheduleCount: number;
  readonly schedulesAt: number;
  readonly schedulesBytes: number;
}

/**
 * Encode a full checkpoint: header followed by the acked ranges; with `deliveries`, a version-2
 * checkpoint that also holds the delivered-below bound, the marks of items unacked below `nextSeq`
 * and every dead letter with its bytes (FORMAT §4.1); with `keys` too (in seq order, each below
 * `nextSeq`), a version-3 checkpoint that holds them after the ranges (§4.6).
 */
export function encodeCheckpoint(
  acks: AckSet,
  nextSeq: number,
  flags: number,
  deliveries: DeliveryState | null = null,
  keys: readonly StoredKey[] | null = null,
  spool: readonly SpoolEntry[] | null = null,
  schedules: readonly StoredSchedule[] | null = null,
): Buffer {
  const problem = acks.check();
  if (problem !== null) throw new Error(`refusing to write an inconsistent cursor: ${problem}`);
  if (keys !== null && deliveries === null)
    throw new Error('refusing to write an inconsistent cursor: a version-3 checkpoint holds the delivery state too');
  if (spool !== null && keys === null)
    throw new Error('refusing to write an inconsistent cursor: a version-4 checkpoint holds the keys too');
  if (schedules !== null && spool === null)
    throw new Error('refusing to write an inconsistent cursor: a version-5 checkpoint holds the spool table too');
  const n = acks.starts.length;
  const v2 = deliveries !== null;
  const v3 = keys !== null;
  const v4 = spool !== null;
  const v5 = schedules !== null;
  const rangesAt = v5
    ? CURSOR_V5_HEADER_BYTES
    : v4
      ? CURSOR_V4_HEADER_BYTES
      : v3
        ? CURSOR_V3_HEADER_BYTES
        : v2
          ? CURSOR_V2_HEADER_BYTES
          : CURSOR_HEADER_BYTES;
  let marks: EncodedMark[] = [];
  let dead: EncodedDead[] = [];
  let bytes = rangesAt + n * RANGE_BYTES;
  const encodedKeys = v3 ? encodeKeys(keys) : { encoded: [], bytes: 0 };
  for (const k of encodedKeys.encoded)
    if (k.entry.seq >= nextSeq)
      throw new Error(`refusing to write an inconsistent cursor: key of seq ${k.entry.seq} is not below ${nextSeq}`);
  bytes += encodedKeys.bytes;
  const encodedSchedules = v5 ? schedules.map(encodeSchedule) : [];
  let schedulesBytes = 0;
  for (let i = 0; i < encodedSchedules.length; i++) {
    if (i > 0 && !(encodedSchedules[i - 1]!.schedule.name < encodedSchedules[i]!.schedule.name))
      throw new Error('refusing to write an inconsistent cursor: schedules out of order');
    schedulesBytes += scheduleEntryBytes(encodedSchedules[i]!);
  }
  bytes += schedulesBytes;
  if (v4) {
    for (let i = 0; i < spool.length; i++) {
      const e = spool[i]!;
      if (!/^[0-9a-f]{32}$/.test(e.file) || !Number.isSafeInteger(e.records) || e.records < 1 || (i > 0 && spool[i - 1]!.file >= e.file)) {
        throw new Error(
          `refusing to write an inconsistent cursor: spool entry ${i} (${e.file}, ${e.records}) is malformed or out of order`,
        );
      }
    }
    bytes += spool.length * SPOOL_ENTRY_BYTES;
  }
  if (v2) {
    marks = deliveries.liveMarks(acks, nextSeq).map((mark) => ({ mark, error: utf8(mark.lastError) }));
    dead = deliveries.dead.map((d) => ({ dead: d, reason: utf8(d.reason) }));
    for (const m of marks) bytes += markEntryBytes(m);
    for (const d of dead) {
      // Every dead letter is acked in the queue and below the next seq (assertion as documentation).
      if (!acks.has(d.dead.seq) || d.dead.seq >= nextSeq)
        throw new Error(`refusing to write an inconsistent cursor: dead letter ${d.dead.seq} is not acked below ${nextSeq}`);
      bytes += deadEntryBytes(d);
    }
  }
  const buf = Buffer.alloc(bytes);
  writeU32(buf, CUR_OFF_MAGIC, CURSOR_MAGIC);
  writeU16(
    buf,
    CUR_OFF_VERSION,
    v5
      ? CURSOR_VERSION_SCHEDULES
      : v4
        ? CURSOR_VERSION_SPOOL
        : v3
          ? CURSOR_VERSION_KEYS
          : v2
            ? CURSOR_VERSION_DELIVERIES
            : CURSOR_VERSION_PLAIN,
  );
  writeU16(buf, CUR_OFF_FLAGS, flags);
  writeU64(buf, CUR_OFF_LWM, acks.lwm);
  writeU64(buf, CUR_OFF_NEXT_SEQ, nextSeq);
  writeU32(buf, CUR_OFF_RANGE_COUNT, n);
  for (let i = 0; i < n; i++) {
    writeU64(buf, rangesAt + i * RANGE_BYTES, acks.starts[i]!);
    writeU64(buf, rangesAt + i * RANGE_BYTES + 8, acks.ends[i]!);
  }
  if (v2) {
    writeU64(buf, CUR_OFF_CHECKPOINT_BYTES, bytes);
    writeU64(buf, CUR_OFF_DELIVERED_BELOW, deliveries.deliveredBelow);
    writeU32(buf, CUR_OFF_MARK_COUNT, marks.length);
    writeU32(buf, CUR_OFF_DEAD_COUNT, dead.length);
    let p = rangesAt + n * RANGE_BYTES;
    if (v3) {
      writeU32(buf, CUR_OFF_KEY_COUNT, encodedKeys.encoded.length);
      writeU32(buf, CUR_OFF_KEYS_BYTES, encodedKeys.bytes);
      p = writeKeys(buf, p, encodedKeys.encoded);
    }
    if (v5) {
      writeU32(buf, CUR_OFF_SCHEDULE_COUNT, encodedSchedules.length);
      writeU32(buf, CUR_OFF_SCHEDULES_BYTES, schedulesBytes);
      for (const e of encodedSchedules) p = writeScheduleEntry(buf, p, e);
    }
    for (const m of marks) p = writeMarkEntry(buf, p, m);
    for (const d of dead) p = writeDeadEntry(buf, p, d);
    if (v4) {
      writeU32(buf, CUR_OFF_SPOOL_COUNT, spool.length);
      for (const e of spool) {
        buf.set(spoolIdBytes(e.file), p);
        writeU64(buf, p + SPOOL_ID_BYTES, e.records);
        p += SPOOL_ENTRY_BYTES;
      }
    }
  }
  // The CRC covers the header before it and everything after it.
  const crc = crc32c32(buf.subarray(CURSOR_HEADER_BYTES), crc32c32(buf.subarray(0, CUR_OFF_CRC)));
  writeU32(buf, CUR_OFF_CRC, crc);
  return buf;
}

export type CursorProblem = { kind: 'unsupported'; version: number } | { kind: 'corrupt'; offset: number; reason: string };

/**
 * Decode the fixed part of a checkpoint from `buf` (its first `min(CURSOR_V2_HEADER_BYTES, size)`
 * bytes). Magic and version are checked before anything else, so a newer version is reported as
 * such whatever follows.
 */
export function decodeCheckpointHeader(buf: Uint8Array, fileSize: number): CheckpointHeader | CursorProblem {
  if (fileSize < CURSOR_HEADER_BYTES || buf.length < CURSOR_HEADER_BYTES) {
    return { kind: 'corrupt', offset: 0, reason: `cursor file is ${fileSize} bytes, shorter than its header` };
  }
  if (readU32(buf, CUR_OFF_MAGIC) !== CURSOR_MAGIC) return { kind: 'corrupt', offset: CUR_OFF_MAGIC, reason: 'bad magic' };
  const version = readU16(buf, CUR_OFF_VERSION);
  if (version > CURSOR_FORMAT_VERSION) return { kind: 'unsupported', version };
  if (version === 0) return { kind: 'corrupt', offset: CUR_OFF_VERSION, reason: 'version 0' };
  const flags = readU16(buf, CUR_OFF_FLAGS);
  const lwm = readU64(buf, CUR_OFF_LWM);
  const nextSeq = readU64(buf, CUR_OFF_NEXT_SEQ);
  const rangeCount = readU32(buf, CUR_OFF_RANGE_COUNT);
  if (version === CURSOR_VERSION_PLAIN) {
    // Bound the range count by the file size before anything is allocated for it. A checkpoint holds
    // every open hole, so it is not bounded by MAX_RANGES_PER_RECORD (which bounds one ACK record):
    // the writer never limits it, and a reader that did would refuse a checkpoint it wrote itself.
    const checkpointBytes = CURSOR_HEADER_BYTES + rangeCount * RANGE_BYTES;
    if (checkpointBytes > fileSize) {
      return { kind: 'corrupt', offset: CUR_OFF_RANGE_COUNT, reason: `range count ${rangeCount} runs past the file` };
    }
    const keysAt = CURSOR_HEADER_BYTES + rangeCount * RANGE_BYTES;
    return {
      version,
      flags,
      lwm,
      nextSeq,
      rangeCount,
      checkpointBytes,
      rangesAt: CURSOR_HEADER_BYTES,
      deliveredBelow: 1,
      markCount: 0,
      deadCount: 0,
      keyCount: 0,
      keysAt,
      keysBytes: 0,
      spoolCount: 0,
      scheduleCount: 0,
      schedulesAt: keysAt,
      schedulesBytes: 0,
    };
  }
  if (fileSize < CURSOR_V2_HEADER_BYTES || buf.length < CURSOR_V2_HEADER_BYTES) {
    return { kind: 'corrupt', offset: 0, reason: `cursor file is ${fileSize} bytes, shorter than its version-2 header` };
  }
  const checkpointBytes = readU64(buf, CUR_OFF_CHECKPOINT_BYTES);
  const deliveredBelow = readU64(buf, CUR_OFF_DELIVERED_BELOW);
  const markCount = readU32(buf, CUR_OFF_MARK_COUNT);
  const deadCount = readU32(buf, CUR_OFF_DEAD_COUNT);
  const v3 = version >= CURSOR_VERSION_KEYS;
  if (v3 && (fileSize < CURSOR_V3_HEADER_BYTES || buf.length < CURSOR_V3_HEADER_BYTES)) {
    return { kind: 'corrupt', offset: 0, reason: `cursor file is ${fileSize} bytes, shorter than its version-3 header` };
  }
  const v4 = version >= CURSOR_VERSION_SPOOL;
  if (v4 && (fileSize < CURSOR_V4_HEADER_BYTES || buf.length < CURSOR_V4_HEADER_BYTES)) {
    return { kind: 'corrupt', offset: 0, reason: `cursor file is ${fileSize} bytes, shorter than its version-4 header` };
  }
  const v5 = version >= CURSOR_VERSION_SCHEDULES;
  if (v5 && (fileSize < CURSOR_V5_HEADER_BYTES || buf.length < CURSOR_V5_HEADER_BYTES)) {
    return { kind: 'corrupt', offset: 0, reason: `cursor file is ${fileSize} bytes, shorter than its version-5 header` };
  }
  const rangesAt = v5 ? CURSOR_V5_HEADER_BYTES : v4 ? CURSOR_V4_HEADER_BYTES : v3 ? CURSOR_V3_HEADER_BYTES : CURSOR_V2_HEADER_BYTES;
  const spoolCount = v4 ? readU32(buf, CUR_OFF_SPOOL_COUNT) : 0;
  const scheduleCount = v5 ? readU32(buf, CUR_OFF_SCHEDULE_COUNT) : 0;
  const schedulesBytes = v5 ? readU32(buf, CUR_OFF_SCHEDULES_BYTES) : 0;
  if (schedulesBytes < scheduleCount * SCHEDULE_ENTRY_FIXED_BYTES) {
    return {
      kind: 'corrupt',
      offset: CUR_OFF_SCHEDULES_BYTES,
      reason: `schedule section of ${schedulesBytes} bytes cannot hold ${scheduleCount} schedules`,
    };
  }
  const keyCount = v3 ? readU32(buf, CUR_OFF_KEY_COUNT) : 0;
  const keysBytes = v3 ? readU32(buf, CUR_OFF_KEYS_BYTES) : 0;
  if (keysBytes < keyCount * KEY_ENTRY_FIXED_BYTES || keysBytes > keyCount * (KEY_ENTRY_FIXED_BYTES + MAX_KEY_BYTES_ON_DISK)) {
    return { kind: 'corrupt', offset: CUR_OFF_KEYS_BYTES, reason: `key section of ${keysBytes} bytes cannot hold ${keyCount} keys` };
  }
  // The whole checkpoint lies in the file, and its counts fit in it at their smallest entry size,
  // before anything is allocated for it.
  const least =
    rangesAt +
    rangeCount * RANGE_BYTES +
    keysBytes +
    schedulesBytes +
    markCount * MARK_ENTRY_FIXED_BYTES +
    deadCount * DEAD_ENTRY_FIXED_BYTES +
    spoolCount * SPOOL_ENTRY_BYTES;
  if (checkpointBytes < 0 || checkpointBytes > fileSize) {
    return { kind: 'corrupt', offset: CUR_OFF_CHECKPOINT_BYTES, reason: `checkpoint size ${checkpointBytes} runs past the file` };
  }
  if (least > checkpointBytes) {
    return {
      kind: 'corrupt',
      offset: CUR_OFF_RANGE_COUNT,
      reason: 'range, key, schedule, mark, dead-letter and spool counts run past the checkpoint',
    };
  }
  const keysAt = rangesAt + rangeCount * RANGE_BYTES;
  return {
    version,
    flags,
    lwm,
    nextSeq,
    rangeCount,
    checkpointBytes,
    rangesAt,
    deliveredBelow,
    markCount,
    deadCount,
    keyCount,
    keysAt,
    keysBytes,
    spoolCount,
    scheduleCount,
    schedulesAt: keysAt + keysBytes,
    schedulesBytes,
  };
}

/** Check the CRC and decode the ranges of a checkpoint whose bytes `[0, checkpointBytes)` are in `buf`. */
export function decodeCheckpointBody(buf: Uint8Array, h: CheckpointHeader): AckSet | { kind: 'corrupt'; offset: number; reason: string } {
  const end = h.checkpointBytes;
  const crc = crc32c32(buf.subarray(CURSOR_HEADER_BYTES, end), crc32c32(buf.subarray(0, CUR_OFF_CRC)));
  if (crc !== readU32(buf, CUR_OFF_CRC)) return { kind: 'corrupt', offset: CUR_OFF_CRC, reason: 'checkpoint CRC mismatch' };
  if ((h.flags & ~CUR_KNOWN_FLAGS) !== 0) return { kind: 'corrupt', offset: CUR_OFF_FLAGS, reason: 'unknown flags' };
  if (h.lwm < 1 || h.nextSeq < 1 || h.lwm > h.nextSeq) {
    return { kind: 'corrupt', offset: CUR_OFF_LWM, reason: `low-water mark ${h.lwm} / next seq ${h.nextSeq} out of range` };
  }
  const acks = new AckSet(h.lwm);
  for (let i = 0; i < h.rangeCount; i++) {
    const s = readU64(buf, h.rangesAt + i * RANGE_BYTES);
    const e = readU64(buf, h.rangesAt + i * RANGE_BYTES + 8);
    if (s < 0 || e < 0 || e > h.nextSeq) {
      return { kind: 'corrupt', offset: h.rangesAt + i * RANGE_BYTES, reason: 'acked range out of range' };
    }
    acks.starts.push(s);
    acks.ends.push(e);
    acks.ackedAbove += e - s;
  }
  const problem = acks.check();
  if (problem !== null) return { kind: 'corrupt', offset: h.rangesAt, reason: problem };
  return acks;
}

/**
 * The delivery sections of a version-2 checkpoint whose CRC and ranges `decodeCheckpointBody`
 * accepted (`acks`): marks of unacked seqs below `nextSeq` in seq order, then dead letters of acked
 * seqs below it in seq order, filling the checkpoint exactly. A version-1 checkpoint holds none.
 */
export function decodeCheckpointDeliveries(
  buf: Uint8Array,
  h: CheckpointHeader,
  acks: AckSet,
): DeliveryState | { kind: 'corrupt'; offset: number; reason: string } {
  const state = new DeliveryState();
  if (h.version === CURSOR_VERSION_PLAIN) return state;
  const end = h.checkpointBytes;
  if (h.deliveredBelow < 1)
    return { kind: 'corrupt', offset: CUR_OFF_DELIVERED_BELOW, reason: `delivered-below bound ${h.deliveredBelow} out of range` };
  state.deliveredBelow = h.deliveredBelow;
  let p = h.schedulesAt + h.schedulesBytes;
  let prev = 0;
  for (let i = 0; i < h.markCount; i++) {
    const m = readMarkEntry(buf, p, end);
    if (m === null || m.value.seq <= prev || m.value.seq >= h.nextSeq || acks.has(m.value.seq)) {
      return { kind: 'corrupt', offset: p, reason: `delivery mark ${i} is malformed or out of order` };
    }
    state.marks.set(m.value.seq, m.value);
    prev = m.value.seq;
    p = m.next;
  }
  prev = 0;
  for (let i = 0; i < h.deadCount; i++) {
    const d = readDeadEntry(buf, p, end);
    if (d === null || d.value.seq <= prev || d.value.seq >= h.nextSeq || !acks.has(d.value.seq)) {
      return { kind: 'corrupt', offset: p, reason: `dead letter ${i} is malformed or out of order` };
    }
    state.dead.push(d.value);
    state.deadBytes += d.value.bytes.length;
    prev = d.value.seq;
    p = d.next;
  }
  if (p + h.spoolCount * SPOOL_ENTRY_BYTES !== end)
    return { kind: 'corrupt', offset: p, reason: 'checkpoint size does not match its contents' };
  return state;
}

/**
 * The spool table of a version-4 checkpoint accepted by `decodeCheckpointBody` (empty before
 * version 4): the last `spoolCount` entries of the checkpoint, ids strictly increasing, counts `>= 1`.
 */
export function decodeCheckpointSpool(
  buf: Uint8Array,
  h: CheckpointHeader,
): SpoolEntry[] | { kind: 'corrupt'; offset: number; reason: string } {
  const out: SpoolEntry[] = [];
  let p = h.checkpointBytes - h.spoolCount * SPOOL_ENTRY_BYTES;
  for (let i = 0; i < h.spoolCount; i++, p += SPOOL_ENTRY_BYTES) {
    const file = spoolIdText(buf, p);
    const records = readU64(buf, p + SPOOL_ID_BYTES);
    if (records < 1 || (i > 0 && out[i - 1]!.file >= file))
      return { kind: 'corrupt', offset: p, reason: `spool entry ${i} is malformed or out of order` };
    out.push({ file, records });
  }
  return out;
}

/** The schedule entries of a version-5 checkpoint accepted by `decodeCheckpointBody` (none before version 5). */
export function decodeCheckpointSchedules(
  buf: Uint8Array,
  h: CheckpointHeader,
): StoredSchedule[] | { kind: 'corrupt'; offset: number; reason: string } {
  if (h.scheduleCount === 0 && h.schedulesBytes === 0) return [];
  const schedules = readSchedules(buf, h.schedulesAt, h.schedulesAt + h.schedulesBytes, h.scheduleCount);
  return Array.isArray(schedules) ? schedules : { kind: 'corrupt', ...schedules };
}

/** The key entries of a version-3 checkpoint accepted by `decodeCheckpointBody` (none before version 3). */
export function decodeCheckpointKeys(
  buf: Uint8Array,
  h: CheckpointHeader,
): StoredKey[] | { kind: 'corrupt'; offset: number; reason: string } {
  if (h.keyCount === 0 && h.keysBytes === 0) return [];
  const keys = readKeys(buf, h.keysAt, h.keysAt + h.keysBytes, h.keyCount, h.nextSeq);
  return Array.isArray(keys) ? keys : { kind: 'corrupt', ...keys };
}

/**
 * Encode the payload of an ACK record for `seqs` (any order, no duplicates required) into ranges.
 * Returns the number of payload bytes written at `buf[at..]`; `buf` must have room for one range per seq.
 */
export function encodeAckRanges(seqs: readonly number[], buf: Uint8Array, at: number): number {
  let sorted = true;
  for (let i = 1; i < seqs.length; i++) {
    if (seqs[i]! <= seqs[i - 1]!) {
      sorted = false;
      break;
    }
  }
  const list = sorted ? seqs : [...seqs].sort((a, b) => a - b);
  let pos = at;
  let start = list[0]!;
  let end = start + 1;
  for (let i = 1; i < list.length; i++) {
    const s = list[i]!;
    if (s === end - 1) continue; // duplicate
    if (s === end) {
      end++;
      continue;
    }
    writeU64(buf, pos, start);
    writeU64(buf, pos + 8, end);
    pos += RANGE_BYTES;
    start = s;
    end = s + 1;
  }
  writeU64(buf, pos, start);
  writeU64(buf, pos + 8, end);
  return pos + RANGE_BYTES - at;
}
