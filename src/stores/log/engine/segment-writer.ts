// Writes FORMAT.md §2 (segment files), §3.1 (ITEM frames) and §3.2 (SEAL); the roll protocol is in docs/internals/engine.md "Write path".
/**
 * The segment writer: the active segment's write descriptor, its position and counters, the
 * preallocated zeros ahead of it, sealing and rolling. It writes and reports; whether a batch is
 * synced is the caller's decision. The syncs it does itself belong to the roll protocol: a sealed
 * segment is durable before the next one exists, and a new segment's header and directory entry
 * are durable before any record goes in.
 */
import { join } from 'node:path';
import type { FileSystem } from '../../../fs/file-system.js';
import type { StoredItem } from '../../../contract/store.js';
import { errnoCode, type Durability } from './durability.js';
import { FRAME_HEADER_BYTES, RECORD_ITEM, SEGMENT_HEADER_BYTES, SEGMENT_VERSION_PLAIN, TMP_SUFFIX, segmentName } from './format.js';
import { encodeFrame, encodeScheduledItemFrame } from './frame.js';
import { itemMetaBytes } from './item-meta.js';
import { closeQuietly, newSegment, type Segment, type SegmentLayout } from './layout.js';
import type { ResolvedOptions } from './options.js';
import { encodeSealFrame, encodeSegmentHeader, type SealInfo } from './segment.js';
import { assertStore } from './assert.js';

/** Zeros written ahead of the active segment's write position at a time (`preallocate`). */
const PREALLOCATE_STEP_BYTES = 4 * 1024 * 1024;
const ZEROS = new Uint8Array(1024 * 1024);

/** What the active segment holds, for its SEAL record. */
export interface ActiveCounts {
  readonly records: number;
  readonly firstSeq: number;
  readonly lastSeq: number;
  /** The lowest segment version that holds every record (`itemSegmentVersion`): 1 while they are plain. */
  readonly need: number;
}

const EMPTY: ActiveCounts = { records: 0, firstSeq: 0, lastSeq: 0, need: SEGMENT_VERSION_PLAIN };

/**
 * The version of the segment that follows one whose records needed version `need`: a store that
 * schedules (keys, groups) items keeps writing version 2 (3, 4), so it does not roll at each
 * segment's first such item, and one that stopped goes back to the lowest version that holds what
 * it writes, which older releases read, after one segment.
 */
export function nextSegmentVersion(need: number): number {
  return need;
}

export class SegmentWriter {
  /** The active segment's read-write descriptor; -1 inside a roll, between seal and creation. */
  #fd = -1;
  #records = 0;
  #firstSeq = 0;
  #lastSeq = 0;
  /** The lowest version that holds every record of the active segment. */
  #need = SEGMENT_VERSION_PLAIN;
  /** Size of the active segment file: the write position plus preallocated zeros. */
  #fileBytes = 0;
  /** The seq the next appended item must carry. */
  nextSeq = 1;
  /**
   * A reused encode buffer, a plain Uint8Array: a FileSystem that keeps `buffer.slice(...)` of a
   * write gets a copy, whereas Buffer#slice would alias memory overwritten by the next batch.
   */
  #buf = new Uint8Array(64 * 1024);

  constructor(
    private readonly fs: FileSystem,
    private readonly dir: string,
    private readonly opts: ResolvedOptions,
    private readonly durability: Durability,
    private readonly layout: SegmentLayout,
  ) {}

  get fd(): number {
    return this.#fd;
  }

  /** Bytes of preallocated zeros past the write position. */
  get preallocatedBytes(): number {
    return Math.max(0, this.#fileBytes - this.layout.active.bytes);
  }

  /** Make `seg` (the last of the layout) the active segment, written through `fd`, holding `counts`. */
  start(seg: Segment, fd: number, counts: ActiveCounts = EMPTY): void {
    assertStore(seg === this.layout.active, 'the started segment is the last of the layout');
    this.#fd = fd;
    this.#fileBytes = seg.bytes;
    this.#records = counts.records;
    this.#firstSeq = counts.firstSeq;
    this.#lastSeq = counts.lastSeq;
    this.#need = counts.need;
    this.durability.resetFlushed();
  }

  /**
   * The batch does not fit the active segment, which already holds records; or it needs a segment
   * version (`need`: 2 for a scheduled item, 3 for a keyed one, 4 for a grouped one) the active segment's version is
   * below (FORMAT §8): a header is never rewritten in place, so the store rolls to a new segment.
   */
  needsRoll(bytes: number, need: number): boolean {
    if (this.layout.active.version < need) return true;
    return this.layout.active.bytes + bytes > this.opts.segmentBytes && this.#records > 0;
  }

  /** fdatasync the active segment. */
  /** fdatasync the active segment; `single`: the sync covers one operation (`Durability.syncFd`). */
  syncActive(single = false): Promise<void> {
    // No active fd only inside a roll, between the sealed segment (already fdatasynced) and the
    // durable creation of the next one: a checkpoint or a store sync taken meanwhile has nothing
    // left to sync here.
    if (this.#fd < 0) return this.durability.failure !== null ? Promise.reject(this.durability.failure) : Promise.resolve();
    return this.durability.syncData(this.#fd, single);
  }

  /**
   * Append `items` (`bytes` of frames) with one positional write. Returns null when written, or the
   * rejection: ERR_STORE_FULL (cut back durably, nothing of the batch kept) or a fail-stop.
   * `willSync` says whether the caller syncs the batch, which is when preallocation pays.
   */
  write(items: readonly StoredItem[], bytes: number, willSync: boolean, need: number): Promise<never> | null {
    if (this.#buf.length < bytes) this.#buf = new Uint8Array(Math.max(bytes, this.#buf.length * 2));
    const buf = this.#buf;
    let pos = 0;
    if (need === SEGMENT_VERSION_PLAIN) {
      for (let i = 0; i < items.length; i++) {
        const it = items[i]!;
        pos = encodeFrame(buf, pos, it.seq, RECORD_ITEM, it.bytes);
      }
    } else {
      if (this.layout.active.version < need)
        return this.durability.fail(
          new Error(
            `items needing segment version ${need} written into ${this.layout.active.name}, a version-${this.layout.active.version} segment`,
          ),
        );
      for (let i = 0; i < items.length; i++) {
        const it = items[i]!;
        const meta = itemMetaBytes(it);
        pos = meta === 0 ? encodeFrame(buf, pos, it.seq, RECORD_ITEM, it.bytes) : encodeScheduledItemFrame(buf, pos, it, meta);
      }
    }
    if (pos !== bytes) return this.durability.fail(new Error(`encoder wrote ${pos} bytes, expected ${bytes}`));
    const active = this.layout.active;
    const at = active.bytes;
    try {
      this.fs.write(this.#fd, buf, 0, bytes, at);
    } catch (e) {
      return this.#writeFailed(e, at, `append to ${active.name}`);
    }
    active.bytes = at + bytes;
    if (this.#fileBytes < at + bytes) this.#fileBytes = at + bytes;
    // Only batches that will be synced benefit; under `none` the zeros would double the bytes written.
    if (willSync && this.opts.preallocate && this.#fileBytes - active.bytes < FRAME_HEADER_BYTES + bytes) {
      const failed = this.#preallocate();
      if (failed !== null) return failed;
    }
    if (this.#records === 0) this.#firstSeq = items[0]!.seq;
    this.#records += items.length;
    if (need > this.#need) this.#need = need;
    this.#lastSeq = items[items.length - 1]!.seq;
    this.nextSeq = this.#lastSeq + 1;
    return null;
  }

  /** The frames of the batch `write()` wrote last (`bytes` long), until the next write. */
  written(bytes: number): Uint8Array {
    return this.#buf.subarray(0, bytes);
  }

  #writeFailed(e: unknown, at: number, what: string): Promise<never> {
    if (errnoCode(e) !== 'ENOSPC') return this.durability.fail(e);
    this.#fileBytes = at;
    return this.durability.cutBack(this.#fd, at, what, e);
  }

  /**
   * Extend the active segment with zeros up to PREALLOCATE_STEP_BYTES ahead (not past
   * `segmentBytes`). The next fdatasync commits the new size once; later ones find the blocks
   * allocated. ENOSPC here only stops preallocating: the batch itself is already written.
   */
  #preallocate(): Promise<never> | null {
    const active = this.layout.active;
    const from = this.#fileBytes;
    const to = Math.min(this.opts.segmentBytes, active.bytes + PREALLOCATE_STEP_BYTES);
    let pos = from;
    try {
      while (pos < to) {
        const n = Math.min(ZEROS.length, to - pos);
        this.fs.write(this.#fd, ZEROS, 0, n, pos);
        pos += n;
      }
    } catch (e) {
      if (errnoCode(e) !== 'ENOSPC') return this.durability.fail(e);
      try {
        this.fs.truncate(this.#fd, active.bytes);
      } catch (e2) {
        return this.durability.fail(e2);
      }
      this.#fileBytes = active.bytes;
      return null;
    }
    this.#fileBytes = Math.max(from, to);
    return null;
  }

  /** Cut the preallocated zeros off the active segment (before sealing it, and at a clean close). */
  trimPreallocation(): void {
    const active = this.layout.active;
    if (this.#fileBytes > active.bytes) {
      this.fs.truncate(this.#fd, active.bytes);
      this.#fileBytes = active.bytes;
    }
  }

  /**
   * Seal the active segment with `endSeq`, then create the next segment durably and make it
   * active: the version the batch waiting for it needs (`need`), or the one `nextSegmentVersion`
   * gives after the sealed segment, whichever is higher.
   */
  async roll(endSeq: number, need: number = SEGMENT_VERSION_PLAIN): Promise<void> {
    const version = Math.max(need, nextSegmentVersion(this.#need));
    await this.seal(endSeq);
    this.detach();
    const { seg, fd } = await this.createSegment(endSeq, version);
    this.layout.list.push(seg);
    this.start(seg, fd);
    if (this.nextSeq < endSeq) this.nextSeq = endSeq;
  }

  /**
   * Make the active segment take a batch that did not fit it (`needsRoll`): roll to the next
   * segment, or, when the active segment holds no record yet and the batch needs a higher version
   * (`need`; the next segment would have the same base, hence the same name), replace it by an
   * empty segment of that version.
   */
  async makeRoom(need: number): Promise<void> {
    const active = this.layout.active;
    if (this.#records === 0 && active.base === this.nextSeq && active.version < need) return this.#replaceEmpty(need);
    return this.roll(this.nextSeq, need);
  }

  /**
   * Replace the empty active segment by an empty one of `version` and the same base, atomically (a
   * header is never rewritten in place): write `<name>.tmp`, fsync it, rename it over the segment,
   * fsync the directory. A crash before the directory fsync leaves either the old segment, empty,
   * and a stray tmp file that open deletes, or (once the rename reached the disk) the new segment,
   * empty, and no tmp file; either is a valid empty active segment, since no record goes in before
   * this resolves.
   */
  async #replaceEmpty(version: number): Promise<void> {
    const old = this.layout.active;
    const tmp = old.path + TMP_SUFFIX;
    const header = encodeSegmentHeader({ flags: 0, baseSeq: old.base, replacesEndSeq: 0, version });
    let fd: number;
    try {
      if (this.fs.stat(tmp) !== null) this.fs.unlink(tmp);
      fd = this.fs.open(tmp, 'create', this.opts.fileMode);
    } catch (e) {
      throw this.durability.markFailed(e);
    }
    try {
      this.fs.write(fd, header, 0, header.length, 0);
      await this.durability.syncFd(fd, false);
      this.fs.rename(tmp, old.path);
      await this.fs.fsyncDir(this.dir);
    } catch (e) {
      this.durability.closeWhenIdle(fd);
      throw this.durability.markFailed(e);
    }
    this.detach();
    const seg = newSegment({
      base: old.base,
      name: old.name,
      path: old.path,
      bytes: SEGMENT_HEADER_BYTES,
      seal: null,
      compacted: false,
      version,
    });
    this.layout.replaceActive(seg);
    this.start(seg, fd);
  }

  /**
   * Give up the active segment's fd once its data is durable (after a seal): closed when no sync
   * is pending on it. Forgotten at once: if creating the next segment fails, close() must not
   * close that number again (by then it may belong to another file).
   */
  detach(): void {
    this.durability.closeWhenIdle(this.#fd);
    this.#fd = -1;
  }

  /** Write the SEAL record (FORMAT §3.2) at the end of the active segment, trim, fdatasync. */
  async seal(endSeq: number): Promise<void> {
    const old = this.layout.active;
    const counted = this.#records > 0;
    const seal: SealInfo = {
      recordCount: this.#records,
      firstSeq: counted ? this.#firstSeq : 0,
      lastSeq: counted ? this.#lastSeq : 0,
      endSeq,
    };
    const frame = encodeSealFrame(seal);
    try {
      this.fs.write(this.#fd, frame, 0, frame.length, old.bytes);
    } catch (e) {
      return this.#writeFailed(e, old.bytes, `seal ${old.name}`);
    }
    old.bytes += frame.length;
    // A sealed segment ends exactly at its seal: the preallocated zeros go before the sync.
    if (this.#fileBytes < old.bytes) this.#fileBytes = old.bytes;
    try {
      this.trimPreallocation();
    } catch (e) {
      return this.durability.fail(e);
    }
    await this.syncActive();
    old.seal = seal;
  }

  /**
   * Create a segment file: header, fsync file, fsync directory. On failure the new fd is closed
   * here and the instance fails; recovery deletes or keeps the file by the interrupted-creation
   * rule (FORMAT §6.2).
   */
  async createSegment(base: number, version: number): Promise<{ seg: Segment; fd: number }> {
    const name = segmentName(base);
    const path = join(this.dir, name);
    const header = encodeSegmentHeader({ flags: 0, baseSeq: base, replacesEndSeq: 0, version });
    let fd: number;
    try {
      fd = this.fs.open(path, 'create', this.opts.fileMode);
    } catch (e) {
      throw this.durability.markFailed(e);
    }
    try {
      this.fs.write(fd, header, 0, header.length, 0);
      await this.durability.syncFd(fd, false);
      await this.fs.fsyncDir(this.dir);
    } catch (e) {
      this.durability.closeWhenIdle(fd);
      throw this.durability.markFailed(e);
    }
    return { seg: newSegment({ base, name, path, bytes: SEGMENT_HEADER_BYTES, seal: null, compacted: false, version }), fd };
  }

  /** Read `[from, to)` of the active segment and write the same bytes back (recovery, FORMAT §6.2). */
  rewriteTail(from: number, to: number): void {
    const chunk = new Uint8Array(Math.min(1024 * 1024, Math.max(0, to - from)));
    for (let pos = from; pos < to; ) {
      const n = readFully(this.fs, this.#fd, chunk, 0, Math.min(chunk.length, to - pos), pos);
      if (n === 0) break;
      this.fs.write(this.#fd, chunk, 0, n, pos);
      pos += n;
    }
  }

  release(): void {
    if (this.#fd >= 0) closeQuietly(this.fs, this.#fd);
    this.#fd = -1;
  }
}

export function readFully(fs: FileSystem, fd: number, buf: Uint8Array, offset: number, length: number, position: number): number {
  let got = 0;
  while (got < length) {
    const n = fs.read(fd, buf, offset + got, length - got, position + got);
    if (n === 0) break;
    got += n;
  }
  return got;
}
