// Implements FORMAT.md §4.6 "Idempotency keys": the key entries of a version-3 checkpoint.
/**
 * A key entry is `seq u64, keyedAt u64, keyBytes u8, key`: the seq of the item pushed with the
 * key, when the key was stored (ms since the epoch on the queue's clock), and the key in UTF-8.
 * Entries are in strictly increasing seq order, each seq below the checkpoint's `nextSeq`.
 */
import type { StoredKey } from '../../../contract/store.js';
import { KEY_ENTRY_FIXED_BYTES, MAX_KEY_BYTES_ON_DISK, readU64, writeU64 } from './format.js';

const encoder = new TextEncoder();
/** Fatal: a key that is not valid UTF-8 is damage, never a key read back different from the one stored. */
const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** A key with its UTF-8 bytes, measured once for the size and written from them. */
export interface EncodedKey {
  readonly entry: StoredKey;
  readonly bytes: Uint8Array;
}

/** Encode `keys` (in seq order) for a checkpoint; throws on a key no entry can hold (an invariant the store checked on append). */
export function encodeKeys(keys: readonly StoredKey[]): { encoded: EncodedKey[]; bytes: number } {
  const encoded: EncodedKey[] = [];
  let bytes = 0;
  let prev = 0;
  for (const entry of keys) {
    const b = encoder.encode(entry.key);
    if (b.length === 0 || b.length > MAX_KEY_BYTES_ON_DISK || entry.seq <= prev)
      throw new Error(`refusing to write an inconsistent cursor: key of seq ${entry.seq} is empty, too long or out of order`);
    prev = entry.seq;
    encoded.push({ entry, bytes: b });
    bytes += KEY_ENTRY_FIXED_BYTES + b.length;
  }
  return { encoded, bytes };
}

/** Write the entries at `buf[at..]`; returns the offset past them. */
export function writeKeys(buf: Uint8Array, at: number, keys: readonly EncodedKey[]): number {
  let p = at;
  for (const k of keys) {
    writeU64(buf, p, k.entry.seq);
    writeU64(buf, p + 8, k.entry.keyedAt);
    buf[p + 16] = k.bytes.length;
    buf.set(k.bytes, p + KEY_ENTRY_FIXED_BYTES);
    p += KEY_ENTRY_FIXED_BYTES + k.bytes.length;
  }
  return p;
}

/**
 * Read `count` entries filling `buf[at .. end)` exactly, each seq from 1 to below `nextSeq` and
 * above the one before, each key 1 to 255 bytes of valid UTF-8, each time a non-negative safe
 * integer. Returns the keys, or the offset and reason of the first bad entry.
 */
export function readKeys(
  buf: Uint8Array,
  at: number,
  end: number,
  count: number,
  nextSeq: number,
): StoredKey[] | { offset: number; reason: string } {
  const keys: StoredKey[] = [];
  let p = at;
  let prev = 0;
  for (let i = 0; i < count; i++) {
    if (p + KEY_ENTRY_FIXED_BYTES > end) return { offset: p, reason: `key entry ${i} runs past the key section` };
    const seq = readU64(buf, p);
    const keyedAt = readU64(buf, p + 8);
    const n = buf[p + 16]!;
    if (!(seq > prev && seq < nextSeq) || keyedAt < 0 || n === 0 || p + KEY_ENTRY_FIXED_BYTES + n > end) {
      return { offset: p, reason: `key entry ${i} is malformed or out of order` };
    }
    let key: string;
    try {
      key = decoder.decode(buf.subarray(p + KEY_ENTRY_FIXED_BYTES, p + KEY_ENTRY_FIXED_BYTES + n));
    } catch {
      return { offset: p, reason: `key entry ${i} is not UTF-8` };
    }
    keys.push({ key, seq, keyedAt });
    prev = seq;
    p += KEY_ENTRY_FIXED_BYTES + n;
  }
  if (p !== end) return { offset: p, reason: 'key section size does not match its entries' };
  return keys;
}
