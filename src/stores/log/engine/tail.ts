// Implements FORMAT.md §6 "Recovery decision table" (the tail rule) and §3 "Bounds".
/**
 * The tail rule, as one labelled table. Recovery scans a file frame by frame; at each position
 * it measures a few facts (the {@link TailInputs}) and looks up the single row that matches.
 * The same table is printed in FORMAT.md; a test checks every row, and another checks that every
 * combination of inputs matches exactly one row.
 */

/** Facts measured at one scan position. */
export interface TailInputs {
  /** No bytes are left after the position. */
  atEnd: boolean;
  /** Every byte from the position to EOF is zero (and there is at least one). */
  restZero: boolean;
  /** At least `FRAME_HEADER_BYTES` are left. */
  headerComplete: boolean;
  /** The frame's length fields are within bounds and the whole frame lies inside the file. */
  lengthInFile: boolean;
  /** The frame's CRC-32C matches. */
  crcOk: boolean;
  /** The CRC-valid frame makes sense here (type, seq order, payload shape). */
  contentOk: boolean;
  /** A CRC-valid, plausible frame starts somewhere after the position. */
  validAfter: boolean;
  /** The position is below the last point known to be durable (for example a checkpoint's nextSeq). */
  belowDurable: boolean;
  /**
   * Another process holds the store and may be writing this file right now (a read-only open
   * beside a live writer). Its tail is a write in progress, not a crash's leftovers: `restZero`
   * and `validAfter` are not measured (the writer changes the bytes they would read while they
   * are read), so the rows for a live writer do not look at them.
   */
  liveWriter: boolean;
}

export type TailVerdict = 'end' | 'record' | 'torn' | 'corrupt';

export interface TailRow {
  readonly id: number;
  readonly label: string;
  readonly verdict: TailVerdict;
  readonly when: (i: TailInputs) => boolean;
}

/** A frame that cannot be taken as written: a prefix, a bad length, or a CRC mismatch. */
function damaged(i: TailInputs): boolean {
  return !i.headerComplete || !i.lengthInFile || !i.crcOk;
}

/**
 * A whole frame can be judged by its CRC and content: `restZero` rules it out only after a crash
 * (a zero run from here on holds no frame); beside a live writer `restZero` is not measured.
 */
function wholeFrame(i: TailInputs): boolean {
  return !i.atEnd && (i.liveWriter || !i.restZero) && i.headerComplete && i.lengthInFile && i.crcOk;
}

/** FORMAT.md §6. The rows are mutually exclusive; the order is only for reading. */
export const TAIL_TABLE: readonly TailRow[] = [
  { id: 1, label: 'end of file', verdict: 'end', when: (i) => i.atEnd },
  {
    id: 2,
    label: 'damaged frame followed by valid data',
    verdict: 'corrupt',
    when: (i) => !i.liveWriter && !i.atEnd && !i.restZero && damaged(i) && i.validAfter,
  },
  {
    id: 3,
    label: 'torn tail below the durable point',
    verdict: 'corrupt',
    when: (i) => !i.atEnd && i.belowDurable && (i.liveWriter ? damaged(i) : i.restZero || (damaged(i) && !i.validAfter)),
  },
  { id: 4, label: 'all-zero run to EOF', verdict: 'torn', when: (i) => !i.liveWriter && !i.atEnd && i.restZero && !i.belowDurable },
  {
    id: 5,
    label: 'partial header at EOF',
    verdict: 'torn',
    when: (i) => !i.liveWriter && !i.atEnd && !i.restZero && !i.headerComplete && !i.validAfter && !i.belowDurable,
  },
  {
    id: 6,
    label: 'length runs past EOF',
    verdict: 'torn',
    when: (i) => !i.liveWriter && !i.atEnd && !i.restZero && i.headerComplete && !i.lengthInFile && !i.validAfter && !i.belowDurable,
  },
  {
    id: 7,
    label: 'CRC mismatch in the last frame',
    verdict: 'torn',
    when: (i) =>
      !i.liveWriter && !i.atEnd && !i.restZero && i.headerComplete && i.lengthInFile && !i.crcOk && !i.validAfter && !i.belowDurable,
  },
  { id: 8, label: 'valid CRC, impossible content', verdict: 'corrupt', when: (i) => wholeFrame(i) && !i.contentOk },
  { id: 9, label: 'valid record', verdict: 'record', when: (i) => wholeFrame(i) && i.contentOk },
  {
    id: 10,
    label: "a live writer's write in progress, or space it has not written yet",
    verdict: 'end',
    when: (i) => i.liveWriter && !i.atEnd && damaged(i) && !i.belowDurable,
  },
];

/** The one row of {@link TAIL_TABLE} that matches; throws if the table is not exclusive (a bug). */
export function classifyTail(inputs: TailInputs): TailRow {
  let found: TailRow | undefined;
  for (const row of TAIL_TABLE) {
    if (row.when(inputs)) {
      if (found !== undefined) throw new Error(`tail table rows ${found.id} and ${row.id} both match`);
      found = row;
    }
  }
  if (found === undefined) throw new Error(`no tail table row matches ${JSON.stringify(inputs)}`);
  return found;
}

/** The order of the inputs in a row mask: bit `i` is `TAIL_INPUT_KEYS[i]`. */
export const TAIL_INPUT_KEYS: readonly (keyof TailInputs)[] = [
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

/**
 * The row for each of the 512 input combinations, computed from {@link TAIL_TABLE} when this module
 * loads: a scan looks its row up with one array access per frame, and a table whose rows overlap
 * or leave a combination uncovered fails at load, before any file is read.
 */
const ROW_BY_MASK: readonly TailRow[] = Array.from({ length: 1 << TAIL_INPUT_KEYS.length }, (_, mask) =>
  classifyTail(Object.fromEntries(TAIL_INPUT_KEYS.map((k, bit) => [k, (mask & (1 << bit)) !== 0])) as unknown as TailInputs),
);

/** The mask of a valid record: a complete frame inside the file, CRC and content good. */
export const VALID_RECORD_MASK = 0b0011_1100;

/** The row for a mask of inputs (bit order {@link TAIL_INPUT_KEYS}). */
export function tailRowForMask(mask: number): TailRow {
  return ROW_BY_MASK[mask]!;
}

/** The row for measured inputs; the same answer as {@link classifyTail}, by lookup. */
export function tailRow(i: TailInputs): TailRow {
  let mask = 0;
  for (let bit = 0; bit < TAIL_INPUT_KEYS.length; bit++) if (i[TAIL_INPUT_KEYS[bit]!]) mask |= 1 << bit;
  return ROW_BY_MASK[mask]!;
}
