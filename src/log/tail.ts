// Implements FORMAT.md §6 "Recovery decision table" (the tail rule) and §3 "Bounds".
/**
 * The tail rule, as one labelled table. Recovery scans a file frame by frame; at each position
 * it measures a few facts (the {@link TailInputs}) and looks up the single row that matches.
 * The same table is printed in FORMAT.md; a test checks every row, and another checks that every
 * combination of inputs matches exactly one row.
 */
import type { FileSystem } from './file-system.js';
import { FRAME_HEADER_BYTES, MAX_PAYLOAD_BYTES_CAP } from './format.js';
import { frameBytes, frameCrcOk, newFrameHeader, readFrameHeader, type FrameHeader } from './frame.js';

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

/** FORMAT.md §6. The rows are mutually exclusive; the order is only for reading. */
export const TAIL_TABLE: readonly TailRow[] = [
  { id: 1, label: 'end of file', verdict: 'end', when: (i) => i.atEnd },
  {
    id: 2,
    label: 'damaged frame followed by valid data',
    verdict: 'corrupt',
    when: (i) => !i.atEnd && !i.restZero && damaged(i) && i.validAfter,
  },
  {
    id: 3,
    label: 'torn tail below the durable point',
    verdict: 'corrupt',
    when: (i) => !i.atEnd && (i.restZero || (damaged(i) && !i.validAfter)) && i.belowDurable,
  },
  { id: 4, label: 'all-zero run to EOF', verdict: 'torn', when: (i) => !i.atEnd && i.restZero && !i.belowDurable },
  {
    id: 5,
    label: 'partial header at EOF',
    verdict: 'torn',
    when: (i) => !i.atEnd && !i.restZero && !i.headerComplete && !i.validAfter && !i.belowDurable,
  },
  {
    id: 6,
    label: 'length runs past EOF',
    verdict: 'torn',
    when: (i) => !i.atEnd && !i.restZero && i.headerComplete && !i.lengthInFile && !i.validAfter && !i.belowDurable,
  },
  {
    id: 7,
    label: 'CRC mismatch in the last frame',
    verdict: 'torn',
    when: (i) =>
      !i.atEnd && !i.restZero && i.headerComplete && i.lengthInFile && !i.crcOk && !i.validAfter && !i.belowDurable,
  },
  {
    id: 8,
    label: 'valid CRC, impossible content',
    verdict: 'corrupt',
    when: (i) => !i.atEnd && !i.restZero && i.headerComplete && i.lengthInFile && i.crcOk && !i.contentOk,
  },
  {
    id: 9,
    label: 'valid record',
    verdict: 'record',
    when: (i) => !i.atEnd && !i.restZero && i.headerComplete && i.lengthInFile && i.crcOk && i.contentOk,
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

// ---------------------------------------------------------------------------------------------

/**
 * A read window over an open file: keeps one chunk in memory and refills it on demand, so that
 * scanning a large file costs one chunk of memory, not the file's size.
 */
export class FileWindow {
  /** A plain Uint8Array (not a Buffer) so that `slice` copies: returned payloads never alias it. */
  buf: Uint8Array;
  /** File offset of `buf[0]`. */
  start = 0;
  /** Bytes of `buf` that hold file data. */
  filled = 0;
  /** Bytes read from the file through this window (tests count these). */
  bytesRead = 0;

  constructor(
    private readonly fs: FileSystem,
    readonly fd: number,
    /** File size; reads never go past it. */
    public size: number,
    private readonly chunkBytes: number,
  ) {
    this.buf = new Uint8Array(0);
  }

  /**
   * Make `[offset, offset + length)` (clamped to `size`) available in `buf`; returns the index of
   * `offset` inside `buf`. `length` is bounded by the caller before it allocates.
   */
  ensure(offset: number, length: number): number {
    const end = Math.min(offset + length, this.size);
    if (offset >= this.start && end <= this.start + this.filled) return offset - this.start;
    const want = Math.min(Math.max(end - offset, this.chunkBytes), this.size - offset);
    if (this.buf.length < want) this.buf = new Uint8Array(Math.max(want, this.chunkBytes));
    let got = 0;
    while (got < want) {
      const n = this.fs.read(this.fd, this.buf, got, want - got, offset + got);
      if (n === 0) break;
      got += n;
    }
    this.bytesRead += got;
    this.start = offset;
    this.filled = got;
    if (offset + got < end) {
      // The file shrank under us, or a short read: report it as an I/O error, never as corruption.
      const err = new Error(`short read at offset ${offset + got} (wanted ${end - offset} bytes)`) as Error & { code: string };
      err.code = 'EIO';
      throw err;
    }
    return 0;
  }

  /** True when every byte of `[offset, size)` is zero. */
  restIsZero(offset: number): boolean {
    let pos = offset;
    while (pos < this.size) {
      const n = Math.min(this.chunkBytes, this.size - pos);
      const at = this.ensure(pos, n);
      for (let k = 0; k < n; k++) if (this.buf[at + k] !== 0) return false;
      pos += n;
    }
    return true;
  }
}

/** What a scan checks frame by frame beyond the CRC; supplied by the segment or cursor reader. */
export interface FrameRules {
  /** Largest payload accepted (bounded by MAX_PAYLOAD_BYTES_CAP). */
  readonly maxPayloadBytes: number;
  /** Does this CRC-valid frame make sense at this point of the scan? May read the payload at `buf[at..]`. */
  contentOk(h: FrameHeader, buf: Uint8Array, at: number): boolean;
  /**
   * Cheap pre-check (no CRC) for the resync search: could a frame with this header come next,
   * `skippedBytes` after the damaged position? (Frames are at least FRAME_HEADER_BYTES long, so
   * consecutive numbers can advance by at most one per FRAME_HEADER_BYTES skipped.)
   */
  plausible(h: FrameHeader, skippedBytes: number): boolean;
  /** Accept the frame (called after `contentOk`). */
  accept(h: FrameHeader, buf: Uint8Array, at: number, offset: number): void;
}

export interface ScanResult {
  /** The row that ended the scan (row 1 for a clean end). */
  readonly row: TailRow;
  /** Offset just past the last accepted frame. */
  readonly validEnd: number;
  /** Offset where the scan stopped (equals validEnd). */
  readonly stopOffset: number;
  readonly inputs: TailInputs | null;
  /** The resync search stopped at its budget without ruling out valid data after the damage. */
  readonly resyncBudgetExhausted: boolean;
}

/**
 * Scan frames from `offset` until a row other than "valid record" matches. `belowDurable(offset)`
 * says whether a torn tail at `offset` would lose data known to be durable.
 */
export function scanFrames(
  win: FileWindow,
  offset: number,
  rules: FrameRules,
  belowDurable: (offset: number) => boolean,
): ScanResult {
  const h = newFrameHeader();
  const maxPayload = Math.min(rules.maxPayloadBytes, MAX_PAYLOAD_BYTES_CAP);
  let pos = offset;
  for (;;) {
    const remaining = win.size - pos;
    const inputs: TailInputs = {
      atEnd: remaining === 0,
      restZero: false,
      headerComplete: remaining >= FRAME_HEADER_BYTES,
      lengthInFile: false,
      crcOk: false,
      contentOk: false,
      validAfter: false,
      belowDurable: false,
    };
    let at = 0;
    if (!inputs.atEnd && inputs.headerComplete) {
      at = win.ensure(pos, FRAME_HEADER_BYTES);
      readFrameHeader(win.buf, at, h);
      const bytes = frameBytes(h);
      inputs.lengthInFile = h.length <= maxPayload && bytes <= remaining;
      if (inputs.lengthInFile) {
        at = win.ensure(pos, bytes);
        inputs.crcOk = frameCrcOk(win.buf, at, h);
        if (inputs.crcOk) inputs.contentOk = rules.contentOk(h, win.buf, at);
      }
    }
    let exhausted = false;
    if (inputs.headerComplete && inputs.lengthInFile && inputs.crcOk && inputs.contentOk) {
      // Row 9, "valid record": accept and move on.
      rules.accept(h, win.buf, at, pos);
      pos += frameBytes(h);
      continue;
    }
    if (!inputs.atEnd) {
      inputs.restZero = win.restIsZero(pos);
      if (!inputs.restZero && !(inputs.crcOk && !inputs.contentOk)) {
        const found = findValidFrameAfter(win, pos + 1, rules, maxPayload, resyncBudgetBytes(win.size));
        // Budget spent: valid data after the damage was not ruled out, so it is not called a torn
        // tail (which would cut it); it is reported as corruption.
        exhausted = found === 'budget';
        inputs.validAfter = found !== 'none';
      }
      inputs.belowDurable = belowDurable(pos);
    }
    return { row: classifyTail(inputs), validEnd: pos, stopOffset: pos, inputs, resyncBudgetExhausted: exhausted };
  }
}

/** Work counters of the resync search, read by tests to bound it without timing it. */
export const resyncCounters = { crcBytes: 0 };

/**
 * CRC bytes the resync search may hash for a file of `fileBytes`: twice its size (plus a little
 * for tiny files). Without a bound a hostile file with a plausible header every 20 bytes, each
 * claiming a length to EOF, costs quadratic time (found by review: 4.7 s for 512 KiB).
 */
export function resyncBudgetBytes(fileBytes: number): number {
  return 2 * fileBytes + 64 * 1024;
}

/**
 * Is there a CRC-valid, plausible frame starting anywhere in `[from, size)`? Used only on a
 * damaged frame, to tell a torn tail (nothing valid follows) from corruption in the middle.
 * Cheap header checks run first, so the CRC is computed only for plausible candidates; at most
 * `budgetBytes` are hashed in all, after which the answer is 'budget' (not ruled out).
 */
function findValidFrameAfter(
  win: FileWindow,
  from: number,
  rules: FrameRules,
  maxPayload: number,
  budgetBytes: number,
): 'found' | 'none' | 'budget' {
  const h = newFrameHeader();
  let hashed = 0;
  for (let pos = from; pos + FRAME_HEADER_BYTES <= win.size; pos++) {
    let at = win.ensure(pos, FRAME_HEADER_BYTES);
    readFrameHeader(win.buf, at, h);
    if (h.length > maxPayload || h.seq < 0 || !rules.plausible(h, pos - from + 1)) continue;
    const bytes = frameBytes(h);
    if (pos + bytes > win.size) continue;
    if (hashed + bytes > budgetBytes) return 'budget';
    hashed += bytes;
    at = win.ensure(pos, bytes);
    resyncCounters.crcBytes += bytes;
    if (frameCrcOk(win.buf, at, h)) return 'found';
  }
  return 'none';
}
