// Implements FORMAT.md §4 "Cursor file" (checkpoint and ACK/OPENED records).
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
  CURSOR_HEADER_BYTES,
  CURSOR_MAGIC,
  FORMAT_VERSION,
  RANGE_BYTES,
  readU16,
  readU32,
  readU64,
  writeU16,
  writeU32,
  writeU64,
} from './format.js';

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
    let lo = 0;
    let hi = this.starts.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.starts[mid]! <= seq) lo = mid + 1;
      else hi = mid;
    }
    return lo;
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
}

/** Encode a full checkpoint: header followed by the acked ranges. */
export function encodeCheckpoint(acks: AckSet, nextSeq: number, flags: number): Buffer {
  const problem = acks.check();
  if (problem !== null) throw new Error(`refusing to write an inconsistent cursor: ${problem}`);
  const n = acks.starts.length;
  const buf = Buffer.alloc(CURSOR_HEADER_BYTES + n * RANGE_BYTES);
  writeU32(buf, CUR_OFF_MAGIC, CURSOR_MAGIC);
  writeU16(buf, CUR_OFF_VERSION, FORMAT_VERSION);
  writeU16(buf, CUR_OFF_FLAGS, flags);
  writeU64(buf, CUR_OFF_LWM, acks.lwm);
  writeU64(buf, CUR_OFF_NEXT_SEQ, nextSeq);
  writeU32(buf, CUR_OFF_RANGE_COUNT, n);
  for (let i = 0; i < n; i++) {
    writeU64(buf, CURSOR_HEADER_BYTES + i * RANGE_BYTES, acks.starts[i]!);
    writeU64(buf, CURSOR_HEADER_BYTES + i * RANGE_BYTES + 8, acks.ends[i]!);
  }
  // The CRC covers the header before it and every range after it.
  const crc = crc32c32(buf.subarray(CURSOR_HEADER_BYTES), crc32c32(buf.subarray(0, CUR_OFF_CRC)));
  writeU32(buf, CUR_OFF_CRC, crc);
  return buf;
}

export type CursorProblem =
  | { kind: 'unsupported'; version: number }
  | { kind: 'corrupt'; offset: number; reason: string };

/** Decode the fixed part of a checkpoint. Magic and version are checked before anything else. */
export function decodeCheckpointHeader(buf: Uint8Array, fileSize: number): CheckpointHeader | CursorProblem {
  if (fileSize < CURSOR_HEADER_BYTES) {
    return { kind: 'corrupt', offset: 0, reason: `cursor file is ${fileSize} bytes, shorter than its header` };
  }
  if (readU32(buf, CUR_OFF_MAGIC) !== CURSOR_MAGIC) return { kind: 'corrupt', offset: CUR_OFF_MAGIC, reason: 'bad magic' };
  const version = readU16(buf, CUR_OFF_VERSION);
  if (version > FORMAT_VERSION) return { kind: 'unsupported', version };
  if (version === 0) return { kind: 'corrupt', offset: CUR_OFF_VERSION, reason: 'version 0' };
  const flags = readU16(buf, CUR_OFF_FLAGS);
  const lwm = readU64(buf, CUR_OFF_LWM);
  const nextSeq = readU64(buf, CUR_OFF_NEXT_SEQ);
  const rangeCount = readU32(buf, CUR_OFF_RANGE_COUNT);
  // Bound the range count by the file size before anything is allocated for it. A checkpoint holds
  // every open hole, so it is not bounded by MAX_RANGES_PER_RECORD (which bounds one ACK record):
  // the writer never limits it, and a reader that did would refuse a checkpoint it wrote itself.
  if (CURSOR_HEADER_BYTES + rangeCount * RANGE_BYTES > fileSize) {
    return { kind: 'corrupt', offset: CUR_OFF_RANGE_COUNT, reason: `range count ${rangeCount} runs past the file` };
  }
  return { version, flags, lwm, nextSeq, rangeCount };
}

/** Check the CRC and decode the ranges of a checkpoint whose bytes `[0, checkpointBytes)` are in `buf`. */
export function decodeCheckpointBody(
  buf: Uint8Array,
  h: CheckpointHeader,
): AckSet | { kind: 'corrupt'; offset: number; reason: string } {
  const end = CURSOR_HEADER_BYTES + h.rangeCount * RANGE_BYTES;
  const crc = crc32c32(buf.subarray(CURSOR_HEADER_BYTES, end), crc32c32(buf.subarray(0, CUR_OFF_CRC)));
  if (crc !== readU32(buf, CUR_OFF_CRC)) return { kind: 'corrupt', offset: CUR_OFF_CRC, reason: 'checkpoint CRC mismatch' };
  if ((h.flags & ~CUR_KNOWN_FLAGS) !== 0) return { kind: 'corrupt', offset: CUR_OFF_FLAGS, reason: 'unknown flags' };
  if (h.lwm < 1 || h.nextSeq < 1 || h.lwm > h.nextSeq) {
    return { kind: 'corrupt', offset: CUR_OFF_LWM, reason: `low-water mark ${h.lwm} / next seq ${h.nextSeq} out of range` };
  }
  const acks = new AckSet(h.lwm);
  for (let i = 0; i < h.rangeCount; i++) {
    const s = readU64(buf, CURSOR_HEADER_BYTES + i * RANGE_BYTES);
    const e = readU64(buf, CURSOR_HEADER_BYTES + i * RANGE_BYTES + 8);
    if (s < 0 || e < 0 || e > h.nextSeq) {
      return { kind: 'corrupt', offset: CURSOR_HEADER_BYTES + i * RANGE_BYTES, reason: 'acked range out of range' };
    }
    acks.starts.push(s);
    acks.ends.push(e);
    acks.ackedAbove += e - s;
  }
  const problem = acks.check();
  if (problem !== null) return { kind: 'corrupt', offset: CURSOR_HEADER_BYTES, reason: problem };
  return acks;
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
