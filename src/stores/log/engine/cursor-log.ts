// Writes FORMAT.md §4 (the cursor file: ACK, OPENED and delivery records, checkpoint replacement §4.4, version upgrade §4.5).
/**
 * The cursor log: the set of acked seqs, the cursor file's descriptor and write position, and the
 * lane that keeps ACK writes from interleaving with a checkpoint (which replaces the file).
 */
import { join } from 'node:path';
import { QueueError } from '../../../contract/errors.js';
import type { FileSystem } from '../../../fs/file-system.js';
import { invariantError } from './assert.js';
import { AckSet, encodeAckRanges, encodeCheckpoint } from './cursor.js';
import { errnoCode, type Durability } from './durability.js';
import type { RecordPayload } from './delivery-format.js';
import { DeliveryState } from './delivery-state.js';
import { KeyTable } from '../../../contract/records/keys.js';
import { SpoolProgress } from './spool-progress.js';
import { ScheduleTable } from '../../../contract/schedule-table.js';
import {
  CURSOR_FILE,
  CURSOR_VERSION_DELIVERIES,
  CURSOR_VERSION_KEYS,
  CURSOR_VERSION_PLAIN,
  CURSOR_VERSION_SCHEDULES,
  CURSOR_VERSION_SPOOL,
  FRAME_HEADER_BYTES,
  FRAME_OFF_LENGTH,
  MARK_RECORD_HEADER_BYTES,
  RANGE_BYTES,
  RECORD_ACK,
  RECORD_MARK,
  RECORD_OPENED,
  RECORD_SCHEDULE,
  RECORD_UNSCHEDULE,
  TMP_SUFFIX,
  readU32,
  readU64,
  writeU32,
  writeU64,
} from './format.js';
import { encodeFrame, encodeFrameInPlace } from './frame.js';
import { closeQuietly } from './layout.js';
import type { ResolvedOptions } from './options.js';

/** What recovery read of an existing cursor file, for reusing it when a new checkpoint does not fit. */
export interface CursorTail {
  /** Offset just past the last valid record. */
  readonly validEnd: number;
  /** Offset where the record log starts (the checkpoint's size). */
  readonly logStart: number;
  /** Number of the last valid record (0 when none). */
  readonly lastRecord: number;
  readonly clean: boolean;
  /** The checkpoint's version. */
  readonly version: number;
  /** The checkpoint's `nextSeq`. */
  readonly checkpointNextSeq: number;
}

export class CursorLog {
  acks = new AckSet(1);
  /** Delivery marks and dead letters (FORMAT §4.1, §4.2); only a version-2 cursor holds any. */
  deliveries = new DeliveryState();
  /**
   * The version of the cursor file on disk: 1 until the first delivery record is needed, then a
   * version-2 checkpoint replaces the file (`upgrade`) and every later checkpoint is version 2.
   */
  version = CURSOR_VERSION_PLAIN;
  /**
   * Idempotency keys of the store (FORMAT §4.6): those of the durable checkpoint, those of the
   * frames written after it, and the ones appended since. A checkpoint writes every key below its
   * next seq not older than the bound `keepKeysFrom` set, and forgets the older ones.
   */
  keys = new KeyTable();
  /**
   * How far each spool file was ingested (FORMAT §14.3): from the durable checkpoint, the ingested
   * frames after it, and the items appended since. A checkpoint with an entry is version 4.
   */
  spool = new SpoolProgress();
  /**
   * The schedules (FORMAT §4.7): the durable checkpoint's, the SCHEDULE and UNSCHEDULE records
   * after it, and the fires of the items written since. A checkpoint that holds one is version 5.
   */
  schedules = new ScheduleTable();
  /** The `nextSeq` of the durable checkpoint: every key of an item below it is in that checkpoint. */
  checkpointNextSeq = 1;
  #fd = -1;
  #offset = 0;
  #logStart = 0;
  #recordSeq = 0;
  #buf = new Uint8Array(4096);
  /** Held while a checkpoint replaces the file; ACK writes wait for it. Null when free. */
  #lane: Promise<void> | null = null;
  /** Low-water mark known durable on disk. */
  durableLwm = 1;

  constructor(
    private readonly fs: FileSystem,
    private readonly dir: string,
    private readonly opts: ResolvedOptions,
    private readonly durability: Durability,
    /** Called after every ACK write: the store starts maintenance from it when there is work. */
    private readonly onAcked: () => void,
  ) {}

  /** Bytes of the cursor file. */
  get bytes(): number {
    return this.#offset;
  }

  /**
   * The record log has grown past `cursorCheckpointBytes`: time for a checkpoint. A version-2
   * checkpoint holds the dead letters' bytes, so it is rewritten only once the log has also grown
   * past the checkpoint itself: the cost of rewriting it is shared by at least as many bytes of
   * records, however large the dead-letter queue.
   */
  needsCheckpoint(): boolean {
    const log = this.#offset - this.#logStart;
    if (log <= this.opts.cursorCheckpointBytes) return false;
    return this.version === CURSOR_VERSION_PLAIN || log > this.#logStart;
  }

  /** Run `fn` once no checkpoint is running; `fn` starts in the same tick when none is. */
  whenFree<T>(fn: () => Promise<T>): Promise<T> {
    if (this.#lane === null) return fn();
    return this.#lane.then(() => this.whenFree(fn));
  }

  /** The lane is free: a record written now cannot interleave with a checkpoint. */
  get free(): boolean {
    return this.#lane === null;
  }

  /**
   * Write delivery records (FORMAT §4.2) after the last record, in one positional write, numbered
   * on from the last one. The caller holds the lane or checked it is free, and changes its state
   * only once this returned null. On a full disk the write is cut off again and the promise it
   * returns rejects with ERR_STORE_FULL; any other failure fails the instance.
   */
  writeRecords(records: readonly RecordPayload[], what: string): Promise<never> | null {
    if (this.durability.failure !== null) return Promise.reject(this.durability.failure);
    if (this.version < CURSOR_VERSION_DELIVERIES) {
      return this.durability.fail(invariantError(`${what} record written into a version-${this.version} cursor`));
    }
    if (this.version < CURSOR_VERSION_SCHEDULES && records.some((r) => r.type === RECORD_SCHEDULE || r.type === RECORD_UNSCHEDULE)) {
      return this.durability.fail(invariantError(`${what} record written into a version-${this.version} cursor`));
    }
    let bytes = 0;
    for (const r of records) bytes += FRAME_HEADER_BYTES + r.payload.length;
    const buf = new Uint8Array(bytes);
    let end = 0;
    records.forEach((r, i) => {
      end = encodeFrame(buf, end, this.#recordSeq + i + 1, r.type, r.payload);
    });
    return this.#writeFrames(buf, end, records.length, what);
  }

  /**
   * Write one MARK record that holds only the delivered-below bound (FORMAT §4.2), as
   * `writeRecords([markPayloads(below, [])])` would, into a frame kept for it: a first delivery
   * writes one, and the consumer's path allocates nothing for it.
   */
  writeBound(below: number): Promise<never> | null {
    if (this.durability.failure !== null) return Promise.reject(this.durability.failure);
    if (this.version < CURSOR_VERSION_DELIVERIES) {
      return this.durability.fail(invariantError(`delivery mark record written into a version-${this.version} cursor`));
    }
    const frame = this.#boundFrame;
    writeU64(frame, FRAME_HEADER_BYTES, below);
    writeU32(frame, FRAME_HEADER_BYTES + 8, 0);
    const end = encodeFrameInPlace(frame, 0, this.#recordSeq + 1, RECORD_MARK, MARK_RECORD_HEADER_BYTES);
    return this.#writeFrames(frame, end, 1, 'delivery mark');
  }

  readonly #boundFrame = new Uint8Array(FRAME_HEADER_BYTES + MARK_RECORD_HEADER_BYTES);

  /** Write `count` encoded frames (`buf` up to `end`) after the last record: null when written. */
  #writeFrames(buf: Uint8Array, end: number, count: number, what: string): Promise<never> | null {
    const at = this.#offset;
    try {
      this.fs.write(this.#fd, buf, 0, end, at);
    } catch (e) {
      if (errnoCode(e) === 'ENOSPC') return this.durability.cutBack(this.#fd, at, what, e);
      return this.durability.fail(e);
    }
    this.#offset = at + end;
    this.#recordSeq += count;
    return null;
  }

  /** Write ACK records for `seqs` once no checkpoint is running; `sync` makes them durable. */
  ack(seqs: readonly number[], sync: boolean): Promise<void> {
    if (this.#lane === null) return this.#ackNow(seqs, sync);
    return this.#lane.then(() => this.ack(seqs, sync));
  }

  /**
   * Write the ranges of one `ack()` call as ACK records (FORMAT §4.2) with one positional write.
   * A record holds at most `maxRangesPerRecord` ranges (the reader's bound), so an ack of more
   * holes is split into several consecutive records; a crash can keep a prefix of them, which
   * acks a subset of an ack that never resolved (allowed: each seq is acked or not).
   */
  #ackNow(seqs: readonly number[], sync: boolean): Promise<void> {
    if (this.durability.failure !== null) return Promise.reject(this.durability.failure);
    const perRecord = this.opts.maxRangesPerRecord;
    // Ranges are encoded after room for the most frame headers they can need (one range per seq
    // at worst), then each chunk is moved down behind its own header (never over a later chunk).
    const maxRecords = Math.ceil(seqs.length / perRecord);
    const rangesAt = maxRecords * FRAME_HEADER_BYTES;
    const need = rangesAt + seqs.length * RANGE_BYTES;
    if (this.#buf.length < need) this.#buf = new Uint8Array(Math.max(need, this.#buf.length * 2));
    const buf = this.#buf;
    const payloadBytes = encodeAckRanges(seqs, buf, rangesAt);
    const chunkBytes = perRecord * RANGE_BYTES;
    let end = 0;
    let records = 0;
    for (let from = 0; from < payloadBytes; from += chunkBytes) {
      const length = Math.min(chunkBytes, payloadBytes - from);
      buf.copyWithin(end + FRAME_HEADER_BYTES, rangesAt + from, rangesAt + from + length);
      end = encodeFrameInPlace(buf, end, this.#recordSeq + records + 1, RECORD_ACK, length);
      records++;
    }
    const at = this.#offset;
    try {
      this.fs.write(this.#fd, buf, 0, end, at);
    } catch (e) {
      if (errnoCode(e) === 'ENOSPC') return this.durability.cutBack(this.#fd, at, 'ack', e);
      return this.durability.fail(e);
    }
    this.#offset = at + end;
    this.#recordSeq += records;
    // The ack set changes from the records as written, so what is in memory is what a reader of
    // the file would decode.
    let ranges = 0;
    for (let p = 0; p < end; ) {
      const length = readU32(buf, p + FRAME_OFF_LENGTH);
      for (let q = p + FRAME_HEADER_BYTES; q < p + FRAME_HEADER_BYTES + length; q += RANGE_BYTES) {
        this.acks.add(readU64(buf, q), readU64(buf, q + 8));
        ranges++;
      }
      p += FRAME_HEADER_BYTES + length;
    }
    if (ranges * RANGE_BYTES !== payloadBytes) {
      return this.durability.fail(invariantError(`ACK records hold ${ranges} ranges, ${payloadBytes / RANGE_BYTES} were encoded`));
    }
    this.onAcked();
    if (!sync) return Promise.resolve();
    return this.sync(seqs.length === 1);
  }

  /** fdatasync the cursor file; the low-water mark of that moment is then durable. `single`: for one ack. */
  sync(single = false): Promise<void> {
    const lwm = this.acks.lwm;
    return this.durability.syncData(this.#fd, single).then(() => {
      if (lwm > this.durableLwm) this.durableLwm = lwm;
    });
  }

  /** fdatasync the cursor file once no checkpoint is running (one that ran made the records durable). */
  syncWritten(): Promise<void> {
    if (this.#lane === null) return this.sync();
    return this.#lane.then(() => this.syncWritten());
  }

  /** Run `fn` with the lane held (no ACK write interleaves). */
  async withLane<T>(fn: () => Promise<T>): Promise<T> {
    while (this.#lane !== null) await this.#lane;
    let release!: () => void;
    this.#lane = new Promise<void>((r) => (release = r));
    try {
      return await fn();
    } finally {
      this.#lane = null;
      release();
    }
  }

  /** Resolves when no checkpoint is running. */
  async idle(): Promise<void> {
    while (this.#lane !== null) await this.#lane;
  }

  /**
   * Replace the cursor file with one checkpoint holding the current ack state and `nextSeq`
   * (tmp, fsync, rename, fsync dir; FORMAT §4.4). `syncData` makes the segments' data durable
   * first, so a checkpoint never describes data that could still be lost. The caller holds the
   * lane, or the store is closing or recovering. Rejects with ERR_STORE_FULL (the current cursor
   * file stays in place and valid) or fails the instance.
   */
  async writeCheckpoint(flags: number, nextSeq: number, syncData: () => Promise<void>, version = this.version, floor = 0): Promise<AckSet> {
    // Capture the state first: appends may continue during the sync, and the checkpoint must not
    // claim their seqs are durable. ACKs cannot change it meanwhile (the lane is held).
    const snapshot = this.acks.clone();
    this.keys.expire();
    const keys = this.keys.size === 0 ? [] : this.keys.list().filter((k) => k.seq < nextSeq);
    // The first key moves the cursor to version 3, which holds the delivery state of version 2 too;
    // the first spool entry moves it to version 4, which holds everything version 3 holds.
    if (keys.length > 0 && version < CURSOR_VERSION_KEYS) version = CURSOR_VERSION_KEYS;
    const spool = this.spool.list();
    const schedules = this.schedules.list();
    // An empty spool table needs no version 4: version 3 holds everything else it holds, and a
    // store whose spool is ingested becomes readable by version-3 readers again. So for the
    // schedules and version 5, which holds everything version 4 holds.
    if (schedules.length > 0) version = CURSOR_VERSION_SCHEDULES;
    else if (spool.length > 0) version = CURSOR_VERSION_SPOOL;
    else if (version >= CURSOR_VERSION_SPOOL) version = CURSOR_VERSION_KEYS;
    // An upgrade asked for (the records about to be written need that version) is kept, empty.
    if (floor > version) version = floor;
    const deliveries = version >= CURSOR_VERSION_DELIVERIES ? this.deliveries.clone() : null;
    await syncData();
    const buf = encodeCheckpoint(
      snapshot,
      nextSeq,
      flags,
      deliveries,
      version >= CURSOR_VERSION_KEYS ? keys : null,
      version >= CURSOR_VERSION_SPOOL ? spool : null,
      version >= CURSOR_VERSION_SCHEDULES ? schedules : null,
    );
    const path = join(this.dir, CURSOR_FILE);
    const tmp = path + TMP_SUFFIX;
    try {
      if (this.fs.stat(tmp) !== null) this.fs.unlink(tmp);
      const fd = this.fs.open(tmp, 'create', this.opts.fileMode);
      try {
        this.fs.write(fd, buf, 0, buf.length, 0);
      } catch (e) {
        closeQuietly(this.fs, fd);
        if (errnoCode(e) === 'ENOSPC') this.#dropTmp(tmp, e);
        throw e;
      }
      try {
        await this.durability.syncFd(fd, false);
      } catch (e) {
        closeQuietly(this.fs, fd);
        throw e;
      }
      this.fs.rename(tmp, path);
      await this.fs.fsyncDir(this.dir);
      // The old cursor fd held only records now covered by the durable checkpoint.
      if (this.#fd >= 0) this.durability.closeWhenIdle(this.#fd);
      this.#fd = fd;
    } catch (e) {
      if (e instanceof QueueError && e.code === 'ERR_STORE_FULL') throw e;
      throw this.durability.markFailed(e);
    }
    this.#offset = buf.length;
    this.#logStart = buf.length;
    this.#recordSeq = 0;
    this.version = version;
    this.checkpointNextSeq = nextSeq;
    // Marks of items acked since the last checkpoint are not in this one: forget them here too.
    if (deliveries !== null) this.deliveries.pruneMarks(snapshot, nextSeq);
    if (snapshot.lwm > this.durableLwm) this.durableLwm = snapshot.lwm;
    return snapshot;
  }

  /**
   * A full disk is not a failure: the current cursor file stays in place and valid, and the
   * callers fall back to it (open, close) or try again later (maintenance).
   */
  #dropTmp(tmp: string, cause: unknown): never {
    try {
      this.fs.unlink(tmp);
    } catch {
      // Deleted at the next open.
    }
    throw new QueueError('ERR_STORE_FULL', 'No space left on device (cursor checkpoint)', { cause });
  }

  /**
   * Go on appending to the existing cursor file after `tail` and make it durable. A CLEAN one gets
   * an OPENED record, so a crash of this session is not reported as a clean shutdown (which would
   * skip the tail rewrite at the next open); an unclean one needs none, and a full disk may leave
   * no room for it.
   */
  async reuse(tail: CursorTail): Promise<void> {
    const fd = this.fs.open(join(this.dir, CURSOR_FILE), 'readWrite');
    this.#fd = fd;
    this.#offset = tail.validEnd;
    this.#logStart = tail.logStart;
    this.#recordSeq = tail.lastRecord;
    this.version = tail.version;
    this.checkpointNextSeq = tail.checkpointNextSeq;
    if (tail.clean) {
      const frame = new Uint8Array(FRAME_HEADER_BYTES);
      encodeFrame(frame, 0, this.#recordSeq + 1, RECORD_OPENED, new Uint8Array(0));
      this.fs.write(fd, frame, 0, FRAME_HEADER_BYTES, this.#offset);
      this.#offset += FRAME_HEADER_BYTES;
      this.#recordSeq++;
    }
    await this.durability.syncFd(fd, true);
  }

  release(): void {
    if (this.#fd >= 0) closeQuietly(this.fs, this.#fd);
    this.#fd = -1;
  }
}
