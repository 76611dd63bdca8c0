// Implements FORMAT.md §7 "Compaction file protocol" and the deletion order of docs/internals/engine.md "Compaction".
/**
 * Background work of one LogStore, in one lane: cursor checkpoints, deleting fully acked segments
 * and compacting sealed ones. The store starts it (`poke()` after an ack or a roll), and so does a
 * timer that `poke()` arms while sealed segments are left, so that segments pinned by an old
 * unacked item are rewritten on an idle queue too; nothing here reaches into the ack or append
 * paths. The order that keeps every ack: the cursor is durable past a segment before the segment
 * is unlinked, and the unlink is made durable by a directory fsync.
 */
import { QueueError } from '../../../contract/errors.js';
import type { FileSystem } from '../../../fs/file-system.js';
import { unrefTimer } from '../../../lib/clock.js';
import type { CursorLog } from './cursor-log.js';
import type { AckSet } from './cursor.js';
import { errnoCode, isStoreFull, type Durability } from './durability.js';
import {
  FRAME_HEADER_BYTES,
  RECORD_ITEM,
  RECORD_SEAL,
  SEAL_FRAME_BYTES,
  SEG_FLAG_COMPACTED,
  SEGMENT_HEADER_BYTES,
  SEGMENT_VERSION_KEYED,
  SEGMENT_VERSION_PLAIN,
  SEGMENT_VERSION_SCHEDULED,
  TMP_SUFFIX,
} from './format.js';
import { decodedSegmentVersion } from './item-meta.js';
import { encodeFrame, payloadOffset } from './frame.js';
import { FileWindow, FrameReader } from './frame-reader.js';
import { MISSING_SEAL, SegmentFrames } from './frame-rules.js';
import { closeQuietly, newSegment, type Segment, type SegmentLayout } from './layout.js';
import type { ResolvedOptions } from './options.js';
import { damaged } from './reader.js';
import { encodeSealFrame, encodeSegmentHeader, type SealInfo } from './segment.js';
import { nextSegmentVersion } from './segment-writer.js';

const MiB = 1024 * 1024;
/** Compaction yields to the event loop after copying this many bytes. */
const YIELD_BYTES = 4 * MiB;

export interface CompactionResult {
  readonly bytesReclaimed: number;
  readonly segmentsDeleted: number;
  readonly segmentsRewritten: number;
}

/** Thrown inside compaction when the store starts closing or fails; never escapes. */
class Aborted extends Error {}

/** What maintenance needs from the rest of the store. */
export interface MaintenanceDeps {
  readonly fs: FileSystem;
  readonly dir: string;
  readonly opts: ResolvedOptions;
  readonly durability: Durability;
  readonly layout: SegmentLayout;
  readonly cursor: CursorLog;
  /** The store accepts work (open, or recovered and not yet handed to a queue). */
  readonly running: () => boolean;
  /** Checkpoint the cursor now (the store supplies the next seq and the data sync). */
  readonly checkpoint: () => Promise<AckSet>;
}

interface Tally {
  bytes: number;
  count: number;
}

export class Maintenance {
  #current: Promise<CompactionResult> | null = null;
  #again = false;
  /** Damage found while compacting stops automatic compaction until `compact()` is asked for. */
  #blockedBy: QueueError | null = null;
  /** The progress callback of the `compact()` running now, if it was given one. */
  #onProgress: ((doneBytes: number, totalBytes: number) => void) | null = null;
  /** Bytes of the run being rewritten, and how many of them were read so far. */
  #progress = { done: 0, total: 0 };
  /** The handle of the delayed round's timer while it is armed. */
  #timer: { handle: unknown } | null = null;

  constructor(private readonly d: MaintenanceDeps) {}

  /**
   * Start a round when there is work: a long cursor log, a fully acked sealed segment, or keys
   * behind. Otherwise, while sealed segments are left, arm the delayed round: acks that leave a
   * pinned segment mostly acked start nothing else, and an idle queue would keep it on disk.
   */
  poke(): void {
    const first = this.d.layout.first;
    if (this.d.cursor.needsCheckpoint() || (first.seal !== null && first.seal.endSeq <= this.d.cursor.acks.lwm) || this.#keysBehind())
      this.schedule();
    else if (first.seal !== null) this.#arm();
  }

  /**
   * Arm the timer of a delayed round, unless one is armed: at most one round per `compactDelayMs`
   * comes from it, however many acks arrive, and it costs one pass over the segment list when the
   * policy finds nothing to rewrite. Unref'd: background work never keeps a process alive.
   */
  #arm(): void {
    if (this.#timer !== null || !this.d.opts.autoCompact || this.#blockedBy !== null || this.#stopping()) return;
    const timer = { handle: null as unknown };
    this.#timer = timer;
    timer.handle = this.d.opts.clock.setTimeout(() => {
      if (this.#timer !== timer) return;
      this.#timer = null;
      this.schedule();
    }, this.d.opts.compactDelayMs);
    unrefTimer(timer.handle);
  }

  /** Cancel the delayed round (the store is closing or was released). */
  stop(): void {
    const timer = this.#timer;
    if (timer === null) return;
    this.#timer = null;
    this.d.opts.clock.clearTimeout(timer.handle);
  }

  /**
   * A sealed version-3 segment holds keyed frames the durable checkpoint does not cover: open after
   * a crash would read them (FORMAT §4.6). A checkpoint after each such roll keeps what open reads
   * for keys to about the active segment, whatever the store's age.
   */
  #keysBehind(): boolean {
    const list = this.d.layout.list;
    for (let i = list.length - 1; i >= 0; i--) {
      const s = list[i]!;
      if (s.seal === null) continue;
      return s.version >= SEGMENT_VERSION_KEYED && s.seal.endSeq > this.d.cursor.checkpointNextSeq;
    }
    return false;
  }

  schedule(): void {
    if (!this.d.running()) return;
    if (this.#current !== null) {
      this.#again = true;
      return;
    }
    this.#start(false).catch(() => undefined);
  }

  /**
   * A forced round: delete acked segments and rewrite every sealed segment that holds acked
   * records. `onProgress` hears the bytes of the rewritten segments read so far and their total.
   */
  async compact(onProgress?: (doneBytes: number, totalBytes: number) => void): Promise<CompactionResult> {
    await this.settled();
    this.#blockedBy = null;
    this.#onProgress = onProgress ?? null;
    try {
      return await this.#start(true);
    } finally {
      this.#onProgress = null;
    }
  }

  #report(doneBytes: number): void {
    this.#progress.done = doneBytes;
    this.#onProgress?.(doneBytes, this.#progress.total);
  }

  async settled(): Promise<void> {
    while (this.#current !== null) await this.#current.catch(() => undefined);
  }

  #start(force: boolean): Promise<CompactionResult> {
    const p = this.#run(force);
    this.#current = p;
    const clear = (): void => {
      if (this.#current === p) this.#current = null;
    };
    p.then(clear, clear);
    return p;
  }

  #stopping(): boolean {
    return !this.d.running() || this.d.durability.failure !== null;
  }

  async #run(force: boolean): Promise<CompactionResult> {
    const deleted: Tally = { bytes: 0, count: 0 };
    const rewritten: Tally = { bytes: 0, count: 0 };
    const result = (): CompactionResult => ({
      bytesReclaimed: deleted.bytes + rewritten.bytes,
      segmentsDeleted: deleted.count,
      segmentsRewritten: rewritten.count,
    });
    try {
      do {
        this.#again = false;
        if (this.#stopping()) break;
        await this.#round(force, deleted, rewritten);
      } while (this.#again);
      return result();
    } catch (e) {
      if (e instanceof Aborted) return result();
      if (isStoreFull(e) || errnoCode(e) === 'ENOSPC') {
        // A full disk stops this round (a compaction's tmp file is removed by #rewrite); nothing
        // is lost, and the next trigger tries again. compact() reports it.
        if (!force) return result();
        throw isStoreFull(e) ? e : new QueueError('ERR_STORE_FULL', 'No space left on device (compaction)', { cause: e });
      }
      if (e instanceof QueueError && e.code === 'ERR_CORRUPT') {
        // Damage found while compacting: surfaced, never repaired; the files stay as they are.
        this.#blockedBy = e;
        throw e;
      }
      throw this.d.durability.markFailed(e);
    }
  }

  async #round(force: boolean, deleted: Tally, rewritten: Tally): Promise<void> {
    let full = false;
    if (this.d.cursor.needsCheckpoint() || this.#keysBehind()) {
      // On a full disk the checkpoint waits; deleting acked segments below still frees space.
      await this.d.cursor
        .withLane(() => this.d.checkpoint())
        .catch((e: unknown) => {
          if (!isStoreFull(e)) throw e;
          full = true;
        });
    }
    const del = await this.#deleteAcked();
    deleted.bytes += del.bytes;
    deleted.count += del.count;
    if (!full && (force || (this.d.opts.autoCompact && this.#blockedBy === null))) {
      const c = await this.#compactSealed(force);
      rewritten.bytes += c.bytes;
      rewritten.count += c.count;
    }
  }

  /** Cursor durable past the segments, then unlink, then fsync the directory. */
  async #deleteAcked(): Promise<Tally> {
    const { layout, cursor } = this.d;
    const doomed: Segment[] = [];
    for (const s of layout.sealedRun()) {
      if (s.seal!.endSeq > cursor.acks.lwm) break;
      doomed.push(s);
    }
    if (doomed.length === 0) return { bytes: 0, count: 0 };
    const need = doomed[doomed.length - 1]!.seal!.endSeq;
    if (cursor.durableLwm < need) {
      await cursor.withLane(() => cursor.sync());
      if (this.d.durability.failure !== null) throw this.d.durability.failure;
    }
    if (cursor.durableLwm < need) return { bytes: 0, count: 0 };
    // The keys of a version-3 segment's items outlive their acks (FORMAT §4.6): they must be in a
    // durable checkpoint before the frames holding them go.
    if (cursor.checkpointNextSeq < need && doomed.some((s) => s.version >= SEGMENT_VERSION_KEYED)) {
      await cursor.withLane(() => this.d.checkpoint());
      if (this.d.durability.failure !== null) throw this.d.durability.failure;
      if (cursor.checkpointNextSeq < need) return { bytes: 0, count: 0 };
    }
    let bytes = 0;
    layout.replaceFront(doomed.length, null);
    for (const s of doomed) {
      this.d.fs.unlink(s.path);
      bytes += s.bytes;
    }
    await this.d.fs.fsyncDir(this.d.dir);
    return { bytes, count: doomed.length };
  }

  /** Live bytes of a sealed segment, estimated from its seal and the ack set. */
  #liveBytesEstimate(s: Segment): number {
    const seal = s.seal!;
    if (seal.recordCount === 0) return 0;
    const unacked = seal.endSeq - s.base - this.d.cursor.acks.ackedIn(s.base, seal.endSeq);
    const perRecord = (s.bytes - SEGMENT_HEADER_BYTES - SEAL_FRAME_BYTES) / seal.recordCount;
    return Math.min(unacked, seal.recordCount) * perRecord;
  }

  /**
   * Rewrite the run of sealed segments into one COMPACTED segment holding only their unacked
   * records (FORMAT.md §7). Policy: when their live bytes are below `compactionLiveRatio` of their
   * size (or, when forced, whenever any of their records is acked). An automatic round rewrites
   * only the first `compactRunBytes` of the run (at least two segments, so that a large first
   * segment, the output of the run before, cannot stop it) and arms the timer for the rest: its
   * cost is bounded whatever the backlog. The rest is still a prefix of the sealed segments, so the
   * next run merges it into the same first segment and the store ends with one compacted segment.
   */
  async #compactSealed(force: boolean): Promise<Tally> {
    let run = this.d.layout.sealedRun();
    if (run.length === 0) return { bytes: 0, count: 0 };
    let total = 0;
    let live = 0;
    for (const s of run) {
      total += s.bytes;
      live += this.#liveBytesEstimate(s);
    }
    const headerBytes = SEGMENT_HEADER_BYTES + SEAL_FRAME_BYTES;
    if (force ? live + headerBytes >= total : live >= total * this.d.opts.compactionLiveRatio) return { bytes: 0, count: 0 };
    let rest = false;
    if (!force) {
      let k = 0;
      let bytes = 0;
      while (k < run.length && (k < 2 || bytes + run[k]!.bytes <= this.d.opts.compactRunBytes)) bytes += run[k++]!.bytes;
      if (k < run.length) {
        run = run.slice(0, k);
        total = bytes;
        rest = true;
      }
    }
    // (1) The cursor must be durable for every record about to be dropped.
    const snapshot = await this.d.cursor.withLane(() => this.d.checkpoint());
    this.#progress = { done: 0, total };
    this.#report(0);
    const written = await this.#rewrite(run, snapshot);
    const result = await this.#swapIn(run, written);
    this.#report(total);
    if (rest) this.#arm();
    return result;
  }

  /**
   * Write the live records of `run` into `<first>.tmp`, sealed and fsynced. The frames are copied
   * byte for byte, metadata included, except those of version-1 segments that carry a metadata
   * area (`#copyLive`); the header, written last (the file is a tmp file until the rename), has
   * version 2 only when a copied record has a priority or a not-before time, so a store whose
   * scheduled items are all acked goes back to segments older releases read.
   */
  async #rewrite(run: readonly Segment[], snapshot: AckSet): Promise<{ seal: SealInfo; bytes: number; version: number }> {
    const { fs, opts } = this.d;
    const first = run[0]!;
    const endSeq = run[run.length - 1]!.seal!.endSeq;
    const tmp = first.path + TMP_SUFFIX;
    if (fs.stat(tmp) !== null) fs.unlink(tmp);
    const fd = fs.open(tmp, 'create', opts.fileMode);
    try {
      const out = new CopyBuffer(fs, fd, SEGMENT_HEADER_BYTES);
      for (const s of run) await this.#copyLive(s, snapshot, out);
      out.flush();
      const seal: SealInfo = { recordCount: out.count, firstSeq: out.firstSeq, lastSeq: out.lastSeq, endSeq };
      const sealFrame = encodeSealFrame(seal);
      fs.write(fd, sealFrame, 0, sealFrame.length, out.pos);
      const version = nextSegmentVersion(out.need);
      const header = encodeSegmentHeader({ flags: SEG_FLAG_COMPACTED, baseSeq: first.base, replacesEndSeq: endSeq, version });
      fs.write(fd, header, 0, header.length, 0);
      await fs.fsync(fd);
      closeQuietly(fs, fd);
      return { seal, bytes: out.pos + sealFrame.length, version };
    } catch (e) {
      closeQuietly(fs, fd);
      try {
        fs.unlink(tmp);
      } catch {
        // A leftover tmp file is deleted at the next open.
      }
      throw e;
    }
  }

  /**
   * Copy the unacked ITEM frames of sealed segment `s` into `out`, validating every frame. A
   * version-1 segment gives an ITEM's metadata area no meaning (FORMAT.md §3.1): copied byte for
   * byte into an output that may have version 2, the same bytes could read as a priority or a
   * not-before time, or as malformed metadata (corruption). Such a frame is written plain instead:
   * its payload alone, with a new CRC, which is what every reader of its segment delivered.
   */
  async #copyLive(s: Segment, snapshot: AckSet, out: CopyBuffer): Promise<void> {
    const fs = this.d.fs;
    const rfd = fs.open(s.path, 'read');
    try {
      const rules = new SegmentFrames(s.base, s.compacted, s.version, s.seal);
      const frames = new FrameReader(new FileWindow(fs, rfd, s.bytes, this.d.opts.readAheadBytes), SEGMENT_HEADER_BYTES, rules);
      let sinceYield = 0;
      for (;;) {
        const verdict = frames.next();
        if (verdict === 'end') {
          if (rules.seal === null) throw damaged(s, frames.offset, MISSING_SEAL);
          return;
        }
        if (verdict !== 'record') throw damaged(s, frames.offset, frames.reason());
        const h = frames.h;
        const bytes = frames.frameBytes;
        if (h.type !== RECORD_SEAL && !snapshot.has(h.seq)) {
          if (h.metaBytes !== 0 && s.version < SEGMENT_VERSION_SCHEDULED)
            out.addPlain(frames.win.buf, payloadOffset(frames.at, h), h.length, h.seq);
          else out.add(frames.win.buf, frames.at, bytes, h.seq);
          // A copied key, spool origin or group needs the version that holds it (FORMAT §8).
          const need = decodedSegmentVersion(rules.schedule);
          if (need > out.need) out.need = need;
        }
        frames.accept();
        sinceYield += bytes;
        if (sinceYield >= YIELD_BYTES) {
          this.#report(this.#progress.done + sinceYield);
          sinceYield = 0;
          await new Promise<void>((r) => setImmediate(r));
          if (this.#stopping()) throw new Aborted();
        }
      }
    } finally {
      closeQuietly(fs, rfd);
    }
  }

  /**
   * (2) Atomically replace the first segment of the run, switching the in-memory layout in the
   * same synchronous step so that no reader opens the new file as the old segment; (3) once the
   * rename is durable, drop the rest of the run (recovery would delete them anyway, by the
   * COMPACTED header's replaced range).
   */
  async #swapIn(run: readonly Segment[], written: { seal: SealInfo; bytes: number; version: number }): Promise<Tally> {
    const { fs, layout } = this.d;
    const first = run[0]!;
    if (this.#stopping()) {
      try {
        fs.unlink(first.path + TMP_SUFFIX);
      } catch {
        // Deleted at the next open.
      }
      throw new Aborted();
    }
    fs.rename(first.path + TMP_SUFFIX, first.path);
    let reclaimed = 0;
    for (const s of run) reclaimed += s.bytes;
    layout.replaceFront(
      run.length,
      newSegment({
        base: first.base,
        name: first.name,
        path: first.path,
        bytes: written.bytes,
        seal: written.seal,
        compacted: true,
        version: written.version,
      }),
    );
    await fs.fsyncDir(this.d.dir);
    for (const s of run) if (s !== first) fs.unlink(s.path);
    await fs.fsyncDir(this.d.dir);
    return { bytes: Math.max(0, reclaimed - written.bytes), count: run.length };
  }
}

/** Frames copied into a compacted segment, written in 1 MiB chunks. */
class CopyBuffer {
  #buf = new Uint8Array(MiB);
  #len = 0;
  count = 0;
  firstSeq = 0;
  lastSeq = 0;
  /** The lowest segment version that holds every copied record (1 while they are plain). */
  need = SEGMENT_VERSION_PLAIN;

  constructor(
    private readonly fs: FileSystem,
    private readonly fd: number,
    /** File offset where the buffered bytes go. */
    public pos: number,
  ) {}

  /** Copy the frame `src[at .. at + bytes)` as it is. */
  add(src: Uint8Array, at: number, bytes: number, seq: number): void {
    this.#room(bytes);
    this.#buf.set(src.subarray(at, at + bytes), this.#len);
    this.#len += bytes;
    this.#counted(seq);
  }

  /** Write a plain ITEM frame (no metadata) of seq `seq` holding the payload `src[at .. at + length)`. */
  addPlain(src: Uint8Array, at: number, length: number, seq: number): void {
    this.#room(FRAME_HEADER_BYTES + length);
    this.#len = encodeFrame(this.#buf, this.#len, seq, RECORD_ITEM, src.subarray(at, at + length));
    this.#counted(seq);
  }

  #room(bytes: number): void {
    if (this.#len + bytes > this.#buf.length) {
      this.flush();
      if (bytes > this.#buf.length) this.#buf = new Uint8Array(bytes);
    }
  }

  #counted(seq: number): void {
    if (this.count === 0) this.firstSeq = seq;
    this.lastSeq = seq;
    this.count++;
  }

  flush(): void {
    if (this.#len === 0) return;
    this.fs.write(this.fd, this.#buf, 0, this.#len, this.pos);
    this.pos += this.#len;
    this.#len = 0;
  }
}
