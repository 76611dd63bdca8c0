// Implements FORMAT.md §1 "Conventions", §2 "Segment files", §3 "Record frames", §4 "Cursor file" and §13 "Identity file".
import {
  MAX_GROUP_BYTES,
  MAX_KEY_BYTES,
  MAX_REASON_BYTES,
  MAX_SCHEDULE_NAME_BYTES,
  MAX_SCHEDULE_SPEC_BYTES,
} from '../../../contract/store.js';

/**
 * The format vocabulary: every magic number, size, offset and type code of the on-disk format
 * lives here, so the writer and the reader cannot drift apart. No other module spells a bare
 * byte count; they import these names. All integers are little-endian.
 */

/** The highest segment-file version this code reads (FORMAT.md §8). */
export const SEGMENT_FORMAT_VERSION = 4;
/** The segment version written while a store holds no item with a priority or a not-before time. */
export const SEGMENT_VERSION_PLAIN = 1;
/**
 * The segment version whose ITEM frames may carry a priority and a not-before time (FORMAT.md
 * §3.1): a version-1 reader would skip them and deliver the item too early or out of order, so it
 * must refuse the file instead.
 */
export const SEGMENT_VERSION_SCHEDULED = 2;
/**
 * The segment version whose ITEM frames may also carry an idempotency key (FORMAT.md §3.1): a
 * version-2 reader would skip it, and a retried push would then store its item twice, so it must
 * refuse the file instead. Version 3 holds everything version 2 holds.
 */
export const SEGMENT_VERSION_KEYED = 3;
/**
 * The segment version whose ITEM frames may also carry a group (FORMAT.md §3.1): a version-3
 * reader would skip it and hand out more items of one group at once than a consumer allows, so it
 * must refuse the file instead. Version 4 holds everything version 3 holds.
 */
export const SEGMENT_VERSION_GROUPS = 4;
/**
 * The highest cursor-file version this code reads (FORMAT.md §8). A store writes cursor version 1
 * until it first stores delivery marks or dead letters, then version 2 (§4.5); version 3 from its
 * first checkpoint holding idempotency keys (§4.6), and version 4 while its checkpoint holds a
 * spool table (§14.3).
 */
export const CURSOR_FORMAT_VERSION = 5;
/** The cursor version a store writes until it needs a record of version 2. */
export const CURSOR_VERSION_PLAIN = 1;
/** The cursor version that holds delivery marks and dead letters (FORMAT.md §4.1, §4.2). */
export const CURSOR_VERSION_DELIVERIES = 2;
/** The cursor version whose checkpoint also holds the store's idempotency keys (FORMAT.md §4.1, §4.6). */
export const CURSOR_VERSION_KEYS = 3;
/** The cursor version whose checkpoint also holds how far each spool file was ingested (FORMAT.md §4.1, §14.3). */
export const CURSOR_VERSION_SPOOL = 4;
/** The cursor version whose checkpoint also holds the store's schedules, and whose log may hold SCHEDULE and UNSCHEDULE records (FORMAT.md §4.1, §4.2, §4.7). */
export const CURSOR_VERSION_SCHEDULES = 5;

/** Bytes 0..3 of every segment file: ASCII "PQSG". */
export const SEGMENT_MAGIC = 0x47535150; // 'P' 'Q' 'S' 'G' read as a little-endian u32
/** Bytes 0..3 of the cursor file: ASCII "PQCK". */
export const CURSOR_MAGIC = 0x4b435150; // 'P' 'Q' 'C' 'K' read as a little-endian u32

// ---- Segment header (FORMAT.md §2.1) ----
export const SEGMENT_HEADER_BYTES = 32;
export const SEG_OFF_MAGIC = 0;
export const SEG_OFF_VERSION = 4;
export const SEG_OFF_HEADER_BYTES = 6;
export const SEG_OFF_FLAGS = 8;
export const SEG_OFF_BASE_SEQ = 12;
export const SEG_OFF_REPLACES_END_SEQ = 20;
export const SEG_OFF_HEADER_CRC = 28;
/** Header flag: the segment was written by compaction and replaces every segment with a base seq in `[baseSeq, replacesEndSeq)`. */
export const SEG_FLAG_COMPACTED = 0x1;
/** Flags this code understands; a set unknown bit in a version-1 or version-2 header is corruption. */
export const SEG_KNOWN_FLAGS = SEG_FLAG_COMPACTED;

// ---- Record frame (FORMAT.md §3) ----
export const FRAME_HEADER_BYTES = 20;
export const FRAME_OFF_CRC = 0;
export const FRAME_OFF_LENGTH = 4;
export const FRAME_OFF_SEQ = 8;
export const FRAME_OFF_TYPE = 16;
export const FRAME_OFF_FLAGS = 17;
export const FRAME_OFF_META_BYTES = 18;
/** The CRC covers the frame from this offset to its end: length, seq, type, flags, metaBytes, metadata and payload. */
export const FRAME_CRC_START = FRAME_OFF_LENGTH;

/** Record types. 0 is never a valid type, so a zero-filled region can never look like a record. */
export const RECORD_ITEM = 1;
export const RECORD_SEAL = 2;
export const RECORD_ACK = 3;
export const RECORD_OPENED = 4;
/** Cursor version 2 only (FORMAT.md §4.2): delivery marks, dead letters, drops and redrives. */
export const RECORD_MARK = 5;
export const RECORD_DEAD = 6;
export const RECORD_DROP = 7;
export const RECORD_REDRIVE = 8;
/** Spool files only (FORMAT.md §14.2): the producer closed the file; nothing follows. */
export const RECORD_SPOOL_END = 9;
/** Cursor version 5 only (FORMAT.md §4.2): a schedule stored (added or replaced), and one deleted. */
export const RECORD_SCHEDULE = 10;
export const RECORD_UNSCHEDULE = 11;

/** Largest metadata area a frame can carry (the field is a u16). */
export const MAX_META_BYTES = 0xffff;
/** Each metadata entry is `tag u8, length u8, value[length]`. Readers skip tags they do not know. */
export const META_ENTRY_HEADER_BYTES = 2;
/** Metadata tag of an item's priority (version-2 segments, FORMAT.md §3.1): an i8, never 0 when written. */
export const META_TAG_PRIORITY = 1;
export const META_PRIORITY_BYTES = 1;
/** Metadata tag of an item's not-before time (version-2 segments): an i64 of ms since the epoch, a safe integer, never 0 when written. */
export const META_TAG_NOT_BEFORE = 2;
export const META_NOT_BEFORE_BYTES = 8;
/** Metadata tag of an item's idempotency key (version-3 segments, FORMAT.md §3.1): 1 to 255 bytes of UTF-8. */
export const META_TAG_KEY = 3;
/** Metadata tag of when the key was stored (version-3 segments): an i64 of ms since the epoch, a non-negative safe integer. */
export const META_TAG_KEYED_AT = 4;
export const META_KEYED_AT_BYTES = 8;
/**
 * Metadata tag of where an ingested item came from (version-3 segments, FORMAT.md §14.3): the
 * spool file's 16-byte id, then the record's number in it (u64). Readers that do not know it skip it.
 */
export const META_TAG_SPOOL = 5;
export const SPOOL_ID_BYTES = 16;
export const META_SPOOL_BYTES = SPOOL_ID_BYTES + 8;
/** Metadata tag of an item's group (version-4 segments, FORMAT.md §3.1): 1 to 64 bytes of UTF-8. */
export const META_TAG_GROUP = 6;
/** Longest group on disk, in UTF-8 bytes (the Store contract's MAX_GROUP_BYTES). */
export const MAX_GROUP_BYTES_ON_DISK = 64;
/**
 * Metadata tag of the schedule slot an item was fired for (version-4 segments, FORMAT.md §3.1):
 * the slot (i64), the schedule's next slot (i64), then the schedule's name (1 to 128 bytes of UTF-8).
 */
export const META_TAG_FIRE = 7;
/** The fixed part of a fire entry's value: slot and next, i64 each. */
export const META_FIRE_FIXED_BYTES = 16;
/** Longest schedule name on disk, in UTF-8 bytes (the Store contract's MAX_SCHEDULE_NAME_BYTES). */
export const MAX_SCHEDULE_NAME_BYTES_ON_DISK = 128;
/** Longest schedule description on disk, in UTF-8 bytes (the Store contract's MAX_SCHEDULE_SPEC_BYTES). */
export const MAX_SCHEDULE_SPEC_BYTES_ON_DISK = 512;

/**
 * Hard upper bound of a payload length the reader accepts, whatever `maxItemBytes` was when the
 * record was written. A length above it is never allocated for (FORMAT.md §3, "Bounds").
 */
export const MAX_PAYLOAD_BYTES_CAP = 256 * 1024 * 1024;

// ---- Seal record payload (FORMAT.md §3.2) ----
export const SEAL_PAYLOAD_BYTES = 20;
export const SEAL_OFF_RECORD_COUNT = 0;
export const SEAL_OFF_FIRST_SEQ = 4;
export const SEAL_OFF_LAST_SEQ = 12;
export const SEAL_FRAME_BYTES = FRAME_HEADER_BYTES + SEAL_PAYLOAD_BYTES;

// ---- Cursor file (FORMAT.md §4) ----
export const CURSOR_HEADER_BYTES = 32;
export const CUR_OFF_MAGIC = 0;
export const CUR_OFF_VERSION = 4;
export const CUR_OFF_FLAGS = 6;
export const CUR_OFF_LWM = 8;
export const CUR_OFF_NEXT_SEQ = 16;
export const CUR_OFF_RANGE_COUNT = 24;
export const CUR_OFF_CRC = 28;
/** One acked range `[start, end)`: two u64. Used in the checkpoint and in ACK record payloads. */
export const RANGE_BYTES = 16;
/** Cursor flag: written by a clean `close()`; an OPENED record appended after it clears it. */
export const CUR_FLAG_CLEAN = 0x1;
export const CUR_KNOWN_FLAGS = CUR_FLAG_CLEAN;
/** Bound on the ranges of one checkpoint or one ACK record, so a hostile count cannot allocate without bound. */
export const MAX_RANGES_PER_RECORD = 1 << 20;

// ---- Cursor version 2 (FORMAT.md §4.1, §4.2) ----
/** A version-2 checkpoint header: the version-1 fields, then checkpointBytes, deliveredBelow, markCount, deadCount. */
export const CURSOR_V2_HEADER_BYTES = 56;
export const CUR_OFF_CHECKPOINT_BYTES = 32;
export const CUR_OFF_DELIVERED_BELOW = 40;
export const CUR_OFF_MARK_COUNT = 48;
export const CUR_OFF_DEAD_COUNT = 52;
// ---- Cursor version 3 (FORMAT.md §4.1, §4.6) ----
/** A version-3 checkpoint header: the version-2 fields, then keyCount and keysBytes. */
export const CURSOR_V3_HEADER_BYTES = 64;
export const CUR_OFF_KEY_COUNT = 56;
export const CUR_OFF_KEYS_BYTES = 60;
/** One key entry: seq u64, keyedAt u64, keyBytes u8, then the key. */
export const KEY_ENTRY_FIXED_BYTES = 17;
/** Longest key on disk, in UTF-8 bytes (the Store contract's MAX_KEY_BYTES; a u8 holds its length). */
export const MAX_KEY_BYTES_ON_DISK = 255;
/** Longest `lastError` or `reason` on disk, in UTF-8 bytes (the Store contract's MAX_REASON_BYTES). */
export const MAX_REASON_BYTES_ON_DISK = 1024;
/** One delivery mark: seq, deliveries, firstDeliveredAt, lastDeliveredAt (u64 each), errorBytes u16, then the error text. */
export const MARK_ENTRY_FIXED_BYTES = 34;
/** One dead letter: seq, deliveries, firstDeliveredAt, lastDeliveredAt, deadAt (u64 each), reasonBytes u16, payloadBytes u32, then reason and payload. */
export const DEAD_ENTRY_FIXED_BYTES = 46;
/** MARK payload: deliveredBelow u64, count u32, then the marks. */
export const MARK_RECORD_HEADER_BYTES = 12;
/** DEAD payload: count u32, then the dead letters. */
export const DEAD_RECORD_HEADER_BYTES = 4;
/** DROP payload: seqs, u64 each. */
export const DROP_ENTRY_BYTES = 8;
/** REDRIVE payload: pairs `from u64, seq u64`. */
export const REDRIVE_ENTRY_BYTES = 16;
/**
 * Largest payload of a MARK, DEAD, DROP or REDRIVE record a reader accepts: one dead letter of the
 * largest item with the longest reason. A length above it is never allocated for.
 */
export const MAX_CURSOR_RECORD_BYTES = MAX_PAYLOAD_BYTES_CAP + DEAD_RECORD_HEADER_BYTES + DEAD_ENTRY_FIXED_BYTES + MAX_REASON_BYTES_ON_DISK;
/** Writers start a new record of these types once its payload passes this many bytes (one entry always fits). */
export const CURSOR_RECORD_SPLIT_BYTES = 1024 * 1024;

// ---- Cursor version 4 (FORMAT.md §4.1, §14.3) ----
/** A version-4 checkpoint header: the version-3 fields, then spoolCount (u32) and 4 reserved bytes. */
export const CURSOR_V4_HEADER_BYTES = 72;
export const CUR_OFF_SPOOL_COUNT = 64;
/** One spool progress entry: the file's 16-byte id, then the records of it ingested (u64). */
export const SPOOL_ENTRY_BYTES = SPOOL_ID_BYTES + 8;

// ---- Cursor version 5 (FORMAT.md §4.1, §4.7) ----
/** A version-5 checkpoint header: the version-4 fields, then scheduleCount (u32) and schedulesBytes (u32). */
export const CURSOR_V5_HEADER_BYTES = 80;
export const CUR_OFF_SCHEDULE_COUNT = 72;
export const CUR_OFF_SCHEDULES_BYTES = 76;
/** One schedule: firedThrough u64, nextAt u64, nameBytes u8, specBytes u16, payloadBytes u32, then name, spec and payload. */
export const SCHEDULE_ENTRY_FIXED_BYTES = 23;

// ---- Spool files (FORMAT.md §14) ----
/** The store directory's subdirectory that holds the spool files. */
export const SPOOL_DIR = 'spool';
/** Bytes 0..3 of a spool file: ASCII "PQSP". */
export const SPOOL_MAGIC = 0x50535150; // 'P' 'Q' 'S' 'P' read as a little-endian u32
/** The highest spool-file version this code reads and the one it writes. */
export const SPOOL_FORMAT_VERSION = 1;
/** magic u32, version u16, headerBytes u16, id[16], createdAt u64 (ms since the epoch)... see §14.1. */
export const SPOOL_HEADER_BYTES = 40;
export const SPL_OFF_MAGIC = 0;
export const SPL_OFF_VERSION = 4;
export const SPL_OFF_HEADER_BYTES = 6;
export const SPL_OFF_ID = 8;
export const SPL_OFF_CREATED_AT = 24;
export const SPL_OFF_RESERVED = 32;
export const SPL_OFF_CRC = 36;
/** `<32 hex digits>.pqs`: a spool file. */
export const SPOOL_SUFFIX = '.pqs';
/** `<32 hex digits>.lock`: held by the file's producer while it writes. */
export const SPOOL_LOCK_SUFFIX = '.lock';

const SPOOL_FILE_RE = /^([0-9a-f]{32})\.pqs$/;
/** The id a spool file's name carries, or null when `name` is not a spool file's name. */
export function parseSpoolName(name: string): string | null {
  return SPOOL_FILE_RE.exec(name)?.[1] ?? null;
}

// ---- Identity file (FORMAT.md §13) ----
/** Bytes 0..3 of the identity file: ASCII "PQID". */
export const IDENTITY_MAGIC = 0x44495150; // 'P' 'Q' 'I' 'D' read as a little-endian u32
/** The highest identity-file version this code reads and the one it writes. */
export const IDENTITY_FORMAT_VERSION = 1;
/** The whole file: magic, version, flags, the 16 id bytes, 4 reserved bytes, CRC. */
export const IDENTITY_FILE_BYTES = 32;
export const ID_OFF_MAGIC = 0;
export const ID_OFF_VERSION = 4;
export const ID_OFF_FLAGS = 6;
export const ID_OFF_ID = 8;
export const ID_ID_BYTES = 16;
export const ID_OFF_RESERVED = 24;
export const ID_OFF_CRC = 28;

// ---- File names (FORMAT.md §5) ----
export const SEGMENT_PREFIX = 'seg-';
export const SEGMENT_SUFFIX = '.log';
/** Base seqs are zero-padded to 20 digits so names sort in seq order (2^64 has 20 digits). */
export const SEGMENT_SEQ_DIGITS = 20;
export const CURSOR_FILE = 'cursor.pqc';
/** The store's identity (FORMAT.md §13). */
export const IDENTITY_FILE = 'store.pqi';
export const LOCK_FILE = 'LOCK';
/** The mutex a process holds while it takes over a stale pid lock (src/fs/pid-lock.ts); never read by the store. */
export const LOCK_TAKEOVER_FILE = 'LOCK.takeover';
/** The socket the process that holds the store serves other processes on (FORMAT.md §15); a stale one is replaced by the next owner. */
export const ENDPOINT_FILE = 'pq.sock';
/** The socket while its owner sets its mode, before it is renamed to ENDPOINT_FILE; a stale one is deleted by the next owner. */
export const ENDPOINT_TMP_FILE = 'pq.sock.tmp';
/** Suffix of a file being written for an atomic replace; such files are deleted at open, never read. */
export const TMP_SUFFIX = '.tmp';
/** Side files that keep the bytes cut off a torn tail: `<file>.torn-<offset>`. */
export const TORN_INFIX = '.torn-';

export const TWO_POW_32 = 0x1_0000_0000;

/** Name of the segment whose base seq is `baseSeq`. */
export function segmentName(baseSeq: number): string {
  return SEGMENT_PREFIX + String(baseSeq).padStart(SEGMENT_SEQ_DIGITS, '0') + SEGMENT_SUFFIX;
}

const SEGMENT_NAME_RE = /^seg-(\d{20})\.log$/;
/** Base seq encoded in a segment name, or `null` when `name` is not a segment name. */
export function parseSegmentName(name: string): number | null {
  const m = SEGMENT_NAME_RE.exec(name);
  if (m === null) return null;
  const n = Number(m[1]);
  return Number.isSafeInteger(n) && n >= 1 ? n : null;
}

/** What kind of file a directory entry is, for the "foreign files" check at open. */
export type EntryKind = 'segment' | 'cursor' | 'identity' | 'lock' | 'endpoint' | 'tmp' | 'torn' | 'spool' | 'os-metadata' | 'foreign';

/**
 * Files a desktop's file manager drops into any folder it shows. They are left alone: refusing
 * them would make a store unusable after someone merely looked at it.
 */
export const OS_METADATA_FILES: readonly string[] = ['.DS_Store', 'Thumbs.db', 'desktop.ini'];

const TMP_RE = /^(seg-\d{20}\.log|cursor\.pqc|store\.pqi)\.tmp(-\d+)?$/;
/**
 * `LOCK.tmp-<pid>`: a file of the lock protocol, written by an opener that does not hold the lock
 * (yet). Never a stray for recovery to delete: the lock holder's recovery used to delete another
 * opener's, which failed one of the two opens (ENOENT) when four `pq push` ran at once.
 */
const LOCK_TMP_RE = /^LOCK\.tmp(-\d+)?$/;
const TORN_RE = /^(seg-\d{20}\.log|cursor\.pqc)\.torn-\d+$/;
export function classifyEntry(name: string): EntryKind {
  if (parseSegmentName(name) !== null) return 'segment';
  if (name === SPOOL_DIR) return 'spool';
  if (name === CURSOR_FILE) return 'cursor';
  if (name === IDENTITY_FILE) return 'identity';
  if (name === LOCK_FILE || name === LOCK_TAKEOVER_FILE || LOCK_TMP_RE.test(name)) return 'lock';
  if (name === ENDPOINT_FILE || name === ENDPOINT_TMP_FILE) return 'endpoint';
  if (TMP_RE.test(name)) return 'tmp';
  if (TORN_RE.test(name)) return 'torn';
  if (OS_METADATA_FILES.includes(name)) return 'os-metadata';
  return 'foreign';
}

// ---- Little-endian u64 helpers for safe-integer seqs (no BigInt on the hot path) ----

export function writeU64(buf: Uint8Array, offset: number, value: number): void {
  const hi = Math.floor(value / TWO_POW_32);
  const lo = value - hi * TWO_POW_32;
  writeU32(buf, offset, lo);
  writeU32(buf, offset + 4, hi);
}

/** Reads a u64; returns -1 when it is not a safe integer (the caller treats that as corruption). */
export function readU64(buf: Uint8Array, offset: number): number {
  const lo = readU32(buf, offset);
  const hi = readU32(buf, offset + 4);
  if (hi >= 0x200000) return -1;
  return hi * TWO_POW_32 + lo;
}

/** 2^21: the high word of 2^53, the first integer past the safe range. */
const SAFE_HI_LIMIT = 0x200000;

/** Writes a safe integer, negative or not, as a two's-complement i64. */
export function writeI64(buf: Uint8Array, offset: number, value: number): void {
  const hi = Math.floor(value / TWO_POW_32);
  writeU32(buf, offset, value - hi * TWO_POW_32);
  writeU32(buf, offset + 4, hi >>> 0);
}

/** Reads an i64; returns null when it is not a safe integer (the caller treats that as corruption). */
export function readI64(buf: Uint8Array, offset: number): number | null {
  const lo = readU32(buf, offset);
  const hi = readU32(buf, offset + 4) | 0;
  // |value| <= 2^53 - 1: the high word lies in [-2^21, 2^21), and -2^53 itself is out.
  if (hi >= SAFE_HI_LIMIT || hi < -SAFE_HI_LIMIT || (hi === -SAFE_HI_LIMIT && lo === 0)) return null;
  return hi * TWO_POW_32 + lo;
}

export function writeU32(buf: Uint8Array, offset: number, value: number): void {
  buf[offset] = value & 0xff;
  buf[offset + 1] = (value >>> 8) & 0xff;
  buf[offset + 2] = (value >>> 16) & 0xff;
  buf[offset + 3] = (value >>> 24) & 0xff;
}

export function readU32(buf: Uint8Array, offset: number): number {
  return (buf[offset]! | (buf[offset + 1]! << 8) | (buf[offset + 2]! << 16)) + buf[offset + 3]! * 0x1000000;
}

export function writeU16(buf: Uint8Array, offset: number, value: number): void {
  buf[offset] = value & 0xff;
  buf[offset + 1] = (value >>> 8) & 0xff;
}

export function readU16(buf: Uint8Array, offset: number): number {
  return buf[offset]! | (buf[offset + 1]! << 8);
}

/**
 * The Store contract's limits and the format's are one each, written twice: the contract's are
 * what every store accepts, the format's what the bytes can hold. They are tied here, when the
 * engine loads: a limit changed on one side only would let LogStore take a key, group, name or
 * reason its frames cut short, so the engine refuses to load instead.
 */
for (const [name, contract, disk] of [
  ['MAX_KEY_BYTES', MAX_KEY_BYTES, MAX_KEY_BYTES_ON_DISK],
  ['MAX_GROUP_BYTES', MAX_GROUP_BYTES, MAX_GROUP_BYTES_ON_DISK],
  ['MAX_REASON_BYTES', MAX_REASON_BYTES, MAX_REASON_BYTES_ON_DISK],
  ['MAX_SCHEDULE_NAME_BYTES', MAX_SCHEDULE_NAME_BYTES, MAX_SCHEDULE_NAME_BYTES_ON_DISK],
  ['MAX_SCHEDULE_SPEC_BYTES', MAX_SCHEDULE_SPEC_BYTES, MAX_SCHEDULE_SPEC_BYTES_ON_DISK],
] as const) {
  if (contract !== disk)
    throw new Error(
      `${name} is ${contract} in the Store contract and ${disk} in the format (src/stores/log/engine/format.ts): they must be one`,
    );
}
