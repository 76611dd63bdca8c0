// Implements FORMAT.md §3.1 "ITEM (type 1)": the priority and not-before entries of an ITEM frame's metadata area.
/**
 * An item's scheduling fields on disk. A plain item (priority 0, no not-before time) has no
 * metadata at all, so its frame is byte for byte what version 1 writes; a scheduled one carries
 * only its non-zero fields, as TLV entries of the frame's metadata area, and lives only in a
 * version-2 segment (FORMAT.md §8).
 */
import { PRIORITY_MAX, type StoredItem } from '../store.js';
import {
  META_ENTRY_HEADER_BYTES,
  META_NOT_BEFORE_BYTES,
  META_PRIORITY_BYTES,
  META_TAG_NOT_BEFORE,
  META_TAG_PRIORITY,
  readI64,
  writeI64,
} from './format.js';

/** The scheduling fields decoded from a frame (0 when absent). */
export interface ItemSchedule {
  priority: number;
  notBefore: number;
}

const PRIORITY_ENTRY_BYTES = META_ENTRY_HEADER_BYTES + META_PRIORITY_BYTES;
const NOT_BEFORE_ENTRY_BYTES = META_ENTRY_HEADER_BYTES + META_NOT_BEFORE_BYTES;
/** The i8 of a priority is stored as its low byte; values from 128 up read back negative. */
const BYTE_RANGE = 256;

/** Bytes of the metadata area `item` is written with: 0 for a plain item. */
export function itemMetaBytes(item: StoredItem): number {
  let bytes = 0;
  if (item.priority !== undefined && item.priority !== 0) bytes += PRIORITY_ENTRY_BYTES;
  if (item.notBefore !== undefined && item.notBefore !== 0) bytes += NOT_BEFORE_ENTRY_BYTES;
  return bytes;
}

/** Write `item`'s metadata entries at `buf[at..]` (room for {@link itemMetaBytes}); returns the offset past them. */
export function encodeItemMeta(buf: Uint8Array, at: number, item: StoredItem): number {
  let p = at;
  if (item.priority !== undefined && item.priority !== 0) {
    buf[p] = META_TAG_PRIORITY;
    buf[p + 1] = META_PRIORITY_BYTES;
    buf[p + META_ENTRY_HEADER_BYTES] = item.priority < 0 ? item.priority + BYTE_RANGE : item.priority;
    p += PRIORITY_ENTRY_BYTES;
  }
  if (item.notBefore !== undefined && item.notBefore !== 0) {
    buf[p] = META_TAG_NOT_BEFORE;
    buf[p + 1] = META_NOT_BEFORE_BYTES;
    writeI64(buf, p + META_ENTRY_HEADER_BYTES, item.notBefore);
    p += NOT_BEFORE_ENTRY_BYTES;
  }
  return p;
}

/**
 * Decode the metadata area `buf[at .. at + metaBytes)` of an ITEM frame of a version-2 segment
 * into `out`. False when it is malformed: an entry running past the area, a known tag with the
 * wrong length or twice, a not-before time that is not a non-negative safe integer (the one rule
 * every store applies on append, `src/schedule-records.ts`: a value no append could have written).
 * Unknown tags are skipped.
 */
export function decodeItemMeta(buf: Uint8Array, at: number, metaBytes: number, out: ItemSchedule): boolean {
  out.priority = 0;
  out.notBefore = 0;
  let seen = 0;
  const end = at + metaBytes;
  for (let p = at; p < end; ) {
    if (p + META_ENTRY_HEADER_BYTES > end) return false;
    const tag = buf[p]!;
    const len = buf[p + 1]!;
    const v = p + META_ENTRY_HEADER_BYTES;
    if (v + len > end) return false;
    if (tag === META_TAG_PRIORITY || tag === META_TAG_NOT_BEFORE) {
      const bit = 1 << tag;
      if ((seen & bit) !== 0) return false;
      seen |= bit;
      if (tag === META_TAG_PRIORITY) {
        if (len !== META_PRIORITY_BYTES) return false;
        const b = buf[v]!;
        out.priority = b > PRIORITY_MAX ? b - BYTE_RANGE : b;
      } else {
        if (len !== META_NOT_BEFORE_BYTES) return false;
        const t = readI64(buf, v);
        if (t === null || t < 0) return false;
        out.notBefore = t;
      }
    }
    p = v + len;
  }
  return true;
}

/** `{ seq, bytes }` with the non-zero scheduling fields of `s` added, as `read` returns items. */
export function withSchedule(seq: number, bytes: Uint8Array, s: ItemSchedule): StoredItem {
  if (s.priority === 0 && s.notBefore === 0) return { seq, bytes };
  if (s.notBefore === 0) return { seq, bytes, priority: s.priority };
  if (s.priority === 0) return { seq, bytes, notBefore: s.notBefore };
  return { seq, bytes, priority: s.priority, notBefore: s.notBefore };
}
