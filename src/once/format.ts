// Implements FORMAT.md §12 "LogProcessedSet" (the items a LogProcessedSet keeps in its LogStore).
import { OpenError } from '../contract/errors.js';
import { STORE_ID_PATTERN } from '../contract/store.js';

/** The payload of the first item (store seq 1): the magic, then the format version. */
export const SET_MAGIC = 'PQ-PROCESSED-SET';
export const SET_MAGIC_BYTES = SET_MAGIC.length;
/** u32 little-endian after the magic. */
export const SET_VERSION_BYTES = 4;
/** A version-1 header: the magic and the version, nothing else. */
export const SET_HEADER_V1_BYTES = SET_MAGIC_BYTES + SET_VERSION_BYTES;
/** u16 little-endian after the version (version 2): the bytes of the store identity that follow. */
export const SET_STORE_ID_LENGTH_BYTES = 2;
/** A version-2 header without its store identity. */
export const SET_HEADER_V2_FIXED_BYTES = SET_HEADER_V1_BYTES + SET_STORE_ID_LENGTH_BYTES;
/** The longest store identity (`STORE_ID_PATTERN`): 64 ASCII characters. */
export const SET_STORE_ID_MAX_BYTES = 64;
/** Version 2 adds the identity of the queue's store the set serves. */
export const SET_FORMAT_VERSION = 2;
/** The store seq of the header item; entries follow it. */
export const SET_HEADER_SEQ = 1;
/** Every later item: one processed seq, u64 little-endian (a safe integer, at least 1). */
export const SET_ENTRY_BYTES = 8;

const MAGIC = new TextEncoder().encode(SET_MAGIC);

export interface SetHeader {
  readonly version: number;
  /** The identity of the queue's store the set serves; null when the header holds none (version 1, or an empty one). */
  readonly storeId: string | null;
}

/** A header of the current version, holding `storeId` (none when null). */
export function encodeHeader(storeId: string | null): Uint8Array {
  if (storeId !== null && !STORE_ID_PATTERN.test(storeId))
    throw new RangeError(`Expected \`storeId\` to be a store identity, got \`${storeId}\``);
  const id = new TextEncoder().encode(storeId ?? '');
  const out = new Uint8Array(SET_HEADER_V2_FIXED_BYTES + id.length);
  out.set(MAGIC, 0);
  const view = new DataView(out.buffer);
  view.setUint32(SET_MAGIC_BYTES, SET_FORMAT_VERSION, true);
  view.setUint16(SET_HEADER_V1_BYTES, id.length, true);
  out.set(id, SET_HEADER_V2_FIXED_BYTES);
  return out;
}

/**
 * The version and store identity of a header payload. Magic first, then the version: a newer
 * version is `ERR_UNSUPPORTED_VERSION`, anything else that is not a header is `ERR_STORE` (not a
 * set), and a header of a known version that does not decode exactly is `ERR_CORRUPT`.
 */
export function decodeHeader(bytes: Uint8Array, dir: string): SetHeader {
  const isMagic = bytes.length >= SET_MAGIC_BYTES && MAGIC.every((b, i) => bytes[i] === b);
  if (!isMagic)
    throw new OpenError('ERR_STORE', `${dir} is not a processed set: its first item is not a processed-set header`, { file: dir });
  const corrupt = (what: string) => new OpenError('ERR_CORRUPT', `The processed-set header in ${dir} ${what}`, { file: dir });
  if (bytes.length < SET_HEADER_V1_BYTES) throw corrupt(`is ${bytes.length} bytes, shorter than its version field`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  // The version before the length: a newer version may have a longer header.
  const version = view.getUint32(SET_MAGIC_BYTES, true);
  if (version > SET_FORMAT_VERSION) {
    throw new OpenError(
      'ERR_UNSUPPORTED_VERSION',
      `The processed set in ${dir} has format version ${version}; this release reads up to ${SET_FORMAT_VERSION}`,
      { file: dir },
    );
  }
  if (version < 1) throw corrupt(`has version ${version}`);
  if (version === 1) {
    if (bytes.length !== SET_HEADER_V1_BYTES) throw corrupt(`of version 1 is ${bytes.length} bytes, not ${SET_HEADER_V1_BYTES}`);
    return { version, storeId: null };
  }
  if (bytes.length < SET_HEADER_V2_FIXED_BYTES)
    throw corrupt(`of version 2 is ${bytes.length} bytes, shorter than ${SET_HEADER_V2_FIXED_BYTES}`);
  const idBytes = view.getUint16(SET_HEADER_V1_BYTES, true);
  if (idBytes > SET_STORE_ID_MAX_BYTES) throw corrupt(`holds a store identity of ${idBytes} bytes, more than ${SET_STORE_ID_MAX_BYTES}`);
  if (bytes.length !== SET_HEADER_V2_FIXED_BYTES + idBytes)
    throw corrupt(`of version 2 is ${bytes.length} bytes, not ${SET_HEADER_V2_FIXED_BYTES + idBytes}`);
  if (idBytes === 0) return { version, storeId: null };
  const storeId = String.fromCharCode(...bytes.subarray(SET_HEADER_V2_FIXED_BYTES));
  if (!STORE_ID_PATTERN.test(storeId)) throw corrupt('holds a store identity with characters outside [A-Za-z0-9._-]');
  return { version, storeId };
}

export function encodeEntry(seq: number): Uint8Array {
  const out = new Uint8Array(SET_ENTRY_BYTES);
  new DataView(out.buffer).setBigUint64(0, BigInt(seq), true);
  return out;
}

/** The processed seq of an entry payload; `ERR_CORRUPT` for a wrong length or a seq out of range. */
export function decodeEntry(bytes: Uint8Array, storeSeq: number, dir: string): number {
  if (bytes.length !== SET_ENTRY_BYTES)
    throw new OpenError('ERR_CORRUPT', `Processed-set entry ${storeSeq} in ${dir} is ${bytes.length} bytes, not ${SET_ENTRY_BYTES}`, {
      file: dir,
    });
  const value = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getBigUint64(0, true);
  if (value < 1n || value > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw new OpenError('ERR_CORRUPT', `Processed-set entry ${storeSeq} in ${dir} holds seq ${value}, not a safe integer of at least 1`, {
      file: dir,
    });
  }
  return Number(value);
}
