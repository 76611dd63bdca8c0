// Delivery counts that survive restarts, and the moves into the dead-letter queue, over a store
// that keeps them (`features.deliveries`). The core asks this object whether an item may be handed
// out now; what must be stored first is stored here, one store call at a time.
//
// The rule it keeps: an item is never handed out for the n-th time before the store holds a record
// that counts n deliveries of it, so a handler that kills the process cannot make its item lose a
// delivery. Recording every first delivery one by one would cost a store call per item, so first
// deliveries are covered by a bound stored ahead of them: `deliveredBelow`, raised a block of seqs
// at a time, before the consumer reaches it. After a crash every unacked item below the stored
// bound counts as delivered once (at most one more than it had); a clean close stores the exact
// bound. A redelivery (after a nack, a retry, a dropped reservation or a restart) stores a mark of
// its own before the item is handed out again.
import { QueueError } from '../errors.js';
import type { DeadLetter, DeliveryMark, Store, StoreRecovery } from '../store.js';
import { MAX_REASON_BYTES } from '../store.js';
import { type Entry, encoder } from './entry.js';
import { unpinned } from '../bytes.js';

const DONE = Promise.resolve();

/** How many seqs one stored `deliveredBelow` covers ahead of the consumer. */
export const DELIVERY_BLOCK = 4096;

/** What a clean close knows of the counts it must store (`DeliveryLedger.storeExactBound`). */
export interface ExactCounts {
  /** Items whose next delivery was counted ahead (at their nack) and never came: their true counts. */
  readonly countedAhead: readonly Entry[];
  /** The lowest seq of an unacked item never handed out (Infinity when none). */
  readonly lowestUndelivered: number;
  /** Unacked items the queue handed out and still knows (returned, waiting, in flight). */
  readonly delivered: readonly Entry[];
}

/** What the ledger tells the core. */
export interface LedgerHost {
  /** A store call failed the queue. */
  fail(error: unknown): void;
  /** The first-delivery bound moved: items waiting on it may be handed out. */
  covered(): void;
  /** The entries are dead letters now, for these reasons: no longer in the queue. */
  moved(entries: Entry[], reasons: string[]): void;
  /** Their move was not stored (`ERR_STORE_FULL`): the entries are still in the queue. */
  notMoved(entries: Entry[], error: QueueError): void;
}

/** One move into the dead-letter queue and whoever waits for it. */
interface Move {
  entry: Entry;
  letter: DeadLetter;
  resolve: () => void;
  reject: (error: unknown) => void;
}

/** Cut `text` to at most {@link MAX_REASON_BYTES} UTF-8 bytes, never inside a character. */
export function boundedReason(text: string): string {
  if (text.length * 3 <= MAX_REASON_BYTES) return text;
  const bytes = encoder.encode(text);
  if (bytes.length <= MAX_REASON_BYTES) return text;
  let end = MAX_REASON_BYTES;
  // Back off continuation bytes (10xxxxxx) so the cut falls before a character's first byte.
  while (end > 0 && (bytes[end]! & 0xc0) === 0x80) end--;
  return new TextDecoder().decode(bytes.subarray(0, end));
}

/** The message a thrown value leaves as an item's last error (never its payload). */
export function errorMessage(error: unknown): string {
  if (error instanceof Error) return boundedReason(error.message === '' ? error.name : `${error.name}: ${error.message}`);
  return boundedReason(String(error));
}

export class DeliveryLedger {
  readonly #store: Store;
  readonly #host: LedgerHost;
  /**
   * Marks and bounds are stored unsynced, whatever the policies: what they must survive is the
   * process dying in the delivery they count, and a written record survives that. Power loss
   * needs no more: the next sync of the store (a synced ack, a lazy sync, a clean close) covers
   * them, and a power loss before it can only lower a count by the deliveries since.
   */
  readonly #sync = false;
  /** Items with a seq below this were in the store at open; only they can have recovered counts. */
  readonly #openNextSeq: number;
  /** Recovered marks of unacked items, dropped as each item is first seen. */
  readonly #recovered: Map<number, DeliveryMark>;
  /** Unacked items below this (and below `#openNextSeq`) were handed out once before this open. */
  readonly #recoveredBelow: number;
  /** When the recovered counts were read: the best known time of a delivery before this open. */
  readonly #openedAt = Date.now();

  /** First deliveries of seqs below this are covered by a stored bound. */
  #below: number;
  /** The bound last asked for (stored or being stored). */
  #asked: number;
  /** One more than the highest seq handed out for the first time: the exact bound. */
  #firstDeliveredBelow: number;
  /** Dead letters the store holds. */
  deadLetters: number;

  #pendingMarks: Entry[] = [];
  /** Settles once the marks asked for so far are stored (or fail the queue). */
  #markWaiter: Promise<void> | undefined;
  #markResolve: (() => void) | undefined;
  #markReject: ((error: unknown) => void) | undefined;
  /** Settles once the marks call in flight is stored. */
  #sentMarks: Promise<void> | undefined;
  #pendingMoves: Move[] = [];
  #pendingDrops: { seqs: number[]; resolve: () => void; reject: (error: unknown) => void }[] = [];
  #busy = false;
  #idleWaiters: (() => void)[] = [];
  #failed = false;
  /** Entries being moved into the dead-letter queue. */
  moving = 0;

  constructor(store: Store, recovery: StoreRecovery, host: LedgerHost) {
    this.#store = store;
    this.#host = host;
    this.#openNextSeq = recovery.nextSeq;
    this.#recovered = new Map((recovery.marks ?? []).map((m) => [m.seq, m]));
    this.#recoveredBelow = Math.min(recovery.deliveredBelow ?? 1, recovery.nextSeq);
    // The open stored `recoveredBelow` before the queue was handed out (see `openLedger`).
    this.#below = this.#recoveredBelow;
    this.#asked = this.#below;
    this.#firstDeliveredBelow = this.#recoveredBelow;
    this.deadLetters = recovery.deadLetters ?? 0;
  }

  /**
   * Store the first bound before the queue is handed out, so that the first items are handed out
   * without waiting (`tryReserve()` finds them at once).
   */
  async start(): Promise<void> {
    const below = this.#below + DELIVERY_BLOCK;
    await this.#store.markDelivered!(below, [], this.#sync);
    this.#below = below;
    this.#asked = below;
  }

  /** Busy with a store call or with work waiting for one. */
  get busy(): boolean {
    return this.#busy || this.#pendingMarks.length > 0 || this.#pendingMoves.length > 0 || this.#pendingDrops.length > 0;
  }

  /** Resolves once no store call of the ledger is in flight or waiting. */
  idle(): Promise<void> {
    if (!this.busy) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
  }

  /** Give an item read from the store the counts recovered for it; once, before its first delivery here. */
  adopt(entry: Entry): void {
    if (entry.deliveries !== 0 || entry.seq >= this.#openNextSeq) return;
    const mark = this.#recovered.get(entry.seq);
    if (mark !== undefined) {
      this.#recovered.delete(entry.seq);
      entry.deliveries = mark.deliveries;
      entry.marked = mark.deliveries;
      entry.firstAt = mark.firstDeliveredAt;
      entry.lastAt = mark.lastDeliveredAt;
      entry.lastError = mark.lastError;
    } else if (entry.seq < this.#recoveredBelow) {
      entry.deliveries = 1;
      entry.marked = 1;
      entry.firstAt = this.#openedAt;
      entry.lastAt = this.#openedAt;
    }
  }

  /**
   * True when `entry` may be handed out now. Otherwise what it waits for has been asked of the
   * store, and `host.covered` is called once it is stored: the entry waits first in line, so
   * items keep their order.
   */
  ready(entry: Entry): boolean {
    const next = entry.deliveries + 1;
    if (next === 1) {
      // Asked ahead: the consumer should find the next block stored before it gets there.
      if (entry.seq + DELIVERY_BLOCK / 2 >= this.#asked) this.#ask(entry.seq + DELIVERY_BLOCK);
      return entry.seq < this.#below;
    }
    if (entry.marked >= next) return true;
    // A failed mark fails the queue through `host.fail`; nobody may hold this promise, and an
    // unhandled rejection would end the process.
    this.markNext(entry).catch(() => undefined);
    // A store that finishes synchronously has stored it already.
    return entry.marked >= next;
  }

  /**
   * Store the mark of `entry`'s next delivery, if not stored or asked for yet; resolves once it is
   * stored (a nack resolves then, so a reserve right after it finds the item ready).
   */
  markNext(entry: Entry): Promise<void> {
    const next = entry.deliveries + 1;
    if (entry.marked >= next) return DONE;
    if (entry.marked === -next) {
      // Asked for already: in the call in flight, or in the next one.
      return this.#pendingMarks.includes(entry) ? this.#marksStored() : (this.#sentMarks ?? DONE);
    }
    // Negative: asked for, not stored yet.
    entry.marked = -next;
    this.#pendingMarks.push(entry);
    const stored = this.#marksStored();
    this.#flush();
    return stored;
  }

  /** Resolves once every mark asked for so far is stored. */
  #marksStored(): Promise<void> {
    if (this.#markWaiter === undefined) {
      this.#markWaiter = new Promise<void>((resolve, reject) => {
        this.#markResolve = resolve;
        this.#markReject = reject;
      });
      // Often nobody waits (a redelivery asked for by the core): a failure is the queue's, reported there.
      this.#markWaiter.catch(() => {});
    }
    return this.#markWaiter;
  }

  /** `entry` is being handed out; `entry.deliveries` already counts it. */
  delivered(entry: Entry, now: number): void {
    if (entry.firstAt === 0) entry.firstAt = now;
    entry.lastAt = now;
    if (entry.deliveries === 1 && entry.seq >= this.#firstDeliveredBelow) this.#firstDeliveredBelow = entry.seq + 1;
  }

  /** Move `entry` (not in flight, not ready) into the dead-letter queue. */
  deadLetter(entry: Entry, reason: string): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const letter: DeadLetter = {
        seq: entry.seq,
        // The store keeps a dead letter's bytes for as long as it is one: never a view into a chunk.
        bytes: unpinned(entry.bytes),
        deliveries: entry.deliveries,
        firstDeliveredAt: entry.firstAt,
        lastDeliveredAt: entry.lastAt,
        deadAt: Date.now(),
        reason: boundedReason(reason),
      };
      this.#pendingMoves.push({ entry, letter, resolve, reject });
      this.moving++;
      this.#flush();
    });
  }

  /** Delete dead letters the store holds. */
  drop(seqs: number[]): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.#pendingDrops.push({ seqs, resolve, reject });
      this.#flush();
    });
  }

  /**
   * Store the exact first-delivery bound, for a clean close, and the true counts of the items
   * that need them (see `ExactCounts`). The bound is never below the recovered one: the items
   * below that which were not read since still count the delivery they had before this open.
   */
  async storeExactBound(exact: ExactCounts): Promise<void> {
    await this.idle();
    const below = Math.max(this.#recoveredBelow, Math.min(this.#firstDeliveredBelow, exact.lowestUndelivered));
    const marked = new Set<Entry>(exact.countedAhead);
    // Handed out, unacked, at or above the bound: the bound no longer counts them.
    for (const e of exact.delivered) if (e.seq >= below) marked.add(e);
    if (this.#failed || (below === this.#asked && marked.size === 0)) return;
    this.#asked = below;
    const marks = [...marked].map(
      (e): DeliveryMark => ({ seq: e.seq, deliveries: e.deliveries, firstDeliveredAt: e.firstAt, lastDeliveredAt: e.lastAt, lastError: e.lastError }),
    );
    marks.sort((a, b) => a.seq - b.seq);
    this.#busy = true;
    try {
      await this.#store.markDelivered!(below, marks, this.#sync);
    } finally {
      this.#busy = false;
      this.#settleIdle();
    }
  }

  /** Stop: nothing more is sent to the store (the queue failed). */
  stop(error: unknown): void {
    this.#failed = true;
    for (const move of this.#pendingMoves.splice(0)) move.reject(error);
    for (const drop of this.#pendingDrops.splice(0)) drop.reject(error);
    this.#pendingMarks.length = 0;
    this.#settleMarks(error);
    this.moving = 0;
    if (!this.#busy) this.#settleIdle();
  }

  /** Forget what waits (close): entries waiting for a mark return to the store as they are. */
  clear(): void {
    for (const entry of this.#pendingMarks) entry.marked = 0;
    this.#pendingMarks.length = 0;
    if (!this.#busy) this.#settleMarks(undefined);
  }

  #settleMarks(error: unknown): void {
    const resolve = this.#markResolve;
    const reject = this.#markReject;
    this.#markWaiter = this.#markResolve = this.#markReject = undefined;
    if (error === undefined) resolve?.();
    else reject?.(error);
  }

  #ask(below: number): void {
    if (below <= this.#asked) return;
    this.#asked = below;
    this.#flush();
  }

  /** One store call at a time: moves first (they free capacity), then marks and bounds, then drops. */
  #flush(): void {
    while (!this.#busy) {
      if (this.#failed) {
        this.#settleIdle();
        return;
      }
      if (!this.#flushOne()) return;
    }
  }

  /** Start the next store call; false when there is none. One that finished synchronously is handled already. */
  #flushOne(): boolean {
    let call: void | Promise<void>;
    let done: (error?: unknown) => void;
    try {
      if (this.#pendingMoves.length > 0) {
        const moves = this.#pendingMoves.splice(0);
        call = this.#store.deadLetter!(moves.map((m) => m.letter));
        done = (error) => this.#moved(moves, error);
      } else if (this.#pendingMarks.length > 0 || this.#asked > this.#below) {
        const entries = this.#pendingMarks.splice(0);
        const below = this.#asked;
        // Whoever waits for these marks: later ones wait for the next call.
        const resolve = this.#markResolve;
        const reject = this.#markReject;
        this.#sentMarks = this.#markWaiter;
        this.#markWaiter = this.#markResolve = this.#markReject = undefined;
        const marks = entries.map(
          (e): DeliveryMark => ({ seq: e.seq, deliveries: e.deliveries + 1, firstDeliveredAt: e.firstAt, lastDeliveredAt: e.lastAt, lastError: e.lastError }),
        );
        call = this.#store.markDelivered!(below, marks, this.#sync);
        done = (error) => {
          this.#sentMarks = undefined;
          this.#marked(entries, below, error);
          if (error === undefined) resolve?.();
          else reject?.(error);
        };
      } else if (this.#pendingDrops.length > 0) {
        const drops = this.#pendingDrops.splice(0);
        // Synced: a purge that resolved is never undone by a power loss.
        call = this.#store.dropDeadLetters!(drops.flatMap((d) => d.seqs), true);
        done = (error) => {
          if (error === undefined) this.deadLetters -= drops.reduce((n, d) => n + d.seqs.length, 0);
          for (const d of drops) error === undefined ? d.resolve() : d.reject(error);
          if (error !== undefined) this.#host.fail(error);
        };
      } else {
        this.#settleIdle();
        return false;
      }
    } catch (error) {
      this.#host.fail(error);
      return true;
    }
    if (call === undefined) {
      // Finished synchronously (markDelivered may): stored now.
      done();
      return true;
    }
    this.#busy = true;
    call.then(
      () => this.#after(() => done()),
      (error: unknown) => this.#after(() => done(error ?? new Error('store call failed'))),
    );
    return true;
  }

  #after(handle: () => void): void {
    this.#busy = false;
    handle();
    this.#flush();
  }

  #marked(entries: Entry[], below: number, error: unknown): void {
    if (this.#failed) return;
    if (error !== undefined) {
      this.#host.fail(error);
      return;
    }
    // An entry asked for again since (close forgot it) keeps its newer request.
    for (const entry of entries) if (entry.marked === -(entry.deliveries + 1)) entry.marked = entry.deliveries + 1;
    if (below > this.#below) this.#below = below;
    // Not from inside this call: it may have come from the core asking whether an item is ready.
    queueMicrotask(this.#covered);
  }

  readonly #covered = (): void => {
    if (!this.#failed) this.#host.covered();
  };

  #moved(moves: Move[], error: unknown): void {
    this.moving -= moves.length;
    const entries = moves.map((m) => m.entry);
    if (error === undefined) {
      this.deadLetters += moves.length;
      this.#host.moved(
        entries,
        moves.map((m) => m.letter.reason),
      );
      for (const m of moves) m.resolve();
      return;
    }
    if (error instanceof QueueError && error.code === 'ERR_STORE_FULL' && !this.#failed) {
      this.#host.notMoved(entries, error);
      for (const m of moves) m.reject(error);
      return;
    }
    this.#host.fail(error);
    for (const m of moves) m.reject(error);
  }

  #settleIdle(): void {
    if (this.busy && !this.#failed) return;
    for (const resolve of this.#idleWaiters.splice(0)) resolve();
  }
}
