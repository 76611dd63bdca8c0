// Implements FORMAT.md §3 "Record frames".
import type { StoredItem } from '../../../contract/store.js';
import { invariantViolated } from './assert.js';
import { crc32c32, crc32cRange } from './crc.js';
import { encodeItemMeta } from './item-meta.js';
import {
  FRAME_CRC_START,
  FRAME_HEADER_BYTES,
  FRAME_OFF_CRC,
  FRAME_OFF_FLAGS,
  FRAME_OFF_LENGTH,
  FRAME_OFF_META_BYTES,
  FRAME_OFF_SEQ,
  FRAME_OFF_TYPE,
  RECORD_ITEM,
  readU16,
  readU32,
  readU64,
  writeU16,
  writeU32,
  writeU64,
} from './format.js';

/**
 * Write one frame with an empty metadata area at `offset` of `buf` (which must have room), copying
 * `payload` after the header, and return the offset just past it.
 */
export function encodeFrame(buf: Uint8Array, offset: number, seq: number, type: number, payload: Uint8Array): number {
  const length = payload.length;
  writeHeaderFields(buf, offset, seq, type, length);
  const payloadStart = offset + FRAME_HEADER_BYTES;
  buf.set(payload, payloadStart);
  // CRC over the header fields after the CRC itself, then the payload (chained, no view needed).
  const headerCrc = crc32cRange(buf, offset + FRAME_CRC_START, payloadStart);
  writeU32(buf, offset + FRAME_OFF_CRC, crc32c32(payload, headerCrc));
  return payloadStart + length;
}

/** Like {@link encodeFrame}, for a payload of `length` bytes already in place after the header. */
export function encodeFrameInPlace(buf: Uint8Array, offset: number, seq: number, type: number, length: number): number {
  writeHeaderFields(buf, offset, seq, type, length);
  const end = offset + FRAME_HEADER_BYTES + length;
  writeU32(buf, offset + FRAME_OFF_CRC, crc32cRange(buf, offset + FRAME_CRC_START, end));
  return end;
}

/**
 * Write the ITEM frame of a scheduled item (FORMAT §3.1): its metadata entries (`metaBytes` of
 * them, from `./item-meta.ts`), then its bytes. A plain item goes through {@link encodeFrame}.
 */
export function encodeScheduledItemFrame(buf: Uint8Array, offset: number, item: StoredItem, metaBytes: number): number {
  const length = item.bytes.length;
  writeHeaderFields(buf, offset, item.seq, RECORD_ITEM, length, metaBytes);
  const metaStart = offset + FRAME_HEADER_BYTES;
  const payloadStart = encodeItemMeta(buf, metaStart, item);
  if (payloadStart !== metaStart + metaBytes)
    invariantViolated(`item ${item.seq}: metadata of ${payloadStart - metaStart} bytes, expected ${metaBytes}`);
  buf.set(item.bytes, payloadStart);
  const end = payloadStart + length;
  writeU32(buf, offset + FRAME_OFF_CRC, crc32cRange(buf, offset + FRAME_CRC_START, end));
  return end;
}

function writeHeaderFields(buf: Uint8Array, offset: number, seq: number, type: number, length: number, metaBytes = 0): void {
  writeU32(buf, offset + FRAME_OFF_LENGTH, length);
  writeU64(buf, offset + FRAME_OFF_SEQ, seq);
  buf[offset + FRAME_OFF_TYPE] = type;
  buf[offset + FRAME_OFF_FLAGS] = 0;
  writeU16(buf, offset + FRAME_OFF_META_BYTES, metaBytes);
}

/** The fixed fields of a frame header, read without checking anything. */
export interface FrameHeader {
  crc: number;
  length: number;
  /** -1 when the stored u64 is not a safe integer. */
  seq: number;
  type: number;
  flags: number;
  metaBytes: number;
}

export function readFrameHeader(buf: Uint8Array, offset: number, out: FrameHeader): FrameHeader {
  out.crc = readU32(buf, offset + FRAME_OFF_CRC);
  out.length = readU32(buf, offset + FRAME_OFF_LENGTH);
  out.seq = readU64(buf, offset + FRAME_OFF_SEQ);
  out.type = buf[offset + FRAME_OFF_TYPE]!;
  out.flags = buf[offset + FRAME_OFF_FLAGS]!;
  out.metaBytes = readU16(buf, offset + FRAME_OFF_META_BYTES);
  return out;
}

export function newFrameHeader(): FrameHeader {
  return { crc: 0, length: 0, seq: 0, type: 0, flags: 0, metaBytes: 0 };
}

/** Total bytes of a frame with this header. */
export function frameBytes(h: FrameHeader): number {
  return FRAME_HEADER_BYTES + h.metaBytes + h.length;
}

/** True when the frame at `offset` (whole frame present in `buf`) has a matching CRC. */
export function frameCrcOk(buf: Uint8Array, offset: number, h: FrameHeader): boolean {
  return crc32cRange(buf, offset + FRAME_CRC_START, offset + frameBytes(h)) === h.crc;
}

/** Offset of the payload of a frame that starts at `offset`. */
export function payloadOffset(offset: number, h: FrameHeader): number {
  return offset + FRAME_HEADER_BYTES + h.metaBytes;
}
