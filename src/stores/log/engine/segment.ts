// Implements FORMAT.md §2 "Segment files" (header) and §3.2 "SEAL record".
import { crc32c32 } from './crc.js';
import {
  SEGMENT_FORMAT_VERSION,
  SEGMENT_VERSION_PLAIN,
  RECORD_SEAL,
  SEAL_FRAME_BYTES,
  SEAL_OFF_FIRST_SEQ,
  SEAL_OFF_LAST_SEQ,
  SEAL_OFF_RECORD_COUNT,
  SEAL_PAYLOAD_BYTES,
  SEG_KNOWN_FLAGS,
  SEG_OFF_BASE_SEQ,
  SEG_OFF_FLAGS,
  SEG_OFF_HEADER_BYTES,
  SEG_OFF_HEADER_CRC,
  SEG_OFF_MAGIC,
  SEG_OFF_REPLACES_END_SEQ,
  SEG_OFF_VERSION,
  SEGMENT_HEADER_BYTES,
  SEGMENT_MAGIC,
  readU16,
  readU32,
  readU64,
  writeU16,
  writeU32,
  writeU64,
} from './format.js';
import { encodeFrame, frameCrcOk, newFrameHeader, readFrameHeader } from './frame.js';

export interface SegmentHeader {
  readonly version: number;
  readonly flags: number;
  readonly baseSeq: number;
  /** For a COMPACTED segment: end (exclusive) of the seq range whose segments it replaces; else 0. */
  readonly replacesEndSeq: number;
}

/** A segment header; `version` is 1 (`SEGMENT_VERSION_PLAIN`) unless the segment may hold scheduled items. */
export function encodeSegmentHeader(h: Omit<SegmentHeader, 'version'> & { readonly version?: number }): Buffer {
  const buf = Buffer.alloc(SEGMENT_HEADER_BYTES);
  writeU32(buf, SEG_OFF_MAGIC, SEGMENT_MAGIC);
  writeU16(buf, SEG_OFF_VERSION, h.version ?? SEGMENT_VERSION_PLAIN);
  writeU16(buf, SEG_OFF_HEADER_BYTES, SEGMENT_HEADER_BYTES);
  writeU32(buf, SEG_OFF_FLAGS, h.flags);
  writeU64(buf, SEG_OFF_BASE_SEQ, h.baseSeq);
  writeU64(buf, SEG_OFF_REPLACES_END_SEQ, h.replacesEndSeq);
  writeU32(buf, SEG_OFF_HEADER_CRC, crc32c32(buf.subarray(0, SEG_OFF_HEADER_CRC)));
  return buf;
}

/** Why a header was refused, with the offset of the offending field. */
export type HeaderProblem = { kind: 'unsupported'; version: number } | { kind: 'corrupt'; offset: number; reason: string };

/**
 * Decode a segment header. Magic and version are checked BEFORE the CRC (FORMAT.md §8): a newer
 * version is reported as unsupported, never as corruption.
 */
export function decodeSegmentHeader(buf: Uint8Array, fileSize: number): SegmentHeader | HeaderProblem {
  if (fileSize < SEGMENT_HEADER_BYTES || buf.length < SEGMENT_HEADER_BYTES) {
    return { kind: 'corrupt', offset: 0, reason: `file is ${fileSize} bytes, shorter than a segment header` };
  }
  if (readU32(buf, SEG_OFF_MAGIC) !== SEGMENT_MAGIC) return { kind: 'corrupt', offset: SEG_OFF_MAGIC, reason: 'bad magic' };
  const version = readU16(buf, SEG_OFF_VERSION);
  if (version > SEGMENT_FORMAT_VERSION) return { kind: 'unsupported', version };
  if (version === 0) return { kind: 'corrupt', offset: SEG_OFF_VERSION, reason: 'version 0' };
  if (crc32c32(buf.subarray(0, SEG_OFF_HEADER_CRC)) !== readU32(buf, SEG_OFF_HEADER_CRC)) {
    return { kind: 'corrupt', offset: SEG_OFF_HEADER_CRC, reason: 'header CRC mismatch' };
  }
  if (readU16(buf, SEG_OFF_HEADER_BYTES) !== SEGMENT_HEADER_BYTES) {
    return { kind: 'corrupt', offset: SEG_OFF_HEADER_BYTES, reason: 'unexpected header size' };
  }
  const flags = readU32(buf, SEG_OFF_FLAGS);
  if ((flags & ~SEG_KNOWN_FLAGS) !== 0) return { kind: 'corrupt', offset: SEG_OFF_FLAGS, reason: 'unknown header flags' };
  const baseSeq = readU64(buf, SEG_OFF_BASE_SEQ);
  const replacesEndSeq = readU64(buf, SEG_OFF_REPLACES_END_SEQ);
  if (baseSeq < 1) return { kind: 'corrupt', offset: SEG_OFF_BASE_SEQ, reason: 'base seq out of range' };
  if (replacesEndSeq < 0 || (replacesEndSeq !== 0 && replacesEndSeq <= baseSeq)) {
    return { kind: 'corrupt', offset: SEG_OFF_REPLACES_END_SEQ, reason: 'replaced range out of order' };
  }
  return { version, flags, baseSeq, replacesEndSeq };
}

/** What a SEAL record says about its segment. `endSeq` is the SEAL frame's seq field. */
export interface SealInfo {
  readonly recordCount: number;
  /** Seq of the first ITEM, or 0 when the segment holds none. */
  readonly firstSeq: number;
  /** Seq of the last ITEM, or 0 when the segment holds none. */
  readonly lastSeq: number;
  /** Base seq of the next segment: every seq of this segment is below it. */
  readonly endSeq: number;
}

/** Encode a complete SEAL frame. */
export function encodeSealFrame(seal: SealInfo): Buffer {
  const buf = Buffer.alloc(SEAL_FRAME_BYTES);
  const payload = Buffer.alloc(SEAL_PAYLOAD_BYTES);
  writeU32(payload, SEAL_OFF_RECORD_COUNT, seal.recordCount);
  writeU64(payload, SEAL_OFF_FIRST_SEQ, seal.firstSeq);
  writeU64(payload, SEAL_OFF_LAST_SEQ, seal.lastSeq);
  encodeFrame(buf, 0, seal.endSeq, RECORD_SEAL, payload);
  return buf;
}

/** Decode the SEAL payload at `buf[at..]` (CRC already checked); `null` when its fields are inconsistent. */
export function decodeSealPayload(buf: Uint8Array, at: number, endSeq: number): SealInfo | null {
  const recordCount = readU32(buf, at + SEAL_OFF_RECORD_COUNT);
  const firstSeq = readU64(buf, at + SEAL_OFF_FIRST_SEQ);
  const lastSeq = readU64(buf, at + SEAL_OFF_LAST_SEQ);
  if (firstSeq < 0 || lastSeq < 0 || endSeq < 1) return null;
  if (recordCount === 0 ? firstSeq !== 0 || lastSeq !== 0 : firstSeq < 1 || lastSeq < firstSeq || lastSeq >= endSeq) return null;
  if (recordCount > 0 && recordCount > lastSeq - firstSeq + 1) return null;
  return { recordCount, firstSeq, lastSeq, endSeq };
}

/**
 * Decode a sealed segment's last `SEAL_FRAME_BYTES`, read on their own at open (without reading the
 * segment's records). `null` when they are not a valid SEAL frame.
 */
export function decodeTrailingSeal(buf: Uint8Array): SealInfo | null {
  if (buf.length < SEAL_FRAME_BYTES) return null;
  const h = readFrameHeader(buf, 0, newFrameHeader());
  if (h.type !== RECORD_SEAL || h.length !== SEAL_PAYLOAD_BYTES || h.metaBytes !== 0 || h.seq < 1) return null;
  if (!frameCrcOk(buf, 0, h)) return null;
  return decodeSealPayload(buf, SEAL_FRAME_BYTES - SEAL_PAYLOAD_BYTES, h.seq);
}
