// Implements FORMAT.md §3.1 "ITEM (type 1)": the priority, not-before, key, keyed-at, spool, group and fire entries of an ITEM frame's metadata area.
/**
 * An item's scheduling fields and idempotency key on disk. A plain item (priority 0, no
 * not-before time, no key) has no metadata at all, so its frame is byte for byte what version 1
 * writes; a scheduled one carries only its non-zero fields, as TLV entries of the frame's metadata
 * area, and lives only in a version-2 or version-3 segment; a keyed one carries its key and the
 * time it was stored, and lives only in a version-3 segment or later; one with a group lives only
 * in a version-4 segment (FORMAT.md §8).
 */
import { PRIORITY_MAX, type ScheduleFire, type SpoolSource, type StoredItem } from '../../../contract/store.js';
import {
  MAX_GROUP_BYTES_ON_DISK,
  MAX_KEY_BYTES_ON_DISK,
  MAX_SCHEDULE_NAME_BYTES_ON_DISK,
  META_ENTRY_HEADER_BYTES,
  META_FIRE_FIXED_BYTES,
  META_TAG_FIRE,
  META_TAG_GROUP,
  SEGMENT_VERSION_GROUPS,
  SEGMENT_VERSION_KEYED,
  SEGMENT_VERSION_PLAIN,
  SEGMENT_VERSION_SCHEDULED,
  META_KEYED_AT_BYTES,
  META_TAG_KEY,
  META_TAG_KEYED_AT,
  META_NOT_BEFORE_BYTES,
  META_PRIORITY_BYTES,
  META_TAG_NOT_BEFORE,
  META_TAG_PRIORITY,
  META_SPOOL_BYTES,
  META_TAG_SPOOL,
  SPOOL_ID_BYTES,
  readI64,
  readU64,
  writeI64,
  writeU64,
} from './format.js';

/** The scheduling fields decoded from a frame (0 when absent), and its key (undefined and 0 when absent). */
export interface ItemSchedule {
  priority: number;
  notBefore: number;
  key: string | undefined;
  keyedAt: number;
  /** The spool record an ingested item came from (version-3 segments), or undefined. */
  spool?: SpoolSource | undefined;
  /** The item's group (version-4 segments), or undefined. */
  group?: string | undefined;
  /** The schedule slot the item was fired for (version-4 segments), or undefined. */
  fired?: ScheduleFire | undefined;
}

/** The lowest segment version that holds `item`'s metadata (FORMAT.md §8): 1 for a plain item. */
export function itemSegmentVersion(item: StoredItem): number {
  if (item.group !== undefined || item.fired !== undefined) return SEGMENT_VERSION_GROUPS;
  if (item.key !== undefined || item.spool !== undefined) return SEGMENT_VERSION_KEYED;
  if ((item.priority !== undefined && item.priority !== 0) || (item.notBefore !== undefined && item.notBefore !== 0))
    return SEGMENT_VERSION_SCHEDULED;
  return SEGMENT_VERSION_PLAIN;
}

/** The lowest segment version that holds the metadata a frame was read with, as `itemSegmentVersion`. */
export function decodedSegmentVersion(s: ItemSchedule): number {
  if (s.group !== undefined || s.fired !== undefined) return SEGMENT_VERSION_GROUPS;
  if (s.key !== undefined || s.spool !== undefined) return SEGMENT_VERSION_KEYED;
  if (s.priority !== 0 || s.notBefore !== 0) return SEGMENT_VERSION_SCHEDULED;
  return SEGMENT_VERSION_PLAIN;
}

const utf8 = new TextEncoder();
/** Fatal: a key that is not valid UTF-8 is damage, never a key read back different from the one stored. */
const utf8Strict = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
const KEYED_AT_ENTRY_BYTES = META_ENTRY_HEADER_BYTES + META_KEYED_AT_BYTES;

const PRIORITY_ENTRY_BYTES = META_ENTRY_HEADER_BYTES + META_PRIORITY_BYTES;
const NOT_BEFORE_ENTRY_BYTES = META_ENTRY_HEADER_BYTES + META_NOT_BEFORE_BYTES;
/** The i8 of a priority is stored as its low byte; values from 128 up read back negative. */
const BYTE_RANGE = 256;

/** Bytes of the metadata area `item` is written with: 0 for a plain item. */
export function itemMetaBytes(item: StoredItem): number {
  let bytes = 0;
  if (item.priority !== undefined && item.priority !== 0) bytes += PRIORITY_ENTRY_BYTES;
  if (item.notBefore !== undefined && item.notBefore !== 0) bytes += NOT_BEFORE_ENTRY_BYTES;
  if (item.key !== undefined) bytes += META_ENTRY_HEADER_BYTES + keyBytesOf(item.key) + KEYED_AT_ENTRY_BYTES;
  if (item.spool !== undefined) bytes += SPOOL_ENTRY_BYTES;
  if (item.group !== undefined) bytes += META_ENTRY_HEADER_BYTES + keyBytesOf(item.group);
  if (item.fired !== undefined) bytes += META_ENTRY_HEADER_BYTES + META_FIRE_FIXED_BYTES + keyBytesOf(item.fired.name);
  return bytes;
}

const SPOOL_ENTRY_BYTES = META_ENTRY_HEADER_BYTES + META_SPOOL_BYTES;

/** The 16 bytes of a spool file id given as 32 hex digits. */
export function spoolIdBytes(id: string): Uint8Array {
  const out = new Uint8Array(SPOOL_ID_BYTES);
  for (let i = 0; i < SPOOL_ID_BYTES; i++) out[i] = Number.parseInt(id.slice(2 * i, 2 * i + 2), 16);
  return out;
}

/** 32 hex digits of the 16-byte spool file id at `buf[at..]`. */
export function spoolIdText(buf: Uint8Array, at: number): string {
  let s = '';
  for (let i = 0; i < SPOOL_ID_BYTES; i++) s += buf[at + i]!.toString(16).padStart(2, '0');
  return s;
}

/** UTF-8 bytes of a key or a group (checked by the store against its bound before it is written). */
function keyBytesOf(key: string): number {
  for (let i = 0; i < key.length; i++) if (key.charCodeAt(i) > 0x7f) return utf8.encode(key).length;
  return key.length;
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
  if (item.key !== undefined) {
    const { written } = utf8.encodeInto(
      item.key,
      buf.subarray(p + META_ENTRY_HEADER_BYTES, p + META_ENTRY_HEADER_BYTES + MAX_KEY_BYTES_ON_DISK),
    );
    buf[p] = META_TAG_KEY;
    buf[p + 1] = written;
    p += META_ENTRY_HEADER_BYTES + written;
    buf[p] = META_TAG_KEYED_AT;
    buf[p + 1] = META_KEYED_AT_BYTES;
    writeI64(buf, p + META_ENTRY_HEADER_BYTES, item.keyedAt!);
    p += KEYED_AT_ENTRY_BYTES;
  }
  if (item.spool !== undefined) {
    buf[p] = META_TAG_SPOOL;
    buf[p + 1] = META_SPOOL_BYTES;
    buf.set(spoolIdBytes(item.spool.file), p + META_ENTRY_HEADER_BYTES);
    writeU64(buf, p + META_ENTRY_HEADER_BYTES + SPOOL_ID_BYTES, item.spool.record);
    p += SPOOL_ENTRY_BYTES;
  }
  if (item.group !== undefined) {
    const { written } = utf8.encodeInto(
      item.group,
      buf.subarray(p + META_ENTRY_HEADER_BYTES, p + META_ENTRY_HEADER_BYTES + MAX_GROUP_BYTES_ON_DISK),
    );
    buf[p] = META_TAG_GROUP;
    buf[p + 1] = written;
    p += META_ENTRY_HEADER_BYTES + written;
  }
  if (item.fired !== undefined) {
    const v = p + META_ENTRY_HEADER_BYTES;
    writeI64(buf, v, item.fired.slot);
    writeI64(buf, v + 8, item.fired.next);
    const { written } = utf8.encodeInto(
      item.fired.name,
      buf.subarray(v + META_FIRE_FIXED_BYTES, v + META_FIRE_FIXED_BYTES + MAX_SCHEDULE_NAME_BYTES_ON_DISK),
    );
    buf[p] = META_TAG_FIRE;
    buf[p + 1] = META_FIRE_FIXED_BYTES + written;
    p = v + META_FIRE_FIXED_BYTES + written;
  }
  return p;
}

/**
 * Decode the metadata area `buf[at .. at + metaBytes)` of an ITEM frame of a segment of `version`
 * 2 or more into `out`. False when it is malformed: an entry running past the area, a known tag
 * with the wrong length or twice, a not-before time that is not a non-negative safe integer (the
 * one rule every store applies on append, `src/contract/records/schedules.ts`: a value no append could have
 * written). From version 3, also a key that is empty or not UTF-8, a keyed-at time that is not a
 * non-negative safe integer, or one of the two without the other; from version 4, a group that is
 * empty, longer than 64 bytes or not UTF-8, and a fire whose times are not non-negative safe
 * integers or whose name is empty, longer than 128 bytes or not UTF-8. Unknown tags are skipped
 * (the tags of a later version too, as that version's predecessors skip them).
 */
export function decodeItemMeta(buf: Uint8Array, at: number, metaBytes: number, out: ItemSchedule, version: number): boolean {
  const keys = version >= SEGMENT_VERSION_KEYED;
  const groups = version >= SEGMENT_VERSION_GROUPS;
  out.priority = 0;
  out.notBefore = 0;
  out.key = undefined;
  out.keyedAt = 0;
  out.spool = undefined;
  out.group = undefined;
  out.fired = undefined;
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
    } else if (keys && (tag === META_TAG_KEY || tag === META_TAG_KEYED_AT)) {
      const bit = 1 << tag;
      if ((seen & bit) !== 0) return false;
      seen |= bit;
      if (tag === META_TAG_KEY) {
        if (len === 0) return false;
        try {
          out.key = utf8Strict.decode(buf.subarray(v, v + len));
        } catch {
          return false;
        }
      } else {
        if (len !== META_KEYED_AT_BYTES) return false;
        const t = readI64(buf, v);
        if (t === null || t < 0) return false;
        out.keyedAt = t;
      }
    } else if (keys && tag === META_TAG_SPOOL) {
      const bit = 1 << tag;
      if ((seen & bit) !== 0 || len !== META_SPOOL_BYTES) return false;
      seen |= bit;
      const record = readU64(buf, v + SPOOL_ID_BYTES);
      if (!Number.isSafeInteger(record) || record < 1) return false;
      out.spool = { file: spoolIdText(buf, v), record };
    } else if (groups && tag === META_TAG_GROUP) {
      const bit = 1 << tag;
      if ((seen & bit) !== 0 || len === 0 || len > MAX_GROUP_BYTES_ON_DISK) return false;
      seen |= bit;
      try {
        out.group = utf8Strict.decode(buf.subarray(v, v + len));
      } catch {
        return false;
      }
    } else if (groups && tag === META_TAG_FIRE) {
      const bit = 1 << tag;
      const nameBytes = len - META_FIRE_FIXED_BYTES;
      if ((seen & bit) !== 0 || nameBytes < 1 || nameBytes > MAX_SCHEDULE_NAME_BYTES_ON_DISK) return false;
      seen |= bit;
      const slot = readI64(buf, v);
      const next = readI64(buf, v + 8);
      if (slot === null || slot < 0 || next === null || next < 0) return false;
      let name: string;
      try {
        name = utf8Strict.decode(buf.subarray(v + META_FIRE_FIXED_BYTES, v + len));
      } catch {
        return false;
      }
      out.fired = { name, slot, next };
    }
    p = v + len;
  }
  // A key and its time are written together: one without the other is no frame a writer wrote.
  if (((seen >> META_TAG_KEY) & 1) !== ((seen >> META_TAG_KEYED_AT) & 1)) return false;
  return true;
}

/** `{ seq, bytes }` with the non-zero scheduling fields of `s`, its group and its fire added, as `read` returns items. */
export function withSchedule(
  seq: number,
  bytes: Uint8Array,
  s: Pick<ItemSchedule, 'priority' | 'notBefore' | 'group' | 'fired'>,
): StoredItem {
  if (s.group !== undefined || s.fired !== undefined) {
    const item: { seq: number; bytes: Uint8Array; priority?: number; notBefore?: number; group?: string; fired?: ScheduleFire } = {
      seq,
      bytes,
    };
    if (s.priority !== 0) item.priority = s.priority;
    if (s.notBefore !== 0) item.notBefore = s.notBefore;
    if (s.group !== undefined) item.group = s.group;
    if (s.fired !== undefined) item.fired = s.fired;
    return item;
  }
  if (s.priority === 0 && s.notBefore === 0) return { seq, bytes };
  if (s.notBefore === 0) return { seq, bytes, priority: s.priority };
  if (s.priority === 0) return { seq, bytes, notBefore: s.notBefore };
  return { seq, bytes, priority: s.priority, notBefore: s.notBefore };
}
