/**
 * LevelStore's keys and values, format by format: implements FORMAT.md §11 (LevelStore). The
 * writer and the reader both take every prefix, length and offset from here.
 */
import { type DeadLetter, type DeliveryMark, MAX_KEY_BYTES, MAX_REASON_BYTES, PRIORITY_MAX, PRIORITY_MIN } from '../../contract/store.js';

/** Keys `i` + seq, `m:format` and `m:nextSeq`. */
export const PLAIN_FORMAT_VERSION = 1;
/** Adds keys `c` + seq (delivery marks), `d` + seq (dead letters) and `m:deliveredBelow`. */
export const DELIVERY_FORMAT_VERSION = 2;
/** Adds keys `s` + seq: the priority and not-before time of scheduled items. */
export const SCHEDULE_FORMAT_VERSION = 3;
/** Adds keys `k` + seq: the idempotency key of each item pushed with one, kept after its ack. */
export const KEYS_FORMAT_VERSION = 4;
/** The newest format this code reads and writes; kept under `m:format`. */
export const NEWEST_FORMAT_VERSION = KEYS_FORMAT_VERSION;

export const ITEM_PREFIX = 0x69; // 'i'
export const MARK_PREFIX = 0x63; // 'c', for delivery counts
export const DEAD_PREFIX = 0x64; // 'd'
export const SCHEDULE_PREFIX = 0x73; // 's'
export const KEY_PREFIX = 0x6b; // 'k'
/** A prefix byte and a seq, for items, marks, dead letters and schedule entries alike. */
export const ITEM_KEY_BYTES = 9;
export const FORMAT_KEY = Buffer.from('m:format');
/** The value under `m:format`: the version as a u64. */
export const FORMAT_VALUE_BYTES = 8;
export const NEXT_SEQ_KEY = Buffer.from('m:nextSeq');
export const DELIVERED_BELOW_KEY = Buffer.from('m:deliveredBelow');
/** The store's identity, the UTF-8 text of a UUID (FORMAT.md §11.6); in no format: older readers never read it. */
export const STORE_ID_KEY = Buffer.from('m:storeId');
/** Keys of all items lie strictly between these two; so for marks and dead letters. */
export const ITEMS_LOW = Buffer.from([ITEM_PREFIX]);
export const ITEMS_HIGH = Buffer.from([ITEM_PREFIX + 1]);
export const MARKS_LOW = Buffer.from([MARK_PREFIX]);
export const MARKS_HIGH = Buffer.from([MARK_PREFIX + 1]);
export const DEAD_LOW = Buffer.from([DEAD_PREFIX]);
export const DEAD_HIGH = Buffer.from([DEAD_PREFIX + 1]);
export const SCHEDULE_LOW = Buffer.from([SCHEDULE_PREFIX]);
export const SCHEDULE_HIGH = Buffer.from([SCHEDULE_PREFIX + 1]);
export const KEYS_LOW = Buffer.from([KEY_PREFIX]);
export const KEYS_HIGH = Buffer.from([KEY_PREFIX + 1]);
/** A key entry's value before the key itself: when it was stored, a u64 of ms since the epoch. */
export const KEY_FIXED_BYTES = 8;
/** A mark's value before its last error: deliveries, first and last delivery time. */
export const MARK_FIXED_BYTES = 24;
/** A dead letter's value before its reason: four 8-byte numbers and the reason's length. */
export const DEAD_FIXED_BYTES = 36;
/** A schedule entry's value: the priority as 1 signed byte, the not-before time as 8 bytes. */
export const SCHEDULE_VALUE_BYTES = 9;
export const NOT_BEFORE_OFFSET = 1;

export function prefixedKey(prefix: number, seq: number): Buffer {
  const key = Buffer.allocUnsafe(ITEM_KEY_BYTES);
  key[0] = prefix;
  key.writeBigUInt64BE(BigInt(seq), 1);
  return key;
}

export function itemKey(seq: number): Buffer {
  return prefixedKey(ITEM_PREFIX, seq);
}

export function markKey(seq: number): Buffer {
  return prefixedKey(MARK_PREFIX, seq);
}

export function deadKey(seq: number): Buffer {
  return prefixedKey(DEAD_PREFIX, seq);
}

export function scheduleKey(seq: number): Buffer {
  return prefixedKey(SCHEDULE_PREFIX, seq);
}

export function keyEntryKey(seq: number): Buffer {
  return prefixedKey(KEY_PREFIX, seq);
}

/** The value under `k` + seq: when the key was stored, then the key in UTF-8. */
export function encodeKeyEntry(key: string, keyedAt: number): Buffer {
  const k = Buffer.from(key, 'utf8');
  const value = Buffer.allocUnsafe(KEY_FIXED_BYTES + k.length);
  value.writeBigUInt64BE(BigInt(keyedAt), 0);
  k.copy(value, KEY_FIXED_BYTES);
  return value;
}

/** Fatal: a key that is not valid UTF-8 is damage, never a key read back different from the one stored. */
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/**
 * The key and time stored under a `k` key, or undefined when the value cannot be one: shorter than
 * its time and one byte, a key longer than `MAX_KEY_BYTES` or not UTF-8, a time past the safe integers.
 */
export function decodeKeyEntry(v: Uint8Array): { key: string; keyedAt: number } | undefined {
  if (v.length <= KEY_FIXED_BYTES || v.length > KEY_FIXED_BYTES + MAX_KEY_BYTES) return undefined;
  const b = Buffer.from(v.buffer, v.byteOffset, v.byteLength);
  const keyedAt = b.readBigUInt64BE(0);
  if (keyedAt > BigInt(Number.MAX_SAFE_INTEGER)) return undefined;
  try {
    return { key: utf8.decode(b.subarray(KEY_FIXED_BYTES)), keyedAt: Number(keyedAt) };
  } catch {
    return undefined;
  }
}

export function encodeMark(mark: DeliveryMark): Buffer {
  const error = Buffer.from(mark.lastError, 'utf8');
  const value = Buffer.allocUnsafe(MARK_FIXED_BYTES + error.length);
  value.writeBigUInt64BE(BigInt(mark.deliveries), 0);
  value.writeBigUInt64BE(BigInt(mark.firstDeliveredAt), 8);
  value.writeBigUInt64BE(BigInt(mark.lastDeliveredAt), 16);
  error.copy(value, MARK_FIXED_BYTES);
  return value;
}

/** The mark stored under `key`, or undefined when the value cannot be one. */
export function decodeMark(key: Uint8Array, v: Buffer): DeliveryMark | undefined {
  if (key.length !== ITEM_KEY_BYTES || v.length < MARK_FIXED_BYTES || v.length > MARK_FIXED_BYTES + MAX_REASON_BYTES) return undefined;
  return {
    seq: seqOfKey(key),
    deliveries: Number(v.readBigUInt64BE(0)),
    firstDeliveredAt: Number(v.readBigUInt64BE(8)),
    lastDeliveredAt: Number(v.readBigUInt64BE(16)),
    lastError: v.toString('utf8', MARK_FIXED_BYTES),
  };
}

export function encodeDead(entry: DeadLetter): Buffer {
  const reason = Buffer.from(entry.reason, 'utf8');
  const value = Buffer.allocUnsafe(DEAD_FIXED_BYTES + reason.length + entry.bytes.length);
  value.writeBigUInt64BE(BigInt(entry.deliveries), 0);
  value.writeBigUInt64BE(BigInt(entry.firstDeliveredAt), 8);
  value.writeBigUInt64BE(BigInt(entry.lastDeliveredAt), 16);
  value.writeBigUInt64BE(BigInt(entry.deadAt), 24);
  value.writeUInt32BE(reason.length, 32);
  reason.copy(value, DEAD_FIXED_BYTES);
  value.set(entry.bytes, DEAD_FIXED_BYTES + reason.length);
  return value;
}

/** The dead letter stored under `key`, or undefined when the value cannot be one. */
export function decodeDead(key: Uint8Array, v: Buffer): DeadLetter | undefined {
  if (key.length !== ITEM_KEY_BYTES || v.length < DEAD_FIXED_BYTES) return undefined;
  // Bounded before it is used: a damaged length must not cut the payload anywhere it likes.
  const reasonBytes = v.readUInt32BE(32);
  if (reasonBytes > MAX_REASON_BYTES || DEAD_FIXED_BYTES + reasonBytes > v.length) return undefined;
  return {
    seq: seqOfKey(key),
    bytes: v.subarray(DEAD_FIXED_BYTES + reasonBytes),
    deliveries: Number(v.readBigUInt64BE(0)),
    firstDeliveredAt: Number(v.readBigUInt64BE(8)),
    lastDeliveredAt: Number(v.readBigUInt64BE(16)),
    deadAt: Number(v.readBigUInt64BE(24)),
    reason: v.toString('utf8', DEAD_FIXED_BYTES, DEAD_FIXED_BYTES + reasonBytes),
  };
}

export function seqOfKey(key: Uint8Array): number {
  return Number(Buffer.from(key.buffer, key.byteOffset, key.byteLength).readBigUInt64BE(1));
}

export function u64(value: number): Buffer {
  const b = Buffer.allocUnsafe(8);
  b.writeBigUInt64BE(BigInt(value));
  return b;
}

export function readU64(value: Uint8Array): number {
  return Number(Buffer.from(value.buffer, value.byteOffset, value.byteLength).readBigUInt64BE(0));
}

/**
 * The value under `s` + seq. Only scheduled items have one; a plain item's value under `i` +
 * seq stays its payload, whatever the store's format.
 */
export function encodeSchedule(priority: number, notBefore: number): Buffer {
  const value = Buffer.allocUnsafe(SCHEDULE_VALUE_BYTES);
  value.writeInt8(priority, 0);
  value.writeBigUInt64BE(BigInt(notBefore), NOT_BEFORE_OFFSET);
  return value;
}

/**
 * The priority and not-before time stored under a schedule key, or undefined when the value
 * cannot be one: the wrong length, a priority out of range, or a time past the safe integers.
 */
export function decodeSchedule(v: Uint8Array): { priority: number; notBefore: number } | undefined {
  if (v.length !== SCHEDULE_VALUE_BYTES) return undefined;
  const b = Buffer.from(v.buffer, v.byteOffset, v.byteLength);
  const priority = b.readInt8(0);
  const notBefore = b.readBigUInt64BE(NOT_BEFORE_OFFSET);
  if (priority < PRIORITY_MIN || priority > PRIORITY_MAX || notBefore > BigInt(Number.MAX_SAFE_INTEGER)) return undefined;
  return { priority, notBefore: Number(notBefore) };
}
