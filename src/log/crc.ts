// Implements FORMAT.md §1 "Conventions" (checksum).
/**
 * CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), from the pure-JS `crc-32` package.
 * `zlib.crc32` is the IEEE polynomial, a different checksum, so it is not a substitute.
 */
import { createRequire } from 'node:module';

interface Crc32c {
  buf(data: Uint8Array, seed?: number): number;
  /** The byte-wise lookup table of the reflected polynomial. */
  table: Int32Array;
}

const crc32c = createRequire(import.meta.url)('crc-32/crc32c') as Crc32c;

/** CRC-32C of `data`, continuing from `seed` (a previous result) when given. Unsigned. */
export function crc32c32(data: Uint8Array, seed?: number): number {
  return crc32c.buf(data, seed) >>> 0;
}

const TABLE = crc32c.table;

/**
 * CRC-32C of `buf[start..end)`, continuing from `seed`, byte by byte. Used for the 16 header bytes
 * of a frame, so the hot path needs no `subarray` view per frame; the payload then goes through
 * the library's faster sliced loop with this result as its seed.
 */
export function crc32cRange(buf: Uint8Array, start: number, end: number, seed = 0): number {
  let c = ~seed;
  for (let i = start; i < end; i++) c = (c >>> 8) ^ TABLE[(c ^ buf[i]!) & 0xff]!;
  return ~c >>> 0;
}
