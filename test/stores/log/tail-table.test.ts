/** The tail rule (FORMAT.md §6): one test per row, and every input combination matches exactly one row. */
import { describe, expect, test } from 'vitest';
import { TAIL_TABLE, classifyTail, type TailInputs } from '../../../src/stores/log/engine/tail.js';

const KEYS: (keyof TailInputs)[] = [
  'atEnd',
  'restZero',
  'headerComplete',
  'lengthInFile',
  'crcOk',
  'contentOk',
  'validAfter',
  'belowDurable',
  'liveWriter',
];

const base: TailInputs = {
  atEnd: false,
  restZero: false,
  headerComplete: true,
  lengthInFile: true,
  crcOk: true,
  contentOk: true,
  validAfter: false,
  belowDurable: false,
  liveWriter: false,
};

describe('tail decision table', () => {
  test('everyCombinationMatchesExactlyOneRow', () => {
    for (let mask = 0; mask < 1 << KEYS.length; mask++) {
      const inputs = Object.fromEntries(KEYS.map((k, i) => [k, (mask & (1 << i)) !== 0])) as unknown as TailInputs;
      const matching = TAIL_TABLE.filter((r) => r.when(inputs)).map((r) => r.id);
      expect(matching, JSON.stringify(inputs)).toHaveLength(1);
    }
  });

  const rows: [number, string, Partial<TailInputs>, string][] = [
    [1, 'end of file', { atEnd: true, headerComplete: false, lengthInFile: false, crcOk: false, contentOk: false }, 'end'],
    [2, 'damaged frame followed by valid data', { crcOk: false, validAfter: true }, 'corrupt'],
    [2, 'bad length followed by valid data', { lengthInFile: false, crcOk: false, validAfter: true }, 'corrupt'],
    [3, 'torn tail below the durable point', { headerComplete: false, lengthInFile: false, crcOk: false, belowDurable: true }, 'corrupt'],
    [3, 'zero tail below the durable point', { restZero: true, headerComplete: false, belowDurable: true }, 'corrupt'],
    [4, 'all-zero run to EOF', { restZero: true, crcOk: false, contentOk: false }, 'torn'],
    [5, 'partial header at EOF', { headerComplete: false, lengthInFile: false, crcOk: false, contentOk: false }, 'torn'],
    [6, 'length runs past EOF', { lengthInFile: false, crcOk: false, contentOk: false }, 'torn'],
    [7, 'CRC mismatch in the last frame', { crcOk: false, contentOk: false }, 'torn'],
    [8, 'valid CRC, impossible content', { contentOk: false }, 'corrupt'],
    [9, 'valid record', {}, 'record'],
    // Beside a live writer: what follows the last whole frame is its write in progress.
    [
      1,
      'end of file beside a live writer',
      { atEnd: true, headerComplete: false, lengthInFile: false, crcOk: false, contentOk: false, liveWriter: true },
      'end',
    ],
    [
      3,
      'damaged frame below the durable point beside a live writer',
      { crcOk: false, contentOk: false, belowDurable: true, liveWriter: true },
      'corrupt',
    ],
    [8, 'valid CRC, impossible content beside a live writer', { contentOk: false, liveWriter: true }, 'corrupt'],
    [9, 'valid record beside a live writer', { liveWriter: true }, 'record'],
    [10, 'frame being written beside a live writer', { crcOk: false, contentOk: false, liveWriter: true }, 'end'],
    [
      10,
      'partial header beside a live writer',
      { headerComplete: false, lengthInFile: false, crcOk: false, contentOk: false, liveWriter: true },
      'end',
    ],
    [
      10,
      'unwritten zeros beside a live writer (restZero not measured)',
      { restZero: true, crcOk: false, contentOk: false, liveWriter: true },
      'end',
    ],
  ];
  for (const [id, label, over, verdict] of rows) {
    test(`row ${id}: ${label} -> ${verdict}`, () => {
      const row = classifyTail({ ...base, ...over });
      expect(row.id).toBe(id);
      expect(row.verdict).toBe(verdict);
    });
  }

  test('everyRowIsReachable', () => {
    const seen = new Set<number>();
    for (let mask = 0; mask < 1 << KEYS.length; mask++) {
      const inputs = Object.fromEntries(KEYS.map((k, i) => [k, (mask & (1 << i)) !== 0])) as unknown as TailInputs;
      seen.add(classifyTail(inputs).id);
    }
    expect([...seen].sort((a, b) => a - b)).toEqual(TAIL_TABLE.map((r) => r.id));
  });
});
