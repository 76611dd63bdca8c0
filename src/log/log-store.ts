// Implements FORMAT.md §2–§7 through the modules it uses; the protocols are described in DESIGN.md.
/**
 * LogStore: a segmented write-ahead log behind the {@link Store} contract.
 *
 * One object owns all mutable state (segments, cursor, reader, tail cache). Appends and acks are
 * synchronous positional writes followed, when asked, by one fdatasync; reads are synchronous.
 * Background work (cursor checkpoints, deleting acked segments, compaction) runs in one
 * maintenance lane, ordered so that the cursor is durable before any segment leaves the disk.
 */
import { dirname, join, resolve } from 'node:path';
import { ByteArena } from '../bytes.js';
import { OpenError, QueueError } from '../errors.js';
import type { ReadRange, Store, StoredItem, StoreFeatures, StoreRecovery } from '../store.js';
import { nonNegativeInteger, optionsObject, positiveInteger, expectation } from '../validate.js';
import { AckSet, decodeCheckpointBody, decodeCheckpointHeader, encodeAckRanges, encodeCheckpoint } from './cursor.js';
import type { FileSystem, LockHandle } from './file-system.js';
import {
  CUR_FLAG_CLEAN,
  CURSOR_FILE,
  CURSOR_HEADER_BYTES,
  FORMAT_VERSION,
  FRAME_HEADER_BYTES,
  FRAME_OFF_LENGTH,
  LOCK_FILE,
  MAX_PAYLOAD_BYTES_CAP,
  MAX_RANGES_PER_RECORD,
  RANGE_BYTES,
  RECORD_ACK,
  RECORD_ITEM,
  RECORD_OPENED,
  RECORD_SEAL,
  SEAL_FRAME_BYTES,
  SEAL_PAYLOAD_BYTES,
  SEG_FLAG_COMPACTED,
  SEG_OFF_BASE_SEQ,
  SEG_OFF_VERSION,
  CUR_OFF_VERSION,
  SEGMENT_HEADER_BYTES,
  TMP_SUFFIX,
  TORN_INFIX,
  classifyEntry,
  parseSegmentName,
  readU32,
  readU64,
  segmentName,
} from './format.js';
import { encodeFrame, encodeFrameInPlace, frameBytes, frameCrcOk, newFrameHeader, payloadOffset, readFrameHeader, type FrameHeader } from './frame.js';
import {
  decodeSealPayload,
  decodeSegmentHeader,
  decodeTrailingSeal,
  encodeSealFrame,
  encodeSegmentHeader,
  type SealInfo,
} from './segment.js';
import { FileWindow, scanFrames, type FrameRules, type ScanResult, type TailRow } from './tail.js';

const MiB = 1024 * 1024;
/** Smallest accepted `segmentBytes`: a header, a seal and a few small frames. Tests use tiny segments. */
export const MIN_SEGMENT_BYTES = 256;
/** Under `none`, the active segment is fdatasynced in the background every this many bytes. */
const BACKGROUND_FLUSH_BYTES = 8 * 1024 * 1024;
/** A clean close seals the active segment when it holds at least this many bytes. */
const SEAL_AT_CLOSE_BYTES = 1024 * 1024;
/** Zeros written ahead of the active segment's write position at a time (`preallocate`). */
const PREALLOCATE_STEP_BYTES = 4 * 1024 * 1024;
const ZEROS = new Uint8Array(1024 * 1024);

/** Options of {@link LogStore.open}. */
export interface LogStoreOptions {
  /**
   * A segment is sealed and a new one started when the next batch would take it past this size.
   * A single batch larger than this goes whole into one segment.
   * @default 67108864 (64 MiB)
   */
  segmentBytes?: number;
  /**
   * Largest payload accepted, in bytes; larger pushes reject with `ERR_TOO_LARGE`. At most 256 MiB.
   * @default 16777216 (16 MiB)
   */
  maxItemBytes?: number;
  /**
   * The file system all I/O goes through.
   * @default the node:fs implementation from `persistent-queue` (`nodeFileSystem`)
   */
  fs?: FileSystem;
  /**
   * When the ACK records appended to the cursor file exceed this many bytes, the cursor is
   * checkpointed (rewritten atomically as one compact record) in the background.
   * @default 1048576 (1 MiB)
   */
  cursorCheckpointBytes?: number;
  /**
   * Bytes of just-appended payloads kept in memory so a caught-up consumer reads without disk I/O.
   * @default 8388608 (8 MiB)
   */
  tailCacheBytes?: number;
  /**
   * Chunk size of the consumer's read-ahead from disk.
   * @default 262144 (256 KiB)
   */
  readAheadBytes?: number;
  /**
   * Automatic compaction: `true` rewrites the sealed segments when their live (unacked) bytes fall
   * below `compactionLiveRatio` of their size. Fully acked segments are always deleted.
   * @default true
   */
  autoCompact?: boolean;
  /**
   * Extend the active segment with zeros ahead of synced writes (4 MiB at a time, never past
   * `segmentBytes`), so that most fdatasyncs overwrite allocated blocks instead of growing the
   * file (BRIEF lesson 15: measured ≈ +40 % records/s for write + fdatasync of 64 frames). The
   * zeros are cut at a clean close, at a roll, and as a zero tail by recovery.
   * @default true
   */
  preallocate?: boolean;
  /**
   * Live fraction of the sealed segments below which automatic compaction rewrites them.
   * @default 0.25
   */
  compactionLiveRatio?: number;
  /**
   * Mode of the store directory when it is created.
   * @default 0o700
   */
  dirMode?: number;
  /**
   * Mode of the files the store creates.
   * @default 0o600
   */
  fileMode?: number;
}

/** What recovery found and did when the store was opened. */
export interface LogStoreRecoveryInfo {
  /** The previous `close()` completed (no crash since). */
  readonly cleanShutdown: boolean;
  /** Bytes of torn records cut off the tails (segment and cursor), each kept in a side file. */
  readonly tornBytes: number;
  /** All-zero bytes cut off the tails: preallocated space, or a tail the file system zero-filled (F3). */
  readonly zeroTailBytes: number;
  /** Side files holding the cut torn bytes. */
  readonly tornFiles: readonly string[];
  /** Stray files deleted, never read: tmp files, and a last segment whose creation a crash interrupted (header incomplete, no records). */
  readonly strayFilesDeleted: readonly string[];
  /** Segments deleted because a completed compaction replaced them. */
  readonly supersededDeleted: readonly string[];
  /** When ACK records referenced seqs past the recovered data (possible only under `none`), the next seq was raised from this value. */
  readonly nextSeqRaisedFrom: number | null;
}

/** A small snapshot for `pq stats`. */
export interface LogStoreStats {
  readonly formatVersion: number;
  readonly dir: string;
  readonly segments: readonly {
    readonly file: string;
    readonly baseSeq: number;
    /** Bytes of records (for the active segment: up to the write position). */
    readonly bytes: number;
    readonly sealed: boolean;
    readonly compacted: boolean;
  }[];
  /** Bytes of every store file, including the active segment's preallocated zeros. */
  readonly bytesOnDisk: number;
  /** Every seq below this is acked. */
  readonly lowWaterMark: number;
  /** Number of acked ranges held above the low-water mark (out-of-order acks). */
  readonly ackedRanges: number;
  readonly nextSeq: number;
  /** Unacked items. */
  readonly count: number;
  readonly cursorBytes: number;
  readonly recovery: LogStoreRecoveryInfo;
}

export interface CompactionResult {
  readonly bytesReclaimed: number;
  readonly segmentsDeleted: number;
  readonly segmentsRewritten: number;
}

interface Segment {
  readonly base: number;
  name: string;
  path: string;
  /** File size (for the active segment: the write position). */
  bytes: number;
  /** Present once the segment ends in a SEAL record. */
  seal: SealInfo | null;
  compacted: boolean;
  readFd: number;
  /** Set when the segment left the layout (deleted or replaced); readers re-seek. */
  retired: boolean;
}

type State = 'recovering' | 'recovered' | 'open' | 'closing' | 'closed';

/** Stores opened in this process, per file system, by canonical path (BRIEF lesson 14). */
const openDirs = new WeakMap<FileSystem, Set<string>>();

function errnoCode(e: unknown): string | undefined {
  return typeof e === 'object' && e !== null && typeof (e as { code?: unknown }).code === 'string'
    ? (e as { code: string }).code
    : undefined;
}

function ratio(name: string, value: unknown): number {
  if (typeof value !== 'number') throw new TypeError(expectation(name, 'a number between 0 and 1', value));
  if (!(value >= 0 && value <= 1)) throw new RangeError(expectation(name, 'a number between 0 and 1', value));
  return value;
}

function bool(name: string, value: unknown): boolean {
  if (typeof value !== 'boolean') throw new TypeError(expectation(name, 'a boolean', value));
  return value;
}

interface ResolvedOptions {
  segmentBytes: number;
  maxItemBytes: number;
  fs: FileSystem;
  cursorCheckpointBytes: number;
  tailCacheBytes: number;
  readAheadBytes: number;
  autoCompact: boolean;
  preallocate: boolean;
  compactionLiveRatio: number;
  dirMode: number;
  fileMode: number;
  /**
   * Ranges per ACK record, for writer and reader alike: MAX_RANGES_PER_RECORD. Not a public option:
   * tests lower it (`maxRangesPerRecord`) to exercise the split of a large ack into several records
   * without acking 2^20 holes.
   */
  maxRangesPerRecord: number;
}

let defaultFs: FileSystem | undefined;
/** The FileSystem installed by `src/log-store.ts` (node:fs), if any. */
export function getDefaultFileSystem(): FileSystem | undefined {
  return defaultFs;
}
/** Set by `src/node-fs.ts` when it is loaded, so `src/log` never imports node:fs itself. */
export function setDefaultFileSystem(fs: FileSystem): void {
  defaultFs = fs;
}

function resolveOptions(raw: unknown): ResolvedOptions {
  const o = optionsObject('options', raw);
  const segmentBytes = o.segmentBytes === undefined ? 64 * MiB : positiveInteger('segmentBytes', o.segmentBytes);
  if (segmentBytes < MIN_SEGMENT_BYTES) {
    throw new RangeError(expectation('segmentBytes', `an integer of at least ${MIN_SEGMENT_BYTES}`, segmentBytes));
  }
  const maxItemBytes = o.maxItemBytes === undefined ? 16 * MiB : positiveInteger('maxItemBytes', o.maxItemBytes);
  if (maxItemBytes > MAX_PAYLOAD_BYTES_CAP) {
    throw new RangeError(expectation('maxItemBytes', `a positive integer of at most ${MAX_PAYLOAD_BYTES_CAP}`, maxItemBytes));
  }
  let fs: FileSystem | undefined = defaultFs;
  if (o.fs !== undefined) {
    const f = o.fs as Partial<FileSystem> | null;
    if (f === null || typeof f !== 'object' || typeof f.open !== 'function' || typeof f.lock !== 'function') {
      throw new TypeError(expectation('fs', 'a FileSystem', o.fs));
    }
    fs = o.fs as FileSystem;
  }
  if (fs === undefined) {
    throw new TypeError('No default FileSystem: import LogStore from the package entry point, or pass `fs`');
  }
  return {
    segmentBytes,
    maxItemBytes,
    fs,
    cursorCheckpointBytes:
      o.cursorCheckpointBytes === undefined ? MiB : positiveInteger('cursorCheckpointBytes', o.cursorCheckpointBytes),
    tailCacheBytes: o.tailCacheBytes === undefined ? 8 * MiB : nonNegativeInteger('tailCacheBytes', o.tailCacheBytes),
    readAheadBytes: o.readAheadBytes === undefined ? 256 * 1024 : positiveInteger('readAheadBytes', o.readAheadBytes),
    autoCompact: o.autoCompact === undefined ? true : bool('autoCompact', o.autoCompact),
    preallocate: o.preallocate === undefined ? true : bool('preallocate', o.preallocate),
    compactionLiveRatio: o.compactionLiveRatio === undefined ? 0.25 : ratio('compactionLiveRatio', o.compactionLiveRatio),
    dirMode: o.dirMode === undefined ? 0o700 : nonNegativeInteger('dirMode', o.dirMode),
    fileMode: o.fileMode === undefined ? 0o600 : nonNegativeInteger('fileMode', o.fileMode),
    maxRangesPerRecord:
      o.maxRangesPerRecord === undefined ? MAX_RANGES_PER_RECORD : Math.min(MAX_RANGES_PER_RECORD, positiveInteger('maxRangesPerRecord', o.maxRangesPerRecord)),
  };
}

function corrupt(file: string, offset: number, reason: string): OpenError {
  return new OpenError('ERR_CORRUPT', `Store file ${file} is damaged at offset ${offset}: ${reason}`, { file, offset });
}

/** Thrown inside compaction when the store starts closing; never escapes. */
class Aborted extends Error {}

/** The durable Store: a segmented write-ahead log plus an ack cursor. See DESIGN.md. */
export class LogStore implements Store {
  readonly maxItemBytes: number;
  readonly features: StoreFeatures = { reopen: true, crashSafe: true };
  /** Absolute path of the store directory. */
  readonly dir: string;

  private readonly opts: ResolvedOptions;
  private readonly fs: FileSystem;
  private state: State = 'recovering';
  private failure: QueueError | null = null;
  private lock: LockHandle | null = null;
  private lockKey = '';

  // ---- segments ----
  private segments: Segment[] = [];
  private active!: Segment;
  private writeFd = -1;
  private activeRecords = 0;
  private activeFirstSeq = 0;
  private activeLastSeq = 0;
  private nextSeq = 1;
  /**
   * Reused encode buffers are plain Uint8Arrays: a FileSystem that keeps `buffer.slice(...)` of a
   * write gets a copy, whereas Buffer#slice would alias memory we overwrite on the next batch.
   */
  private writeBuf = new Uint8Array(64 * 1024);
  /** Syncs in flight per fd; an fd is closed only when none is pending on it (BRIEF lesson 11). */
  private fdSyncs = new Map<number, number>();
  private fdCloseWanted = new Set<number>();
  /** Write offset of the active segment when its last data sync started. */
  private flushedOffset = 0;
  private backgroundFlush = false;
  /** Size of the active segment file: the write position plus preallocated zeros. */
  private activeFileBytes = 0;

  // ---- cursor ----
  private acks = new AckSet(1);
  private cursorFd = -1;
  private cursorOffset = 0;
  private cursorLogStart = 0;
  private cursorRecordSeq = 0;
  private ackBuf = new Uint8Array(4096);
  /** Serialises ACK writes with checkpoints (which replace the cursor file). */
  private cursorLane: Promise<void> = Promise.resolve();
  private cursorBusy = false;
  /** Low-water mark known durable on disk. */
  private durableLwm = 1;

  // ---- reader ----
  private readerSeg: Segment | null = null;
  private readerWin: FileWindow | null = null;
  private readerOffset = 0;
  private readerPrevSeq = 0;
  private readonly hdr: FrameHeader = newFrameHeader();
  /** Copies of the payloads read from disk, in slabs of this store's own. */
  private readonly arena = new ByteArena();

  // ---- tail cache ----
  /** Appended batches (copies of the arrays; the payloads are the core's own copies), oldest first. */
  private cache: (readonly StoredItem[] | null)[] = [];
  private cacheBatchBytes: number[] = [];
  private cacheHead = 0;
  private cacheBytes = 0;

  // ---- maintenance ----
  private maintenance: Promise<CompactionResult> | null = null;
  private maintenanceAgain = false;
  private compactionBlockedBy: QueueError | null = null;

  private recoveryInfo!: LogStoreRecoveryInfo;
  private cleanShutdown = false;

  private constructor(dir: string, opts: ResolvedOptions) {
    this.dir = dir;
    this.opts = opts;
    this.fs = opts.fs;
    this.maxItemBytes = opts.maxItemBytes;
  }

  /**
   * Open (creating if missing) the store in `dir`: lock it, recover its state, and return a store
   * ready to hand to the queue builder. Rejects with `OpenError` (`ERR_STORE`, `ERR_CORRUPT`,
   * `ERR_UNSUPPORTED_VERSION`, `ERR_LOCKED`); a failed open changes no byte of the store's files.
   * Options are validated first (`TypeError`/`RangeError`).
   */
  static async open(dir: string, options?: LogStoreOptions): Promise<LogStore> {
    if (typeof dir !== 'string' || dir.length === 0) throw new TypeError(expectation('dir', 'a non-empty string', dir));
    const opts = resolveOptions(options);
    const store = new LogStore(resolve(dir), opts);
    await store.recover();
    return store;
  }

  // =============================================================================================
  // Store contract
  // =============================================================================================

  /** Returns what recovery found. Callable once per instance; a closed store needs a new `LogStore.open`. */
  open(): Promise<StoreRecovery> {
    if (this.state !== 'recovered') {
      return Promise.reject(
        new OpenError(
          'ERR_STORE',
          this.state === 'open'
            ? `LogStore for ${this.dir} is already open; a store backs one queue at a time`
            : `LogStore for ${this.dir} was closed; open it again with LogStore.open(dir)`,
        ),
      );
    }
    this.state = 'open';
    return Promise.resolve({ nextSeq: this.nextSeq, count: this.unackedCount() });
  }

  append(items: readonly StoredItem[], sync: boolean): Promise<void> {
    const refused = this.refuse();
    if (refused !== null) return refused;
    let bytes = 0;
    let expect = this.nextSeq;
    for (let i = 0; i < items.length; i++) {
      const it = items[i]!;
      if (it.seq !== expect || it.bytes.length > this.maxItemBytes) {
        return this.fail(
          new Error(
            `append invariant violated: item ${i} has seq ${it.seq} (expected ${expect}) and ${it.bytes.length} bytes (max ${this.maxItemBytes})`,
          ),
        );
      }
      expect++;
      bytes += FRAME_HEADER_BYTES + it.bytes.length;
    }
    if (items.length === 0) return this.fail(new Error('append invariant violated: empty batch'));
    if (this.active.bytes + bytes > this.opts.segmentBytes && this.activeRecords > 0) {
      return this.rollThenWrite(items, bytes, sync);
    }
    return this.writeBatch(items, bytes, sync);
  }

  ack(seqs: readonly number[], sync: boolean): Promise<void> {
    const refused = this.refuse();
    if (refused !== null) return refused;
    if (seqs.length === 0) return this.fail(new Error('ack invariant violated: empty batch'));
    for (const s of seqs) {
      if (!Number.isSafeInteger(s) || s < 1 || s >= this.nextSeq || this.acks.has(s)) {
        return this.fail(new Error(`ack invariant violated: seq ${s} was not appended or is already acked`));
      }
    }
    return this.ackWhenFree(seqs, sync);
  }

  /** ACK records never interleave with a checkpoint, which replaces the cursor file. */
  private ackWhenFree(seqs: readonly number[], sync: boolean): Promise<void> {
    if (!this.cursorBusy) return this.ackNow(seqs, sync);
    return this.cursorLane.then(() => this.ackWhenFree(seqs, sync));
  }

  read(range: ReadRange): readonly StoredItem[] {
    if (this.failure !== null) throw this.failure;
    if (this.state === 'closed' || this.state === 'closing') throw new QueueError('ERR_CLOSED', 'LogStore is closed');
    const out: StoredItem[] = [];
    const { before, limit } = range;
    let from = range.after + 1;
    if (limit <= 0 || from >= before || from >= this.nextSeq) return out;
    const cacheLen = this.cache.length - this.cacheHead;
    const cacheFirst = cacheLen > 0 ? this.cache[this.cacheHead]![0]!.seq : Infinity;
    if (from < cacheFirst) {
      // Disk, up to where the cache starts. Damage met after some items were collected ends the
      // batch there; the next read starts at the damage and throws.
      try {
        this.readDisk(from, Math.min(before, cacheFirst), limit, out);
      } catch (e) {
        if (out.length > 0 && e instanceof QueueError && e.code === 'ERR_CORRUPT') return out;
        throw e;
      }
      if (out.length >= limit || cacheFirst >= before) return out;
      from = cacheFirst;
    }
    if (cacheLen > 0) {
      // Appended seqs are consecutive within one session: find the batch holding `from` by its
      // first seq, then walk forward.
      let lo = this.cacheHead;
      let hi = this.cache.length - 1;
      while (lo < hi) {
        const mid = (lo + hi + 1) >>> 1;
        if (this.cache[mid]![0]!.seq <= from) lo = mid;
        else hi = mid - 1;
      }
      for (let b = lo; b < this.cache.length; b++) {
        const batch = this.cache[b]!;
        for (let i = Math.max(0, from - batch[0]!.seq); i < batch.length; i++) {
          const item = batch[i]!;
          if (item.seq >= before || out.length >= limit) return out;
          if (!this.acks.has(item.seq)) out.push(item);
        }
      }
    }
    return out;
  }

  /**
   * Finish background work, write a CLEAN checkpoint over durable data, release the lock. On a
   * failed instance it only releases resources (recovery is close + reopen). Rejects with
   * `ERR_STORE_FAILED` when the final sync fails.
   */
  async close(): Promise<void> {
    if (this.state === 'closed' || this.state === 'closing') return;
    const wasFailed = this.failure !== null;
    this.state = 'closing';
    let error: unknown = null;
    try {
      if (this.maintenance !== null) await this.maintenance.catch(() => undefined);
      while (this.cursorBusy) await this.cursorLane;
      if (this.failure === null) {
        this.trimPreallocation();
        // Seal a large active segment, so the next open reads its 40-byte seal instead of
        // scanning it (open time must not grow with the backlog); a small one is cheaper to scan
        // than a new segment file per open/close cycle.
        if (this.active.seal === null && this.active.bytes - SEGMENT_HEADER_BYTES >= SEAL_AT_CLOSE_BYTES) {
          await this.sealActive(this.nextSeq).catch((e: unknown) => {
            if (!isStoreFull(e)) throw e; // a full disk: the segment stays unsealed (scanned at open)
          });
        }
        try {
          await this.writeCheckpoint(CUR_FLAG_CLEAN);
        } catch (e) {
          if (!isStoreFull(e)) throw e;
          // A full disk: keep the current cursor (checkpoint + records) and make it durable. The
          // next open reads it as an unclean shutdown, which only costs it a scan.
          await this.syncActiveData();
          await this.syncCursor();
          if (this.failure !== null) throw this.failure;
        }
      }
    } catch (e) {
      error = this.markFailed(e);
    } finally {
      this.releaseAll();
      this.state = 'closed';
    }
    if (error !== null && !wasFailed) throw error;
  }

  // =============================================================================================
  // Extras: compaction and inspection
  // =============================================================================================

  /**
   * Delete fully acked segments and rewrite sealed segments that hold acked records, keeping only
   * their live records. Rejects with `ERR_CORRUPT` when a segment being rewritten is damaged.
   */
  async compact(): Promise<CompactionResult> {
    const refused = this.refuse();
    if (refused !== null) {
      await refused;
    }
    while (this.maintenance !== null) await this.maintenance.catch(() => undefined);
    this.compactionBlockedBy = null;
    return this.startMaintenance(true);
  }

  /** Resolves once background work (checkpoint, segment deletion, compaction) has finished. */
  async settled(): Promise<void> {
    while (this.maintenance !== null) await this.maintenance.catch(() => undefined);
    while (this.cursorBusy) await this.cursorLane;
  }

  /** A snapshot of the store's layout and counters. */
  inspect(): LogStoreStats {
    // The active segment's preallocated zeros occupy disk too.
    let bytesOnDisk = this.cursorOffset + Math.max(0, this.activeFileBytes - this.active.bytes);
    const segments = this.segments.map((s) => {
      bytesOnDisk += s.bytes;
      return { file: s.name, baseSeq: s.base, bytes: s.bytes, sealed: s.seal !== null, compacted: s.compacted };
    });
    return {
      formatVersion: FORMAT_VERSION,
      dir: this.dir,
      segments,
      bytesOnDisk,
      lowWaterMark: this.acks.lwm,
      ackedRanges: this.acks.starts.length,
      nextSeq: this.nextSeq,
      count: this.unackedCount(),
      cursorBytes: this.cursorOffset,
      recovery: this.recoveryInfo,
    };
  }

  /** What recovery found and did at open. */
  get recovery(): LogStoreRecoveryInfo {
    return this.recoveryInfo;
  }

  // =============================================================================================
  // Failure handling
  // =============================================================================================

  private refuse(): Promise<never> | null {
    if (this.failure !== null) return Promise.reject(this.failure);
    if (this.state !== 'open' && this.state !== 'recovered') {
      return Promise.reject(new QueueError('ERR_CLOSED', 'LogStore is closed'));
    }
    return null;
  }

  private markFailed(cause: unknown): QueueError {
    if (this.failure === null) {
      const msg = cause instanceof Error ? cause.message : String(cause);
      this.failure =
        cause instanceof QueueError && cause.code === 'ERR_STORE_FAILED'
          ? cause
          : new QueueError('ERR_STORE_FAILED', `LogStore for ${this.dir} failed and must be reopened: ${msg}`, { cause });
    }
    return this.failure;
  }

  /** Fail-stop (BRIEF lesson 10): the instance refuses everything from now on. Never retries an fsync. */
  private fail(cause: unknown): Promise<never> {
    return Promise.reject(this.markFailed(cause));
  }

  private unackedCount(): number {
    const count = this.nextSeq - this.acks.lwm - this.acks.ackedAbove;
    if (count < 0) throw this.markFailed(new Error(`count invariant violated: ${count}`));
    return count;
  }

  // =============================================================================================
  // Append path
  // =============================================================================================

  private writeBatch(items: readonly StoredItem[], bytes: number, sync: boolean): Promise<void> {
    if (this.writeBuf.length < bytes) this.writeBuf = new Uint8Array(Math.max(bytes, this.writeBuf.length * 2));
    const buf = this.writeBuf;
    let pos = 0;
    for (let i = 0; i < items.length; i++) {
      const it = items[i]!;
      pos = encodeFrame(buf, pos, it.seq, RECORD_ITEM, it.bytes);
    }
    if (pos !== bytes) return this.fail(new Error(`encoder wrote ${pos} bytes, expected ${bytes}`));
    const at = this.active.bytes;
    try {
      this.fs.write(this.writeFd, buf, 0, bytes, at);
    } catch (e) {
      return this.writeFailed(e, this.writeFd, at, `append to ${this.active.name}`);
    }
    this.active.bytes = at + bytes;
    if (this.activeFileBytes < at + bytes) this.activeFileBytes = at + bytes;
    // Only batches that will be synced benefit; under `none` the zeros would double the bytes written.
    if (sync && this.opts.preallocate && this.activeFileBytes - this.active.bytes < FRAME_HEADER_BYTES + bytes) {
      const failed = this.preallocate();
      if (failed !== null) return failed;
    }
    if (this.activeRecords === 0) this.activeFirstSeq = items[0]!.seq;
    this.activeRecords += items.length;
    this.activeLastSeq = items[items.length - 1]!.seq;
    this.nextSeq = this.activeLastSeq + 1;
    this.cacheAppend(items, bytes);
    if (!sync) {
      if (this.active.bytes - this.flushedOffset >= BACKGROUND_FLUSH_BYTES && !this.backgroundFlush) this.startBackgroundFlush();
      return Promise.resolve();
    }
    this.flushedOffset = this.active.bytes;
    return this.syncActiveData();
  }

  /**
   * Under `none` nothing syncs the active segment until it rolls, and the roll's fdatasync would
   * then flush the whole segment while appends wait (measured: ~0.3 s per 64 MiB segment, a third
   * of the run time at 1 M msgs/s). A background fdatasync every BACKGROUND_FLUSH_BYTES keeps the
   * dirty tail short. At most one is in flight; a failure fails the instance like any sync.
   */
  private startBackgroundFlush(): void {
    this.backgroundFlush = true;
    this.flushedOffset = this.active.bytes;
    this.syncActiveData().then(
      () => {
        this.backgroundFlush = false;
      },
      () => {
        this.backgroundFlush = false;
      },
    );
  }

  /** One fdatasync of the active segment; failure is fatal (never retried: fsyncgate). */
  private syncActiveData(): Promise<void> {
    // No active fd only inside a roll, between the sealed segment (already fdatasynced) and the
    // durable creation of the next one: a checkpoint taken meanwhile has nothing left to sync.
    if (this.writeFd < 0) return this.failure !== null ? Promise.reject(this.failure) : Promise.resolve();
    return this.syncFd(this.writeFd, true).then(undefined, (e: unknown) => this.fail(e));
  }

  /** fdatasync/fsync `fd`, counting it so that the fd is not closed while the sync runs. */
  private syncFd(fd: number, dataOnly: boolean): Promise<void> {
    this.fdSyncs.set(fd, (this.fdSyncs.get(fd) ?? 0) + 1);
    const done = (): void => {
      const n = this.fdSyncs.get(fd)! - 1;
      if (n > 0) this.fdSyncs.set(fd, n);
      else {
        this.fdSyncs.delete(fd);
        if (this.fdCloseWanted.delete(fd)) this.closeQuietly(fd);
      }
    };
    return (dataOnly ? this.fs.fdatasync(fd) : this.fs.fsync(fd)).then(
      () => {
        done();
        // After any failed sync, a later successful one proves nothing: the failed sync may have
        // dropped dirty pages that this one was meant to cover (fsyncgate). Found by the
        // engine-crash fuzzer: an ack whose record was written before a failed fdatasync of the
        // cursor resolved on the next, successful one, and came back after a power loss.
        if (this.failure !== null) throw this.failure;
      },
      (e: unknown) => {
        done();
        throw e;
      },
    );
  }

  /** Close `fd` now, or when the last sync pending on it settles. */
  private closeWhenIdle(fd: number): void {
    if (this.fdSyncs.has(fd)) this.fdCloseWanted.add(fd);
    else this.closeQuietly(fd);
  }

  /**
   * Extend the active segment with zeros up to PREALLOCATE_STEP_BYTES ahead (not past
   * `segmentBytes`). The next fdatasync commits the new size once; later ones find the blocks
   * allocated. ENOSPC here only stops preallocating: the batch itself is already written.
   */
  private preallocate(): Promise<never> | null {
    const from = this.activeFileBytes;
    const to = Math.min(this.opts.segmentBytes, this.active.bytes + PREALLOCATE_STEP_BYTES);
    let pos = from;
    try {
      while (pos < to) {
        const n = Math.min(ZEROS.length, to - pos);
        this.fs.write(this.writeFd, ZEROS, 0, n, pos);
        pos += n;
      }
    } catch (e) {
      if (errnoCode(e) !== 'ENOSPC') return this.fail(e);
      try {
        this.fs.truncate(this.writeFd, this.active.bytes);
      } catch (e2) {
        return this.fail(e2);
      }
      this.activeFileBytes = this.active.bytes;
      return null;
    }
    this.activeFileBytes = Math.max(from, to);
    return null;
  }

  /** Cut the preallocated zeros off the active segment (before sealing it, and at a clean close). */
  private trimPreallocation(): void {
    if (this.activeFileBytes > this.active.bytes) {
      this.fs.truncate(this.writeFd, this.active.bytes);
      this.activeFileBytes = this.active.bytes;
    }
  }

  /**
   * A write failed. ENOSPC: cut the file back to its length before the write and report
   * `ERR_STORE_FULL` (the store stays usable). Anything else: fail-stop.
   */
  private writeFailed(e: unknown, fd: number, at: number, what: string): Promise<never> {
    if (errnoCode(e) === 'ENOSPC') {
      try {
        this.fs.truncate(fd, at);
      } catch (e2) {
        return this.fail(e2);
      }
      if (fd === this.writeFd) this.activeFileBytes = at;
      return Promise.reject(new QueueError('ERR_STORE_FULL', `No space left on device (${what})`, { cause: e }));
    }
    return this.fail(e);
  }

  private async rollThenWrite(items: readonly StoredItem[], bytes: number, sync: boolean): Promise<void> {
    await this.roll(this.nextSeq);
    return this.writeBatch(items, bytes, sync);
  }

  /**
   * Seal the active segment with `endSeq`, make it durable, then create the next segment and make
   * it and its directory entry durable (BRIEF lessons 6 and 11).
   */
  private async roll(endSeq: number): Promise<void> {
    await this.sealActive(endSeq);
    // The old fd's data is durable; close it once no sync is pending on it. Forget it at once: if
    // creating the next segment fails, close() must not close that number again (by then it may
    // belong to another file; found by review).
    this.closeWhenIdle(this.writeFd);
    this.writeFd = -1;
    const seg = await this.createSegment(endSeq);
    this.segments.push(seg);
    this.active = seg;
    this.activeFileBytes = seg.bytes;
    this.activeRecords = 0;
    this.activeFirstSeq = 0;
    this.activeLastSeq = 0;
    if (this.nextSeq < endSeq) this.nextSeq = endSeq;
    this.scheduleMaintenance();
  }

  /** Write the SEAL record (FORMAT §3.2) at the end of the active segment, trim, fdatasync. */
  private async sealActive(endSeq: number): Promise<void> {
    const old = this.active;
    const seal: SealInfo = {
      recordCount: this.activeRecords,
      firstSeq: this.activeRecords > 0 ? this.activeFirstSeq : 0,
      lastSeq: this.activeRecords > 0 ? this.activeLastSeq : 0,
      endSeq,
    };
    const frame = encodeSealFrame(seal);
    try {
      this.fs.write(this.writeFd, frame, 0, frame.length, old.bytes);
    } catch (e) {
      return this.writeFailed(e, this.writeFd, old.bytes, `seal ${old.name}`);
    }
    old.bytes += frame.length;
    // A sealed segment ends exactly at its seal: the preallocated zeros go before the sync.
    if (this.activeFileBytes < old.bytes) this.activeFileBytes = old.bytes;
    try {
      this.trimPreallocation();
    } catch (e) {
      return this.fail(e);
    }
    await this.syncActiveData();
    this.flushedOffset = 0;
    old.seal = seal;
  }

  /**
   * Create a segment file: header, fsync file, fsync directory. Sets `writeFd` once the segment is
   * durable; on failure the new fd is closed here (the instance fails; recovery deletes or keeps
   * the file by the interrupted-creation rule, FORMAT §6.2).
   */
  private async createSegment(base: number): Promise<Segment> {
    const name = segmentName(base);
    const path = join(this.dir, name);
    const header = encodeSegmentHeader({ flags: 0, baseSeq: base, replacesEndSeq: 0 });
    let fd: number;
    try {
      fd = this.fs.open(path, 'create', this.opts.fileMode);
    } catch (e) {
      throw this.markFailed(e);
    }
    try {
      this.fs.write(fd, header, 0, header.length, 0);
      await this.syncFd(fd, false);
      await this.fs.fsyncDir(this.dir);
    } catch (e) {
      this.closeWhenIdle(fd);
      throw this.markFailed(e);
    }
    this.writeFd = fd;
    return { base, name, path, bytes: header.length, seal: null, compacted: false, readFd: -1, retired: false };
  }

  // ---- tail cache ----

  private cacheAppend(items: readonly StoredItem[], bytes: number): void {
    const max = this.opts.tailCacheBytes;
    if (max === 0) return;
    // Whole batches: O(1) per append instead of per item. The core may reuse its array.
    this.cache.push(items.slice());
    this.cacheBatchBytes.push(bytes);
    this.cacheBytes += bytes;
    while (this.cacheBytes > max && this.cacheHead < this.cache.length) {
      this.cacheBytes -= this.cacheBatchBytes[this.cacheHead]!;
      this.cache[this.cacheHead] = null;
      this.cacheHead++;
    }
    if (this.cacheHead > 1024 && this.cacheHead * 2 > this.cache.length) {
      this.cache = this.cache.slice(this.cacheHead);
      this.cacheBatchBytes = this.cacheBatchBytes.slice(this.cacheHead);
      this.cacheHead = 0;
    }
  }

  // =============================================================================================
  // Ack path
  // =============================================================================================

  /**
   * Write the ranges of one `ack()` call as ACK records (FORMAT §4.2) with one positional write.
   * A record holds at most `maxRangesPerRecord` ranges (the reader's bound), so an ack of more
   * holes is split into several consecutive records; a crash can keep a prefix of them, which
   * acks a subset of an ack that never resolved (allowed: each seq is acked or not).
   */
  private ackNow(seqs: readonly number[], sync: boolean): Promise<void> {
    if (this.failure !== null) return Promise.reject(this.failure);
    const perRecord = this.opts.maxRangesPerRecord;
    // Ranges are encoded after room for the most frame headers they can need (one range per seq
    // at worst), then each chunk is moved down behind its own header (never over a later chunk).
    const maxRecords = Math.ceil(seqs.length / perRecord);
    const rangesAt = maxRecords * FRAME_HEADER_BYTES;
    const need = rangesAt + seqs.length * RANGE_BYTES;
    if (this.ackBuf.length < need) this.ackBuf = new Uint8Array(Math.max(need, this.ackBuf.length * 2));
    const buf = this.ackBuf;
    const payloadBytes = encodeAckRanges(seqs, buf, rangesAt);
    const chunkBytes = perRecord * RANGE_BYTES;
    let end = 0;
    let records = 0;
    for (let from = 0; from < payloadBytes; from += chunkBytes) {
      const length = Math.min(chunkBytes, payloadBytes - from);
      buf.copyWithin(end + FRAME_HEADER_BYTES, rangesAt + from, rangesAt + from + length);
      end = encodeFrameInPlace(buf, end, this.cursorRecordSeq + records + 1, RECORD_ACK, length);
      records++;
    }
    const at = this.cursorOffset;
    try {
      this.fs.write(this.cursorFd, buf, 0, end, at);
    } catch (e) {
      return this.writeFailed(e, this.cursorFd, at, 'ack');
    }
    this.cursorOffset = at + end;
    this.cursorRecordSeq += records;
    for (let p = 0; p < end; ) {
      const length = readU32(buf, p + FRAME_OFF_LENGTH);
      for (let q = p + FRAME_HEADER_BYTES; q < p + FRAME_HEADER_BYTES + length; q += RANGE_BYTES) {
        this.acks.add(readU64(buf, q), readU64(buf, q + 8));
      }
      p += FRAME_HEADER_BYTES + length;
    }
    if (this.needsMaintenance()) this.scheduleMaintenance();
    if (!sync) return Promise.resolve();
    return this.syncCursor();
  }

  private syncCursor(): Promise<void> {
    const lwm = this.acks.lwm;
    return this.syncFd(this.cursorFd, true).then(
      () => {
        if (lwm > this.durableLwm) this.durableLwm = lwm;
      },
      (e: unknown) => this.fail(e),
    );
  }

  /** Run `fn` with the cursor lane held (no ACK write interleaves). */
  private async withCursorLane<T>(fn: () => Promise<T>): Promise<T> {
    while (this.cursorBusy) await this.cursorLane;
    this.cursorBusy = true;
    let release!: () => void;
    this.cursorLane = new Promise<void>((r) => (release = r));
    try {
      return await fn();
    } finally {
      this.cursorBusy = false;
      release();
    }
  }

  /**
   * Replace the cursor file with one checkpoint holding the current ack state (BRIEF lesson 7:
   * tmp, fsync, rename, fsync dir). The segments' data is made durable first, so a checkpoint
   * never describes data that could still be lost (recovery relies on it: FORMAT.md §6).
   * The caller holds the cursor lane, or the store is closing.
   */
  private async writeCheckpoint(flags: number): Promise<AckSet> {
    // Capture the state first: appends may continue during the sync, and the checkpoint must not
    // claim their seqs are durable. ACKs cannot change it meanwhile (the lane is held).
    const snapshot = this.acks.clone();
    const nextSeq = this.nextSeq;
    await this.syncActiveData();
    const buf = encodeCheckpoint(snapshot, nextSeq, flags);
    const path = join(this.dir, CURSOR_FILE);
    const tmp = path + TMP_SUFFIX;
    try {
      if (this.fs.stat(tmp) !== null) this.fs.unlink(tmp);
      const fd = this.fs.open(tmp, 'create', this.opts.fileMode);
      try {
        this.fs.write(fd, buf, 0, buf.length, 0);
      } catch (e) {
        this.closeQuietly(fd);
        if (errnoCode(e) === 'ENOSPC') {
          // A full disk is not a failure: the current cursor file stays in place and valid, and
          // the callers fall back to it (open, close) or retry later (maintenance).
          try {
            this.fs.unlink(tmp);
          } catch {
            // Deleted at the next open.
          }
          throw new QueueError('ERR_STORE_FULL', 'No space left on device (cursor checkpoint)', { cause: e });
        }
        throw e;
      }
      try {
        await this.syncFd(fd, false);
      } catch (e) {
        this.closeQuietly(fd);
        throw e;
      }
      this.fs.rename(tmp, path);
      await this.fs.fsyncDir(this.dir);
      // The old cursor fd held only records now covered by the durable checkpoint.
      if (this.cursorFd >= 0) this.closeWhenIdle(this.cursorFd);
      this.cursorFd = fd;
    } catch (e) {
      if (e instanceof QueueError && e.code === 'ERR_STORE_FULL') throw e;
      throw this.markFailed(e);
    }
    this.cursorOffset = buf.length;
    this.cursorLogStart = buf.length;
    this.cursorRecordSeq = 0;
    if (snapshot.lwm > this.durableLwm) this.durableLwm = snapshot.lwm;
    return snapshot;
  }

  // =============================================================================================
  // Read path
  // =============================================================================================

  /** Index of the segment that holds `seq` (the last with base <= seq), or 0. */
  private segmentIndexFor(seq: number): number {
    let lo = 0;
    let hi = this.segments.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.segments[mid]!.base <= seq) lo = mid + 1;
      else hi = mid;
    }
    return Math.max(0, lo - 1);
  }

  private readCorrupt(seg: Segment, offset: number, reason: string): QueueError {
    return new QueueError('ERR_CORRUPT', `Store file ${seg.name} is damaged at offset ${offset}: ${reason}`, {
      file: seg.path,
      offset,
    });
  }

  private openReader(seg: Segment): void {
    if (seg.readFd < 0) seg.readFd = this.fs.open(seg.path, 'read');
    this.readerSeg = seg;
    this.readerWin = new FileWindow(this.fs, seg.readFd, seg.bytes, this.opts.readAheadBytes);
    this.readerOffset = SEGMENT_HEADER_BYTES;
    this.readerPrevSeq = 0;
  }

  /** Read unacked items with `from <= seq < before` from disk into `out`, up to `limit` in total. */
  private readDisk(from: number, before: number, limit: number, out: StoredItem[]): void {
    let seg = this.readerSeg;
    // Keep the forward position when `from` lies ahead of it in the same segment; otherwise seek
    // through the in-memory segment index (base seq -> segment) and scan from that segment's start.
    // `from < seg.base` too: after crossing a seal into the next segment the reader has read no
    // record there yet (`readerPrevSeq` is 0), so a read that starts further back must re-seek
    // (found by test/crash/model.test.ts: a second read from 0 returned nothing).
    if (seg === null || seg.retired || this.readerPrevSeq >= from || from < seg.base || (seg.seal !== null && seg.seal.endSeq <= from)) {
      seg = this.segments[this.segmentIndexFor(from)]!;
      this.openReader(seg);
    }
    const h = this.hdr;
    for (;;) {
      const win = this.readerWin!;
      win.size = seg.bytes; // for the active segment: the write position, never past it
      const pos = this.readerOffset;
      if (pos >= win.size) {
        if (seg === this.active) return; // caught up with the writer
        throw this.readCorrupt(seg, pos, 'sealed segment ends without a seal record');
      }
      if (pos + FRAME_HEADER_BYTES > win.size) throw this.readCorrupt(seg, pos, 'partial frame header');
      let at = win.ensure(pos, FRAME_HEADER_BYTES);
      readFrameHeader(win.buf, at, h);
      const bytes = frameBytes(h);
      if (h.length > MAX_PAYLOAD_BYTES_CAP || pos + bytes > win.size) throw this.readCorrupt(seg, pos, 'frame length runs past the data');
      at = win.ensure(pos, bytes);
      if (!frameCrcOk(win.buf, at, h)) throw this.readCorrupt(seg, pos, 'CRC mismatch');
      if (h.seq <= this.readerPrevSeq || h.seq < seg.base) throw this.readCorrupt(seg, pos, `seq ${h.seq} out of order`);
      if (h.type === RECORD_SEAL) {
        // A roll in progress: the SEAL is written but its fdatasync (which sets `seal`) is
        // pending, or the next segment is not created yet. Nothing follows yet: caught up, and
        // the position stays on the seal (found by review: reported as corruption).
        if (seg === this.active && seg.seal === null && pos + bytes === seg.bytes) return;
        if (seg.seal === null || pos + bytes !== seg.bytes || h.seq !== seg.seal.endSeq) {
          throw this.readCorrupt(seg, pos, 'unexpected seal record');
        }
        const idx = this.segments.indexOf(seg);
        if (idx >= 0 && idx === this.segments.length - 1 && seg === this.active) return;
        if (idx < 0 || idx + 1 >= this.segments.length) throw this.readCorrupt(seg, pos, 'no segment after a sealed one');
        seg = this.segments[idx + 1]!;
        this.openReader(seg);
        continue;
      }
      if (h.type !== RECORD_ITEM) throw this.readCorrupt(seg, pos, `unknown record type ${h.type}`);
      if (h.seq >= before) return; // position stays on this record
      this.readerOffset = pos + bytes;
      this.readerPrevSeq = h.seq;
      if (h.seq >= from && !this.acks.has(h.seq)) {
        const p = payloadOffset(at, h);
        // A copy into a shared slab (src/bytes.ts): far cheaper than one ArrayBuffer per item.
        out.push({ seq: h.seq, bytes: this.arena.copy(win.buf.subarray(p, p + h.length)) });
        if (out.length >= limit) return;
      }
    }
  }

  // =============================================================================================
  // Maintenance: checkpoints, deleting acked segments, compaction
  // =============================================================================================

  private needsMaintenance(): boolean {
    if (this.cursorOffset - this.cursorLogStart > this.opts.cursorCheckpointBytes) return true;
    const first = this.segments[0]!;
    return first.seal !== null && first.seal.endSeq <= this.acks.lwm;
  }

  private scheduleMaintenance(): void {
    if (this.state !== 'open' && this.state !== 'recovered') return;
    if (this.maintenance !== null) {
      this.maintenanceAgain = true;
      return;
    }
    this.startMaintenance(false).catch(() => undefined);
  }

  private startMaintenance(force: boolean): Promise<CompactionResult> {
    const p = this.runMaintenance(force);
    this.maintenance = p;
    const clear = (): void => {
      if (this.maintenance === p) this.maintenance = null;
    };
    p.then(clear, clear);
    return p;
  }

  private async runMaintenance(force: boolean): Promise<CompactionResult> {
    let bytesReclaimed = 0;
    let segmentsDeleted = 0;
    let segmentsRewritten = 0;
    const run = async (): Promise<void> => {
      do {
        this.maintenanceAgain = false;
        if (this.failure !== null || this.state === 'closing' || this.state === 'closed') return;
        let full = false;
        if (this.cursorOffset - this.cursorLogStart > this.opts.cursorCheckpointBytes) {
          // On a full disk the checkpoint waits; deleting acked segments below still frees space.
          await this.withCursorLane(() => this.writeCheckpoint(0)).catch((e: unknown) => {
            if (!isStoreFull(e)) throw e;
            full = true;
          });
        }
        const del = await this.deleteAckedSegments();
        bytesReclaimed += del.bytes;
        segmentsDeleted += del.count;
        if (!full && (force || (this.opts.autoCompact && this.compactionBlockedBy === null))) {
          const c = await this.compactSealed(force);
          bytesReclaimed += c.bytes;
          segmentsRewritten += c.count;
        }
      } while (this.maintenanceAgain);
    };
    return run().then(
      () => ({ bytesReclaimed, segmentsDeleted, segmentsRewritten }),
      (e: unknown) => {
        if (e instanceof Aborted) return { bytesReclaimed, segmentsDeleted, segmentsRewritten };
        if (isStoreFull(e) || errnoCode(e) === 'ENOSPC') {
          // A full disk stops this round (a compaction's tmp file is removed by compactSealed);
          // nothing is lost, and the next trigger tries again. compact() reports it.
          if (!force) return { bytesReclaimed, segmentsDeleted, segmentsRewritten };
          throw isStoreFull(e) ? e : new QueueError('ERR_STORE_FULL', 'No space left on device (compaction)', { cause: e });
        }
        if (e instanceof QueueError && e.code === 'ERR_CORRUPT') {
          // Damage found while compacting: surfaced, never repaired; the files stay as they are
          // and automatic compaction stops until `compact()` is asked for again.
          this.compactionBlockedBy = e;
          throw e;
        }
        throw this.markFailed(e);
      },
    );
  }

  /** BRIEF lesson 9: cursor durable past the segments, then unlink, then fsync the directory. */
  private async deleteAckedSegments(): Promise<{ bytes: number; count: number }> {
    const doomed: Segment[] = [];
    for (const s of this.segments) {
      if (s.seal === null || s.seal.endSeq > this.acks.lwm) break;
      doomed.push(s);
    }
    if (doomed.length === 0) return { bytes: 0, count: 0 };
    const need = doomed[doomed.length - 1]!.seal!.endSeq;
    if (this.durableLwm < need) {
      await this.withCursorLane(() => this.syncCursor());
      if (this.failure !== null) throw this.failure;
    }
    if (this.durableLwm < need) return { bytes: 0, count: 0 };
    let bytes = 0;
    this.segments = this.segments.slice(doomed.length);
    for (const s of doomed) {
      this.retire(s);
      this.fs.unlink(s.path);
      bytes += s.bytes;
    }
    await this.fs.fsyncDir(this.dir);
    return { bytes, count: doomed.length };
  }

  private retire(s: Segment): void {
    s.retired = true;
    if (this.readerSeg === s) {
      this.readerSeg = null;
      this.readerWin = null;
    }
    if (s.readFd >= 0) this.closeQuietly(s.readFd);
    s.readFd = -1;
  }

  /** Live bytes of a sealed segment, estimated from its seal and the ack set. */
  private liveBytesEstimate(s: Segment): number {
    const seal = s.seal!;
    if (seal.recordCount === 0) return 0;
    const unacked = seal.endSeq - s.base - this.acks.ackedIn(s.base, seal.endSeq);
    const perRecord = (s.bytes - SEGMENT_HEADER_BYTES - SEAL_FRAME_BYTES) / seal.recordCount;
    return Math.min(unacked, seal.recordCount) * perRecord;
  }

  /**
   * Rewrite the run of sealed segments into one COMPACTED segment holding only their unacked
   * records (FORMAT.md §7). Policy: when their live bytes are below `compactionLiveRatio` of their
   * size (or, when forced, whenever any of their records is acked).
   */
  private async compactSealed(force: boolean): Promise<{ bytes: number; count: number }> {
    const run: Segment[] = [];
    for (const s of this.segments) {
      if (s.seal === null) break;
      run.push(s);
    }
    if (run.length === 0) return { bytes: 0, count: 0 };
    let total = 0;
    let live = 0;
    for (const s of run) {
      total += s.bytes;
      live += this.liveBytesEstimate(s);
    }
    const headerBytes = SEGMENT_HEADER_BYTES + SEAL_FRAME_BYTES;
    if (force ? live + headerBytes >= total : live >= total * this.opts.compactionLiveRatio) {
      return { bytes: 0, count: 0 };
    }
    // (1) The cursor must be durable for every record we are about to drop.
    const snapshot = await this.withCursorLane(() => this.writeCheckpoint(0));
    const first = run[0]!;
    const endSeq = run[run.length - 1]!.seal!.endSeq;
    const finalPath = first.path;
    const tmp = finalPath + TMP_SUFFIX;
    if (this.fs.stat(tmp) !== null) this.fs.unlink(tmp);
    const header = encodeSegmentHeader({ flags: SEG_FLAG_COMPACTED, baseSeq: first.base, replacesEndSeq: endSeq });
    const fd = this.fs.open(tmp, 'create', this.opts.fileMode);
    let ok = false;
    try {
      this.fs.write(fd, header, 0, header.length, 0);
      let outPos = header.length;
      let out = new Uint8Array(MiB);
      let outLen = 0;
      let count = 0;
      let firstSeq = 0;
      let lastSeq = 0;
      const flush = (): void => {
        if (outLen === 0) return;
        this.fs.write(fd, out, 0, outLen, outPos);
        outPos += outLen;
        outLen = 0;
      };
      for (const s of run) {
        const rfd = this.fs.open(s.path, 'read');
        try {
          const win = new FileWindow(this.fs, rfd, s.bytes, this.opts.readAheadBytes);
          const h = newFrameHeader();
          let pos = SEGMENT_HEADER_BYTES;
          let prev = 0;
          let sinceYield = 0;
          for (;;) {
            if (pos + FRAME_HEADER_BYTES > s.bytes) throw this.readCorrupt(s, pos, 'sealed segment ends without a seal record');
            let at = win.ensure(pos, FRAME_HEADER_BYTES);
            readFrameHeader(win.buf, at, h);
            const bytes = frameBytes(h);
            if (h.length > MAX_PAYLOAD_BYTES_CAP || pos + bytes > s.bytes) throw this.readCorrupt(s, pos, 'frame length runs past the data');
            at = win.ensure(pos, bytes);
            if (!frameCrcOk(win.buf, at, h)) throw this.readCorrupt(s, pos, 'CRC mismatch');
            if (h.seq <= prev || h.seq < s.base) throw this.readCorrupt(s, pos, `seq ${h.seq} out of order`);
            if (h.type === RECORD_SEAL) {
              if (pos + bytes !== s.bytes) throw this.readCorrupt(s, pos, 'seal record before the end');
              break;
            }
            if (h.type !== RECORD_ITEM) throw this.readCorrupt(s, pos, `unknown record type ${h.type}`);
            prev = h.seq;
            if (!snapshot.has(h.seq)) {
              if (outLen + bytes > out.length) {
                flush();
                if (bytes > out.length) out = new Uint8Array(bytes);
              }
              out.set(win.buf.subarray(at, at + bytes), outLen);
              outLen += bytes;
              if (count === 0) firstSeq = h.seq;
              lastSeq = h.seq;
              count++;
            }
            pos += bytes;
            sinceYield += bytes;
            if (sinceYield >= 4 * MiB) {
              sinceYield = 0;
              await new Promise<void>((r) => setImmediate(r));
              if (this.state === 'closing' || this.state === 'closed' || this.failure !== null) throw new Aborted();
            }
          }
        } finally {
          this.closeQuietly(rfd);
        }
      }
      flush();
      const seal = { recordCount: count, firstSeq: count > 0 ? firstSeq : 0, lastSeq: count > 0 ? lastSeq : 0, endSeq };
      const sealFrame = encodeSealFrame(seal);
      this.fs.write(fd, sealFrame, 0, sealFrame.length, outPos);
      outPos += sealFrame.length;
      await this.fs.fsync(fd);
      this.closeQuietly(fd);
      ok = true;
      if (this.state === 'closing' || this.state === 'closed' || this.failure !== null) throw new Aborted();
      // (2) Atomically replace the first segment of the run, and switch the in-memory layout in
      // the same synchronous step so that no reader opens the new file as the old segment.
      this.fs.rename(tmp, finalPath);
      let reclaimed = 0;
      for (const s of run) {
        reclaimed += s.bytes;
        this.retire(s);
      }
      const seg: Segment = {
        base: first.base,
        name: first.name,
        path: finalPath,
        bytes: outPos,
        seal,
        compacted: true,
        readFd: -1,
        retired: false,
      };
      this.segments = [seg, ...this.segments.slice(run.length)];
      await this.fs.fsyncDir(this.dir);
      // (3) Only once the rename is durable, drop the rest of the run (recovery would delete them
      // anyway, by the COMPACTED header's replaced range).
      for (const s of run) if (s !== first) this.fs.unlink(s.path);
      await this.fs.fsyncDir(this.dir);
      return { bytes: Math.max(0, reclaimed - outPos), count: run.length };
    } catch (e) {
      if (!ok) {
        this.closeQuietly(fd);
        try {
          this.fs.unlink(tmp);
        } catch {
          // A leftover tmp file is deleted at the next open.
        }
      }
      throw e;
    }
  }

  // =============================================================================================
  // Recovery
  // =============================================================================================

  private async recover(): Promise<void> {
    const fs = this.fs;
    const dir = this.dir;
    const st = fs.stat(dir);
    if (st !== null && !st.isDirectory) {
      throw new OpenError('ERR_STORE', `Store path ${dir} exists and is not a directory`, { file: dir });
    }
    if (st === null) {
      // The new directory entries must be durable too (fsync of the parent; ALICE): otherwise a
      // power loss can take the whole store directory with it.
      const created: string[] = [];
      for (let d = dir; fs.stat(d) === null && dirname(d) !== d; d = dirname(d)) created.push(d);
      try {
        fs.mkdirp(dir, this.opts.dirMode);
        for (const d of created.reverse()) await fs.fsyncDir(dirname(d));
      } catch (e) {
        throw new OpenError('ERR_STORE', `Cannot create store directory ${dir}: ${(e as Error).message}`, { cause: e, file: dir });
      }
    }
    let key = dir;
    try {
      if (fs.realpath !== undefined) key = fs.realpath(dir);
    } catch {
      // Fall back to the resolved path.
    }
    let set = openDirs.get(fs);
    if (set === undefined) openDirs.set(fs, (set = new Set()));
    if (set.has(key)) {
      // Refused before the lock is touched: a failed second open must not drop the first one's lock.
      throw new OpenError('ERR_LOCKED', `Store ${dir} is already open in this process (pid ${process.pid})`, { file: dir });
    }
    set.add(key);
    this.lockKey = key;
    try {
      // Before the lock: a directory that is not a store must not have its own LOCK file taken
      // over or deleted (found by review: a LevelDB directory lost its LOCK). A failed open
      // changes no file.
      refuseForeign(dir, fs.readdir(dir));
      try {
        this.lock = fs.lock(join(dir, LOCK_FILE));
      } catch (e) {
        if (errnoCode(e) === 'ELOCKED') {
          const pid = (e as { pid?: unknown }).pid;
          throw new OpenError(
            'ERR_LOCKED',
            `Store ${dir} is locked by another process${typeof pid === 'number' ? ` (pid ${pid})` : ''}`,
            { cause: e, file: join(dir, LOCK_FILE) },
          );
        }
        throw e;
      }
      const plan = this.readPhase();
      await this.applyPhase(plan);
    } catch (e) {
      this.releaseAll();
      if (e instanceof OpenError) throw e;
      // An I/O error (EMFILE, EACCES, EIO...) keeps its code in `cause`; it is never called corruption.
      throw new OpenError('ERR_STORE', `Cannot open store ${dir}: ${(e as Error)?.message ?? String(e)}`, {
        cause: e,
        file: dir,
      });
    }
  }

  /** Everything recovery decides, computed without writing a byte. */
  private readPhase(): RecoveryPlan {
    const fs = this.fs;
    const dir = this.dir;
    const names = fs.readdir(dir).sort();
    refuseForeign(dir, names); // again under the lock: the directory may have changed meanwhile
    const segNames: string[] = [];
    const stray: string[] = [];
    let hasCursor = false;
    for (const n of names) {
      const kind = classifyEntry(n);
      if (kind === 'segment') segNames.push(n);
      else if (kind === 'cursor') hasCursor = true;
      else if (kind === 'tmp') stray.push(n);
    }

    // Pass 1: every header, versions first (BRIEF lesson 1).
    const fds: number[] = [];
    try {
      const found: { name: string; path: string; base: number; size: number; fd: number; flags: number; replacesEndSeq: number }[] = [];
      let tornCreated: { name: string; base: number } | null = null;
      const problems: OpenError[] = [];
      const hbuf = Buffer.alloc(Math.max(SEGMENT_HEADER_BYTES, CURSOR_HEADER_BYTES));
      for (const name of segNames) {
        const path = join(dir, name);
        const fd = fs.open(path, 'read');
        fds.push(fd);
        const size = fs.size(fd);
        const n = readFully(fs, fd, hbuf, 0, Math.min(SEGMENT_HEADER_BYTES, size), 0);
        const h = decodeSegmentHeader(hbuf.subarray(0, n), size);
        if ('kind' in h) {
          if (h.kind === 'unsupported') {
            throw new OpenError('ERR_UNSUPPORTED_VERSION', `Segment ${name} has format version ${h.version}; this version reads up to ${FORMAT_VERSION}`, { file: path, offset: SEG_OFF_VERSION });
          }
          // A crash while the last segment was being created, before its header was durable,
          // leaves it empty, torn or zero-filled (F1/F3/F4; createSegment fsyncs the header before
          // any record goes in, so it holds nothing). Found by test/crash/exhaustive.test.ts.
          const base = parseSegmentName(name);
          if (base !== null && name === segNames[segNames.length - 1] && isTornSegmentCreation(hbuf.subarray(0, n), size, base)) {
            tornCreated = { name, base };
            continue;
          }
          problems.push(corrupt(path, h.offset, h.reason));
          continue;
        }
        if (h.baseSeq !== parseSegmentName(name)) problems.push(corrupt(path, SEG_OFF_BASE_SEQ, `header base seq ${h.baseSeq} does not match the file name`));
        found.push({ name, path, base: h.baseSeq, size, fd, flags: h.flags, replacesEndSeq: h.replacesEndSeq });
      }
      let cursor: CursorRead | null = null;
      const cursorPath = join(dir, CURSOR_FILE);
      if (hasCursor) {
        const fd = fs.open(cursorPath, 'read');
        fds.push(fd);
        cursor = readCursor(fs, fd, cursorPath, this.opts.maxRangesPerRecord);
      }
      if (problems.length > 0) throw problems[0]!;

      // Pass 2: the layout. A COMPACTED segment supersedes every segment whose base lies inside the
      // range it replaces (an interrupted compaction is finished by deleting them).
      found.sort((a, b) => a.base - b.base);
      const superseded = new Set<string>();
      for (const f of found) {
        if ((f.flags & SEG_FLAG_COMPACTED) === 0) continue;
        for (const g of found) if (g.base > f.base && g.base < f.replacesEndSeq) superseded.add(g.name);
      }
      const layout = found.filter((f) => !superseded.has(f.name));
      const acks = cursor?.acks ?? new AckSet(1);
      const checkpointNextSeq = cursor?.checkpointNextSeq ?? 1;

      if (cursor === null && !(layout.length === 0 || (layout.length === 1 && layout[0]!.base === 1 && layout[0]!.size === SEGMENT_HEADER_BYTES))) {
        throw corrupt(cursorPath, 0, 'the cursor file is missing but the store holds data');
      }
      if (cursor !== null && layout.length === 0 && !(acks.lwm === 1 && checkpointNextSeq === 1 && acks.starts.length === 0)) {
        throw corrupt(join(dir, segmentName(acks.lwm)), 0, 'no segment files, but the cursor describes data');
      }

      const segments: Segment[] = [];
      for (let i = 0; i < layout.length - 1; i++) {
        const f = layout[i]!;
        const tbuf = Buffer.alloc(SEAL_FRAME_BYTES);
        if (f.size < SEGMENT_HEADER_BYTES + SEAL_FRAME_BYTES) throw corrupt(f.path, f.size, 'sealed segment too short for its seal record');
        readFully(fs, f.fd, tbuf, 0, SEAL_FRAME_BYTES, f.size - SEAL_FRAME_BYTES);
        const seal = decodeTrailingSeal(tbuf);
        if (seal === null) throw corrupt(f.path, f.size - SEAL_FRAME_BYTES, 'sealed segment does not end in a valid seal record');
        if (seal.recordCount > 0 && seal.firstSeq < f.base) throw corrupt(f.path, f.size - SEAL_FRAME_BYTES, 'seal range below the base seq');
        const next = layout[i + 1]!;
        if (next.base !== seal.endSeq) {
          throw corrupt(next.path, 0, `segment gap: the previous segment ends at seq ${seal.endSeq}, this one starts at ${next.base}`);
        }
        segments.push({ base: f.base, name: f.name, path: f.path, bytes: f.size, seal, compacted: (f.flags & SEG_FLAG_COMPACTED) !== 0, readFd: -1, retired: false });
      }

      // Pass 3: scan the last segment, the only one that may have a torn tail.
      let activeScan: ActiveScan | null = null;
      if (layout.length > 0) {
        const f = layout[layout.length - 1]!;
        activeScan = scanActive(fs, f.fd, f.path, f.base, f.size, checkpointNextSeq, this.opts.readAheadBytes, (f.flags & SEG_FLAG_COMPACTED) !== 0);
        segments.push({
          base: f.base,
          name: f.name,
          path: f.path,
          bytes: activeScan.validEnd,
          seal: activeScan.seal,
          compacted: (f.flags & SEG_FLAG_COMPACTED) !== 0,
          readFd: -1,
          retired: false,
        });
        if (activeScan.seal === null && (f.flags & SEG_FLAG_COMPACTED) !== 0) {
          throw corrupt(f.path, activeScan.validEnd, 'a compacted segment must end in a seal record');
        }
      }

      // Pass 4: cross-checks between the cursor and the data.
      const last = segments[segments.length - 1];
      if (tornCreated !== null) {
        // Only the segment a roll was creating: the one after a sealed segment, or the very first.
        const expected = last === undefined ? 1 : last.seal?.endSeq;
        if (expected !== tornCreated.base) {
          throw corrupt(join(dir, tornCreated.name), 0, 'segment header is incomplete, and it is not the segment a roll was creating');
        }
        stray.push(tornCreated.name);
      }
      const dataNext =
        last === undefined ? 1 : last.seal !== null ? last.seal.endSeq : Math.max(last.base, activeScan!.lastSeq + 1);
      if (segments.length > 0 && segments[0]!.base > acks.lwm) {
        throw corrupt(segments[0]!.path, 0, `missing segment: seqs from ${acks.lwm} to ${segments[0]!.base - 1} are unacked but no segment holds them`);
      }
      if (checkpointNextSeq > dataNext) {
        throw corrupt(last!.path, last!.bytes, `data ends at seq ${dataNext - 1} but the cursor checkpoint covers up to ${checkpointNextSeq - 1}`);
      }
      // Seqs with no record in a sealed segment (before its first or after its last item) are
      // acked by definition: that keeps "unacked count = nextSeq - lwm - acked ranges" exact.
      for (const s of segments) {
        if (s.seal === null || s.seal.endSeq <= acks.lwm) continue;
        if (s.seal.recordCount === 0) acks.add(s.base, s.seal.endSeq);
        else {
          acks.add(s.base, s.seal.firstSeq);
          acks.add(s.seal.lastSeq + 1, s.seal.endSeq);
        }
      }
      // ACK records past the data can only come from an unsynced crash under `none`: those items
      // are gone. Raise nextSeq past them so a seq is never reused (a stale ACK record would
      // otherwise ack a new item on a later recovery), and mark the skipped seqs acked.
      let raiseTo = dataNext;
      if (cursor !== null && cursor.maxAckEnd > dataNext) raiseTo = cursor.maxAckEnd;
      const problem = acks.check();
      if (problem !== null) throw corrupt(cursorPath, 0, problem);
      return {
        stray,
        superseded: [...superseded],
        segments,
        activeScan,
        cursor,
        acks,
        dataNext,
        raiseTo,
        fds,
      };
    } catch (e) {
      for (const fd of fds) this.closeQuietly(fd);
      throw e;
    }
  }

  /** Carry out the plan: the first writes of this open. */
  private async applyPhase(plan: RecoveryPlan): Promise<void> {
    const fs = this.fs;
    const dir = this.dir;
    for (const fd of plan.fds) this.closeQuietly(fd);
    const tornFiles: string[] = [];
    let tornBytes = 0;
    let zeroTailBytes = 0;
    for (const n of plan.stray) fs.unlink(join(dir, n));
    for (const n of plan.superseded) fs.unlink(join(dir, n));

    // Torn tails: keep the cut bytes in a side file (fsynced) before cutting them (BRIEF lesson 5).
    const cutTail = async (path: string, validEnd: number, zero: boolean): Promise<void> => {
      const fd = fs.open(path, 'readWrite');
      try {
        const size = fs.size(fd);
        if (size <= validEnd) return;
        if (zero) zeroTailBytes += size - validEnd;
        else tornBytes += size - validEnd;
        if (!zero) {
          const cut = Buffer.allocUnsafe(Math.min(size - validEnd, 64 * MiB));
          const n = readFully(fs, fd, cut, 0, cut.length, validEnd);
          const side = `${path}${TORN_INFIX}${validEnd}`;
          if (fs.stat(side) !== null) fs.unlink(side);
          const sfd = fs.open(side, 'create', this.opts.fileMode);
          try {
            fs.write(sfd, cut, 0, n, 0);
            await fs.fsync(sfd);
          } finally {
            this.closeQuietly(sfd);
          }
          tornFiles.push(side);
        }
        fs.truncate(fd, validEnd);
        await fs.fdatasync(fd);
      } finally {
        this.closeQuietly(fd);
      }
    };
    const scan = plan.activeScan;
    const activeSeg = plan.segments[plan.segments.length - 1];
    if (scan !== null && scan.row.verdict === 'torn') await cutTail(activeSeg!.path, scan.validEnd, scan.tornZero);
    if (plan.cursor !== null && plan.cursor.row.verdict === 'torn') {
      await cutTail(join(dir, CURSOR_FILE), plan.cursor.validEnd, plan.cursor.tornZero);
    }

    this.segments = plan.segments;
    this.acks = plan.acks;
    this.nextSeq = plan.dataNext;
    if (activeSeg !== undefined) {
      this.active = activeSeg;
      this.writeFd = fs.open(activeSeg.path, 'readWrite');
      this.activeFileBytes = activeSeg.bytes; // the scan cut any zero tail
      // fsyncgate (F5): after a failed fsync the previous session's tail may sit in the page cache
      // as clean pages that never reached the disk, and an fdatasync now would write nothing.
      // Unless the previous session closed cleanly, write the tail past the last point the
      // checkpoint knows durable back in place (same bytes; at most one segment), so that the
      // fdatasync below really makes it durable. Found by review.
      if (plan.cursor === null || !plan.cursor.clean) this.rewriteTail(scan!.durableEnd, activeSeg.bytes);
      // KAFKA-10101: after a crash the tail may sit only in the page cache; make it durable
      // before anything is served from it.
      await this.syncActiveData();
      if (this.failure !== null) throw this.failure;
      this.activeRecords = scan!.records;
      this.activeFirstSeq = scan!.firstSeq;
      this.activeLastSeq = scan!.lastSeq;
      if (activeSeg.seal !== null) {
        // Crashed between sealing and creating the next segment: start it now.
        this.closeWhenIdle(this.writeFd);
        this.writeFd = -1;
        const seg = await this.createSegment(activeSeg.seal.endSeq);
        this.segments.push(seg);
        this.active = seg;
        this.activeFileBytes = seg.bytes;
        this.activeRecords = 0;
      }
    } else {
      const seg = await this.createSegment(1);
      this.segments = [seg];
      this.active = seg;
      this.activeFileBytes = seg.bytes;
    }
    let raisedFrom: number | null = null;
    if (plan.raiseTo > this.nextSeq) {
      raisedFrom = this.nextSeq;
      this.acks.add(this.nextSeq, plan.raiseTo);
      // Record the raise in the data itself: seal the active segment with the raised end seq.
      await this.roll(plan.raiseTo);
      this.nextSeq = plan.raiseTo;
    }
    if (this.failure !== null) throw this.failure;
    // A fresh checkpoint at every open: it drops stale ACK records, clears the CLEAN flag, and is
    // written over data made durable just above.
    try {
      await this.writeCheckpoint(0);
    } catch (e) {
      if (!isStoreFull(e) || plan.cursor === null) throw e;
      // A full disk: serve with the existing cursor instead of refusing to open (found by review:
      // the store was wedged until space was freed by hand). An OPENED record (FORMAT §4.2)
      // clears its CLEAN flag; the fdatasync makes the records read at recovery durable.
      await this.reuseCursor(plan.cursor);
    }
    await fs.fsyncDir(dir);
    if (this.failure !== null) throw this.failure;
    this.durableLwm = this.acks.lwm;
    this.cleanShutdown = plan.cursor !== null && plan.cursor.clean;
    this.state = 'recovered';
    this.recoveryInfo = {
      cleanShutdown: this.cleanShutdown,
      tornBytes,
      zeroTailBytes,
      tornFiles,
      strayFilesDeleted: plan.stray,
      supersededDeleted: plan.superseded,
      nextSeqRaisedFrom: raisedFrom,
    };
    this.scheduleMaintenanceAfterOpen();
  }

  /**
   * Open the existing cursor file for appending records after `cursor` and make it durable. A
   * CLEAN one gets an OPENED record, so a crash of this session is not reported as a clean
   * shutdown (which would skip the tail rewrite at the next open); an unclean one needs none, and
   * a full disk may leave no room for it.
   */
  private async reuseCursor(cursor: CursorRead): Promise<void> {
    const fd = this.fs.open(join(this.dir, CURSOR_FILE), 'readWrite');
    this.cursorFd = fd;
    this.cursorOffset = cursor.validEnd;
    this.cursorLogStart = cursor.logStart;
    this.cursorRecordSeq = cursor.lastRecord;
    if (!cursor.clean) {
      await this.syncFd(fd, true);
      return;
    }
    const frame = new Uint8Array(FRAME_HEADER_BYTES);
    encodeFrame(frame, 0, this.cursorRecordSeq + 1, RECORD_OPENED, new Uint8Array(0));
    this.fs.write(fd, frame, 0, FRAME_HEADER_BYTES, this.cursorOffset);
    this.cursorOffset += FRAME_HEADER_BYTES;
    this.cursorRecordSeq++;
    await this.syncFd(fd, true);
  }

  /** Read `[from, to)` of the active segment and write the same bytes back (see applyPhase). */
  private rewriteTail(from: number, to: number): void {
    const chunk = new Uint8Array(Math.min(MiB, Math.max(0, to - from)));
    for (let pos = from; pos < to; ) {
      const n = readFully(this.fs, this.writeFd, chunk, 0, Math.min(chunk.length, to - pos), pos);
      if (n === 0) break;
      this.fs.write(this.writeFd, chunk, 0, n, pos);
      pos += n;
    }
  }

  private scheduleMaintenanceAfterOpen(): void {
    if (this.needsMaintenance()) this.scheduleMaintenance();
  }

  private closeQuietly(fd: number): void {
    try {
      this.fs.close(fd);
    } catch {
      // Closing a descriptor whose data is already durable cannot lose anything.
    }
  }

  private releaseAll(): void {
    for (const s of this.segments) {
      if (s.readFd >= 0) this.closeQuietly(s.readFd);
      s.readFd = -1;
    }
    if (this.writeFd >= 0) this.closeQuietly(this.writeFd);
    for (const fd of this.fdCloseWanted) this.closeQuietly(fd);
    this.fdCloseWanted.clear();
    this.writeFd = -1;
    if (this.cursorFd >= 0) this.closeQuietly(this.cursorFd);
    this.cursorFd = -1;
    this.readerSeg = null;
    this.readerWin = null;
    if (this.lock !== null) {
      try {
        this.lock.release();
      } catch {
        // Release is idempotent; a failure leaves a stale lock that the next opener takes over.
      }
      this.lock = null;
    }
    if (this.lockKey !== '') {
      openDirs.get(this.fs)?.delete(this.lockKey);
      this.lockKey = '';
    }
  }
}

// =============================================================================================
// Recovery helpers
// =============================================================================================

export interface ActiveScan {
  readonly row: TailRow;
  readonly validEnd: number;
  /**
   * End of the last record the cursor checkpoint knows durable (seq below its `nextSeq`), or 0
   * when no record of this segment is known durable (then even the header may not be).
   */
  readonly durableEnd: number;
  readonly tornZero: boolean;
  readonly records: number;
  readonly firstSeq: number;
  readonly lastSeq: number;
  readonly seal: SealInfo | null;
}

export interface CursorRead {
  readonly acks: AckSet;
  /** Offset where the record log starts (the checkpoint's size). */
  readonly logStart: number;
  /** Number of the last valid record (0 when none). */
  readonly lastRecord: number;
  readonly checkpointNextSeq: number;
  readonly maxAckEnd: number;
  readonly clean: boolean;
  readonly row: TailRow;
  readonly validEnd: number;
  readonly tornZero: boolean;
}

interface RecoveryPlan {
  readonly stray: string[];
  readonly superseded: string[];
  readonly segments: Segment[];
  readonly activeScan: ActiveScan | null;
  readonly cursor: CursorRead | null;
  readonly acks: AckSet;
  readonly dataNext: number;
  readonly raiseTo: number;
  readonly fds: number[];
}

/** `ERR_STORE` when the directory holds an entry that no store writes (FORMAT §5). */
function refuseForeign(dir: string, names: readonly string[]): void {
  const foreign = names.filter((n) => classifyEntry(n) === 'foreign').sort();
  if (foreign.length > 0) {
    throw new OpenError(
      'ERR_STORE',
      `Directory ${dir} holds files that are not part of a store (${foreign.slice(0, 3).join(', ')}${foreign.length > 3 ? ', ...' : ''})`,
      { file: join(dir, foreign[0]!) },
    );
  }
}

/**
 * True when `bytes` (the whole file, `size` bytes) is what a crash can leave of a segment header
 * being created for `base`: no longer than a header, a prefix of the header, then only zeros.
 */
function isTornSegmentCreation(bytes: Uint8Array, size: number, base: number): boolean {
  if (size > SEGMENT_HEADER_BYTES || bytes.length !== size) return false;
  const want = encodeSegmentHeader({ flags: 0, baseSeq: base, replacesEndSeq: 0 });
  let i = 0;
  while (i < size && bytes[i] === want[i]) i++;
  if (i === SEGMENT_HEADER_BYTES) return false; // a complete, valid header is not torn
  for (; i < size; i++) if (bytes[i] !== 0) return false;
  return true;
}

function readFully(fs: FileSystem, fd: number, buf: Uint8Array, offset: number, length: number, position: number): number {
  let got = 0;
  while (got < length) {
    const n = fs.read(fd, buf, offset + got, length - got, position + got);
    if (n === 0) break;
    got += n;
  }
  return got;
}

/** Scan the active segment with the tail table (FORMAT.md §6). */
export function scanActive(
  fs: FileSystem,
  fd: number,
  path: string,
  base: number,
  size: number,
  durableNextSeq: number,
  chunkBytes: number,
  compacted = false,
): ActiveScan {
  const win = new FileWindow(fs, fd, size, chunkBytes);
  let records = 0;
  let firstSeq = 0;
  let lastSeq = 0;
  let seal: SealInfo | null = null;
  let durableEnd = 0;
  const rules: FrameRules = {
    maxPayloadBytes: MAX_PAYLOAD_BYTES_CAP,
    contentOk(h, buf, at) {
      if (seal !== null) return false; // nothing may follow a seal
      if (h.seq <= lastSeq || h.seq < base) return false;
      if (h.type === RECORD_ITEM) return true;
      if (h.type === RECORD_SEAL) {
        if (h.length !== SEAL_PAYLOAD_BYTES || h.metaBytes !== 0) return false;
        const s = decodeSealPayload(buf, payloadOffset(at, h), h.seq);
        return s !== null && s.recordCount === records && s.firstSeq === (records > 0 ? firstSeq : 0) && s.lastSeq === (records > 0 ? lastSeq : 0);
      }
      return false;
    },
    plausible(h, skippedBytes) {
      if (!((h.type === RECORD_ITEM || h.type === RECORD_SEAL) && h.seq > lastSeq && h.seq >= base)) return false;
      // Seqs of a plain segment are consecutive and every frame takes at least a header, so the
      // next valid ITEM lies at most one seq per header skipped ahead. (A COMPACTED segment, with
      // gaps, is never written in place: damage in it is corruption whatever the search says.)
      return compacted || h.type !== RECORD_ITEM || h.seq <= Math.max(base, lastSeq + 1) + Math.floor(skippedBytes / FRAME_HEADER_BYTES);
    },
    accept(h, buf, at, offset) {
      if (h.type === RECORD_SEAL) {
        seal = decodeSealPayload(buf, payloadOffset(at, h), h.seq);
        return;
      }
      if (h.seq < durableNextSeq) durableEnd = offset + frameBytes(h);
      if (records === 0) firstSeq = h.seq;
      lastSeq = h.seq;
      records++;
    },
  };
  const result = scanFrames(win, SEGMENT_HEADER_BYTES, rules, () => Math.max(base, lastSeq + 1) < durableNextSeq);
  if (result.row.verdict === 'corrupt') throw corrupt(path, result.stopOffset, rowReason(result));
  return {
    row: result.row,
    validEnd: result.validEnd,
    durableEnd,
    tornZero: result.inputs?.restZero ?? false,
    records,
    firstSeq,
    lastSeq,
    seal,
  };
}

function isStoreFull(e: unknown): boolean {
  return e instanceof QueueError && e.code === 'ERR_STORE_FULL';
}

function rowReason(result: ScanResult): string {
  const why = `${result.row.label} (recovery table row ${result.row.id})`;
  return result.resyncBudgetExhausted ? `${why}; the resync search spent its budget without ruling out valid data after the damage` : why;
}

/** Read the cursor file: checkpoint, then ACK/OPENED records with the tail table. */
export function readCursor(fs: FileSystem, fd: number, path: string, maxRangesPerRecord = MAX_RANGES_PER_RECORD): CursorRead {
  const size = fs.size(fd);
  const hbuf = Buffer.alloc(CURSOR_HEADER_BYTES);
  const n = readFully(fs, fd, hbuf, 0, Math.min(CURSOR_HEADER_BYTES, size), 0);
  const h = decodeCheckpointHeader(hbuf.subarray(0, n), size);
  if ('kind' in h) {
    if (h.kind === 'unsupported') {
      throw new OpenError('ERR_UNSUPPORTED_VERSION', `Cursor file has format version ${h.version}; this version reads up to ${FORMAT_VERSION}`, { file: path, offset: CUR_OFF_VERSION });
    }
    throw corrupt(path, h.offset, h.reason);
  }
  const ckBytes = CURSOR_HEADER_BYTES + h.rangeCount * RANGE_BYTES;
  const body = Buffer.alloc(ckBytes);
  readFully(fs, fd, body, 0, ckBytes, 0);
  const acks = decodeCheckpointBody(body, h);
  if ('kind' in acks) throw corrupt(path, acks.offset, acks.reason);
  let prevRecord = 0;
  let maxAckEnd = 0;
  let clean = (h.flags & CUR_FLAG_CLEAN) !== 0;
  const win = new FileWindow(fs, fd, size, 64 * 1024);
  const rangesOk = (buf: Uint8Array, at: number, length: number): boolean => {
    for (let p = at; p < at + length; p += RANGE_BYTES) {
      const s = readU64(buf, p);
      const e = readU64(buf, p + 8);
      if (s < 1 || e <= s) return false;
    }
    return true;
  };
  const rules: FrameRules = {
    maxPayloadBytes: maxRangesPerRecord * RANGE_BYTES,
    contentOk(fh, buf, at) {
      if (fh.seq !== prevRecord + 1 || fh.metaBytes !== 0) return false;
      if (fh.type === RECORD_OPENED) return fh.length === 0;
      if (fh.type !== RECORD_ACK || fh.length === 0 || fh.length % RANGE_BYTES !== 0) return false;
      return rangesOk(buf, payloadOffset(at, fh), fh.length);
    },
    plausible(fh, skippedBytes) {
      // Record numbers are consecutive and every record takes at least a header.
      return (
        (fh.type === RECORD_ACK || fh.type === RECORD_OPENED) &&
        fh.seq > prevRecord &&
        fh.seq <= prevRecord + 1 + Math.floor(skippedBytes / FRAME_HEADER_BYTES)
      );
    },
    accept(fh, buf, at) {
      prevRecord = fh.seq;
      if (fh.type === RECORD_OPENED) {
        clean = false;
        return;
      }
      clean = false;
      const p0 = payloadOffset(at, fh);
      for (let p = p0; p < p0 + fh.length; p += RANGE_BYTES) {
        const s = readU64(buf, p);
        const e = readU64(buf, p + 8);
        acks.add(s, e);
        if (e > maxAckEnd) maxAckEnd = e;
      }
    },
  };
  const result = scanFrames(win, ckBytes, rules, () => false);
  if (result.row.verdict === 'corrupt') throw corrupt(path, result.stopOffset, rowReason(result));
  return {
    acks,
    logStart: ckBytes,
    lastRecord: prevRecord,
    checkpointNextSeq: h.nextSeq,
    maxAckEnd,
    clean,
    row: result.row,
    validEnd: result.validEnd,
    tornZero: result.inputs?.restZero ?? false,
  };
}
