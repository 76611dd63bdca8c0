// Reads the frames of FORMAT.md §2–§3 in every segment, going on past damage with the bounded search of §6.1.
/**
 * The walk of `verify` and salvage: every segment of a recovery plan, every frame judged by the
 * one frame reader and its rules, and, unlike open and the consumer's reader, going on after
 * damage. After a damaged frame the reader resynchronises on the next frame that the `validAfter`
 * search of FORMAT §6.1 accepts (CRC-valid, a type that fits, a seq above the last one and within
 * one per header skipped), judges it in full, and the walk goes on from there. So the intact
 * records after the damage are counted (and copied by salvage), and each damaged byte range is
 * reported once, with the unacked seqs whose records it held.
 *
 * A seq is lost when it is unacked, lies below the end of the data (or below the checkpoint's next
 * seq, which was durable), and no intact record holds it. Seqs that a SEAL says its segment has no
 * record of (FORMAT §3.2) do not exist and are not lost.
 */
import type { ScheduleFire, SpoolSource } from '../../../contract/store.js';
import { join } from 'node:path';
import type { FileSystem } from '../../../fs/file-system.js';
import type { OpenError } from '../../../contract/errors.js';
import { AckSet } from './cursor.js';
import {
  CURSOR_FILE,
  MAX_RANGES_PER_RECORD,
  RECORD_ITEM,
  SEAL_FRAME_BYTES,
  SEG_FLAG_COMPACTED,
  SEGMENT_HEADER_BYTES,
  SEGMENT_VERSION_PLAIN,
  classifyEntry,
  parseSegmentName,
} from './format.js';
import { payloadOffset } from './frame.js';
import { FileWindow, FrameReader, resyncBudgetBytes } from './frame-reader.js';
import { MISSING_SEAL, SegmentFrames } from './frame-rules.js';
import { closeQuietly, newSegment } from './layout.js';
import { damaged } from './reader.js';
import { readCursor, type RecoveryPlan } from './recovery-plan.js';
import { decodeSegmentHeader, decodeTrailingSeal, type SealInfo } from './segment.js';
import { readFully } from './segment-writer.js';

/** Seqs `first ..= last`. */
export interface SeqRange {
  readonly first: number;
  readonly last: number;
}

/** One damaged byte range of a segment file. */
export interface DamagedRange {
  /** Path of the segment file. */
  readonly file: string;
  /** First damaged byte: where the last intact frame before it ends. */
  readonly offset: number;
  /** Where intact frames start again, or the file's size when none follows. */
  readonly end: number;
  /** The damage as the consumer's reader and compaction report it (the row of the tail table). */
  readonly reason: string;
  /** The walk found no frame to resume at within the resync search's budget: the rest of the file is unread. */
  readonly budgetSpent: boolean;
  /** Unacked seqs whose records lay in the damaged bytes. */
  readonly lostSeqs: SeqRange[];
  /**
   * The file changed under the walk: it was gone when the walk came to open it, or shorter when the
   * read failed than when the walk opened it. Beside a live writer, the writer's own doing (a segment
   * deleted once all of it was acked, the preallocated zeros cut off before a seal).
   */
  readonly changed?: boolean;
}

/** Bytes at the end of the active segment that open would cut (FORMAT §6.1 rows 4–7): not damage. */
export interface TailCut {
  readonly file: string;
  readonly offset: number;
  readonly bytes: number;
  /** The trailing zero bytes among them (preallocated space or F3 padding): all of them for a zero tail. */
  readonly zeroBytes: number;
}

/** A segment to walk. */
export interface WalkSegment {
  readonly name: string;
  readonly path: string;
  readonly base: number;
  readonly compacted: boolean;
  /** The header's format version (1 when the header is damaged: its metadata then counts for nothing). */
  readonly version: number;
  /** The seal read from the segment's last bytes (null when it has none, or a bad one). */
  readonly seal: SealInfo | null;
  /** The last segment, which may end in a torn or zero tail. */
  readonly active: boolean;
  /** The header's damage, when it cannot be read: `base` then comes from the file name. */
  readonly headerDamage: { readonly offset: number; readonly reason: string } | null;
}

export interface WalkOptions {
  /** Acked seqs, with the seqs sealed segments hold no record of. */
  readonly acks: AckSet;
  /** The lowest seq that should be in the segments unless acked. */
  readonly firstSeq: number;
  /** Records below this seq were durable (the checkpoint's next seq): a tail before them is damage. */
  readonly durableNextSeq: number;
  readonly chunkBytes: number;
  /**
   * Another process holds the store: the active segment is read with the tail table's
   * `liveWriter` input, so its write in progress ends the data seen instead of being damage or a
   * torn tail.
   */
  readonly liveWriter?: boolean;
}

/** An intact ITEM record. `payload` is a view into the walk's read window, valid until the walk moves on. */
export interface WalkRecord {
  readonly seq: number;
  readonly payload: Uint8Array;
  /** The item's priority and not-before time, 0 when it has none (FORMAT §3.1). */
  readonly priority: number;
  readonly notBefore: number;
  /** The spool record an ingested item came from (FORMAT §14.3), or undefined. */
  readonly spool: SpoolSource | undefined;
  /** The item's group (FORMAT §3.1), or undefined. */
  readonly group: string | undefined;
  /** The schedule slot the item was fired for (FORMAT §3.1), or undefined. */
  readonly fired: ScheduleFire | undefined;
}

/**
 * Every segment file of the store in chain order: those of `plan`, and those it left out and a walk
 * can still read. The plan leaves out the last segment of its layout when its scan met damage (open
 * fails there), and a segment whose header it cannot read (open fails there too). Both still hold
 * records, and the seqs in them are unacked items: the walk goes through them, so their intact
 * records are copied and the rest are counted lost, never dropped unreported. A segment whose
 * header is damaged is walked with the base seq its file name gives (the header's must equal it,
 * FORMAT §5), as a plain segment (its COMPACTED flag cannot be trusted, and taking gaps for acks
 * would hide losses), and its header is reported as damage. Only the last file walked is active;
 * the others must end in a SEAL, read from their last bytes as the plan reads it.
 */
export function walkSegments(fs: FileSystem, dir: string, plan: RecoveryPlan): WalkSegment[] {
  const planned: WalkSegment[] = plan.segments.map((s) => ({
    name: s.name,
    path: s.path,
    base: s.base,
    compacted: s.compacted,
    version: s.version,
    seal: s.seal,
    active: false,
    headerDamage: null,
  }));
  const skip = new Set([...plan.stray, ...plan.superseded, ...plan.segments.map((s) => s.name)]);
  const names = plan.names.filter((n) => classifyEntry(n) === 'segment' && !skip.has(n));
  const left: WalkSegment[] = [];
  for (const name of names) {
    const seg = leftOutSegment(fs, dir, name);
    if (seg !== null) left.push(seg);
  }
  const out = [...planned, ...left].sort((a, b) => a.base - b.base);
  const last = out.length - 1;
  return out.map((seg, i) => {
    if (i === last) {
      // The plan judged its own last segment as the active one; a segment walked after it makes it sealed.
      const active = planned.includes(seg) ? plan.activeScan !== null && seg.name === plan.segments.at(-1)?.name : true;
      return { ...seg, active };
    }
    return seg.seal !== null || planned.includes(seg) ? seg : { ...seg, seal: trailingSeal(fs, seg) };
  });
}

/**
 * A segment the plan left out, as the walk reads it: with its header when the header is sound,
 * else with the base its name gives and the header's damage. Null for a segment of a newer
 * version (the plan reported it; this version cannot read its records).
 */
function leftOutSegment(fs: FileSystem, dir: string, name: string): WalkSegment | null {
  const path = join(dir, name);
  const base = parseSegmentName(name)!;
  const plain: WalkSegment = {
    name,
    path,
    base,
    compacted: false,
    version: SEGMENT_VERSION_PLAIN,
    seal: null,
    active: false,
    headerDamage: null,
  };
  let fd: number;
  try {
    fd = fs.open(path, 'read');
  } catch {
    return plain; // the plan reported it unreadable; the walk reports what reading it does now
  }
  try {
    const buf = new Uint8Array(SEGMENT_HEADER_BYTES);
    const size = fs.size(fd);
    const h = decodeSegmentHeader(buf.subarray(0, readFully(fs, fd, buf, 0, Math.min(size, SEGMENT_HEADER_BYTES), 0)), size);
    if (!('kind' in h)) return { ...plain, base: h.baseSeq, compacted: (h.flags & SEG_FLAG_COMPACTED) !== 0, version: h.version };
    if (h.kind === 'unsupported') return null;
    return { ...plain, headerDamage: { offset: h.offset, reason: `segment header: ${h.reason}` } };
  } catch {
    return plain;
  } finally {
    closeQuietly(fs, fd);
  }
}

/** The SEAL in the last bytes of `seg`, when there is a valid one (FORMAT §3.2), as the plan reads a sealed segment's. */
function trailingSeal(fs: FileSystem, seg: WalkSegment): SealInfo | null {
  let fd = -1;
  try {
    fd = fs.open(seg.path, 'read');
    const size = fs.size(fd);
    if (size < SEGMENT_HEADER_BYTES + SEAL_FRAME_BYTES) return null;
    const buf = new Uint8Array(SEAL_FRAME_BYTES);
    readFully(fs, fd, buf, 0, SEAL_FRAME_BYTES, size - SEAL_FRAME_BYTES);
    const seal = decodeTrailingSeal(buf);
    // A seal whose records start below the base does not belong to this segment (file check 11).
    return seal !== null && !(seal.recordCount > 0 && seal.firstSeq < seg.base) ? seal : null;
  } catch {
    return null; // the walk's own read reports the error
  } finally {
    if (fd >= 0) closeQuietly(fs, fd);
  }
}

/**
 * The lost seqs, in order: the walk reports every seq it has accounted for, and those below it
 * that are neither acked nor held by an intact record are lost. Seqs only ever move forward.
 */
class LossLedger {
  readonly lost: SeqRange[] = [];
  count = 0;
  #next: number;
  /** Index of the first ack range that may still matter (ranges only ever get behind `#next`). */
  #range = 0;

  constructor(
    private readonly acks: AckSet,
    first: number,
  ) {
    this.#next = Math.max(first, 1);
  }

  /** Every seq below `seq` is accounted for: returns those that are lost (and adds them to `lost`). */
  lostBelow(seq: number): SeqRange[] {
    const found: SeqRange[] = [];
    const { starts, ends } = this.acks;
    let s = Math.max(this.#next, this.acks.lwm);
    while (s < seq) {
      while (this.#range < starts.length && ends[this.#range]! <= s) this.#range++;
      const r = this.#range;
      if (r < starts.length && starts[r]! <= s) {
        s = ends[r]!;
        continue;
      }
      const e = r < starts.length ? Math.min(starts[r]!, seq) : seq;
      found.push({ first: s, last: e - 1 });
      this.count += e - s;
      s = e;
    }
    this.#next = Math.max(this.#next, seq);
    for (const r of found) {
      const last = this.lost.at(-1);
      if (last !== undefined && last.last + 1 === r.first) this.lost[this.lost.length - 1] = { first: last.first, last: r.last };
      else this.lost.push(r);
    }
    return found;
  }

  /** Seqs below `seq` do not exist (a SEAL says so): nothing is lost. */
  skipTo(seq: number): void {
    this.#next = Math.max(this.#next, seq);
  }
}

/**
 * Walks every segment once, yielding the intact ITEM records in order (`walk()`), and records
 * the damage, the tails and the lost seqs as it goes.
 */
/** Whether the file at `path`, `size` bytes when opened (-1: not opened), is shorter now or gone. */
function shrank(fs: FileSystem, path: string, size: number): boolean {
  if (size < 0) return false;
  try {
    const now = fs.stat(path);
    return now === null || now.size < size;
  } catch {
    return false;
  }
}

export class StoreWalk {
  /** Intact ITEM records. */
  records = 0;
  readonly damages: DamagedRange[] = [];
  readonly tails: TailCut[] = [];
  /** Segment files walked, and the bytes of those finished. */
  files = 0;
  bytesDone = 0;
  /** One more than the last seq the data accounts for. */
  dataNext = 1;
  readonly #ledger: LossLedger;
  /** The reader of the segment being walked. */
  #frames: FrameReader | null = null;
  /** The damage whose lost seqs are still being counted: until the next intact record, or the end of a sealed segment. */
  #open: { lostSeqs: SeqRange[] } | null = null;

  constructor(
    private readonly fs: FileSystem,
    private readonly segments: readonly WalkSegment[],
    private readonly opts: WalkOptions,
    private readonly onSegment?: (walk: StoreWalk) => void,
  ) {
    this.#ledger = new LossLedger(opts.acks, opts.firstSeq);
  }

  get lost(): readonly SeqRange[] {
    return this.#ledger.lost;
  }

  get lostCount(): number {
    return this.#ledger.count;
  }

  /** Bytes of the segments walked so far, the one being walked up to its reader's position. */
  get bytesWalked(): number {
    return this.bytesDone + (this.#frames?.offset ?? 0);
  }

  *walk(): Generator<WalkRecord, void, undefined> {
    for (const seg of this.segments) {
      this.#account(this.#ledger.lostBelow(seg.base));
      if (seg.seal !== null) this.#ledger.skipTo(seg.seal.recordCount > 0 ? seg.seal.firstSeq : seg.seal.endSeq);
      let fd = -1;
      let size = -1;
      try {
        fd = this.fs.open(seg.path, 'read');
        size = this.fs.size(fd);
        yield* this.#segment(seg, new FileWindow(this.fs, fd, size, this.opts.chunkBytes));
        this.bytesDone += size;
      } catch (e) {
        // An I/O error (EIO on a bad sector, a file removed meanwhile) is not corruption: it is
        // reported as such, the seqs the rest of the file held count as lost, and the walk goes on.
        if (typeof (e as { code?: unknown } | null)?.code !== 'string') throw e;
        const damage: DamagedRange = {
          file: seg.path,
          offset: 0,
          end: 0,
          reason: `cannot read ${seg.path}: ${(e as Error).message}`,
          budgetSpent: false,
          lostSeqs: [],
          ...((e as { code: string }).code === 'ENOENT' || shrank(this.fs, seg.path, size) ? { changed: true } : {}),
        };
        this.damages.push(damage);
        this.#open = damage;
        this.dataNext = seg.seal?.endSeq ?? seg.base;
      } finally {
        this.#frames = null;
        if (fd >= 0) closeQuietly(this.fs, fd);
      }
      this.files++;
      this.onSegment?.(this);
    }
    this.#account(this.#ledger.lostBelow(Math.max(this.dataNext, this.opts.durableNextSeq)));
  }

  /** Lost seqs found while a damage is open belong to it. */
  #account(lost: SeqRange[]): void {
    if (this.#open !== null) this.#open.lostSeqs.push(...lost);
  }

  /** One segment's frames. */
  *#segment(seg: WalkSegment, win: FileWindow): Generator<WalkRecord, void, undefined> {
    if (seg.headerDamage !== null) {
      // The records after a damaged header are judged as any others: a CRC-valid frame with a
      // seq that fits the base. Until the first of them, what is lost belongs to the header's damage.
      const reason = damaged(
        newSegment({ base: seg.base, name: seg.name, path: seg.path, bytes: 0, seal: null, compacted: false, version: seg.version }),
        seg.headerDamage.offset,
        seg.headerDamage.reason,
      ).message;
      const damage: DamagedRange = {
        file: seg.path,
        offset: seg.headerDamage.offset,
        end: Math.min(SEGMENT_HEADER_BYTES, win.size),
        reason,
        budgetSpent: false,
        lostSeqs: [],
      };
      this.damages.push(damage);
      this.#open = damage;
      if (win.size <= SEGMENT_HEADER_BYTES) {
        this.dataNext = seg.seal?.endSeq ?? seg.base;
        return;
      }
    }
    const rules = new SegmentFrames(seg.base, seg.compacted, seg.version, seg.seal, seg.active ? this.opts.durableNextSeq : 0);
    const frames = new FrameReader(
      win,
      SEGMENT_HEADER_BYTES,
      rules,
      seg.active ? () => rules.tornLosesDurable : undefined,
      seg.active && this.opts.liveWriter === true,
    );
    frames.sharedResyncBudgetBytes = resyncBudgetBytes(win.size);
    this.#frames = frames;
    for (;;) {
      const verdict = frames.next();
      if (verdict === 'record') {
        const h = frames.h;
        if (h.type === RECORD_ITEM) {
          // Compaction copied every record unacked in a durable checkpoint: a gap between two
          // records of a COMPACTED segment with no damage between them was acked, known or not.
          if (seg.compacted && this.#open === null) this.#ledger.skipTo(h.seq);
          this.#account(this.#ledger.lostBelow(h.seq));
          this.#open = null;
          this.#ledger.skipTo(h.seq + 1);
          this.records++;
          const p = payloadOffset(frames.at, h);
          yield {
            seq: h.seq,
            payload: win.buf.subarray(p, p + h.length),
            priority: rules.schedule.priority,
            notBefore: rules.schedule.notBefore,
            spool: rules.schedule.spool,
            group: rules.schedule.group,
            fired: rules.schedule.fired,
          };
        }
        frames.accept();
        continue;
      }
      if (verdict === 'end' && (seg.active || rules.seal !== null)) break;
      if (verdict === 'torn' && seg.active) {
        this.tails.push(tailCut(seg.path, win, frames.offset, frames.inputs?.restZero === true));
        break;
      }
      if (!this.#skipDamage(seg, frames, rules, verdict === 'end' ? MISSING_SEAL : frames.reason())) break;
    }
    const seal = rules.seal ?? seg.seal;
    if (seal !== null) {
      this.#account(this.#ledger.lostBelow(seal.recordCount > 0 ? seal.lastSeq + 1 : seal.endSeq));
      this.#ledger.skipTo(seal.endSeq);
      this.#open = null;
      this.dataNext = seal.endSeq;
    } else this.dataNext = Math.max(seg.base, rules.lastSeq + 1);
  }

  /** Record the damage at the reader's position and resynchronise after it; false when nothing intact follows. */
  #skipDamage(seg: WalkSegment, frames: FrameReader, rules: SegmentFrames, why: string): boolean {
    const offset = frames.offset;
    const reason = damaged(
      newSegment({ base: seg.base, name: seg.name, path: seg.path, bytes: 0, seal: null, compacted: seg.compacted, version: seg.version }),
      offset,
      why,
    ).message;
    rules.skipDamage();
    let resumed = false;
    let found = frames.resync();
    while (found === 'found') {
      if (frames.next() === 'record') {
        resumed = true;
        break;
      }
      found = frames.resync();
    }
    const damage: DamagedRange = {
      file: seg.path,
      offset,
      end: resumed ? frames.offset : frames.win.size,
      reason,
      budgetSpent: found === 'budget',
      lostSeqs: [],
    };
    this.damages.push(damage);
    this.#open = damage;
    return resumed;
  }
}

/** The tail open would cut at `offset`, with how many of its bytes are trailing zeros. */
function tailCut(file: string, win: FileWindow, offset: number, zero: boolean): TailCut {
  const bytes = win.size - offset;
  if (zero) return { file, offset, bytes, zeroBytes: bytes };
  let end = win.size;
  while (end > offset) {
    const from = Math.max(offset, end - 64 * 1024);
    const at = win.ensure(from, end - from);
    let k = end - from;
    while (k > 0 && win.buf[at + k - 1] === 0) k--;
    if (k > 0) {
      end = from + k;
      break;
    }
    end = from;
  }
  return { file, offset, bytes, zeroBytes: win.size - end };
}

/** What is known of the acks: the cursor as the plan read it, or what of it can still be read. */
export interface KnownAcks {
  readonly acks: AckSet;
  /**
   * The seq from which the segments should hold every unacked item: the low-water mark, or, when
   * no ack is known, the lowest base seq a segment file is named by (segments before the first
   * were deleted only once acked).
   */
  readonly firstSeq: number;
  /** The checkpoint's next seq: records below it were durable. */
  readonly durableNextSeq: number;
  /** What was left out, when the cursor could not be read whole. */
  readonly note: string | null;
}

/**
 * The acks to walk with. When the plan could not read the cursor, its checkpoint and the ACK
 * records before the damage are still used; acks after the damage are left out, and an unreadable
 * checkpoint leaves none known: an item then comes back rather than being lost.
 */
export function knownAcks(fs: FileSystem, dir: string, plan: RecoveryPlan, planProblems: readonly OpenError[]): KnownAcks {
  if (plan.cursor !== null) return { acks: plan.acks, firstSeq: plan.acks.lwm, durableNextSeq: plan.cursor.checkpointNextSeq, note: null };
  const path = join(dir, CURSOR_FILE);
  const damage = planProblems.find((p) => p.file === path && p.code === 'ERR_CORRUPT');
  const prefix = damage !== undefined ? readCursorBeforeDamage(fs, path, damage.offset ?? 0) : null;
  if (prefix !== null) {
    const note = `${CURSOR_FILE} is damaged at offset ${damage!.offset ?? 0}: the acks recorded after it are not applied, so the items they acked count as unacked (they will be delivered again)`;
    return { acks: prefix.acks, firstSeq: prefix.acks.lwm, durableNextSeq: prefix.checkpointNextSeq, note };
  }
  const missing = !plan.names.includes(CURSOR_FILE);
  const note = `${CURSOR_FILE} is ${missing ? 'missing' : 'unreadable'}: no ack is known, so every intact record counts as unacked (acked ones will be delivered again)`;
  const skip = new Set([...plan.stray, ...plan.superseded]);
  const bases = plan.names
    .filter((n) => !skip.has(n))
    .map(parseSegmentName)
    .filter((b): b is number => b !== null);
  return { acks: new AckSet(1), firstSeq: bases.length > 0 ? Math.min(...bases) : 1, durableNextSeq: 1, note };
}

/**
 * The checkpoint and the ACK records before the damage the plan found at `damageAt`, or null when
 * the checkpoint itself is damaged. The record log is read with the plan's own reader, given a
 * view of the file that ends where the damage starts; acks after the damage are left out (an item
 * then comes back rather than being lost).
 */
function readCursorBeforeDamage(fs: FileSystem, path: string, damageAt: number): { acks: AckSet; checkpointNextSeq: number } | null {
  const upToDamage = new Proxy(fs, {
    get: (target, key, receiver) => {
      if (key === 'size') return () => damageAt;
      const value: unknown = Reflect.get(target, key, receiver);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  let fd = -1;
  try {
    fd = fs.open(path, 'read');
    const c = readCursor(upToDamage, fd, path, MAX_RANGES_PER_RECORD);
    return { acks: c.acks, checkpointNextSeq: c.checkpointNextSeq };
  } catch {
    return null;
  } finally {
    if (fd >= 0) closeQuietly(fs, fd);
  }
}
