import { describe, expect, it } from 'vitest';
import { Prng, formatSeed, parseSeed, withReproduction } from '../../src/testing/prng.js';

describe('Prng', () => {
  it('sameSeedGivesTheSameSequence', () => {
    const a = new Prng(7);
    const b = new Prng(7);
    const xs = Array.from({ length: 100 }, () => a.next());
    expect(Array.from({ length: 100 }, () => b.next())).toEqual(xs);
    expect(xs.every((x) => Number.isInteger(x) && x >= 0 && x < 2 ** 32)).toBe(true);
    expect(new Prng(8).next()).not.toBe(new Prng(7).next());
  });

  it('intIsInRangeAndCoversIt', () => {
    const prng = new Prng(1);
    const seen = new Set<number>();
    for (let i = 0; i < 1000; i++) {
      const value = prng.int(10);
      expect(value).toBeGreaterThanOrEqual(0);
      expect(value).toBeLessThan(10);
      seen.add(value);
    }
    expect(seen.size).toBe(10);
    expect(() => prng.int(0)).toThrow(RangeError);
  });

  it('boolFollowsItsProbability', () => {
    const prng = new Prng(2);
    let trues = 0;
    for (let i = 0; i < 10_000; i++) if (prng.bool(0.25)) trues++;
    expect(trues).toBeGreaterThan(2200);
    expect(trues).toBeLessThan(2800);
    expect(new Prng(3).bool(0)).toBe(false);
    expect(new Prng(3).bool(1)).toBe(true);
  });

  it('seedsPrintAndParse', () => {
    expect(formatSeed(42)).toBe('0x0000002a');
    expect(parseSeed('0x0000002a')).toBe(42);
    expect(parseSeed('42')).toBe(42);
    expect(() => parseSeed('nope')).toThrow(RangeError);
  });

  it('withReproductionPrefixesTheFailureWithTheLine', async () => {
    await expect(
      withReproduction(
        () => 'seed=0x00000001 crash=r1',
        () => {
          throw new Error('boom');
        },
      ),
    ).rejects.toThrow(/^reproduce: seed=0x00000001 crash=r1\nboom$/);
  });
});
