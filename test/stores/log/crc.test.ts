// crc32cRange computes the CRC-32C of a span in place, sixteen bytes per step; it must agree with
// the library's own function over a view of the same bytes, at every alignment and length.
import { describe, expect, test } from 'vitest';
import { crc32c32, crc32cRange } from '../../../src/stores/log/engine/crc.js';
import { prng } from './helpers.js';

describe('crc32cRange', () => {
  test('matchesTheCheckValueOfCrc32c', () => {
    const bytes = new TextEncoder().encode('123456789');
    expect(crc32cRange(bytes, 0, bytes.length)).toBe(0xe3069283);
    expect(crc32cRange(new Uint8Array(0), 0, 0)).toBe(0);
  });

  test('agreesWithTheLibraryOverEverySpanAndSeed', () => {
    const seed = 0x5eed_c0de;
    const rnd = prng(seed);
    const buf = new Uint8Array(600);
    for (let i = 0; i < buf.length; i++) buf[i] = Math.floor(rnd() * 256);
    let checked = 0;
    for (let start = 0; start < 40; start++) {
      for (const length of [0, 1, 15, 16, 17, 31, 32, 33, 148, 513]) {
        const crcSeed = Math.floor(rnd() * 2 ** 32);
        for (const s of [0, crcSeed]) {
          const want = crc32c32(buf.subarray(start, start + length), s);
          const got = crc32cRange(buf, start, start + length, s);
          if (got !== want)
            throw new Error(
              `crc32cRange(start ${start}, length ${length}, seed ${s}) = ${got}, want ${want}; reproduce with seed 0x${seed.toString(16)}`,
            );
          checked++;
        }
      }
    }
    expect(checked).toBe(40 * 10 * 2);
  });
});
