// Implements the key recovery of FORMAT.md §4.6: the keys of ITEM frames (§3.1) written after the checkpoint.
/**
 * At open, the keys of a LogStore come from two places: the durable checkpoint holds every key of
 * an item below its `nextSeq`, and the ITEM frames of version-3 segments hold the keys of the
 * items written since. Only those frames are read: segments of version 1 or 2 hold no key, and
 * frames below the checkpoint's `nextSeq` add nothing to it, so a store without keys, or one
 * closed cleanly, reads no record here.
 */
import type { FileSystem } from '../../../fs/file-system.js';
import type { KeyTable } from '../../../contract/records/keys.js';
import type { SpoolProgress } from './spool-progress.js';
import type { ScheduleTable } from '../../../contract/schedule-table.js';
import { RECORD_ITEM, SEGMENT_HEADER_BYTES, SEGMENT_VERSION_KEYED } from './format.js';
import { FileWindow, FrameReader } from './frame-reader.js';
import { SegmentFrames } from './frame-rules.js';
import { closeQuietly, type Segment } from './layout.js';
import { damaged } from './reader.js';

/**
 * Add to `out` the key of every ITEM frame with a seq at or above `fromSeq` in the segments of
 * version 3 and 4 of `segments`, to `spool` the spool origin of each (FORMAT §14.3), and to
 * `schedules` the fire of each (FORMAT §4.7).
 */
export function scanKeys(
  fs: FileSystem,
  segments: readonly Segment[],
  fromSeq: number,
  chunkBytes: number,
  out: KeyTable,
  spool?: SpoolProgress,
  schedules?: ScheduleTable,
): void {
  for (const s of segments) {
    if (s.version < SEGMENT_VERSION_KEYED) continue;
    if (s.seal !== null && s.seal.endSeq <= fromSeq) continue;
    const fd = fs.open(s.path, 'read');
    try {
      const rules = new SegmentFrames(s.base, s.compacted, s.version, s.seal);
      const frames = new FrameReader(new FileWindow(fs, fd, s.bytes, chunkBytes), SEGMENT_HEADER_BYTES, rules);
      for (;;) {
        const verdict = frames.next();
        if (verdict === 'end') break;
        // Recovery cut the active segment's tail already: anything but a record here is damage.
        if (verdict !== 'record') throw damaged(s, frames.offset, frames.reason());
        const h = frames.h;
        const key = rules.schedule.key;
        if (h.type === RECORD_ITEM && h.seq >= fromSeq) {
          if (key !== undefined) out.add({ key, seq: h.seq, keyedAt: rules.schedule.keyedAt });
          const origin = rules.schedule.spool;
          if (origin !== undefined) spool?.set(origin.file, origin.record);
          const fired = rules.schedule.fired;
          if (fired !== undefined) schedules?.addFire(fired);
        }
        frames.accept();
      }
    } finally {
      closeQuietly(fs, fd);
    }
  }
}
