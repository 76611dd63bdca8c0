// The options of LogStore.open, their defaults and their validation.
import type { FileSystem } from '../../../fs/file-system.js';
import { checkClock, type Clock } from '../../../lib/clock.js';
import { MAX_PAYLOAD_BYTES_CAP, MAX_RANGES_PER_RECORD } from './format.js';
import { lockSignalOption, lockTimeoutOption } from './lock-wait.js';
import { expectation, knownKeys, nonNegativeInteger, optionsObject, positiveInteger } from '../../../lib/validate.js';

const MiB = 1024 * 1024;
/** Smallest accepted `segmentBytes`: a header, a seal and a few small frames. Tests use tiny segments. */
export const MIN_SEGMENT_BYTES = 256;
/** setTimeout's longest delay (2^31 − 1 ms): Node fires a longer one at once, with a warning. */
const MAX_TIMER_MS = 2 ** 31 - 1;
/** What an automatic compaction reads per run at most (and at least two segments): see `./maintenance.ts`. */
const COMPACT_RUN_BYTES = 64 * MiB;

/** The system's timers, for the delayed compaction when no clock is given. */
const systemClock: Clock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

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
   * @default `nodeFileSystem` (the node:fs implementation) when opened through `persistent-queue`
   */
  fs?: FileSystem;
  /**
   * When the ACK records appended to the cursor file exceed this many bytes, the cursor is
   * checkpointed (rewritten atomically as one compact record) in the background.
   * @default 1048576 (1 MiB)
   */
  cursorCheckpointBytes?: number;
  /**
   * Bytes of just-appended batches kept in memory, so that a consumer a little behind reads them
   * without a read from the file. Off by default: a consumer that is caught up is handed new items
   * directly, one further behind reads them from the page cache, and keeping megabytes of young
   * buffers alive costs the garbage collector more than those reads (docs/internals/engine.md,
   * "Reads").
   * @default 0
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
   * Hand out items read from disk as views into the read-ahead chunk they were read into, instead
   * of copying each payload into a slab. A chunk is never overwritten once a view into it was
   * handed out (the next read gets a fresh one), so a view stays valid for as long as it is
   * referenced. A held item keeps its whole chunk (`readAheadBytes`) in memory; items with a
   * priority or a not-before time, which the queue may hold for long, are always copied, and the
   * queue copies a delayed retry and a dead letter. `false`
   * copies every payload, as earlier releases did (docs/stores/logstore.md, "Zero-copy reads").
   * @default true
   */
  zeroCopyReads?: boolean;
  /**
   * Extend the active segment with zeros ahead of synced writes (4 MiB at a time, never past
   * `segmentBytes`), so that most fdatasyncs overwrite allocated blocks instead of growing the
   * file (docs/internals/engine.md, "Write path": measured ≈ +40 % records/s for write + fdatasync of 64 frames). The
   * zeros are cut at a clean close, at a roll, and as a zero tail by recovery.
   * @default true
   */
  preallocate?: boolean;
  /**
   * Where the fsyncs and fdatasyncs of the segments and the cursor file run: on the calling thread
   * (the FileSystem's `fdatasyncSync`/`fsyncSync`), or in the libuv threadpool.
   * - `'auto'` (the default): on the calling thread when no other sync of the file is running and
   *   the sync covers one operation (a batch of one push or one ack: a serial producer or consumer,
   *   which has nothing to overlap with the flush), or covers a batch (or a new segment or
   *   checkpoint file) while the event loop's other work during a flush is shorter than what the
   *   threadpool's round trip adds to it (the share of the time the loop ran callbacks, by
   *   `performance.eventLoopUtilization`, under `1 - stall / flight`, both flushes' times
   *   measured as the store runs; never under 15 %), unless a consumer trails the producers by
   *   more than two batches. In the threadpool otherwise, where the event loop goes on with other
   *   work while the device flushes (a consumer that fell behind, a server's requests); one such
   *   sync in 16 goes there anyway, to see a loop that got busy. At most one of them per turn of the event loop
   *   runs on the calling thread: the loop stands still for at most one device flush at a time,
   *   and timers and I/O run between two.
   *   docs/guides/durability.md, "Blocking syncs", has the measured figures.
   * - `true`: every sync on the calling thread (the event loop stands still for every device
   *   flush: for a CLI or a single-purpose worker, not for a process that must keep serving while
   *   the disk works). Under `none` the background flush of the active segment (one fdatasync per
   *   8 MiB written) then blocks too.
   * - `false`: every sync in the threadpool.
   * Durability is the same for all three: a synced operation resolves only after its flush
   * returned. Directory fsyncs, the identity file, compaction's rewritten segments and the cut of a
   * torn tail at open stay asynchronous, and so does the background flush under `none` with
   * `'auto'`. With a FileSystem that cannot sync on the calling thread (no `fdatasyncSync`),
   * `'auto'` syncs in the threadpool and `true` is refused.
   * @default 'auto'
   */
  blockingSync?: boolean | 'auto';
  /**
   * Live fraction of the sealed segments below which automatic compaction rewrites them.
   * @default 0.25
   */
  compactionLiveRatio?: number;
  /**
   * How long after an ack (or the open) automatic compaction waits before it looks at the sealed
   * segments again, when any are left, and rewrites them by the `compactionLiveRatio` policy. Without
   * it, segments pinned by an old unacked item would stay on disk, fully acked otherwise, for as long
   * as the queue is idle. The timer is unref'd (it never keeps the process alive), at most one is
   * armed at a time, `close()` cancels it, and one run reads at most 64 MiB of segments; the rest
   * waits for the next run. An integer from 0 to 2^31 − 1. Off with `autoCompact: false`.
   * @default 1000
   */
  compactDelayMs?: number;
  /**
   * How often the owner of the store (a process with a queue open over it) looks for pushes spooled
   * by producers in other processes (`connect()` while no process had the queue open: docs/guides/other-processes.md,
   * "The spool"), beyond the look it takes at open. The timer is unref'd. An integer from 1
   * to 2^31 − 1.
   * @default 100
   */
  spoolPollMs?: number;
  /**
   * The clock whose timers run the delayed compaction (`compactDelayMs`) and the spool's polls
   * (`spoolPollMs`); only its `setTimeout` and `clearTimeout` are used. A test passes a `ManualClock` (`persistent-queue/testing`) and moves
   * it itself, so that the compaction runs when the test says.
   * @default the system's timers
   */
  clock?: Clock;
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
  /**
   * Refuse to create a store: a missing directory, or one that holds no store file yet, rejects
   * with `ERR_NOT_FOUND` and nothing is created.
   * @default false (true when `readOnly`)
   */
  mustExist?: boolean;
  /**
   * Open for reading only: no lock is taken and no byte is written, created or deleted, so the
   * store can be inspected while another process has it open. The store is the state as of this
   * open (docs/stores/logstore.md, "Inspecting a live store"); `append`, `ack`, `compact` and a queue over it
   * reject with `ERR_READ_ONLY`.
   * @default false
   */
  readOnly?: boolean;
  /**
   * Serve the queue to producers in other processes and threads while a queue over this store is
   * open: `connect(dir)` then reaches it through the Unix socket `pq.sock` in the store directory
   * (mode 0600; a named pipe on Windows), removed again at close (docs/guides/other-processes.md, "Producers in other
   * processes and threads"). `false` serves nobody. A `readOnly` store never serves. The socket
   * is a file of the real disk: over another `fs` than `nodeFileSystem` (the simulated crash disk)
   * the store serves only when this is `true`.
   * @default true over `nodeFileSystem`, false over another `fs`
   */
  endpoint?: boolean;
  /**
   * How long `open` waits, in milliseconds, for a store that another process (or another open in
   * this process) holds, trying again after short pauses (5 ms, doubling up to 100 ms). Past it,
   * `open` rejects with `OpenError` `ERR_LOCKED` naming the holder's pid. `Infinity` waits until
   * the holder lets go or `signal` aborts.
   * @default 0 (fail at once)
   */
  lockTimeoutMs?: number;
  /**
   * Aborting it while `open` waits for the lock rejects the open with the signal's reason (a
   * DOMException named `AbortError` unless `abort()` was given one); nothing is left held or
   * written. Once the lock is held the open runs to its end.
   */
  signal?: AbortSignal;
}

function ratio(name: string, value: unknown): number {
  if (typeof value !== 'number') throw new TypeError(expectation(name, 'a number between 0 and 1', value));
  if (!(value >= 0 && value <= 1)) throw new RangeError(expectation(name, 'a number between 0 and 1', value));
  return value;
}

function pollDelay(name: string, value: unknown): number {
  const ms = positiveInteger(name, value);
  if (ms > MAX_TIMER_MS) throw new RangeError(expectation(name, `an integer from 1 to ${MAX_TIMER_MS}`, value));
  return ms;
}

function timerDelay(name: string, value: unknown): number {
  const ms = nonNegativeInteger(name, value);
  if (ms > MAX_TIMER_MS) throw new RangeError(expectation(name, `an integer from 0 to ${MAX_TIMER_MS}`, value));
  return ms;
}

function bool(name: string, value: unknown): boolean {
  if (typeof value !== 'boolean') throw new TypeError(expectation(name, 'a boolean', value));
  return value;
}

export interface ResolvedOptions {
  segmentBytes: number;
  maxItemBytes: number;
  fs: FileSystem;
  cursorCheckpointBytes: number;
  tailCacheBytes: number;
  readAheadBytes: number;
  autoCompact: boolean;
  zeroCopyReads: boolean;
  preallocate: boolean;
  blockingSync: boolean | 'auto';
  compactionLiveRatio: number;
  compactDelayMs: number;
  spoolPollMs: number;
  clock: Clock;
  /**
   * Bytes of sealed segments one automatic compaction reads at most (and at least two segments):
   * COMPACT_RUN_BYTES. Not a public option: tests lower it (`compactRunBytes`) to see a pinned run
   * shrink over several runs without writing gigabytes.
   */
  compactRunBytes: number;
  dirMode: number;
  fileMode: number;
  mustExist: boolean;
  readOnly: boolean;
  endpoint: boolean;
  lockTimeoutMs: number;
  signal: AbortSignal | undefined;
  /**
   * Ranges per ACK record, for writer and reader alike: MAX_RANGES_PER_RECORD. Not a public option:
   * tests lower it (`maxRangesPerRecord`) to exercise the split of a large ack into several records
   * without acking 2^20 holes.
   */
  maxRangesPerRecord: number;
}

const OPTION_NAMES: readonly string[] = [
  'segmentBytes',
  'maxItemBytes',
  'fs',
  'cursorCheckpointBytes',
  'tailCacheBytes',
  'readAheadBytes',
  'autoCompact',
  'zeroCopyReads',
  'preallocate',
  'blockingSync',
  'compactionLiveRatio',
  'compactDelayMs',
  'spoolPollMs',
  'clock',
  'compactRunBytes',
  'dirMode',
  'fileMode',
  'mustExist',
  'readOnly',
  'endpoint',
  'maxRangesPerRecord',
  'lockTimeoutMs',
  'signal',
];

export function resolveOptions(raw: unknown, defaultFs: FileSystem | undefined): ResolvedOptions {
  const o = optionsObject('options', raw);
  knownKeys('options', o, OPTION_NAMES);
  const segmentBytes = o.segmentBytes === undefined ? 64 * MiB : positiveInteger('segmentBytes', o.segmentBytes);
  if (segmentBytes < MIN_SEGMENT_BYTES) {
    throw new RangeError(expectation('segmentBytes', `an integer of at least ${MIN_SEGMENT_BYTES}`, segmentBytes));
  }
  const maxItemBytes = o.maxItemBytes === undefined ? 16 * MiB : positiveInteger('maxItemBytes', o.maxItemBytes);
  if (maxItemBytes > MAX_PAYLOAD_BYTES_CAP) {
    throw new RangeError(expectation('maxItemBytes', `a positive integer of at most ${MAX_PAYLOAD_BYTES_CAP}`, maxItemBytes));
  }
  const readOnly = o.readOnly === undefined ? false : bool('readOnly', o.readOnly);
  if (readOnly && o.mustExist === false)
    throw new TypeError('Expected `mustExist` not to be false with `readOnly`: a read-only open cannot create a store');
  let fs: FileSystem | undefined = defaultFs;
  if (o.fs !== undefined) {
    const f = o.fs as Partial<FileSystem> | null;
    if (f === null || typeof f !== 'object' || typeof f.open !== 'function' || typeof f.lock !== 'function') {
      throw new TypeError(expectation('fs', 'a FileSystem', o.fs));
    }
    fs = o.fs as FileSystem;
  }
  if (fs === undefined) {
    throw new TypeError('Expected `fs` to be a FileSystem: this entry has no default (the `persistent-queue` entry uses node:fs)');
  }
  const canBlock = typeof fs.fdatasyncSync === 'function' && typeof fs.fsyncSync === 'function';
  if (o.blockingSync !== undefined && o.blockingSync !== 'auto' && typeof o.blockingSync !== 'boolean') {
    throw new TypeError(expectation('blockingSync', "a boolean or 'auto'", o.blockingSync));
  }
  const blockingSync = o.blockingSync === undefined || o.blockingSync === 'auto' ? (canBlock ? 'auto' : false) : o.blockingSync;
  if (blockingSync === true && !canBlock) {
    throw new TypeError('Expected `fs` to have fdatasyncSync and fsyncSync with `blockingSync`: this FileSystem syncs only asynchronously');
  }
  return {
    segmentBytes,
    maxItemBytes,
    fs,
    cursorCheckpointBytes: o.cursorCheckpointBytes === undefined ? MiB : positiveInteger('cursorCheckpointBytes', o.cursorCheckpointBytes),
    tailCacheBytes: o.tailCacheBytes === undefined ? 0 : nonNegativeInteger('tailCacheBytes', o.tailCacheBytes),
    readAheadBytes: o.readAheadBytes === undefined ? 256 * 1024 : positiveInteger('readAheadBytes', o.readAheadBytes),
    autoCompact: o.autoCompact === undefined ? true : bool('autoCompact', o.autoCompact),
    zeroCopyReads: o.zeroCopyReads === undefined ? true : bool('zeroCopyReads', o.zeroCopyReads),
    preallocate: o.preallocate === undefined ? true : bool('preallocate', o.preallocate),
    blockingSync,
    compactionLiveRatio: o.compactionLiveRatio === undefined ? 0.25 : ratio('compactionLiveRatio', o.compactionLiveRatio),
    compactDelayMs: o.compactDelayMs === undefined ? 1000 : timerDelay('compactDelayMs', o.compactDelayMs),
    spoolPollMs: o.spoolPollMs === undefined ? 100 : pollDelay('spoolPollMs', o.spoolPollMs),
    clock: o.clock === undefined ? systemClock : checkClock(o.clock),
    compactRunBytes: o.compactRunBytes === undefined ? COMPACT_RUN_BYTES : positiveInteger('compactRunBytes', o.compactRunBytes),
    dirMode: o.dirMode === undefined ? 0o700 : nonNegativeInteger('dirMode', o.dirMode),
    fileMode: o.fileMode === undefined ? 0o600 : nonNegativeInteger('fileMode', o.fileMode),
    mustExist: readOnly || (o.mustExist === undefined ? false : bool('mustExist', o.mustExist)),
    readOnly,
    endpoint: o.endpoint === undefined ? defaultFs !== undefined && fs === defaultFs : bool('endpoint', o.endpoint),
    lockTimeoutMs: lockTimeoutOption(o.lockTimeoutMs),
    signal: lockSignalOption(o.signal),
    maxRangesPerRecord:
      o.maxRangesPerRecord === undefined
        ? MAX_RANGES_PER_RECORD
        : Math.min(MAX_RANGES_PER_RECORD, positiveInteger('maxRangesPerRecord', o.maxRangesPerRecord)),
  };
}
