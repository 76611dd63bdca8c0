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
 * The slice-by-16 tables of the same polynomial: T[k][b] is the CRC of byte b followed by k zero
 * bytes (T[0] is the library's byte-wise table), built as the library builds its own.
 */
const T = ((): Int32Array[] => {
  const all = new Int32Array(16 * 256);
  for (let n = 0; n < 256; n++) all[n] = TABLE[n]!;
  for (let n = 0; n < 256; n++) {
    let v = TABLE[n]!;
    for (let c = 256 + n; c < 16 * 256; c += 256) v = all[c] = (v >>> 8) ^ TABLE[v & 0xff]!;
  }
  return Array.from({ length: 16 }, (_, k) => all.subarray(k * 256, k * 256 + 256));
})();
const [T0, T1, T2, T3, T4, T5, T6, T7, T8, T9, Ta, Tb, Tc, Td, Te, Tf] = T as [
  Int32Array,
  Int32Array,
  Int32Array,
  Int32Array,
  Int32Array,
  Int32Array,
  Int32Array,
  Int32Array,
  Int32Array,
  Int32Array,
  Int32Array,
  Int32Array,
  Int32Array,
  Int32Array,
  Int32Array,
  Int32Array,
];

/**
 * CRC-32C of `buf[start..end)`, continuing from `seed`: the same result as
 * `crc32c32(buf.subarray(start, end), seed)` without making that view, which costs an allocation
 * per frame on the read path (every frame read from disk is checked). Sixteen bytes per step, as
 * the library's own loop.
 */
export function crc32cRange(buf: Uint8Array, start: number, end: number, seed = 0): number {
  let c = ~seed;
  let i = start;
  for (const last = end - 15; i < last; i += 16) {
    c =
      Tf[buf[i]! ^ (c & 255)]! ^
      Te[buf[i + 1]! ^ ((c >> 8) & 255)]! ^
      Td[buf[i + 2]! ^ ((c >> 16) & 255)]! ^
      Tc[buf[i + 3]! ^ (c >>> 24)]! ^
      Tb[buf[i + 4]!]! ^
      Ta[buf[i + 5]!]! ^
      T9[buf[i + 6]!]! ^
      T8[buf[i + 7]!]! ^
      T7[buf[i + 8]!]! ^
      T6[buf[i + 9]!]! ^
      T5[buf[i + 10]!]! ^
      T4[buf[i + 11]!]! ^
      T3[buf[i + 12]!]! ^
      T2[buf[i + 13]!]! ^
      T1[buf[i + 14]!]! ^
      T0[buf[i + 15]!]!;
  }
  for (; i < end; i++) c = (c >>> 8) ^ T0[(c ^ buf[i]!) & 0xff]!;
  return ~c >>> 0;
}
