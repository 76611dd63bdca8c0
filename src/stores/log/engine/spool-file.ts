// Implements FORMAT.md §14.1 "Spool header" and §14.2 "Spool records".
/**
 * A spool file: what one producer pushed while no process had the queue open. A 40-byte header
 * (magic, version, the file's id, when it was created), then record frames of §3 numbered 1, 2,
 * 3...: ITEM frames (their metadata the priority, not-before time and key of §3.1) and, last, one
 * END frame when the producer closed the file. The frames are judged by the tail table of §6.1
 * through `FrameReader`, as the log's own are.
 */
import { join } from 'node:path';
import type { FileSystem } from '../../../fs/file-system.js';
import { crc32c32 } from './crc.js';
import {
  FRAME_HEADER_BYTES,
  MAX_PAYLOAD_BYTES_CAP,
  RECORD_ITEM,
  RECORD_SPOOL_END,
  SPL_OFF_CRC,
  SPL_OFF_CREATED_AT,
  SPL_OFF_HEADER_BYTES,
  SPL_OFF_ID,
  SPL_OFF_MAGIC,
  SPL_OFF_RESERVED,
  SPL_OFF_VERSION,
  SPOOL_FORMAT_VERSION,
  SPOOL_HEADER_BYTES,
  SPOOL_ID_BYTES,
  SPOOL_DIR,
  SPOOL_MAGIC,
  SPOOL_SUFFIX,
  SEGMENT_VERSION_KEYED,
  parseSpoolName,
  readU16,
  readU32,
  readU64,
  writeU16,
  writeU32,
  writeU64,
} from './format.js';
import { FileWindow, FrameReader, type FrameRules } from './frame-reader.js';
import { payloadOffset, type FrameHeader } from './frame.js';
import { decodeItemMeta, spoolIdBytes, spoolIdText, type ItemSchedule } from './item-meta.js';

/** A spool file's header, decoded. */
export interface SpoolHeader {
  readonly id: string;
  readonly createdAt: number;
}

export function encodeSpoolHeader(id: string, createdAt: number): Uint8Array {
  const buf = new Uint8Array(SPOOL_HEADER_BYTES);
  writeU32(buf, SPL_OFF_MAGIC, SPOOL_MAGIC);
  writeU16(buf, SPL_OFF_VERSION, SPOOL_FORMAT_VERSION);
  writeU16(buf, SPL_OFF_HEADER_BYTES, SPOOL_HEADER_BYTES);
  buf.set(spoolIdBytes(id), SPL_OFF_ID);
  writeU64(buf, SPL_OFF_CREATED_AT, createdAt);
  writeU32(buf, SPL_OFF_RESERVED, 0);
  writeU32(buf, SPL_OFF_CRC, crc32c32(buf.subarray(0, SPL_OFF_CRC)));
  return buf;
}

export type SpoolHeaderProblem = { kind: 'unsupported'; version: number } | { kind: 'corrupt'; offset: number; reason: string };

/**
 * Decode a spool header. Magic and version are checked before the CRC (a newer version is
 * reported as such, whatever follows), and the id must be the one the file's name carries.
 */
export function decodeSpoolHeader(buf: Uint8Array, size: number, nameId: string): SpoolHeader | SpoolHeaderProblem {
  if (size < SPOOL_HEADER_BYTES || buf.length < SPOOL_HEADER_BYTES)
    return { kind: 'corrupt', offset: 0, reason: `spool file is ${size} bytes, shorter than its header` };
  if (readU32(buf, SPL_OFF_MAGIC) !== SPOOL_MAGIC) return { kind: 'corrupt', offset: SPL_OFF_MAGIC, reason: 'bad magic' };
  const version = readU16(buf, SPL_OFF_VERSION);
  if (version > SPOOL_FORMAT_VERSION) return { kind: 'unsupported', version };
  if (version === 0) return { kind: 'corrupt', offset: SPL_OFF_VERSION, reason: 'version 0' };
  if (crc32c32(buf.subarray(0, SPL_OFF_CRC)) !== readU32(buf, SPL_OFF_CRC))
    return { kind: 'corrupt', offset: SPL_OFF_CRC, reason: 'header CRC mismatch' };
  if (readU16(buf, SPL_OFF_HEADER_BYTES) !== SPOOL_HEADER_BYTES || readU32(buf, SPL_OFF_RESERVED) !== 0) {
    return { kind: 'corrupt', offset: SPL_OFF_HEADER_BYTES, reason: 'unknown header size or reserved bytes' };
  }
  const id = spoolIdText(buf, SPL_OFF_ID);
  if (id !== nameId) return { kind: 'corrupt', offset: SPL_OFF_ID, reason: `the header's id ${id} is not the file name's` };
  const createdAt = readU64(buf, SPL_OFF_CREATED_AT);
  if (createdAt < 0) return { kind: 'corrupt', offset: SPL_OFF_CREATED_AT, reason: 'creation time out of range' };
  return { id, createdAt };
}

/** One record of a spool file: a push of one payload, with the options it was pushed with. */
export interface SpoolRecord {
  /** Its number in the file, from 1. */
  readonly record: number;
  readonly bytes: Uint8Array;
  readonly priority: number;
  readonly notBefore: number;
  readonly key: string | undefined;
}

/**
 * The frames of a spool file after its header: ITEM frames numbered 1, 2, 3... with the metadata
 * of §3.1 (priority, not-before time, key and keyed-at), then at most one empty END frame, and
 * nothing after it. Collects the records it accepts.
 */
export class SpoolFrames implements FrameRules {
  readonly maxPayloadBytes = MAX_PAYLOAD_BYTES_CAP;
  lastRecord: number;
  ended = false;
  readonly records: SpoolRecord[] = [];
  readonly #schedule: ItemSchedule = { priority: 0, notBefore: 0, key: undefined, keyedAt: 0 };

  constructor(afterRecord = 0) {
    this.lastRecord = afterRecord;
  }

  contentOk(h: FrameHeader, buf: Uint8Array, at: number): boolean {
    if (this.ended || h.seq !== this.lastRecord + 1) return false;
    if (h.type === RECORD_SPOOL_END) return h.length === 0 && h.metaBytes === 0;
    if (h.type !== RECORD_ITEM) return false;
    if (h.metaBytes === 0) {
      this.#schedule.priority = 0;
      this.#schedule.notBefore = 0;
      this.#schedule.key = undefined;
      return true;
    }
    // A spool record never carries a spool origin: the owner adds it when it ingests the record.
    return (
      decodeItemMeta(buf, at + FRAME_HEADER_BYTES, h.metaBytes, this.#schedule, SEGMENT_VERSION_KEYED) && this.#schedule.spool === undefined
    );
  }

  plausible(h: FrameHeader, skippedBytes: number): boolean {
    return (
      (h.type === RECORD_ITEM || h.type === RECORD_SPOOL_END) &&
      h.seq > this.lastRecord &&
      h.seq <= this.lastRecord + 1 + Math.floor(skippedBytes / FRAME_HEADER_BYTES)
    );
  }

  accept(h: FrameHeader, buf: Uint8Array, at: number): void {
    this.lastRecord = h.seq;
    if (h.type === RECORD_SPOOL_END) {
      this.ended = true;
      return;
    }
    const p = payloadOffset(at, h);
    const s = this.#schedule;
    this.records.push({ record: h.seq, bytes: buf.slice(p, p + h.length), priority: s.priority, notBefore: s.notBefore, key: s.key });
  }
}

/** The 16 random bytes of a new spool file's id, as 32 hex digits. */
export function newSpoolId(random: (n: number) => Uint8Array): string {
  const bytes = random(SPOOL_ID_BYTES);
  let s = '';
  for (const b of bytes) s += b.toString(16).padStart(2, '0');
  return s;
}

/** The ids of the spool files in the store directory `dir` (none when it has no spool directory). */
export function spoolFileIds(fs: FileSystem, dir: string): string[] {
  const spoolDir = join(dir, SPOOL_DIR);
  if (fs.stat(spoolDir) === null) return [];
  return fs
    .readdir(spoolDir)
    .map(parseSpoolName)
    .filter((id): id is string => id !== null)
    .sort();
}

/** What the spool holds, read without ingesting (a read-only view, `pq stats` with no owner). */
export interface SpoolBacklog {
  /** Spool files in the directory. */
  readonly files: number;
  /** Whole records in them beyond what the store holds (as its checkpoint says). */
  readonly records: number;
}

/** Count the spool's whole records beyond `ingested(file)` of each file. Unreadable files count as files only. */
export function readSpoolBacklog(fs: FileSystem, dir: string, ingested: (file: string) => number, chunkBytes: number): SpoolBacklog {
  const ids = spoolFileIds(fs, dir);
  let records = 0;
  for (const id of ids) {
    let fd: number;
    try {
      fd = fs.open(join(dir, SPOOL_DIR, id + SPOOL_SUFFIX), 'read');
    } catch {
      continue;
    }
    try {
      const size = fs.size(fd);
      const head = new Uint8Array(SPOOL_HEADER_BYTES);
      const n = fs.read(fd, head, 0, head.length, 0);
      if ('kind' in decodeSpoolHeader(head.subarray(0, n), size, id)) continue;
      const rules = new SpoolFrames();
      const frames = new FrameReader(new FileWindow(fs, fd, size, chunkBytes), SPOOL_HEADER_BYTES, rules);
      while (frames.next() === 'record') frames.accept();
      records += Math.max(0, rules.lastRecord - (rules.ended ? 1 : 0) - ingested(id));
    } finally {
      fs.close(fd);
    }
  }
  return { files: ids.length, records };
}
