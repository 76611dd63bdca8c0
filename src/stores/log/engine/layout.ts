// The segments of a store in seq order (FORMAT.md §2.2, §5): what every role of the engine reads.
import type { FileSystem } from '../../../fs/file-system.js';
import { SEGMENT_VERSION_SCHEDULED } from './format.js';
import type { SealInfo } from './segment.js';
import { lowerBound } from '../../../lib/lower-bound.js';

/** One segment file as the engine knows it. */
export interface Segment {
  readonly base: number;
  readonly name: string;
  readonly path: string;
  /** File size (for the active segment: the write position). */
  bytes: number;
  /** Present once the segment ends in a SEAL record. */
  seal: SealInfo | null;
  readonly compacted: boolean;
  /** The header's format version: 2 when the segment may hold items with a priority or a not-before time (FORMAT §8). */
  readonly version: number;
  /** A read descriptor, opened by the reader on first use (-1 until then). */
  readFd: number;
  /** Set when the segment left the layout (deleted or replaced); readers re-seek. */
  retired: boolean;
}

/** A segment as the layout holds it, from what is known of its file: not yet opened for reading, not retired. */
export function newSegment(file: Omit<Segment, 'readFd' | 'retired'>): Segment {
  return {
    base: file.base,
    name: file.name,
    path: file.path,
    bytes: file.bytes,
    seal: file.seal,
    compacted: file.compacted,
    version: file.version,
    readFd: -1,
    retired: false,
  };
}

/**
 * The live segments, oldest first; the last one is the active segment (sealed only while a roll
 * is in flight), so the list is never empty once the store is open. Owned by the store and
 * changed only by the writer (a roll adds one), maintenance (deleting and replacing sealed ones,
 * the last one excepted: `sealedRun`) and recovery (the initial list).
 */
export class SegmentLayout {
  list: Segment[] = [];

  constructor(private readonly fs: FileSystem) {}

  get active(): Segment {
    return this.list[this.list.length - 1]!;
  }

  get first(): Segment {
    return this.list[0]!;
  }

  /** The segment that holds `seq`: the last with base <= seq, or the first. */
  segmentFor(seq: number): Segment {
    const list = this.list;
    const after = lowerBound(0, list.length, (i) => list[i]!.base <= seq);
    return list[Math.max(0, after - 1)]!;
  }

  /** The segment after `seg`, or null when it is the last (or no longer in the layout). */
  after(seg: Segment): Segment | null {
    const idx = this.list.indexOf(seg);
    return idx >= 0 && idx + 1 < this.list.length ? this.list[idx + 1]! : null;
  }

  /**
   * The first seq of the oldest segment that may hold an item with a priority or a not-before
   * time (version 2), or null when none may. Every such item is written only into such a segment
   * (FORMAT §8), so no scheduled item lies below it; nothing is read to find it.
   */
  scheduledBase(): number | null {
    for (const s of this.list) if (s.version >= SEGMENT_VERSION_SCHEDULED) return s.base;
    return null;
  }

  /**
   * The leading run of sealed segments that maintenance may delete or rewrite: never the last
   * segment. A sealed last segment is the one a roll in flight is leaving, before the next one is
   * durably created: it is the active segment every reader of the layout finds, and on disk it is
   * what tells recovery where seqs go on (its seal's end seq). Deleted then, a crash before the
   * new segment's header is durable would leave a store with no segment whose cursor describes
   * data. The roll starts maintenance again once the new segment is in the layout.
   */
  sealedRun(): Segment[] {
    const run: Segment[] = [];
    for (let i = 0; i < this.list.length - 1; i++) {
      const s = this.list[i]!;
      if (s.seal === null) break;
      run.push(s);
    }
    return run;
  }

  /** Replace the first `count` segments with `replacement` (none to just drop them); they are retired. */
  replaceFront(count: number, replacement: Segment | null): void {
    const gone = this.list.slice(0, count);
    this.list = replacement === null ? this.list.slice(count) : [replacement, ...this.list.slice(count)];
    for (const s of gone) this.retire(s);
  }

  /** Replace the active segment by `replacement` (same base, a new file renamed over it); the old one is retired. */
  replaceActive(replacement: Segment): void {
    const old = this.active;
    this.list = [...this.list.slice(0, -1), replacement];
    this.retire(old);
  }

  private retire(s: Segment): void {
    s.retired = true;
    if (s.readFd >= 0) closeQuietly(this.fs, s.readFd);
    s.readFd = -1;
  }

  /** Close every read descriptor (the store is closing). */
  release(): void {
    for (const s of this.list) {
      if (s.readFd >= 0) closeQuietly(this.fs, s.readFd);
      s.readFd = -1;
    }
  }
}

export function closeQuietly(fs: FileSystem, fd: number): void {
  try {
    fs.close(fd);
  } catch {
    // Closing a descriptor whose data is already durable cannot lose anything.
  }
}
