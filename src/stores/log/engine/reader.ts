// Reads FORMAT.md §3 frames forward through the segments (§6.3: errors found while reading).
/**
 * The consumer's reader: a forward position in one segment, read ahead in chunks, and a bounded
 * cache of just-appended batches so that a caught-up consumer never reads the disk. Reads are
 * synchronous (`tryReserve()` is served from them).
 */
import { ByteArena } from '../../../lib/bytes.js';
import { QueueError } from '../../../contract/errors.js';
import type { FileSystem } from '../../../fs/file-system.js';
import type { ReadRange, StoredItem } from '../../../contract/store.js';
import { invariantViolated } from './assert.js';
import type { AckSet } from './cursor.js';
import { FRAME_HEADER_BYTES, FRAME_OFF_LENGTH, FRAME_OFF_SEQ, RECORD_SEAL, SEGMENT_HEADER_BYTES, readU32, readU64 } from './format.js';
import { payloadOffset } from './frame.js';
import { FileWindow, FrameReader } from './frame-reader.js';
import { MISSING_SEAL, SegmentFrames } from './frame-rules.js';
import { withSchedule } from './item-meta.js';
import type { Segment, SegmentLayout } from './layout.js';
import type { ResolvedOptions } from './options.js';
import { lowerBound } from '../../../lib/lower-bound.js';

export function damaged(seg: Segment, offset: number, reason: string): QueueError {
  return new QueueError('ERR_CORRUPT', `Store file ${seg.name} is damaged at offset ${offset}: ${reason}`, { file: seg.path, offset });
}

/**
 * A batch of plain items kept as the frames it was written as (FORMAT §3): one buffer per batch
 * instead of an object and a view per item. Objects kept for a while outlive the young-generation
 * collections and are copied and promoted; when the cache kept the core's own entries that was
 * most of the collector's time in a `group` push with 64 producers, and about a tenth of its
 * throughput. A read makes the items it returns, short-lived, as a disk read does. (Even so the
 * cache is off by default: see `tailCacheBytes`.)
 */
class FrameBatch {
  constructor(
    readonly first: number,
    readonly count: number,
    readonly frames: Uint8Array,
  ) {}
}

type CachedBatch = readonly StoredItem[] | FrameBatch;

/** The largest run of frames the cache keeps in one buffer (a larger frame is a run of its own). */
const FRAME_RUN_BYTES = 64 * 1024;

function firstSeqOf(batch: CachedBatch): number {
  return batch instanceof FrameBatch ? batch.first : batch[0]!.seq;
}

/** Appended batches kept in memory, oldest first, up to `tailCacheBytes`. */
class TailCache {
  #batches: (CachedBatch | null)[] = [];
  #batchBytes: number[] = [];
  #head = 0;
  #bytes = 0;
  /** Copies of the frames of plain batches, in slabs of the cache's own. */
  readonly #arena = new ByteArena();

  constructor(private readonly maxBytes: number) {}

  /** First cached seq, or Infinity. */
  get firstSeq(): number {
    return this.#head < this.#batches.length ? firstSeqOf(this.#batches[this.#head]!) : Infinity;
  }

  /**
   * Keep `items` (`bytes` of frames). `frames`, when given, is that batch as written, every item
   * a plain one: the cache keeps a copy of it instead of the items.
   */
  add(items: readonly StoredItem[], bytes: number, frames: Uint8Array | null): void {
    if (this.maxBytes === 0) return;
    if (frames === null) {
      // Whole batches: O(1) per append instead of per item. The core may reuse its array.
      this.#batches.push(items.slice());
      this.#batchBytes.push(bytes);
      this.#bytes += bytes;
    } else {
      this.#addFrames(items[0]!.seq, frames);
    }
    while (this.#bytes > this.maxBytes && this.#head < this.#batches.length) {
      this.#bytes -= this.#batchBytes[this.#head]!;
      this.#batches[this.#head] = null;
      this.#head++;
    }
    if (this.#head > 1024 && this.#head * 2 > this.#batches.length) {
      this.#batches = this.#batches.slice(this.#head);
      this.#batchBytes = this.#batchBytes.slice(this.#head);
      this.#head = 0;
    }
  }

  /**
   * Keep `frames` (plain items from `first` on) in runs of whole frames of at most
   * FRAME_RUN_BYTES (or one frame, when larger), each copied into a buffer of its own or a shared
   * slab: an item handed out keeps at most its run alive, as a slab copy would.
   */
  #addFrames(first: number, frames: Uint8Array): void {
    let start = 0;
    let at = 0;
    let seq = first;
    let count = 0;
    while (at < frames.length) {
      const next = at + FRAME_HEADER_BYTES + readU32(frames, at + FRAME_OFF_LENGTH);
      if (count > 0 && next - start > FRAME_RUN_BYTES) {
        this.#keepRun(seq, count, frames.subarray(start, at));
        seq += count;
        count = 0;
        start = at;
      }
      count++;
      at = next;
    }
    if (at !== frames.length) invariantViolated(`tail cache: frames end at ${at}, the batch at ${frames.length}`);
    this.#keepRun(seq, count, frames.subarray(start, at));
  }

  #keepRun(first: number, count: number, frames: Uint8Array): void {
    this.#batches.push(new FrameBatch(first, count, this.#arena.copy(frames)));
    this.#batchBytes.push(frames.length);
    this.#bytes += frames.length;
  }

  /** Unacked items with `from <= seq < before` into `out`, up to `limit` in total. */
  read(from: number, before: number, limit: number, acks: AckSet, out: StoredItem[]): void {
    if (this.#head >= this.#batches.length) return;
    // Appended seqs are consecutive within one session: find the batch holding `from` by its
    // first seq, then walk forward.
    const batches = this.#batches;
    // The last batch from the head whose first seq is at most `from` (the head when none is).
    const lo = Math.max(this.#head, lowerBound(this.#head, batches.length, (i) => firstSeqOf(batches[i]!) <= from) - 1);
    for (let b = lo; b < this.#batches.length; b++) {
      const batch = this.#batches[b]!;
      if (batch instanceof FrameBatch) {
        if (!readFrames(batch, from, before, limit, acks, out)) return;
        continue;
      }
      for (let i = Math.max(0, from - batch[0]!.seq); i < batch.length; i++) {
        const item = batch[i]!;
        if (item.seq >= before || out.length >= limit) return;
        if (!acks.has(item.seq)) out.push(item);
      }
    }
  }
}

/**
 * The unacked items of `batch` with `from <= seq < before` into `out`, up to `limit` in total,
 * each a view into the batch's frames. False once the range or the limit is reached.
 */
function readFrames(batch: FrameBatch, from: number, before: number, limit: number, acks: AckSet, out: StoredItem[]): boolean {
  const frames = batch.frames;
  let at = 0;
  for (let i = 0; i < batch.count; i++) {
    const seq = batch.first + i;
    const length = readU32(frames, at + FRAME_OFF_LENGTH);
    if (seq >= from) {
      if (seq >= before || out.length >= limit) return false;
      if (readU64(frames, at + FRAME_OFF_SEQ) !== seq)
        invariantViolated(`tail cache frame of seq ${readU64(frames, at + FRAME_OFF_SEQ)} where ${seq} was kept`);
      if (!acks.has(seq)) out.push({ seq, bytes: new Uint8Array(frames.buffer, frames.byteOffset + at + FRAME_HEADER_BYTES, length) });
    }
    at += FRAME_HEADER_BYTES + length;
  }
  return true;
}

export class LogReader {
  #seg: Segment | null = null;
  #frames: FrameReader | null = null;
  #rules: SegmentFrames | null = null;
  /** Copies of the payloads read from disk (scheduled items, or all with `zeroCopyReads: false`), in slabs of this store's own. */
  readonly #arena = new ByteArena();
  readonly #cache: TailCache;
  /** Damage met by a read that returned the items before it; every later read throws it. */
  #damage: QueueError | null = null;

  constructor(
    private readonly fs: FileSystem,
    private readonly opts: ResolvedOptions,
    private readonly layout: SegmentLayout,
  ) {
    this.#cache = new TailCache(opts.tailCacheBytes);
  }

  /**
   * Just-appended items, kept so a caught-up consumer reads them without disk I/O. `frames` is the
   * batch as written when every item in it is a plain one (no metadata), else null.
   */
  /** Whether the store keeps a tail cache (`tailCacheBytes` > 0): without one, `appended` need not be called. */
  get caching(): boolean {
    return this.opts.tailCacheBytes > 0;
  }

  appended(items: readonly StoredItem[], bytes: number, frames: Uint8Array | null): void {
    this.#cache.add(items, bytes, frames);
  }

  read(range: ReadRange, acks: AckSet, nextSeq: number): StoredItem[] {
    if (this.#damage !== null) throw this.#damage;
    const out: StoredItem[] = [];
    const { before, limit } = range;
    let from = range.after + 1;
    if (limit <= 0 || from >= before || from >= nextSeq) return out;
    const cacheFirst = this.#cache.firstSeq;
    if (from < cacheFirst) {
      // Disk, up to where the cache starts. Damage met after some items were collected ends the
      // batch there; the next read starts at the damage and throws.
      try {
        this.#readDisk(from, Math.min(before, cacheFirst), limit, acks, out);
      } catch (e) {
        if (out.length > 0 && e instanceof QueueError && e.code === 'ERR_CORRUPT') {
          // The items before the damage are returned; the next read reports the damage, even
          // when the segment index would let it seek past (damage in a SEAL after the last item).
          this.#damage = e;
          return out;
        }
        throw e;
      }
      if (out.length >= limit || cacheFirst >= before) return out;
      from = cacheFirst;
    }
    this.#cache.read(from, before, limit, acks, out);
    return out;
  }

  #open(seg: Segment): FrameReader {
    if (seg.readFd < 0) seg.readFd = this.fs.open(seg.path, 'read');
    this.#seg = seg;
    this.#rules = new SegmentFrames(seg.base, seg.compacted, seg.version, seg.seal);
    this.#frames = new FrameReader(
      new FileWindow(this.fs, seg.readFd, seg.bytes, this.opts.readAheadBytes),
      SEGMENT_HEADER_BYTES,
      this.#rules,
    );
    return this.#frames;
  }

  /** Read unacked items with `from <= seq < before` from disk into `out`, up to `limit` in total. */
  #readDisk(from: number, before: number, limit: number, acks: AckSet, out: StoredItem[]): void {
    let seg = this.#seg;
    let frames = this.#frames;
    const rules0 = this.#rules;
    // Keep the forward position when `from` lies ahead of it in the same segment; otherwise seek
    // through the segment index (base seq -> segment) and scan from that segment's start.
    // `from < seg.base` too: after crossing a seal into the next segment the reader has read no
    // record there yet, so a read that starts further back must re-seek.
    if (
      seg === null ||
      frames === null ||
      rules0 === null ||
      seg.retired ||
      rules0.lastSeq >= from ||
      from < seg.base ||
      (seg.seal !== null && seg.seal.endSeq <= from)
    ) {
      seg = this.layout.segmentFor(from);
      frames = this.#open(seg);
    }
    for (;;) {
      const rules = this.#rules!;
      // For the active segment: up to the write position, never past it. A segment opened while
      // active may have been sealed since: its SEAL must then match the seal the roll wrote.
      frames.win.size = seg.bytes;
      rules.expectedSeal = seg.seal;
      const verdict = frames.next();
      if (verdict === 'end') {
        if (rules.seal === null) {
          if (seg === this.layout.active) return; // caught up with the writer
          throw damaged(seg, frames.offset, MISSING_SEAL);
        }
        // Past a seal. A roll in progress (the next segment not created yet): caught up.
        const next = this.layout.after(seg);
        if (next === null) {
          if (seg === this.layout.active) return;
          throw damaged(seg, frames.offset, 'no segment after a sealed one');
        }
        seg = next;
        frames = this.#open(seg);
        continue;
      }
      if (verdict !== 'record') throw damaged(seg, frames.offset, frames.reason());
      const h = frames.h;
      if (h.type === RECORD_SEAL) {
        frames.accept();
        continue;
      }
      if (h.seq >= before) return; // the position stays on this record
      const at = frames.at;
      frames.accept();
      if (h.seq >= from && !acks.has(h.seq)) {
        if (out.length > 0 && out[out.length - 1]!.seq >= h.seq) invariantViolated(`disk read of seq ${h.seq} out of order`);
        const p = payloadOffset(at, h);
        const win = frames.win;
        const s = rules.schedule;
        let bytes: Uint8Array;
        if (this.opts.zeroCopyReads && s.priority === 0 && s.notBefore === 0) {
          // A view into the chunk just read and checked: the window never writes into it again.
          bytes = new Uint8Array(win.buf.buffer, win.buf.byteOffset + p, h.length);
          win.lent = true;
        } else {
          // A copy into a shared slab (src/lib/bytes.ts): far cheaper than one ArrayBuffer per item.
          // Scheduled items are copied: the queue holds them until they are due, and a view would
          // keep a whole chunk of mostly other items alive for that long.
          bytes = this.#arena.copy(win.buf.subarray(p, p + h.length));
        }
        out.push(withSchedule(h.seq, bytes, s));
        if (out.length >= limit) return;
      }
    }
  }

  release(): void {
    this.#seg = null;
    this.#frames = null;
    this.#rules = null;
  }
}
