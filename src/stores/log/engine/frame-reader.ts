// Implements FORMAT.md §3 "Bounds" and §6.1 "The tail rule" for every reader of frames.
/**
 * The one place where a frame is judged. {@link FrameReader} walks the frames of a file window
 * and, at each position, measures the inputs of the tail table and looks up its row: a record,
 * the end of the data, a torn tail or corruption. The consumer reader, compaction, recovery and
 * `verify` all read frames through it, with the content rules of `./frame-rules.ts`, so a frame
 * is valid for all of them or for none.
 */
import type { FileSystem } from '../../../fs/file-system.js';
import { FRAME_HEADER_BYTES, MAX_CURSOR_RECORD_BYTES, MAX_PAYLOAD_BYTES_CAP } from './format.js';

/** No frame of any file may have a longer payload: a dead letter of the largest item, with its fields, in a cursor record. */
const MAX_FRAME_PAYLOAD_BYTES = Math.max(MAX_PAYLOAD_BYTES_CAP, MAX_CURSOR_RECORD_BYTES);
import { frameBytes, frameCrcOk, newFrameHeader, readFrameHeader, type FrameHeader } from './frame.js';
import { tailRow, tailRowForMask, VALID_RECORD_MASK, type TailInputs, type TailRow, type TailVerdict } from './tail.js';

/**
 * A read window over an open file: keeps one chunk in memory and refills it on demand, so that
 * scanning a large file costs one chunk of memory, not the file's size.
 */
export class FileWindow {
  /** A plain Uint8Array (not a Buffer) so that `slice` copies; views into it are handed out only after `lent` is set. */
  buf: Uint8Array;
  /** File offset of `buf[0]`. */
  start = 0;
  /** Bytes of `buf` that hold file data. */
  filled = 0;
  /** Bytes read from the file through this window (tests count these). */
  bytesRead = 0;
  /**
   * Set when a view into `buf` was handed out (zero-copy reads): the next refill reads into a
   * fresh buffer instead, so that every view handed out keeps its bytes for as long as it lives.
   */
  lent = false;

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
    if (this.lent || this.buf.length < want) {
      this.buf = new Uint8Array(Math.max(want, this.chunkBytes));
      this.lent = false;
    }
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

/** What a reader checks frame by frame beyond the CRC; `./frame-rules.ts` has one per file kind. */
export interface FrameRules {
  /** Largest payload accepted (bounded by MAX_FRAME_PAYLOAD_BYTES). */
  readonly maxPayloadBytes: number;
  /**
   * Largest payload a frame of `type` may have, when it is below `maxPayloadBytes` (a longer one
   * is a bad length, §6.1). Rules without it bound every type by `maxPayloadBytes`.
   */
  payloadBound?(type: number): number;
  /** Does this CRC-valid frame make sense at this point of the file? May read the payload at `buf[at..]`. */
  contentOk(h: FrameHeader, buf: Uint8Array, at: number): boolean;
  /**
   * Cheap pre-check (no CRC) for the resync search: could a frame with this header come next,
   * `skippedBytes` after the damaged position? (Frames are at least FRAME_HEADER_BYTES long, so
   * consecutive numbers can advance by at most one per FRAME_HEADER_BYTES skipped.)
   */
  plausible(h: FrameHeader, skippedBytes: number): boolean;
  /** Take the frame (called once per record the consumer accepts). */
  accept(h: FrameHeader, buf: Uint8Array, at: number, offset: number): void;
}

const NEVER_DURABLE = (): boolean => false;
/** The row of a valid record, looked up once: `next()` returns it for every record read. */
const VALID_ROW: TailRow = tailRowForMask(VALID_RECORD_MASK);
if (VALID_ROW.verdict !== 'record')
  throw new Error(`tail table: a valid record must be read as a record, row ${VALID_ROW.id} says ${VALID_ROW.verdict}`);

/**
 * Walks the frames of `win` from `offset`. `next()` judges the frame at the current position
 * without moving; after a `'record'` the consumer either takes it with `accept()` (the position
 * moves past it) or stops there. Any other verdict is final for this position: `row` and `inputs`
 * say which row of the tail table matched.
 */
export class FrameReader {
  readonly h: FrameHeader = newFrameHeader();
  /** File offset of the frame under judgement; after the last `accept()`, the end of the valid data. */
  offset: number;
  /** Index in `win.buf` of the current frame, valid after `next()` returned `'record'`. */
  at = 0;
  /** The row of the last verdict. */
  row: TailRow = VALID_ROW;
  /** The measured inputs of the last verdict other than a record (null after a record). */
  inputs: TailInputs | null = null;
  /** The resync search stopped at its budget without ruling out valid data after the damage. */
  resyncBudgetExhausted = false;
  /**
   * CRC bytes every later resync search of this reader may still hash, shared by all of them, or
   * null when each search has a budget of its own (`resyncBudgetBytes` of the file). A reader that
   * goes on past damage (`resync()`) sets it, so that many damaged frames cannot make a walk
   * quadratic; a reader that stops at the first damage has no need to.
   */
  sharedResyncBudgetBytes: number | null = null;
  /** Where the last search started (-1: none since the last record), and the frame it found (-1: none). */
  #searchedFrom = -1;
  #foundAt = -1;
  readonly #maxPayload: number;

  constructor(
    readonly win: FileWindow,
    offset: number,
    private readonly rules: FrameRules,
    /** Whether a torn tail at this offset would lose data known to be durable. */
    private readonly belowDurable: (offset: number) => boolean = NEVER_DURABLE,
    /** Another process holds the store and may be appending to this file as it is read (input `liveWriter`). */
    private readonly liveWriter = false,
  ) {
    this.offset = offset;
    this.#maxPayload = Math.min(rules.maxPayloadBytes, MAX_FRAME_PAYLOAD_BYTES);
  }

  /** Judge the frame at `offset`. */
  next(): TailVerdict {
    const win = this.win;
    const pos = this.offset;
    const h = this.h;
    const remaining = win.size - pos;
    let lengthInFile = false;
    let crcOk = false;
    let contentOk = false;
    if (remaining >= FRAME_HEADER_BYTES) {
      let at = win.ensure(pos, FRAME_HEADER_BYTES);
      readFrameHeader(win.buf, at, h);
      const bytes = frameBytes(h);
      lengthInFile =
        h.length <= this.#maxPayload &&
        bytes <= remaining &&
        (this.rules.payloadBound === undefined || h.length <= this.rules.payloadBound(h.type));
      if (lengthInFile) {
        at = win.ensure(pos, bytes);
        crcOk = frameCrcOk(win.buf, at, h);
        if (crcOk) contentOk = this.rules.contentOk(h, win.buf, at);
      }
      this.at = at;
      if (crcOk && contentOk) {
        this.row = VALID_ROW;
        this.inputs = null;
        return 'record';
      }
    }
    return this.#notARecord(pos, remaining, lengthInFile, crcOk, contentOk);
  }

  /**
   * The rest of the tail table's inputs for a position that holds no valid record. Kept out of
   * `next()`, which stays small enough for the reader's loop to inline its hot part.
   */
  #notARecord(pos: number, remaining: number, lengthInFile: boolean, crcOk: boolean, contentOk: boolean): TailVerdict {
    const win = this.win;
    const inputs: TailInputs = {
      atEnd: remaining <= 0,
      restZero: false,
      headerComplete: remaining >= FRAME_HEADER_BYTES,
      lengthInFile,
      crcOk,
      contentOk,
      validAfter: false,
      belowDurable: false,
      liveWriter: this.liveWriter,
    };
    this.resyncBudgetExhausted = false;
    this.#searchedFrom = -1;
    this.#foundAt = -1;
    if (!inputs.atEnd) {
      // Beside a live writer the bytes after the position are being written while they would be
      // read: a zero run or a later frame seen there says nothing about damage here.
      inputs.restZero = !this.liveWriter && win.restIsZero(pos);
      if (!this.liveWriter && !inputs.restZero && !(crcOk && !contentOk)) {
        const found = this.#search(pos + 1);
        // Budget spent: valid data after the damage was not ruled out, so it is not called a torn
        // tail (which would cut it); it is reported as corruption.
        inputs.validAfter = found !== 'none';
      }
      inputs.belowDurable = this.belowDurable(pos);
    }
    this.inputs = inputs;
    this.row = tailRow(inputs);
    return this.row.verdict;
  }

  /** Bytes of the current frame (after `'record'`). */
  get frameBytes(): number {
    return frameBytes(this.h);
  }

  /** Take the current record and move past it. */
  accept(): void {
    this.rules.accept(this.h, this.win.buf, this.at, this.offset);
    this.offset += frameBytes(this.h);
  }

  /**
   * After a verdict of damage, move to the next frame that the bounded search of FORMAT §6.1
   * (`validAfter`) accepts: CRC-valid and plausible by type and numbering after the last accepted
   * record. The search `next()` already ran is reused; when it did not run (a CRC-valid frame with
   * impossible content), it runs now. Returns 'found' with `offset` on that frame, which the next
   * `next()` judges in full (its content may still be impossible: then resync again); 'none' or
   * 'budget' leave `offset` where it was. Open and the consumer reader never call this: for them,
   * damage ends the scan. `verify` and salvage go on, to count and copy what lies after it.
   */
  resync(): 'found' | 'none' | 'budget' {
    if (this.#searchedFrom !== this.offset + 1) this.#search(this.offset + 1);
    if (this.#foundAt < 0) return this.resyncBudgetExhausted ? 'budget' : 'none';
    this.offset = this.#foundAt;
    this.#searchedFrom = -1;
    this.#foundAt = -1;
    return 'found';
  }

  #search(from: number): 'found' | 'none' | 'budget' {
    const shared = this.sharedResyncBudgetBytes;
    const budget = shared ?? resyncBudgetBytes(this.win.size);
    const found = findValidFrameAfter(this.win, from, this.rules, this.#maxPayload, budget);
    this.#searchedFrom = from;
    if (shared !== null) this.sharedResyncBudgetBytes = shared - found.hashedBytes;
    this.#foundAt = found.offset;
    this.resyncBudgetExhausted = found.verdict === 'budget';
    return found.verdict;
  }

  /** Why the last verdict is damage: the row, and whether the resync search ran out of budget. */
  reason(): string {
    const why = `${this.row.label} (tail table row ${this.row.id})`;
    return this.resyncBudgetExhausted ? `${why}; the resync search spent its budget without ruling out valid data after the damage` : why;
  }
}

export interface ScanResult {
  /** The row that ended the scan (row 1 for a clean end). */
  readonly row: TailRow;
  /** Offset just past the last accepted frame, where the scan stopped. */
  readonly validEnd: number;
  readonly inputs: TailInputs | null;
  /** Why the scan stopped, when it stopped on damage. */
  readonly reason: string;
}

/** Accept every record from `offset` until a row other than "valid record" matches. */
export function scanFrames(
  win: FileWindow,
  offset: number,
  rules: FrameRules,
  belowDurable: (offset: number) => boolean,
  liveWriter = false,
): ScanResult {
  const reader = new FrameReader(win, offset, rules, belowDurable, liveWriter);
  while (reader.next() === 'record') reader.accept();
  return { row: reader.row, validEnd: reader.offset, inputs: reader.inputs, reason: reader.reason() };
}

/** Work counters of the resync search, read by tests to bound it without timing it. */
export const resyncCounters = { crcBytes: 0 };

/**
 * CRC bytes the resync search may hash for a file of `fileBytes`: twice its size (plus a little
 * for tiny files). Without a bound, a hostile file with a plausible header every 20 bytes, each
 * claiming a length to EOF, costs quadratic time (measured: 4.7 s for 512 KiB).
 */
export function resyncBudgetBytes(fileBytes: number): number {
  return 2 * fileBytes + 64 * 1024;
}

interface SearchResult {
  readonly verdict: 'found' | 'none' | 'budget';
  /** Offset of the frame found, or -1. */
  readonly offset: number;
  readonly hashedBytes: number;
}

/**
 * Is there a CRC-valid, plausible frame starting anywhere in `[from, size)`, and where is the first?
 * Used only on a damaged frame, to tell a torn tail (nothing valid follows) from corruption in the
 * middle, and by `resync()`. Cheap header checks run first, so the CRC is computed only for
 * plausible candidates; at most `budgetBytes` are hashed in all, after which the answer is
 * 'budget' (not ruled out).
 */
function findValidFrameAfter(win: FileWindow, from: number, rules: FrameRules, maxPayload: number, budgetBytes: number): SearchResult {
  const h = newFrameHeader();
  let hashed = 0;
  for (let pos = from; pos + FRAME_HEADER_BYTES <= win.size; pos++) {
    let at = win.ensure(pos, FRAME_HEADER_BYTES);
    readFrameHeader(win.buf, at, h);
    if (h.length > maxPayload || h.seq < 0 || !rules.plausible(h, pos - from + 1)) continue;
    if (rules.payloadBound !== undefined && h.length > rules.payloadBound(h.type)) continue;
    const bytes = frameBytes(h);
    if (pos + bytes > win.size) continue;
    if (hashed + bytes > budgetBytes) return { verdict: 'budget', offset: -1, hashedBytes: hashed };
    hashed += bytes;
    at = win.ensure(pos, bytes);
    resyncCounters.crcBytes += bytes;
    if (frameCrcOk(win.buf, at, h)) return { verdict: 'found', offset: pos, hashedBytes: hashed };
  }
  return { verdict: 'none', offset: -1, hashedBytes: hashed };
}
