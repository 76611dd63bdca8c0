// Implements FORMAT.md §12 "Processed set" (the items a LogProcessedSet keeps in its LogStore).
import { OpenError } from '../errors.js';

/** The payload of the first item (store seq 1): the magic, then the format version. */
export const SET_MAGIC = 'PQ-PROCESSED-SET';
export const SET_MAGIC_BYTES = SET_MAGIC.length;
/** u32 little-endian after the magic. */
export const SET_VERSION_BYTES = 4;
export const SET_HEADER_BYTES = SET_MAGIC_BYTES + SET_VERSION_BYTES;
export const SET_FORMAT_VERSION = 1;
/** The store seq of the header item; entries follow it. */
export const SET_HEADER_SEQ = 1;
/** Every later item: one processed seq, u64 little-endian (a safe integer, at least 1). */
export const SET_ENTRY_BYTES = 8;

const MAGIC = new TextEncoder().encode(SET_MAGIC);

export function encodeHeader(): Uint8Array {
  const out = new Uint8Array(SET_HEADER_BYTES);
  out.set(MAGIC, 0);
  new DataView(out.buffer).setUint32(SET_MAGIC_BYTES, SET_FORMAT_VERSION, true);
  return out;
}

/**
 * The version of a header payload. Magic first, then the version: a newer version is
 * `ERR_UNSUPPORTED_VERSION`, anything else that is not a header is `ERR_STORE` (not a set).
 */
export function decodeHeader(bytes: Uint8Array, dir: string): number {
  const isMagic = bytes.length >= SET_MAGIC_BYTES && MAGIC.every((b, i) => bytes[i] === b);
  if (!isMagic) throw new OpenError('ERR_STORE', `${dir} is not a processed set: its first item is not a processed-set header`, { file: dir });
  const corrupt = (what: string) => new OpenError('ERR_CORRUPT', `The processed-set header in ${dir} ${what}`, { file: dir });
  if (bytes.length < SET_HEADER_BYTES) throw corrupt(`is ${bytes.length} bytes, not ${SET_HEADER_BYTES}`);
  // The version before the length: a newer version may have a longer header.
  const version = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getUint32(SET_MAGIC_BYTES, true);
  if (version > SET_FORMAT_VERSION) {
    throw new OpenError('ERR_UNSUPPORTED_VERSION', `The processed set in ${dir} has format version ${version}; this release reads up to ${SET_FORMAT_VERSION}`, { file: dir });
  }
  if (bytes.length !== SET_HEADER_BYTES) throw corrupt(`is ${bytes.length} bytes, not ${SET_HEADER_BYTES}`);
  if (version < 1) throw corrupt(`has version ${version}`);
  return version;
}

export function encodeEntry(seq: number): Uint8Array {
  const out = new Uint8Array(SET_ENTRY_BYTES);
  new DataView(out.buffer).setBigUint64(0, BigInt(seq), true);
  return out;
}

/** The processed seq of an entry payload; `ERR_CORRUPT` for a wrong length or a seq out of range. */
export function decodeEntry(bytes: Uint8Array, storeSeq: number, dir: string): number {
  if (bytes.length !== SET_ENTRY_BYTES) throw new OpenError('ERR_CORRUPT', `Processed-set entry ${storeSeq} in ${dir} is ${bytes.length} bytes, not ${SET_ENTRY_BYTES}`, { file: dir });
  const value = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getBigUint64(0, true);
  if (value < 1n || value > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw new OpenError('ERR_CORRUPT', `Processed-set entry ${storeSeq} in ${dir} holds seq ${value}, not a safe integer of at least 1`, { file: dir });
  }
  return Number(value);
}
