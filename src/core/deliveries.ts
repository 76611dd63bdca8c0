// Delivery counts that survive restarts, and the moves into the dead-letter queue, over a store
// that keeps them (`features.deliveries`). The core asks this object whether an item may be handed
// out now; what must be stored first is stored here, one store call at a time.
//
// The rule it keeps: an item is never handed out for the n-th time before the store holds a record
// that counts n deliveries of it, so a handler that kills the process cannot make its item lose a
// delivery; and no record counts a delivery that has not happened, so an item never handed out
// comes back after any exit with no delivery counted. First deliveries in seq order are covered by
// one bound, `deliveredBelow`, raised to exactly one past the item handed out; a first delivery out
// of seq order (once items with a priority or a not-before time exist) and every later delivery
// stores a mark of its own. Hand-outs made together (the waiters served in one pass, the items a
// batch gathers) share one store call.
import { QueueError } from '../contract/errors.js';
import type { DeadLetter, DeliveryMark, Store, StoreRecovery } from '../contract/store.js';
import { MAX_REASON_BYTES } from '../contract/store.js';
import { type Entry, encoder } from './entry.js';
import { unpinned } from '../lib/bytes.js';

const DONE = Promise.resolve();

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

/** A delivery count asked of the store for an entry. */
interface WantedMark {
  readonly entry: Entry;
  /** The count the mark stores. */
  readonly count: number;
}

/** Called once the store call carrying what was asked has finished: with no error when stored (or refused for a full disk). */
type Stored = (error?: unknown) => void;

const NOTHING_WAITS: Stored[] = [];
const NO_MARKS: readonly DeliveryMark[] = [];
const NO_WANTED: WantedMark[] = [];

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
  /** The bound the store held at open: above `#recoveredBelow` when items it covered were lost. */
  readonly #storedBelowAtOpen: number;
  /** When the recovered counts were read: the best known time of a delivery before this open. */
  readonly #openedAt = Date.now();

  /** First deliveries of seqs below this are covered by a stored bound. */
  #below: number;
  /** The bound last asked for (stored or being stored). */
  #asked: number;
  /** One more than the highest seq handed out for the first time: the exact bound. */
  #firstDeliveredBelow: number;
  /**
   * Items with a priority or a not-before time exist: first deliveries may come out of seq order,
   * and a bound raised past an item not handed out yet would count a delivery it never had, so
   * each first delivery stores a mark of its own.
   */
  #outOfOrder = false;
  /** Hand-outs are being gathered into one store call (`beginRun`/`endRun`). */
  #inRun = false;
  /** The bound the hand-outs of the run need. */
  #runBelow = 0;
  /** Marks the hand-outs of the run need. */
  #runMarks = 0;
  /** The bound stored at open was refused for a full disk: the next call must store one. */
  #lowerOwed = false;
  /** Dead letters the store holds. */
  deadLetters: number;
  /** Deliveries whose record the store refused for want of space (`ERR_STORE_FULL`): counted in memory only. */
  uncounted = 0;

  #pendingMarks: WantedMark[] = [];
  /** Called once the next marks-and-bound call finishes. */
  #waiting: Stored[] = NOTHING_WAITS;
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
    this.#storedBelowAtOpen = recovery.deliveredBelow ?? 1;
    this.#recoveredBelow = Math.min(this.#storedBelowAtOpen, recovery.nextSeq);
    this.#below = this.#recoveredBelow;
    this.#asked = this.#below;
    this.#firstDeliveredBelow = this.#recoveredBelow;
    this.deadLetters = recovery.deadLetters ?? 0;
  }

  /**
   * At open, before the queue is handed out: store the recovered bound, which counts no delivery
   * that had not happened. It lowers a bound above the store's next seq (the items it covered were
   * lost to a crash), so that items pushed from now on at those seqs are not counted as delivered
   * after a later crash; and it readies a store that has a format step to take before its first
   * delivery record (LogStore's cursor version 2), so that the records of the first deliveries are
   * written within the call. A full disk does not refuse the open (draining the queue is how space
   * comes back): the bound is then stored with the first record that fits.
   */
  async start(): Promise<void> {
    try {
      await this.#store.markDelivered!(this.#recoveredBelow, [], this.#sync);
    } catch (error) {
      if (!isStoreFull(error)) throw error;
      // Sent again with the next call of marks or bounds, whose bound is at most `#asked`.
      if (this.#storedBelowAtOpen > this.#recoveredBelow) this.#lowerOwed = true;
    }
  }

  /** Busy with a store call or with work waiting for one. */
  get busy(): boolean {
    return (
      this.#busy ||
      this.#pendingMarks.length > 0 ||
      this.#pendingMoves.length > 0 ||
      this.#pendingDrops.length > 0 ||
      this.#asked > this.#below
    );
  }

  /** Resolves once no store call of the ledger is in flight or waiting. */
  idle(): Promise<void> {
    if (!this.busy) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
  }

  /** Items with a priority or a not-before time joined the queue: first deliveries are marked one by one from now on. */
  scheduled(): void {
    this.#outOfOrder = true;
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
   * items keep their order. During a run (`beginRun`) it is always true: the record is asked for,
   * and the run's caller hands the entry over only once `endRun` says it is stored.
   */
  ready(entry: Entry): boolean {
    const next = entry.deliveries + 1;
    if (entry.marked >= next) return true;
    if (next === 1 && !this.#outOfOrder) {
      if (entry.seq < this.#below) return true;
      if (this.#inRun) {
        if (entry.seq >= this.#runBelow) this.#runBelow = entry.seq + 1;
        return true;
      }
      if (this.#bound(entry.seq + 1)) return true;
      this.#ask(entry.seq + 1);
      return entry.seq < this.#below;
    }
    if (entry.marked === -next) {
      // Asked for already, not stored yet: a run waits for the call that stores it.
      if (this.#inRun) this.#runMarks++;
      return this.#inRun;
    }
    this.#want(entry, next);
    if (this.#inRun) {
      this.#runMarks++;
      return true;
    }
    this.#flush();
    // A store that finishes synchronously has stored it already.
    return entry.marked >= next;
  }

  /**
   * The serial consumer's path: with nothing else asked of the store and no call in flight, store
   * the bound `below` directly. True when the store finished within the call; otherwise the call
   * goes on as one made by `#flushOne` (its end wakes whoever waits), and this returns false.
   */
  #bound(below: number): boolean {
    if (
      this.#busy ||
      this.#failed ||
      this.#pendingMarks.length > 0 ||
      this.#asked > this.#below ||
      this.#lowerOwed ||
      this.#waiting !== NOTHING_WAITS
    )
      return false;
    let call: void | Promise<void>;
    try {
      call = this.#store.markDelivered!(below, NO_MARKS, this.#sync);
    } catch (error) {
      this.#host.fail(error);
      return false;
    }
    this.#asked = below;
    if (call === undefined) {
      this.#below = below;
      return true;
    }
    this.#busy = true;
    call.then(
      () => this.#after(() => this.#marked(NO_WANTED, below, undefined)),
      (error: unknown) => this.#after(() => this.#marked(NO_WANTED, below, error ?? new Error('store call failed'))),
    );
    return false;
  }

  /** Gather the records of the hand-outs from here to `endRun` into one store call. */
  beginRun(): void {
    this.#inRun = true;
    this.#runBelow = 0;
    this.#runMarks = 0;
  }

  /**
   * End a run: ask the store for what its hand-outs need, in one call. True when nothing was
   * needed or the store finished within the call: the entries may be handed over now. Otherwise
   * `stored` is called once the call has finished (with the error that failed the queue, if so).
   */
  endRun(stored: Stored): boolean {
    this.#inRun = false;
    const below = this.#runBelow;
    if (below <= this.#below && this.#runMarks === 0) return true;
    if (this.#runMarks === 0 && this.#bound(below)) return true;
    if (below > this.#asked) this.#asked = below;
    let done = false;
    let failure: unknown;
    this.#onStored((error) => {
      done = true;
      failure = error;
      stored(error);
    });
    this.#flush();
    if (!done) return false;
    // Finished within the call: the caller goes on at once, and was not told twice.
    if (failure !== undefined) throw failure;
    return true;
  }

  /**
   * Store the mark of `entry`'s current count with its last error, when it has an error worth
   * keeping (a nack after a handler failure); resolves once stored. The count itself needs no
   * mark: the record stored before this delivery holds it.
   */
  noteNack(entry: Entry): Promise<void> {
    if (entry.lastError === '' || entry.deliveries === 0) return DONE;
    this.#want(entry, entry.deliveries);
    const stored = this.#storedPromise();
    this.#flush();
    return stored;
  }

  /** A mark counting `count` deliveries of `entry`, for the next call (`entry.marked` negative: asked, not stored yet). */
  #want(entry: Entry, count: number): void {
    entry.marked = -count;
    this.#pendingMarks.push({ entry, count });
  }

  #onStored(stored: Stored): void {
    if (this.#waiting === NOTHING_WAITS) this.#waiting = [];
    this.#waiting.push(stored);
  }

  /** Resolves once everything asked so far is stored. */
  #storedPromise(): Promise<void> {
    const promise = new Promise<void>((resolve, reject) => this.#onStored((error) => (error === undefined ? resolve() : reject(error))));
    // Often nobody waits: a failure is the queue's, reported there.
    promise.catch(() => {});
    return promise;
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
      // Sent a microtask later: a move often comes from inside a hand-out (an item past
      // maxDeliveries, a payload that does not decode), and the record of the item handed out
      // next must not wait behind it.
      if (!this.#moveQueued) {
        this.#moveQueued = true;
        queueMicrotask(this.#flushMoves);
      }
    });
  }

  #moveQueued = false;
  readonly #flushMoves = (): void => {
    this.#moveQueued = false;
    this.#flush();
  };

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
      (e): DeliveryMark => ({
        seq: e.seq,
        deliveries: e.deliveries,
        firstDeliveredAt: e.firstAt,
        lastDeliveredAt: e.lastAt,
        lastError: e.lastError,
      }),
    );
    marks.sort((a, b) => a.seq - b.seq);
    this.#busy = true;
    try {
      await this.#store.markDelivered!(below, marks, this.#sync);
      this.#below = below;
    } catch (error) {
      // A full disk at close: the records stored before hold counts at least as high as the truth
      // wherever a delivery happened, so nothing is lost by leaving them as they are.
      if (!isStoreFull(error)) throw error;
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
    this.#asked = this.#below;
    this.#settleWaiting(error);
    this.moving = 0;
    if (!this.#busy) this.#settleIdle();
  }

  /** Forget what waits (close): entries waiting for a mark return to the store as they are. */
  clear(): void {
    for (const { entry } of this.#pendingMarks) entry.marked = 0;
    this.#pendingMarks.length = 0;
    if (!this.#busy) {
      this.#asked = this.#below;
      this.#settleWaiting(undefined);
    }
  }

  #settleWaiting(error: unknown): void {
    const waiting = this.#waiting;
    this.#waiting = NOTHING_WAITS;
    for (const stored of waiting) stored(error);
  }

  #ask(below: number): void {
    if (below <= this.#asked) return;
    this.#asked = below;
    this.#flush();
  }

  /**
   * One store call at a time: marks and bounds first (a hand-out waits for them), then moves (they
   * free capacity), then drops.
   */
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
      if (this.#pendingMarks.length > 0 || this.#asked > this.#below || this.#lowerOwed) {
        const wanted = this.#pendingMarks;
        this.#pendingMarks = [];
        const below = this.#asked;
        // Whoever waits for these: later ones wait for the next call.
        const waiting = this.#waiting;
        this.#waiting = NOTHING_WAITS;
        const now = Date.now();
        const marks = wanted.map(({ entry: e, count }): DeliveryMark => {
          // A mark ahead of its delivery (the entry waits for it) carries the delivery's time.
          const ahead = count > e.deliveries;
          return {
            seq: e.seq,
            deliveries: count,
            firstDeliveredAt: e.firstAt === 0 ? now : e.firstAt,
            lastDeliveredAt: ahead ? now : e.lastAt,
            lastError: e.lastError,
          };
        });
        call = this.#store.markDelivered!(below, dedupe(marks), this.#sync);
        done = (error) => {
          this.#marked(wanted, below, error);
          const failure = this.#failed ? error : undefined;
          for (const stored of waiting) stored(failure);
        };
      } else if (this.#pendingMoves.length > 0) {
        const moves = this.#pendingMoves.splice(0);
        call = this.#store.deadLetter!(moves.map((m) => m.letter));
        done = (error) => this.#moved(moves, error);
      } else if (this.#pendingDrops.length > 0) {
        const drops = this.#pendingDrops.splice(0);
        // Synced: a purge that resolved is never undone by a power loss.
        call = this.#store.dropDeadLetters!(
          drops.flatMap((d) => d.seqs),
          true,
        );
        done = (error) => {
          if (error === undefined) this.deadLetters -= drops.reduce((n, d) => n + d.seqs.length, 0);
          for (const d of drops) error === undefined ? d.resolve() : d.reject(error);
          // A full disk refuses the purge, and only the purge.
          if (error !== undefined && !isStoreFull(error)) this.#host.fail(error);
        };
      } else {
        // What they waited for was in the call that just finished.
        if (this.#waiting !== NOTHING_WAITS) this.#settleWaiting(undefined);
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

  #marked(wanted: WantedMark[], below: number, error: unknown): void {
    if (this.#failed) return;
    if (error !== undefined) {
      if (!isStoreFull(error)) {
        this.#host.fail(error);
        return;
      }
      // The disk is full: the items are handed out all the same (draining the queue is how space
      // comes back), counted in memory; a later record that fits stores their counts, and a crash
      // before one does loses these deliveries from the counts.
      this.uncounted += wanted.length + Math.max(0, below - Math.max(this.#below, 1));
    } else this.#lowerOwed = false;
    // An entry asked for again since (close forgot it, or a newer count) keeps its newer request.
    for (const { entry, count } of wanted) if (entry.marked === -count) entry.marked = count;
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
    if (isStoreFull(error) && !this.#failed) {
      this.#host.notMoved(entries, error as QueueError);
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

function isStoreFull(error: unknown): boolean {
  return error instanceof QueueError && error.code === 'ERR_STORE_FULL';
}

/** One mark per seq, the newest (highest count) kept: a store refuses a seq marked twice in one call. */
function dedupe(marks: DeliveryMark[]): DeliveryMark[] {
  if (marks.length < 2) return marks;
  const bySeq = new Map<number, DeliveryMark>();
  for (const m of marks) {
    const had = bySeq.get(m.seq);
    if (had === undefined || had.deliveries < m.deliveries) bySeq.set(m.seq, m);
  }
  return bySeq.size === marks.length ? marks : [...bySeq.values()];
}
