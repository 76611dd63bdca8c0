// Implements FORMAT.md §13 "Identity file".
/**
 * The store's identity: 16 random bytes created once, when the store is created (or at the first
 * writable open of a store written before identities existed), and kept across every reopen.
 * Seqs start again at 1 in a store deleted and created again; the identity tells the two apart,
 * so that `(identity, seq)` names one item for good (store-and-forward publishes under that name).
 *
 * The file is written as every replaced file is (tmp, fsync, rename, and the directory fsync of
 * the open that writes it), so a crash leaves either no identity file, or a whole one. A damaged
 * one is corruption: making a new identity in its place would give items already forwarded a new
 * name.
 */
import { join } from 'node:path';
import type { FileSystem } from '../../../fs/file-system.js';
import type { OpenError } from '../../../contract/errors.js';
import { crc32c32 } from './crc.js';
import {
  IDENTITY_FILE,
  IDENTITY_FILE_BYTES,
  IDENTITY_FORMAT_VERSION,
  IDENTITY_MAGIC,
  ID_ID_BYTES,
  ID_OFF_CRC,
  ID_OFF_FLAGS,
  ID_OFF_ID,
  ID_OFF_MAGIC,
  ID_OFF_RESERVED,
  ID_OFF_VERSION,
  TMP_SUFFIX,
  readU16,
  readU32,
  writeU16,
  writeU32,
} from './format.js';
import { closeQuietly } from './layout.js';
import { FILE_CHECKS, checkFailed } from './recovery-checks.js';
import { readFully } from './segment-writer.js';

/** The identity's text form: the 16 bytes as lower-case hex in groups of 8-4-4-4-12 (a UUID). */
export function identityText(id: Uint8Array): string {
  const hex = Buffer.from(id.buffer, id.byteOffset, id.byteLength).toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** The 16 bytes of a UUID's text form. */
export function identityBytes(text: string): Uint8Array {
  const hex = text.replaceAll('-', '');
  if (!/^[0-9a-f]{32}$/.test(hex)) throw new RangeError(`Expected an identity of 32 lower-case hex digits, got ${text}`);
  return Uint8Array.from(Buffer.from(hex, 'hex'));
}

/** The whole identity file for `id` (16 bytes). */
export function encodeIdentity(id: Uint8Array): Uint8Array {
  if (id.length !== ID_ID_BYTES) throw new RangeError(`Expected an identity of ${ID_ID_BYTES} bytes, got ${id.length}`);
  const buf = new Uint8Array(IDENTITY_FILE_BYTES);
  writeU32(buf, ID_OFF_MAGIC, IDENTITY_MAGIC);
  writeU16(buf, ID_OFF_VERSION, IDENTITY_FORMAT_VERSION);
  writeU16(buf, ID_OFF_FLAGS, 0);
  buf.set(id, ID_OFF_ID);
  writeU32(buf, ID_OFF_RESERVED, 0);
  writeU32(buf, ID_OFF_CRC, crc32c32(buf.subarray(0, ID_OFF_CRC)));
  return buf;
}

/**
 * Decode an identity file. Magic, then version (a newer one is not damage, §8), then size, CRC,
 * flags and the reserved bytes.
 */
export function decodeIdentity(
  buf: Uint8Array,
): { id: string } | { kind: 'unsupported'; version: number } | { kind: 'damaged'; offset: number; reason: string } {
  if (buf.length < ID_OFF_VERSION + 2 || readU32(buf, ID_OFF_MAGIC) !== IDENTITY_MAGIC)
    return { kind: 'damaged', offset: ID_OFF_MAGIC, reason: 'bad identity file magic' };
  const version = readU16(buf, ID_OFF_VERSION);
  if (version > IDENTITY_FORMAT_VERSION) return { kind: 'unsupported', version };
  if (version === 0) return { kind: 'damaged', offset: ID_OFF_VERSION, reason: 'identity file version 0' };
  if (buf.length !== IDENTITY_FILE_BYTES)
    return {
      kind: 'damaged',
      offset: Math.min(buf.length, IDENTITY_FILE_BYTES),
      reason: `identity file is ${buf.length} bytes, not ${IDENTITY_FILE_BYTES}`,
    };
  if (readU32(buf, ID_OFF_CRC) !== crc32c32(buf.subarray(0, ID_OFF_CRC)))
    return { kind: 'damaged', offset: ID_OFF_CRC, reason: 'identity file CRC mismatch' };
  if (readU16(buf, ID_OFF_FLAGS) !== 0) return { kind: 'damaged', offset: ID_OFF_FLAGS, reason: 'unknown identity file flags' };
  if (readU32(buf, ID_OFF_RESERVED) !== 0)
    return { kind: 'damaged', offset: ID_OFF_RESERVED, reason: 'identity file reserved bytes are not zero' };
  return { id: identityText(buf.subarray(ID_OFF_ID, ID_OFF_ID + ID_ID_BYTES)) };
}

/**
 * Read the identity file of `dir` when `names` holds one: its text form, or null when there is
 * none. A file that cannot be decoded is reported (file checks 2 and 20); I/O errors are thrown.
 */
export function readIdentity(fs: FileSystem, dir: string, names: readonly string[], report: (p: OpenError) => void): string | null {
  if (!names.includes(IDENTITY_FILE)) return null;
  const path = join(dir, IDENTITY_FILE);
  const fd = fs.open(path, 'read');
  let bytes: Uint8Array;
  try {
    // One byte more than a whole file: a longer file is damage, and nothing larger is allocated.
    const buf = new Uint8Array(IDENTITY_FILE_BYTES + 1);
    bytes = buf.subarray(0, readFully(fs, fd, buf, 0, buf.length, 0));
  } finally {
    closeQuietly(fs, fd);
  }
  const d = decodeIdentity(bytes);
  if ('id' in d) return d.id;
  if (d.kind === 'unsupported') {
    report(
      checkFailed(
        FILE_CHECKS.newerVersion,
        path,
        ID_OFF_VERSION,
        `Identity file has format version ${d.version}; this version reads up to ${IDENTITY_FORMAT_VERSION}`,
      ),
    );
  } else report(checkFailed(FILE_CHECKS.badIdentity, path, d.offset, d.reason));
  return null;
}

/**
 * Write a new identity file in `dir` from 16 random bytes: tmp, fsync, rename. The caller fsyncs
 * the directory before the open resolves (the rename is durable only then). Returns the text form.
 */
export async function writeIdentity(fs: FileSystem, dir: string, fileMode: number): Promise<string> {
  const id = new Uint8Array(ID_ID_BYTES);
  globalThis.crypto.getRandomValues(id);
  // The bits of a version-4 UUID, so that the text form reads as one wherever it is shown.
  id[6] = (id[6]! & 0x0f) | 0x40;
  id[8] = (id[8]! & 0x3f) | 0x80;
  const buf = encodeIdentity(id);
  const path = join(dir, IDENTITY_FILE);
  const tmp = path + TMP_SUFFIX;
  if (fs.stat(tmp) !== null) fs.unlink(tmp);
  const fd = fs.open(tmp, 'create', fileMode);
  try {
    fs.write(fd, buf, 0, buf.length, 0);
    await fs.fsync(fd);
  } finally {
    closeQuietly(fs, fd);
  }
  fs.rename(tmp, path);
  return identityText(id);
}
