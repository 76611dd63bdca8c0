/**
 * What a version-2 cursor describes beyond the acked set (FORMAT.md §4.3): the delivered-below
 * bound, the newest delivery mark of each item, and the dead letters with their bytes. The cursor
 * log owns one; recovery builds one from the checkpoint and the records after it.
 */
import type { DeadLetter, DeliveryMark } from '../../../contract/store.js';
import { lowerBound } from '../../../lib/lower-bound.js';

/**
 * What the marks are pruned against: the acked set (./cursor.ts's AckSet). Only its question is
 * named here, so that this module, which the cursor's decoder builds, does not import the cursor.
 */
interface AckedSeqs {
  has(seq: number): boolean;
}

export class DeliveryState {
  deliveredBelow = 1;
  /** Newest mark of each seq; marks of seqs acked since are dropped when a checkpoint is written. */
  marks = new Map<number, DeliveryMark>();
  /** Dead letters in seq order. */
  dead: DeadLetter[] = [];
  /** Payload bytes of the dead letters. */
  deadBytes = 0;

  clone(): DeliveryState {
    const c = new DeliveryState();
    c.deliveredBelow = this.deliveredBelow;
    c.marks = new Map(this.marks);
    c.dead = this.dead.slice();
    c.deadBytes = this.deadBytes;
    return c;
  }

  /** Nothing beyond the version-1 state: a store in this state needs no version-2 cursor. */
  get plain(): boolean {
    return this.deliveredBelow === 1 && this.marks.size === 0 && this.dead.length === 0;
  }

  /** Index of the first dead letter with seq >= `seq`. */
  deadIndex(seq: number): number {
    const dead = this.dead;
    return lowerBound(0, dead.length, (i) => dead[i]!.seq < seq);
  }

  holdsDead(seq: number): boolean {
    return this.dead[this.deadIndex(seq)]?.seq === seq;
  }

  mark(below: number, marks: readonly DeliveryMark[]): void {
    this.deliveredBelow = below;
    for (const m of marks) this.marks.set(m.seq, m);
  }

  /** Hold `entries` as dead letters (any order; none held yet) and forget their marks. */
  addDead(entries: readonly DeadLetter[]): void {
    for (const e of entries) {
      const last = this.dead[this.dead.length - 1];
      if (last === undefined || last.seq < e.seq) this.dead.push(e);
      else this.dead.splice(this.deadIndex(e.seq), 0, e);
      this.deadBytes += e.bytes.length;
      this.marks.delete(e.seq);
    }
  }

  /** Forget the dead letters with these seqs; returns how many were held. */
  dropDead(seqs: Iterable<number>): number {
    const drop = new Set(seqs);
    let dropped = 0;
    this.dead = this.dead.filter((d) => {
      if (!drop.has(d.seq)) return true;
      this.deadBytes -= d.bytes.length;
      dropped++;
      return false;
    });
    return dropped;
  }

  /** Up to `limit` dead letters with seq > `after`, in seq order. */
  readDead(after: number, limit: number): DeadLetter[] {
    const from = this.deadIndex(after + 1);
    return this.dead.slice(from, from + limit);
  }

  /** The marks of items still unacked and below `nextSeq`, in seq order. */
  liveMarks(acks: AckedSeqs, nextSeq: number): DeliveryMark[] {
    const out: DeliveryMark[] = [];
    for (const m of this.marks.values()) if (m.seq < nextSeq && !acks.has(m.seq)) out.push(m);
    return out.sort((a, b) => a.seq - b.seq);
  }

  /** Drop the marks of acked seqs and of seqs at or past `nextSeq`. */
  pruneMarks(acks: AckedSeqs, nextSeq: number): void {
    for (const seq of this.marks.keys()) if (seq >= nextSeq || acks.has(seq)) this.marks.delete(seq);
  }
}
