// Implements FORMAT.md §4.1 (the delivery sections of a version-2 checkpoint) and §4.2 (MARK, DEAD, DROP and REDRIVE records).
/**
 * Bytes of delivery marks and dead letters, as a version-2 cursor holds them: in the checkpoint
 * and in the records after it. Every decoder checks each length against the end of the bytes it
 * was given before it reads past it, and returns null for anything a writer never writes.
 */
import type { DeadLetter, DeliveryMark } from '../../../contract/store.js';
import {
  CURSOR_RECORD_SPLIT_BYTES,
  DEAD_ENTRY_FIXED_BYTES,
  DEAD_RECORD_HEADER_BYTES,
  DROP_ENTRY_BYTES,
  MARK_ENTRY_FIXED_BYTES,
  MARK_RECORD_HEADER_BYTES,
  MAX_PAYLOAD_BYTES_CAP,
  MAX_REASON_BYTES_ON_DISK,
  RECORD_DEAD,
  RECORD_DROP,
  RECORD_MARK,
  RECORD_REDRIVE,
  REDRIVE_ENTRY_BYTES,
  readU16,
  readU32,
  readU64,
  writeU16,
  writeU32,
  writeU64,
} from './format.js';

const encoder = new TextEncoder();
const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

/** UTF-8 bytes of `text`. */
export function utf8(text: string): Uint8Array {
  return encoder.encode(text);
}

function decodeText(buf: Uint8Array, at: number, length: number): string | null {
  if (length === 0) return '';
  try {
    return strictUtf8.decode(buf.subarray(at, at + length));
  } catch {
    return null;
  }
}

/** A mark with its error text already encoded. */
export interface EncodedMark {
  readonly mark: DeliveryMark;
  readonly error: Uint8Array;
}

/** A dead letter with its reason already encoded. */
export interface EncodedDead {
  readonly dead: DeadLetter;
  readonly reason: Uint8Array;
}

export function markEntryBytes(m: EncodedMark): number {
  return MARK_ENTRY_FIXED_BYTES + m.error.length;
}

export function deadEntryBytes(d: EncodedDead): number {
  return DEAD_ENTRY_FIXED_BYTES + d.reason.length + d.dead.bytes.length;
}

export function writeMarkEntry(buf: Uint8Array, at: number, m: EncodedMark): number {
  writeU64(buf, at, m.mark.seq);
  writeU64(buf, at + 8, m.mark.deliveries);
  writeU64(buf, at + 16, m.mark.firstDeliveredAt);
  writeU64(buf, at + 24, m.mark.lastDeliveredAt);
  writeU16(buf, at + 32, m.error.length);
  buf.set(m.error, at + MARK_ENTRY_FIXED_BYTES);
  return at + markEntryBytes(m);
}

export function writeDeadEntry(buf: Uint8Array, at: number, d: EncodedDead): number {
  const e = d.dead;
  writeU64(buf, at, e.seq);
  writeU64(buf, at + 8, e.deliveries);
  writeU64(buf, at + 16, e.firstDeliveredAt);
  writeU64(buf, at + 24, e.lastDeliveredAt);
  writeU64(buf, at + 32, e.deadAt);
  writeU16(buf, at + 40, d.reason.length);
  writeU32(buf, at + 42, e.bytes.length);
  buf.set(d.reason, at + DEAD_ENTRY_FIXED_BYTES);
  buf.set(e.bytes, at + DEAD_ENTRY_FIXED_BYTES + d.reason.length);
  return at + deadEntryBytes(d);
}

/** A decoded entry and the offset just past it. */
export interface Decoded<T> {
  readonly value: T;
  readonly next: number;
}

/** The mark at `buf[at..end)`, or null when it is malformed or runs past `end`. */
export function readMarkEntry(buf: Uint8Array, at: number, end: number): Decoded<DeliveryMark> | null {
  if (at + MARK_ENTRY_FIXED_BYTES > end) return null;
  const seq = readU64(buf, at);
  const deliveries = readU64(buf, at + 8);
  const firstDeliveredAt = readU64(buf, at + 16);
  const lastDeliveredAt = readU64(buf, at + 24);
  const errorBytes = readU16(buf, at + 32);
  const textAt = at + MARK_ENTRY_FIXED_BYTES;
  if (seq < 1 || deliveries < 1 || firstDeliveredAt < 0 || lastDeliveredAt < 0) return null;
  if (errorBytes > MAX_REASON_BYTES_ON_DISK || textAt + errorBytes > end) return null;
  const lastError = decodeText(buf, textAt, errorBytes);
  if (lastError === null) return null;
  return { value: { seq, deliveries, firstDeliveredAt, lastDeliveredAt, lastError }, next: textAt + errorBytes };
}

/** The dead letter at `buf[at..end)` (its payload copied), or null when malformed or past `end`. */
export function readDeadEntry(buf: Uint8Array, at: number, end: number): Decoded<DeadLetter> | null {
  if (at + DEAD_ENTRY_FIXED_BYTES > end) return null;
  const seq = readU64(buf, at);
  const deliveries = readU64(buf, at + 8);
  const firstDeliveredAt = readU64(buf, at + 16);
  const lastDeliveredAt = readU64(buf, at + 24);
  const deadAt = readU64(buf, at + 32);
  const reasonBytes = readU16(buf, at + 40);
  const payloadBytes = readU32(buf, at + 42);
  if (seq < 1 || deliveries < 0 || firstDeliveredAt < 0 || lastDeliveredAt < 0 || deadAt < 0) return null;
  if (reasonBytes > MAX_REASON_BYTES_ON_DISK || payloadBytes > MAX_PAYLOAD_BYTES_CAP) return null;
  const reasonAt = at + DEAD_ENTRY_FIXED_BYTES;
  const payloadAt = reasonAt + reasonBytes;
  if (payloadAt + payloadBytes > end) return null;
  const reason = decodeText(buf, reasonAt, reasonBytes);
  if (reason === null) return null;
  // A copy: the caller's buffer is a read window that is reused.
  const bytes = buf.slice(payloadAt, payloadAt + payloadBytes);
  return { value: { seq, bytes, deliveries, firstDeliveredAt, lastDeliveredAt, deadAt, reason }, next: payloadAt + payloadBytes };
}

/** One record of the cursor log of version 2, decoded. */
export type DeliveryRecord =
  | { readonly type: typeof RECORD_MARK; readonly below: number; readonly marks: readonly DeliveryMark[] }
  | { readonly type: typeof RECORD_DEAD; readonly dead: readonly DeadLetter[] }
  | { readonly type: typeof RECORD_DROP; readonly seqs: readonly number[] }
  | { readonly type: typeof RECORD_REDRIVE; readonly moves: readonly { readonly from: number; readonly seq: number }[] };

export function isDeliveryRecordType(type: number): boolean {
  return type === RECORD_MARK || type === RECORD_DEAD || type === RECORD_DROP || type === RECORD_REDRIVE;
}

/**
 * Decode the payload `buf[at..at+length)` of a record of `type` (FORMAT §4.2), or null when it is
 * not what a writer writes: counts that do not fill the payload exactly, seqs out of order, a
 * string that is not UTF-8, a length past its bound.
 */
export function decodeDeliveryRecord(type: number, buf: Uint8Array, at: number, length: number): DeliveryRecord | null {
  const end = at + length;
  switch (type) {
    case RECORD_MARK: {
      if (length < MARK_RECORD_HEADER_BYTES) return null;
      const below = readU64(buf, at);
      const count = readU32(buf, at + 8);
      if (below < 1 || count * MARK_ENTRY_FIXED_BYTES > length - MARK_RECORD_HEADER_BYTES) return null;
      const marks: DeliveryMark[] = [];
      let p = at + MARK_RECORD_HEADER_BYTES;
      for (let i = 0; i < count; i++) {
        const m = readMarkEntry(buf, p, end);
        if (m === null) return null;
        marks.push(m.value);
        p = m.next;
      }
      return p === end ? { type, below, marks } : null;
    }
    case RECORD_DEAD: {
      if (length < DEAD_RECORD_HEADER_BYTES) return null;
      const count = readU32(buf, at);
      if (count < 1 || count * DEAD_ENTRY_FIXED_BYTES > length - DEAD_RECORD_HEADER_BYTES) return null;
      const dead: DeadLetter[] = [];
      let p = at + DEAD_RECORD_HEADER_BYTES;
      for (let i = 0; i < count; i++) {
        const d = readDeadEntry(buf, p, end);
        if (d === null || (i > 0 && d.value.seq <= dead[i - 1]!.seq)) return null;
        dead.push(d.value);
        p = d.next;
      }
      return p === end ? { type, dead } : null;
    }
    case RECORD_DROP: {
      if (length === 0 || length % DROP_ENTRY_BYTES !== 0) return null;
      const seqs: number[] = [];
      for (let p = at; p < end; p += DROP_ENTRY_BYTES) {
        const s = readU64(buf, p);
        if (s < 1 || (seqs.length > 0 && s <= seqs[seqs.length - 1]!)) return null;
        seqs.push(s);
      }
      return { type, seqs };
    }
    case RECORD_REDRIVE: {
      if (length === 0 || length % REDRIVE_ENTRY_BYTES !== 0) return null;
      const moves: { from: number; seq: number }[] = [];
      for (let p = at; p < end; p += REDRIVE_ENTRY_BYTES) {
        const from = readU64(buf, p);
        const seq = readU64(buf, p + 8);
        // The new seqs of one redrive are consecutive; each dead letter is older than its new item.
        if (from < 1 || seq <= from || (moves.length > 0 && seq !== moves[moves.length - 1]!.seq + 1)) return null;
        moves.push({ from, seq });
      }
      return { type, moves };
    }
    default:
      return null;
  }
}

/** Split `entries` into runs whose encoded size stays within the split bound (at least one entry each). */
function runs<T>(entries: readonly T[], bytesOf: (e: T) => number, headerBytes: number): T[][] {
  const out: T[][] = [];
  let run: T[] = [];
  let bytes = headerBytes;
  for (const e of entries) {
    const b = bytesOf(e);
    if (run.length > 0 && bytes + b > CURSOR_RECORD_SPLIT_BYTES) {
      out.push(run);
      run = [];
      bytes = headerBytes;
    }
    run.push(e);
    bytes += b;
  }
  if (run.length > 0 || out.length === 0) out.push(run);
  return out;
}

/** A record to write: its type and payload. */
export interface RecordPayload {
  readonly type: number;
  readonly payload: Uint8Array;
}

/** MARK payloads for one `markDelivered` call: every record carries `below` (a crash may keep a prefix). */
export function markPayloads(below: number, marks: readonly EncodedMark[]): RecordPayload[] {
  return runs(marks, markEntryBytes, MARK_RECORD_HEADER_BYTES).map((run) => {
    let bytes = MARK_RECORD_HEADER_BYTES;
    for (const m of run) bytes += markEntryBytes(m);
    const payload = new Uint8Array(bytes);
    writeU64(payload, 0, below);
    writeU32(payload, 8, run.length);
    let p = MARK_RECORD_HEADER_BYTES;
    for (const m of run) p = writeMarkEntry(payload, p, m);
    return { type: RECORD_MARK, payload };
  });
}

/** DEAD payloads for one `deadLetter` call, entries in seq order; each dead letter lies whole in one record. */
export function deadPayloads(entries: readonly EncodedDead[]): RecordPayload[] {
  return runs(entries, deadEntryBytes, DEAD_RECORD_HEADER_BYTES).map((run) => {
    let bytes = DEAD_RECORD_HEADER_BYTES;
    for (const d of run) bytes += deadEntryBytes(d);
    const payload = new Uint8Array(bytes);
    writeU32(payload, 0, run.length);
    let p = DEAD_RECORD_HEADER_BYTES;
    for (const d of run) p = writeDeadEntry(payload, p, d);
    return { type: RECORD_DEAD, payload };
  });
}

/** DROP payloads for sorted, distinct `seqs`. */
export function dropPayloads(seqs: readonly number[]): RecordPayload[] {
  return runs(seqs, () => DROP_ENTRY_BYTES, 0).map((run) => {
    const payload = new Uint8Array(run.length * DROP_ENTRY_BYTES);
    for (let i = 0; i < run.length; i++) writeU64(payload, i * DROP_ENTRY_BYTES, run[i]!);
    return { type: RECORD_DROP, payload };
  });
}

/** REDRIVE payloads for `moves`, whose new seqs are consecutive. */
export function redrivePayloads(moves: readonly { readonly from: number; readonly seq: number }[]): RecordPayload[] {
  return runs(moves, () => REDRIVE_ENTRY_BYTES, 0).map((run) => {
    const payload = new Uint8Array(run.length * REDRIVE_ENTRY_BYTES);
    run.forEach((m, i) => {
      writeU64(payload, i * REDRIVE_ENTRY_BYTES, m.from);
      writeU64(payload, i * REDRIVE_ENTRY_BYTES + 8, m.seq);
    });
    return { type: RECORD_REDRIVE, payload };
  });
}
