/**
 * The one seeded pseudo-random number generator every randomised test, fuzzer and the simulated
 * crash disk of this project draws from. `Math.random` is never used: a run is reproduced from
 * its seed alone, and every randomised run prints that seed in a one-line reproduction.
 *
 * The generator is sfc32 (Chris Doty-Humphrey's Small Fast Counting generator, 128 bits of
 * state, period at least 2^32), seeded through splitmix32 so that nearby seeds (1, 2, 3...)
 * give unrelated streams. It is not cryptographic.
 */

import { nonNegativeInteger, positiveInteger, expectation } from '../lib/validate.js';

const UINT32_RANGE = 0x1_0000_0000;

/** splitmix32: spreads a 32-bit seed into well-mixed 32-bit words for the sfc32 state. */
function splitmix32(state: number): [next: number, output: number] {
  const next = (state + 0x9e3779b9) | 0;
  let z = next;
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
  z ^= z >>> 16;
  return [next, z >>> 0];
}

/** A seeded sfc32 generator. Two instances with the same seed produce the same sequence. */
export class Prng {
  /** The seed this generator was created with (an unsigned 32-bit integer). */
  readonly seed: number;
  #a: number;
  #b: number;
  #c: number;
  #d: number;

  /** @param seed Any safe integer; it is reduced to 32 bits (`seed >>> 0`). */
  constructor(seed: number) {
    if (typeof seed !== 'number' || !Number.isSafeInteger(seed)) {
      throw new TypeError(expectation('seed', 'a safe integer', seed));
    }
    this.seed = seed >>> 0;
    let state = this.seed;
    const words: number[] = [];
    for (let i = 0; i < 4; i++) {
      const [next, output] = splitmix32(state);
      state = next;
      words.push(output);
    }
    this.#a = words[0]!;
    this.#b = words[1]!;
    this.#c = words[2]!;
    this.#d = words[3]!;
    // Discard the first outputs, as the sfc32 author recommends, so the state is well mixed.
    for (let i = 0; i < 12; i++) this.next();
  }

  /** The next raw output: an unsigned 32-bit integer in [0, 2^32). */
  next(): number {
    const t = (((this.#a + this.#b) | 0) + this.#d) | 0;
    this.#d = (this.#d + 1) | 0;
    this.#a = this.#b ^ (this.#b >>> 9);
    this.#b = (this.#c + (this.#c << 3)) | 0;
    this.#c = (this.#c << 21) | (this.#c >>> 11);
    this.#c = (this.#c + t) | 0;
    return t >>> 0;
  }

  /** A float in [0, 1) with 32 bits of randomness. */
  float(): number {
    return this.next() / UINT32_RANGE;
  }

  /**
   * An integer in [0, n), without modulo bias.
   * @param n A positive integer not above 2^32.
   */
  int(n: number): number {
    positiveInteger('n', n);
    if (n > UINT32_RANGE) throw new RangeError(expectation('n', 'a positive integer not above 2^32', n));
    // Rejection sampling: drop the top partial bucket so every result is equally likely.
    const limit = UINT32_RANGE - (UINT32_RANGE % n);
    for (;;) {
      const value = this.next();
      if (value < limit) return value % n;
    }
  }

  /** An integer in [min, max], both inclusive. */
  intBetween(min: number, max: number): number {
    nonNegativeInteger('min', min);
    nonNegativeInteger('max', max);
    if (max < min) throw new RangeError(expectation('max', `at least min (${min})`, max));
    return min + this.int(max - min + 1);
  }

  /**
   * `true` with probability `p`.
   * @param p A probability in [0, 1]. @default 0.5
   */
  bool(p = 0.5): boolean {
    if (typeof p !== 'number' || !(p >= 0 && p <= 1)) throw new RangeError(expectation('p', 'a probability in [0, 1]', p));
    return this.float() < p;
  }

  /** One element of a non-empty array, uniformly. */
  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new RangeError(expectation('items', 'a non-empty array', items));
    return items[this.int(items.length)]!;
  }

  /** `count` random bytes. */
  bytes(count: number): Uint8Array {
    nonNegativeInteger('count', count);
    const out = new Uint8Array(count);
    for (let i = 0; i < count; i += 4) {
      let word = this.next();
      for (let j = i; j < Math.min(i + 4, count); j++) {
        out[j] = word & 0xff;
        word >>>= 8;
      }
    }
    return out;
  }

  /** A new generator seeded from this one: an independent stream that stays reproducible. */
  fork(): Prng {
    return new Prng(this.next());
  }
}

/** Formats a seed the way every reproduction line prints it: `0x` and 8 hex digits. */
export function formatSeed(seed: number): string {
  return `0x${(seed >>> 0).toString(16).padStart(8, '0')}`;
}

/** Parses a seed as printed by {@link formatSeed}, or a decimal integer. */
export function parseSeed(text: string): number {
  const trimmed = text.trim();
  const value = /^0x[0-9a-f]+$/i.test(trimmed)
    ? Number.parseInt(trimmed.slice(2), 16)
    : /^\d+$/.test(trimmed)
      ? Number(trimmed)
      : Number.NaN;
  if (!Number.isSafeInteger(value)) throw new RangeError(expectation('seed', 'a decimal or 0x-prefixed hex integer', text));
  return value >>> 0;
}

/**
 * The seed a randomised test should use: the `SEED` environment variable (as printed in a
 * reproduction line) when it is set, so a failure is replayed with `SEED=0x1234abcd npx vitest run`,
 * otherwise `fallback`.
 */
export function seedFromEnv(fallback: number, variable = 'SEED'): number {
  const text = typeof process === 'undefined' ? undefined : process.env[variable];
  return text === undefined || text === '' ? fallback >>> 0 : parseSeed(text);
}

/**
 * Runs `body` and, if it throws, rethrows with the reproduction line prepended to the message
 * (`reproduce: seed=0x0000002a crash=r1`), so a failing seeded run prints the one line that
 * replays it. `line` is computed only on failure, so it can describe the state at that moment.
 */
export async function withReproduction<T>(line: () => string, body: () => T | Promise<T>): Promise<T> {
  try {
    return await body();
  } catch (error) {
    const text = `reproduce: ${line()}`;
    if (error instanceof Error) {
      error.message = `${text}\n${error.message}`;
      throw error;
    }
    throw new Error(`${text}\n${String(error)}`, { cause: error });
  }
}
