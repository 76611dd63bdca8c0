// Implements FORMAT.md §2–§7 through the modules it uses; the protocols are described in
// docs/internals/engine.md.
/**
 * LogEngine: LogStore's engine, a segmented write-ahead log behind the {@link Store} contract,
 * over the file system it is given (LogStore, src/stores/log/log-store.ts, gives it node:fs and
 * serves the owner's endpoint). This class is the facade: its state machine and the Store methods. Each role is an object of its own, owning its
 * state: the segment writer, the cursor log, the reader, maintenance, durability bookkeeping, and
 * recovery (a read-only plan, then an apply step).
 */
import { resolve } from 'node:path';
import { OpenError, QueueError } from '../../../contract/errors.js';
import type { FileSystem, LockHandle } from '../../../fs/file-system.js';
import { claimOpen } from '../../../fs/open-registry.js';
import { scheduleFault } from '../../../contract/records/schedules.js';
import { keyFault } from '../../../contract/records/keys.js';
import type { OwnerSurface } from '../../../contract/owner-surface.js';
import type {
  DeadLetter,
  DeadLetterRange,
  DeliveryMark,
  ReadRange,
  Redrive,
  Store,
  StoredItem,
  StoredSchedule,
  StoreFeatures,
  StoreRecovery,
  StoreUsage,
} from '../../../contract/store.js';
import { Schedules } from './schedules.js';
import { fireFault } from '../../../contract/schedule-table.js';
import { expectation, optionsObject } from '../../../lib/validate.js';
import { CursorLog } from './cursor-log.js';
import { Deliveries } from './deliveries.js';
import { Durability, errnoCode, isStoreFull } from './durability.js';
import {
  CUR_FLAG_CLEAN,
  FRAME_HEADER_BYTES,
  IDENTITY_FILE_BYTES,
  SEGMENT_HEADER_BYTES,
  SEGMENT_VERSION_GROUPS,
  SEGMENT_VERSION_KEYED,
  SEGMENT_VERSION_PLAIN,
} from './format.js';
import { SegmentLayout } from './layout.js';
import { LockWait } from './lock-wait.js';
import { Maintenance, type CompactionResult } from './maintenance.js';
import { resolveOptions, type LogStoreOptions, type ResolvedOptions } from './options.js';
import { readOnlyView, type ReadOnlyView } from './read-only.js';
import { LogReader } from './reader.js';
import { applyRecovery, type LogStoreRecoveryInfo } from './recovery-apply.js';
import { foreignEntryProblem, planRecovery } from './recovery-plan.js';
import { itemMetaBytes, itemSegmentVersion } from './item-meta.js';
import { spoolFault } from './spool-progress.js';
import { SpoolIngest, type SpoolStats } from './spool-ingest.js';
import { SegmentWriter } from './segment-writer.js';
import { groupFault } from '../../../contract/records/groups.js';
import { openFailed, prepareDirectory, takeLock } from './store-dir.js';

export { MIN_SEGMENT_BYTES, type LogStoreOptions } from './options.js';
export type { CompactionResult } from './maintenance.js';
export type { LogStoreRecoveryInfo } from './recovery-apply.js';

/** A clean close seals the active segment when it holds at least this many bytes. */
const SEAL_AT_CLOSE_BYTES = 1024 * 1024;

/** A small snapshot for `pq stats`. */
export interface LogStoreStats {
  /** The store's identity (FORMAT.md §13), null for a read-only open of a store that has none. */
  readonly storeId: string | null;
  /**
   * The cursor file's format version (FORMAT.md §8): 1; 2 once the store holds delivery marks or
   * dead letters; 3 once a checkpoint holds idempotency keys; 4 while a checkpoint holds how far
   * spool files were ingested. Each segment's own is in `segments`.
   */
  readonly formatVersion: number;
  readonly dir: string;
  readonly segments: readonly {
    readonly file: string;
    readonly baseSeq: number;
    /** Bytes of records (for the active segment: up to the write position). */
    readonly bytes: number;
    readonly sealed: boolean;
    readonly compacted: boolean;
    /**
     * The header's format version (FORMAT.md §2.2, §8): 1 for plain items; 2 when the segment may
     * hold items with a priority or a not-before time; 3 when it may also hold idempotency keys or
     * spool origins.
     */
    readonly version: number;
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
  /** Every unacked item with a priority or a not-before time has a seq at or above this (`nextSeq` when none ever was). */
  readonly scheduledFrom: number;
  readonly cursorBytes: number;
  /** Dead letters held, and the bytes of their payloads (kept in memory and in the cursor file). */
  readonly deadLetters: number;
  readonly deadLetterBytes: number;
  readonly recovery: LogStoreRecoveryInfo;
  /**
   * The spool (docs/guides/other-processes.md, "The spool"): files waiting in it, records read from them and not
   * ingested yet, records ingested by this owner, torn bytes cut from dead producers' files, and
   * files it could not ingest (left as they are). For a read-only open, what the spool holds beyond
   * the checkpoint's record of it. Null for a writable store that serves no queue yet.
   */
  readonly spool: SpoolStats | null;
  /**
   * A read-only open of a store another process held (`pid` null when the file system does not
   * know it): that writer was live as the store was read, so the active segment ended in its
   * write in progress and its preallocated space, which are neither torn nor a zero tail (both
   * counts of `recovery` are 0), and `recovery.cleanShutdown` is false because the store is open.
   * Null when nobody held it, and for a writable open (which holds it itself).
   */
  readonly liveWriter: { readonly pid: number | null } | null;
  /**
   * The schedules the store keeps (docs/guides/schedules.md, "Schedules"), with how far each fired: `firedThrough`
   * and `nextAt`, in ms since the epoch, as of the last item it fired (the description `spec` is
   * the queue's).
   */
  readonly schedules: readonly StoredSchedule[];
}

type State = 'recovering' | 'recovered' | 'open' | 'closing' | 'closed';

/** The durable Store: a segmented write-ahead log plus an ack cursor. See docs/internals/engine.md. */
export class LogEngine implements Store {
  /**
   * The file system used when `options.fs` is not given. None here: the `persistent-queue` entry
   * point's LogStore supplies node:fs, so that nothing under `src/stores/log/engine` imports it.
   */
  protected static readonly defaultFileSystem: FileSystem | undefined = undefined;

  readonly maxItemBytes: number;
  readonly features: StoreFeatures = {
    reopen: true,
    crashSafe: true,
    deliveries: true,
    scheduling: true,
    idempotency: true,
    groups: true,
    schedules: true,
  };
  /** Absolute path of the store directory. */
  readonly dir: string;

  readonly #fs: FileSystem;
  readonly #opts: ResolvedOptions;
  #state: State = 'recovering';
  #lock: LockHandle | null = null;
  #unclaim: (() => void) | null = null;
  readonly #durability: Durability;
  readonly #layout: SegmentLayout;
  readonly #writer: SegmentWriter;
  readonly #cursor: CursorLog;
  readonly #reader: LogReader;
  readonly #maintenance: Maintenance;
  readonly #deliveries: Deliveries;
  readonly #schedules: Schedules;
  #recovery!: LogStoreRecoveryInfo;
  /** Set when opened with `readOnly`: what the store serves, as of its open. */
  #view: ReadOnlyView | null = null;
  /** The spool's ingestion, once the store serves a queue (`attach`). */
  #ingest: SpoolIngest | null = null;
  /** Items in the last batch appended: how far a consumer may trail the producers and still keep up (`markDelivered`). */
  #lastBatchItems = 1;
  /** One past the highest seq handed out since open (`markDelivered`). */
  #handedOutBelow = 0;

  protected constructor(dir: string, opts: ResolvedOptions) {
    this.dir = dir;
    this.#opts = opts;
    this.#fs = opts.fs;
    this.maxItemBytes = opts.maxItemBytes;
    this.#durability = new Durability(this.#fs, dir, opts.blockingSync);
    this.#layout = new SegmentLayout(this.#fs);
    this.#writer = new SegmentWriter(this.#fs, dir, opts, this.#durability, this.#layout);
    this.#cursor = new CursorLog(this.#fs, dir, opts, this.#durability, () => this.#maintenance.poke());
    this.#reader = new LogReader(this.#fs, opts, this.#layout);
    this.#maintenance = new Maintenance({
      fs: this.#fs,
      dir,
      opts,
      durability: this.#durability,
      layout: this.#layout,
      cursor: this.#cursor,
      running: () => this.#state === 'open' || this.#state === 'recovered',
      checkpoint: () => this.#cursor.writeCheckpoint(0, this.#writer.nextSeq, () => this.#writer.syncActive()),
    });
    this.#deliveries = new Deliveries({
      cursor: this.#cursor,
      durability: this.#durability,
      maxItemBytes: this.maxItemBytes,
      nextSeq: () => this.#writer.nextSeq,
      checkpoint: (version) => this.#cursor.writeCheckpoint(0, this.#writer.nextSeq, () => this.#writer.syncActive(), version),
      append: (items, sync) => this.append(items, sync),
      written: () => this.#maintenance.poke(),
    });
    this.#schedules = new Schedules({
      cursor: this.#cursor,
      maxItemBytes: this.maxItemBytes,
      upgrade: (version) =>
        this.#cursor.writeCheckpoint(0, this.#writer.nextSeq, () => this.#writer.syncActive(), this.#cursor.version, version),
      written: () => this.#maintenance.poke(),
    });
  }

  /**
   * Open (creating if missing, unless `mustExist`) the store in `dir`: lock it, recover its state,
   * and return a store ready to hand to the queue builder. With `readOnly`, take no lock and write
   * nothing: the store serves `read()` and `inspect()` as of this open. Rejects with `OpenError`
   * (`ERR_STORE`, `ERR_CORRUPT`, `ERR_UNSUPPORTED_VERSION`, `ERR_LOCKED`, `ERR_NOT_FOUND`); a
   * failed open changes no byte of the store's files.
   * Options are validated first (`TypeError`/`RangeError`, unknown option names included).
   */
  static async open(dir: string, options?: LogStoreOptions): Promise<LogEngine> {
    if (typeof dir !== 'string' || dir.length === 0) throw new TypeError(expectation('dir', 'a non-empty string', dir));
    // biome-ignore lint/complexity/noThisInStatic: the subclass of src/stores/log/log-store.ts sets its own default file system (node:fs), read through `this`.
    const opts = resolveOptions(options, this.defaultFileSystem);
    const store = new this(resolve(dir), opts);
    await store.#recover();
    return store;
  }

  // ---- Store contract ----

  /** Returns what recovery found. Callable once per instance; a closed store needs a new `LogStore.open`. */
  open(): Promise<StoreRecovery> {
    if (this.#view !== null) return Promise.reject(this.#readOnlyError('cannot back a queue'));
    if (this.#state !== 'recovered') {
      return Promise.reject(
        this.#state === 'open'
          ? new OpenError('ERR_LOCKED', `LogStore for ${this.dir} already backs an open queue; a store backs one queue at a time`)
          : new OpenError('ERR_STORE', `LogStore for ${this.dir} was closed; open it again with LogStore.open(dir)`),
      );
    }
    this.#state = 'open';
    const nextSeq = this.#writer.nextSeq;
    const d = this.#cursor.deliveries;
    return Promise.resolve({
      nextSeq,
      count: this.#unackedCount(),
      deliveredBelow: d.deliveredBelow,
      marks: d.liveMarks(this.#cursor.acks, nextSeq),
      deadLetters: d.dead.length,
      scheduledFrom: this.#scheduledFrom(),
      storeId: this.#recovery.storeId!,
      keys: this.#cursor.keys.list(),
      schedules: this.#schedules.list(),
    });
  }

  // ---- Schedules (`features.schedules`; `./schedules.ts`) ----

  /** A SCHEDULE record in the cursor file (FORMAT §4.2), after a version-5 checkpoint the first time. */
  putSchedule(schedule: StoredSchedule, sync: boolean): Promise<void> {
    return this.#refuse() ?? this.#schedules.putSchedule(schedule, sync);
  }

  /** An UNSCHEDULE record in the cursor file (FORMAT §4.2). */
  dropSchedule(name: string, sync: boolean): Promise<void> {
    return this.#refuse() ?? this.#schedules.dropSchedule(name, sync);
  }

  /** True when this store serves an endpoint once its queue is open: opened with `endpoint` (the default) and not `readOnly`. */
  protected get serves(): boolean {
    return this.#opts.endpoint && !this.#opts.readOnly && this.#state === 'open';
  }

  /** How often the spool is polled while it exists (`spoolPollMs`). */
  protected get spoolPollMs(): number {
    return this.#opts.spoolPollMs;
  }

  /** Keys stored before `at` are left out of the next checkpoint (`./cursor-log.ts`), and so gone once it is durable. */
  keepKeysFrom(at: number): void {
    this.#cursor.keys.keepKeysFrom(at);
  }

  /**
   * Every unacked item with a priority or a not-before time has a seq at or above this. From the
   * segment headers read at open, not from the items: a store of plain items opens as fast as
   * before. Seqs below the low-water mark are acked, so it may raise the bound.
   */
  #scheduledFrom(): number {
    const nextSeq = this.#writer.nextSeq;
    const scheduledBase = this.#layout.scheduledBase();
    return scheduledBase === null ? nextSeq : Math.min(nextSeq, Math.max(scheduledBase, this.#cursor.acks.lwm));
  }

  // ---- Delivery counts and dead letters (`features.deliveries`; `./deliveries.ts`) ----

  /** Finishes synchronously (returns undefined) when unsynced and no checkpoint runs: the record is written then. */
  markDelivered(below: number, marks: readonly DeliveryMark[], sync: boolean): void | Promise<void> {
    // A consumer handing out items that trail the producers' by more than two batches needs the
    // event loop to catch up: the next batch's sync leaves it to the consumer (Durability.syncFd).
    // How far it got is the highest item handed out: the bound stops below an item held back
    // (a delay, a priority, a group's limit), and the items handed out past it come as marks.
    let handedOutBelow = Math.max(this.#handedOutBelow, below);
    for (let i = 0; i < marks.length; i++) if (marks[i]!.seq >= handedOutBelow) handedOutBelow = marks[i]!.seq + 1;
    this.#handedOutBelow = handedOutBelow;
    if (this.#writer.nextSeq - handedOutBelow > 2 * this.#lastBatchItems) this.#durability.noteConsumerBehind(this.#writer.fd);
    return this.#refuse() ?? this.#deliveries.markDelivered(below, marks, sync);
  }

  /** Durable when it resolves, whatever the policy: the DEAD records are fdatasynced. */
  deadLetter(entries: readonly DeadLetter[]): Promise<void> {
    return this.#refuse() ?? this.#deliveries.deadLetter(entries);
  }

  /** Served from memory: the store holds every dead letter's bytes (docs/internals/engine.md "Delivery marks and dead letters"). */
  readDeadLetters(range: DeadLetterRange): readonly DeadLetter[] {
    if (this.#state === 'closed' || this.#state === 'closing') throw new QueueError('ERR_CLOSED', 'LogStore is closed');
    return this.#deliveries.readDeadLetters(range);
  }

  dropDeadLetters(seqs: readonly number[], sync: boolean): Promise<void> {
    return this.#refuse() ?? this.#deliveries.dropDeadLetters(seqs, sync);
  }

  redrive(moves: readonly Redrive[], sync: boolean): Promise<void> {
    return this.#refuse() ?? this.#deliveries.redrive(moves, sync);
  }

  append(items: readonly StoredItem[], sync: boolean): Promise<void> {
    const refused = this.#refuse();
    if (refused !== null) return refused;
    if (items.length === 0) return this.#durability.fail(new Error('append invariant violated: empty batch'));
    this.#lastBatchItems = items.length;
    let bytes = 0;
    /** The lowest segment version that holds every item of the batch (FORMAT §8). */
    let need = SEGMENT_VERSION_PLAIN;
    let expect = this.#writer.nextSeq;
    for (let i = 0; i < items.length; i++) {
      const it = items[i]!;
      if (it.seq !== expect || it.bytes.length > this.maxItemBytes) {
        return this.#durability.fail(
          new Error(
            `append invariant violated: item ${i} has seq ${it.seq} (expected ${expect}) and ${it.bytes.length} bytes (max ${this.maxItemBytes})`,
          ),
        );
      }
      expect++;
      bytes += FRAME_HEADER_BYTES + it.bytes.length;
      // Plain items pay a few property reads here; only items with metadata are measured and checked.
      if (
        (it.priority !== undefined && it.priority !== 0) ||
        (it.notBefore !== undefined && it.notBefore !== 0) ||
        it.key !== undefined ||
        it.keyedAt !== undefined ||
        it.spool !== undefined ||
        it.group !== undefined ||
        it.fired !== undefined
      ) {
        const fault = scheduleFault(it) ?? keyFault(it) ?? spoolFault(it) ?? groupFault(it) ?? fireFault(it);
        if (fault !== undefined) return Promise.reject(new QueueError('ERR_STORE', `LogStore.append: ${fault}`));
        // An ingested item's origin is read back at open from version-3 segments only, as keys are.
        const version = itemSegmentVersion(it);
        if (version > need) need = version;
        bytes += itemMetaBytes(it);
      }
    }
    if (this.#writer.needsRoll(bytes, need)) return this.#rollThenWrite(items, bytes, sync, need);
    return this.#write(items, bytes, sync, need);
  }

  async #rollThenWrite(items: readonly StoredItem[], bytes: number, sync: boolean, need: number): Promise<void> {
    await this.#writer.makeRoom(need);
    this.#maintenance.schedule();
    return this.#write(items, bytes, sync, need);
  }

  #write(items: readonly StoredItem[], bytes: number, sync: boolean, need: number): Promise<void> {
    const rejected = this.#writer.write(items, bytes, sync, need);
    if (rejected !== null) return rejected;
    // The keys are known once their frames are written: a checkpoint holds those below its next
    // seq, which it makes durable first (FORMAT §4.6).
    if (need >= SEGMENT_VERSION_KEYED) {
      this.#cursor.keys.addItems(items);
      this.#cursor.spool.addItems(items);
      // A schedule's progress too: a checkpoint takes it over once the frames are durable (FORMAT §4.7).
      if (need >= SEGMENT_VERSION_GROUPS) this.#cursor.schedules.addFires(items);
    }
    if (this.#reader.caching) this.#reader.appended(items, bytes, need === SEGMENT_VERSION_PLAIN ? this.#writer.written(bytes) : null);
    const offset = this.#layout.active.bytes;
    if (!sync) {
      this.#durability.afterUnsyncedWrite(this.#writer.fd, offset);
      return Promise.resolve();
    }
    this.#durability.noteSyncStarted(offset);
    // A batch of one item is one push: its sync may run on the calling thread (`blockingSync`).
    return this.#writer.syncActive(items.length === 1);
  }

  ack(seqs: readonly number[], sync: boolean): Promise<void> {
    const refused = this.#refuse();
    if (refused !== null) return refused;
    if (seqs.length === 0) return this.#durability.fail(new Error('ack invariant violated: empty batch'));
    const acks = this.#cursor.acks;
    const next = this.#writer.nextSeq;
    for (const s of seqs) {
      if (!Number.isSafeInteger(s) || s < 1 || s >= next || acks.has(s)) {
        return this.#durability.fail(new Error(`ack invariant violated: seq ${s} was not appended or is already acked`));
      }
    }
    try {
      return this.#cursor.ack(seqs, sync);
    } catch (e) {
      return this.#durability.fail(e);
    }
  }

  /**
   * Make every written ACK record durable (the lazy acks' sync): an fdatasync of the cursor file,
   * once no checkpoint runs (one that ran has made them durable already), and of the active
   * segment when it holds bytes no sync has started on. The two files cannot share one fdatasync:
   * items and acks live in different files (FORMAT §2, §4). Between a roll's seal and the new
   * segment only the cursor file is synced, without waiting for the roll: the sealed segment, still
   * the layout's last (maintenance never takes it), was fdatasynced with every item before its seal
   * was recorded, and the batch waiting for the new segment is not written yet
   * (docs/internals/engine.md, "Concurrency inside the store").
   */
  sync(): Promise<void> {
    const refused = this.#refuse();
    if (refused !== null) return refused;
    const offset = this.#layout.active.bytes;
    if (!this.#durability.syncStartedAt(offset)) {
      this.#durability.noteSyncStarted(offset);
      return Promise.all([this.#writer.syncActive(), this.#cursor.syncWritten()]).then(() => undefined);
    }
    return this.#cursor.syncWritten();
  }

  read(range: ReadRange): readonly StoredItem[] {
    const failure = this.#durability.failure;
    if (failure !== null) throw failure;
    if (this.#state === 'closed' || this.#state === 'closing') throw new QueueError('ERR_CLOSED', 'LogStore is closed');
    try {
      return this.#reader.read(range, this.#cursor.acks, this.#writer.nextSeq);
    } catch (e) {
      if (e instanceof QueueError || errnoCode(e) !== undefined) throw e;
      throw this.#durability.markFailed(e);
    }
  }

  /**
   * Finish background work, write a CLEAN checkpoint over durable data, release the lock. On a
   * failed instance it only releases resources (recovery is close + reopen). Rejects with
   * `ERR_STORE_FAILED` when the final sync fails.
   */
  async close(): Promise<void> {
    if (this.#state === 'closed' || this.#state === 'closing') return;
    const wasFailed = this.#durability.failure !== null;
    this.#state = 'closing';
    this.#maintenance.stop();
    let error: unknown = null;
    try {
      await this.#ingest?.stop();
      await this.#maintenance.settled();
      await this.#cursor.idle();
      if (this.#durability.failure === null && this.#view === null) await this.#closeCleanly();
    } catch (e) {
      error = this.#durability.markFailed(e);
    } finally {
      this.#releaseAll();
      this.#state = 'closed';
    }
    if (error !== null && !wasFailed) throw error;
  }

  async #closeCleanly(): Promise<void> {
    const writer = this.#writer;
    const active = this.#layout.active;
    writer.trimPreallocation();
    // Seal a large active segment, so the next open reads its 40-byte seal instead of scanning it
    // (open time must not grow with the backlog); a small one is cheaper to scan than a new
    // segment file per open/close cycle.
    if (active.seal === null && active.bytes - SEGMENT_HEADER_BYTES >= SEAL_AT_CLOSE_BYTES) {
      await writer.seal(writer.nextSeq).catch((e: unknown) => {
        if (!isStoreFull(e)) throw e; // a full disk: the segment stays unsealed (scanned at open)
      });
    }
    try {
      await this.#cursor.writeCheckpoint(CUR_FLAG_CLEAN, writer.nextSeq, () => writer.syncActive());
    } catch (e) {
      if (!isStoreFull(e)) throw e;
      // A full disk: keep the current cursor (checkpoint + records) and make it durable. The next
      // open reads it as an unclean shutdown, which only costs it a scan.
      await writer.syncActive();
      await this.#cursor.sync();
      if (this.#durability.failure !== null) throw this.#durability.failure;
    }
  }

  // ---- Extras: compaction and inspection ----

  /**
   * Delete fully acked segments and rewrite sealed segments that hold acked records, keeping only
   * their live records. Rejects with `ERR_CORRUPT` when a segment being rewritten is damaged.
   * `onProgress` is called with the bytes of the rewritten segments read so far and their total.
   */
  async compact(options?: { onProgress?: (doneBytes: number, totalBytes: number) => void }): Promise<CompactionResult> {
    const onProgress = optionsObject('options', options).onProgress;
    if (onProgress !== undefined && typeof onProgress !== 'function')
      throw new TypeError(expectation('options.onProgress', 'a function', onProgress));
    const refused = this.#refuse();
    if (refused !== null) await refused;
    return this.#maintenance.compact(onProgress as ((doneBytes: number, totalBytes: number) => void) | undefined);
  }

  /** Resolves once background work (checkpoint, segment deletion, compaction) has finished. */
  async settled(): Promise<void> {
    await this.#maintenance.settled();
    await this.#cursor.idle();
  }

  /** Bytes of every store file and the number of segments, without building a snapshot (`stats()`). */
  /**
   * An upper bound, from the segment sizes alone (no segment is read): the frames of every live
   * segment after its header. Items acked in a segment that is not yet compacted away, and each
   * frame's header and metadata, are counted too; see docs/guides/capacity.md, "Byte capacity".
   */
  payloadBytes(): number {
    let bytes = 0;
    for (const s of this.#layout.list) bytes += Math.max(0, s.bytes - SEGMENT_HEADER_BYTES);
    return bytes;
  }

  usage(): StoreUsage {
    return { bytesOnDisk: this.#bytesOnDisk(), segments: this.#layout.list.length };
  }

  #bytesOnDisk(): number {
    if (this.#view !== null) return this.#view.bytesOnDisk;
    // The active segment's preallocated zeros occupy disk too.
    let bytes = this.#cursor.bytes + this.#writer.preallocatedBytes + IDENTITY_FILE_BYTES;
    for (const s of this.#layout.list) bytes += s.bytes;
    return bytes;
  }

  /** A snapshot of the store's layout and counters. */
  inspect(): LogStoreStats {
    const acks = this.#cursor.acks;
    const view = this.#view;
    const bytesOnDisk = this.#bytesOnDisk();
    const segments = this.#layout.list.map((s) => ({
      file: s.name,
      baseSeq: s.base,
      bytes: s.bytes,
      sealed: s.seal !== null,
      compacted: s.compacted,
      version: s.version,
    }));
    return {
      storeId: this.#recovery.storeId,
      formatVersion: view?.cursorVersion ?? this.#cursor.version,
      dir: this.dir,
      segments,
      bytesOnDisk,
      lowWaterMark: acks.lwm,
      ackedRanges: acks.starts.length,
      nextSeq: this.#writer.nextSeq,
      count: this.#unackedCount(),
      scheduledFrom: this.#scheduledFrom(),
      cursorBytes: view?.cursorBytes ?? this.#cursor.bytes,
      deadLetters: this.#cursor.deliveries.dead.length,
      deadLetterBytes: this.#cursor.deliveries.deadBytes,
      recovery: this.#recovery,
      spool:
        this.#ingest !== null
          ? { ...this.#ingest.stats, problems: [...this.#ingest.stats.problems] }
          : view !== null
            ? { files: view.spool.files, pendingRecords: view.spool.records, ingested: 0, tornBytes: 0, problems: [] }
            : null,
      liveWriter: view?.liveWriter ?? null,
      schedules: view?.schedules ?? this.#schedules.list(),
    };
  }

  /**
   * Serve the queue to other processes (the Store contract's `attach`): the Builder calls it once
   * the queue over this store is open. The engine ingests the spool (at once and at each poll); the
   * `persistent-queue` entry's LogStore also serves the endpoint (`serves` says whether it should),
   * so that nothing under `src/stores/log/engine` opens a socket.
   */
  async attach(surface: OwnerSurface): Promise<void> {
    // A read-only store backs no queue: it serves nobody.
    if (this.#view !== null) return;
    if (this.#ingest !== null) return;
    const warned = new Set<string>();
    this.#ingest = new SpoolIngest({
      fs: this.#fs,
      dir: this.dir,
      progress: this.#cursor.spool,
      clock: this.#opts.clock,
      pollMs: this.#opts.spoolPollMs,
      chunkBytes: this.#opts.readAheadBytes,
      push: (file, records) => surface.ingest(file, records),
      fail: (error) => this.#durability.markFailed(error),
      problem: ({ file, reason }) => {
        if (warned.has(file)) return;
        warned.add(file);
        process.emitWarning(`Spool file ${file} was not ingested whole: ${reason}`, { code: 'PQ_SPOOL_DAMAGED' });
      },
      pollFailed: (error) => {
        // A queue that closed or failed under the poll stops it; anything else is said once.
        if (this.#state !== 'open' || this.#durability.failure !== null) return;
        const message = (error as Error)?.message ?? String(error);
        if (warned.has(message)) return;
        warned.add(message);
        process.emitWarning(`The spool of ${this.dir} could not be read: ${message}; polling on, further apart`, { code: 'PQ_SPOOL_READ' });
      },
    });
    // Not waited for: the spool may hold more than the queue's capacity, which only a consumer
    // (handed out once open resolves) can make room for.
    void this.ingestSpool();
  }

  /**
   * Record that `records` records of the spool file `file` are in this store (salvage copies a
   * store's items and its spool, and this says what the copied items already hold). @internal
   */
  noteSpoolProgress(file: string, records: number): void {
    this.#cursor.spool.set(file, records);
  }

  /**
   * Ingest what the spool holds now (the queue's owner does it at open and at each poll); resolves
   * once this pass is done. A pass that fails because the queue closed or failed is not an error here.
   */
  async ingestSpool(): Promise<void> {
    const ingest = this.#ingest;
    if (ingest === null) return;
    try {
      await ingest.poke();
    } catch (e) {
      if (
        this.#state !== 'open' ||
        this.#durability.failure !== null ||
        (e instanceof QueueError && (e.code === 'ERR_CLOSED' || e.code === 'ERR_STORE_FAILED'))
      )
        return;
      process.emitWarning(`The spool of ${this.dir} could not be read: ${(e as Error)?.message ?? e}; trying again at the next poll`, {
        code: 'PQ_SPOOL_READ',
      });
    }
  }

  /**
   * The store's identity (FORMAT.md §13): created at random with the store, kept across reopens,
   * new when the store is deleted and created again. Null only when the store was opened
   * read-only and was written before identities existed.
   */
  get storeId(): string | null {
    return this.#recovery.storeId;
  }

  /** What recovery found and did at open. */
  get recovery(): LogStoreRecoveryInfo {
    return this.#recovery;
  }

  // ---- Internals ----

  #readOnlyError(what: string): QueueError {
    return new QueueError(
      'ERR_READ_ONLY',
      `LogStore for ${this.dir} was opened read-only and ${what}; open it without readOnly to change it`,
      { file: this.dir },
    );
  }

  #refuse(): Promise<never> | null {
    if (this.#view !== null) return Promise.reject(this.#readOnlyError('cannot be written'));
    const failure = this.#durability.failure;
    if (failure !== null) return Promise.reject(failure);
    if (this.#state !== 'open' && this.#state !== 'recovered') return Promise.reject(new QueueError('ERR_CLOSED', 'LogStore is closed'));
    return null;
  }

  #unackedCount(): number {
    const acks = this.#cursor.acks;
    const count = this.#writer.nextSeq - acks.lwm - acks.ackedAbove;
    if (count < 0) throw this.#durability.markFailed(new Error(`count invariant violated: ${count}`));
    return count;
  }

  async #recover(): Promise<void> {
    const dir = this.dir;
    const wait = new LockWait(this.#opts);
    wait.throwIfAborted();
    await prepareDirectory(this.#fs, dir, this.#opts);
    if (this.#opts.readOnly) return this.#recoverReadOnly();
    let key = dir;
    try {
      if (this.#fs.realpath !== undefined) key = this.#fs.realpath(dir);
    } catch {
      // Fall back to the resolved path.
    }
    // Refused before the lock is touched: a failed second open must not drop the first one's lock.
    // A second open in this process waits for the first to close, as one in another process does.
    this.#unclaim = await wait.retry(() => claimOpen(this.#fs, key, dir));
    try {
      // Before the lock: a directory that is not a store must not have its own LOCK file taken
      // over or deleted (a LevelDB directory has one). A failed open changes no file.
      const foreign = foreignEntryProblem(dir, this.#fs.readdir(dir));
      if (foreign !== null) throw foreign;
      await wait.retry(() => {
        this.#lock = takeLock(this.#fs, dir);
      });
      // Under the lock the plan reads the directory again: it may have changed meanwhile.
      const plan = planRecovery(this.#fs, dir, this.#opts);
      this.#recovery = await applyRecovery(plan, {
        fs: this.#fs,
        dir,
        opts: this.#opts,
        durability: this.#durability,
        layout: this.#layout,
        writer: this.#writer,
        cursor: this.#cursor,
      });
      this.#state = 'recovered';
      this.#maintenance.poke();
    } catch (e) {
      this.#releaseAll();
      if (e instanceof OpenError || wait.isAbort(e)) throw e;
      // An I/O error (EMFILE, EACCES, EIO...) keeps its code in `cause`; it is never called corruption.
      throw openFailed('Cannot open store', dir, e);
    }
  }

  /** No claim, no lock, no write: the plan is kept in memory (`./read-only.ts`). */
  async #recoverReadOnly(): Promise<void> {
    try {
      const view = await readOnlyView(this.#fs, this.dir, this.#opts);
      this.#view = view;
      this.#layout.list = view.segments;
      this.#cursor.acks = view.acks;
      this.#cursor.deliveries = view.deliveries;
      this.#cursor.version = view.cursorVersion;
      this.#writer.nextSeq = view.nextSeq;
      this.#recovery = view.recovery;
      this.#state = 'recovered';
    } catch (e) {
      this.#releaseAll();
      if (e instanceof OpenError) throw e;
      throw openFailed('Cannot open store', this.dir, e);
    }
  }

  #releaseAll(): void {
    this.#maintenance.stop();
    this.#layout.release();
    this.#writer.release();
    this.#durability.release();
    this.#cursor.release();
    this.#reader.release();
    if (this.#lock !== null) {
      try {
        this.#lock.release();
      } catch {
        // Release is idempotent; a failure leaves a stale lock that the next opener takes over.
      }
      this.#lock = null;
    }
    this.#unclaim?.();
    this.#unclaim = null;
  }
}
