// Per-group concurrency (`process(handler, { groupConcurrency })`): how many items of each group
// are in flight, across every consumer of the queue, and the items set aside ("parked") because
// their group was at the limit of the consumer that met them, so that the items of other groups
// behind them are handed out meanwhile (no head-of-line blocking). The core decides; this object
// keeps the counts and the parked items.
import { unpinned } from '../lib/bytes.js';
import type { Entry } from './entry.js';
import { Heap } from './heap.js';

/**
 * At most this many items are parked at once. Past it a consumer waits instead of reading further
 * ahead: parked items are held in memory (their bytes too), and a group with millions of items
 * queued ahead of the others would otherwise be read into memory whole to find the next item of
 * another group. Within the bound no group waits behind another group's limit.
 */
export const PARKED_MAX_ITEMS = 65_536;

/** `a` goes before `b` in the order the core hands items out: higher priority, then lower seq. */
export function deliveredFirst(a: Entry, b: Entry): boolean {
  return a.priority > b.priority || (a.priority === b.priority && a.seq < b.seq);
}

/** The parked items of one group, best first (items arrive in near order, and the best is what leaves). */
export type EntryHeap = Heap<Entry>;

export function entryHeap(): EntryHeap {
  return new Heap<Entry>(deliveredFirst);
}

/** Releases between two sweeps of the groups with nothing in flight (`GroupGate.released`). */
const SWEEP_EVERY = 4096;

export class GroupGate {
  /**
   * Items in flight per group. A group that drops to none keeps its entry until the next sweep:
   * deleting it at once and adding it again at its next hand-out cost a hand-out more than the
   * counting itself, with a thousand groups and 64 workers. So memory follows the groups active
   * since the last sweep.
   */
  readonly #inFlight = new Map<string, number>();
  /** Items parked for their group's limit, by group; a group's entry goes with its last item. */
  readonly #parked = new Map<string, EntryHeap>();
  #parkedCount = 0;
  /** Groups with at least one item in flight now (the owner's figures report it without a walk of the map). */
  #busy = 0;
  #sinceSweep = 0;
  /**
   * The lowest concurrency limit under which an item now parked was parked. A consumer with a
   * higher limit (or none) may take items of a group that is at that limit: the parked items go
   * back before it takes. Consumers that share one limit never send them back.
   */
  #parkLimit = Infinity;

  /** Items parked now (every group). */
  get parked(): number {
    return this.#parkedCount;
  }

  /** Groups with at least one item in flight now. */
  get busyGroups(): number {
    return this.#busy;
  }

  /** Groups with items parked now. */
  get waitingGroups(): number {
    return this.#parked.size;
  }

  /** Items of `group` in flight now, whoever holds them. */
  inFlight(group: string): number {
    return this.#inFlight.get(group) ?? 0;
  }

  /** Items of `group` parked now. */
  parkedOf(group: string): number {
    return this.#parked.get(group)?.size ?? 0;
  }

  /**
   * Each group with items in flight or parked, once: its name, its items in flight and its items
   * parked (for the owner's report of its groups: a walk of the groups active now, nothing copied).
   */
  *active(): Generator<[group: string, inFlight: number, parked: number]> {
    for (const [group, n] of this.#inFlight) if (n > 0) yield [group, n, this.parkedOf(group)];
    for (const [group, parked] of this.#parked) if ((this.#inFlight.get(group) ?? 0) <= 0) yield [group, 0, parked.size];
  }

  /** An item of `group` is handed out. */
  delivered(group: string): void {
    const n = this.#inFlight.get(group) ?? 0;
    if (n === 0) this.#busy++;
    this.#inFlight.set(group, n + 1);
  }

  /**
   * An item of `group` is no longer in flight (settled, returned). Returns the best parked item
   * of the group, which may go now (one slot was freed), or undefined.
   */
  released(group: string): Entry | undefined {
    const n = this.#inFlight.get(group);
    if (n !== undefined) {
      this.#inFlight.set(group, n - 1);
      if (n === 1) this.#busy--;
    }
    if (++this.#sinceSweep >= SWEEP_EVERY) this.#sweep();
    if (this.#parkedCount === 0) return undefined;
    const parked = this.#parked.get(group);
    if (parked === undefined) return undefined;
    const next = parked.pop()!;
    if (parked.size === 0) this.#parked.delete(group);
    if (--this.#parkedCount === 0) this.#parkLimit = Infinity;
    return next;
  }

  #sweep(): void {
    this.#sinceSweep = 0;
    for (const [group, n] of this.#inFlight) if (n <= 0) this.#inFlight.delete(group);
  }

  /**
   * Set `entry` aside: its group is at `limit`. The caller checked the bound on parked items
   * (`PARKED_MAX_ITEMS`).
   */
  park(entry: Entry, limit: number): void {
    const group = entry.group!;
    // Held in memory until its group has room: a view into a store's read chunk would keep the
    // whole chunk alive for that long.
    entry.bytes = unpinned(entry.bytes);
    let parked = this.#parked.get(group);
    if (parked === undefined) this.#parked.set(group, (parked = entryHeap()));
    parked.push(entry);
    this.#parkedCount++;
    if (limit < this.#parkLimit) this.#parkLimit = limit;
  }

  /**
   * A consumer with concurrency limit `limit` is about to take: the items parked under lower
   * limits than its own, which it may be allowed to take, come back (all of them), else none.
   */
  reopenFor(limit: number): Entry[] | undefined {
    if (this.#parkedCount === 0 || limit <= this.#parkLimit) return undefined;
    return this.takeAll();
  }

  /** Every parked item, taken out (a consumer with a higher limit). */
  takeAll(): Entry[] {
    const out = this.entries();
    this.#parked.clear();
    this.#parkedCount = 0;
    this.#parkLimit = Infinity;
    return out;
  }

  /** The parked items (for the exact counts a clean close stores). */
  entries(): Entry[] {
    const out: Entry[] = [];
    for (const parked of this.#parked.values()) for (const entry of parked.values()) out.push(entry);
    return out;
  }

  /** Forget everything (close: the in-flight items go back to the store with the queue). */
  clear(): void {
    this.#inFlight.clear();
    this.#busy = 0;
    this.#parked.clear();
    this.#parkedCount = 0;
    this.#parkLimit = Infinity;
  }
}
