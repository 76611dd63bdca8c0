// When the core hands its next batch to the store: group commit and the per-turn budget of store calls.

/**
 * The most store calls one pipeline makes in one turn of the event loop under the default budget
 * `'auto'` (`Builder.storeCallsPerTurn`; before `'auto'`, the fixed default); past the budget, the
 * next call waits for the next turn. Operations chained in promise callbacks (a
 * consumer that acks as soon as it reserves, a producer that pushes as soon as its push resolved)
 * never leave the microtask queue, so without a budget a store that resolves at once (`none`,
 * MemStore) is handed one item per call: measured in `bench/profile.mjs logstore none 64 128 e2e`,
 * 1 item per ack call, one write(2) per message. Past the budget, everything issued meanwhile joins
 * one batch on the next turn, and timers and I/O get their turn too.
 */
export const TURN_STORE_CALLS = 16;

/** A settled promise: a reaction on it runs a callback in a microtask (see `FlushScheduler.schedule`). */
export const SETTLED = Promise.resolve();

/** Under `'auto'`, the budget doubles after this many flushes in a row that waited a turn for one operation. */
const LONE_FLUSHES_TO_GROW = 4;

/** A pipeline's per-turn budget of store calls: a fixed number, or `'auto'` (see FlushScheduler). */
export type TurnBudget = number | 'auto';

/**
 * When one pipeline (appends or acks) hands its next batch to the store. `schedule()` flushes in
 * a microtask, so every operation issued in the same synchronous run joins one batch; `admit()`
 * counts store calls against the per-turn budget and, once it is spent, moves the flush to the
 * next turn.
 *
 * Under `'auto'` (the default) the budget follows what waiting a turn gathered. A flush moved to
 * the next turn that hands over several operations shows callers that chain in parallel: the
 * budget drops to 1, so that each turn gathers one batch (measured under `none`, 64 producers end
 * to end: 1.7–3.0× a budget of 16). Such flushes that hand over a single operation, four in a row,
 * show a serial caller, whom the wait only delays: the budget doubles, up to TURN_STORE_CALLS,
 * where a serial caller pays one turn per 16 calls (a budget of 1 costs it 37–80 %).
 */
export class FlushScheduler {
  readonly #flush: () => number;
  readonly #adaptive: boolean;
  #budget: number;
  #scheduled = false;
  /** The flush scheduled is the one moved to the next turn. */
  #deferred = false;
  #calls = 0;
  #resetScheduled = false;
  /** Flushes moved to the next turn in a row that handed over one operation each. */
  #lone = 0;

  /** `flush` returns how many operations it handed to the store (0: none). */
  constructor(flush: () => number, budget: TurnBudget) {
    this.#flush = flush;
    this.#adaptive = budget === 'auto';
    this.#budget = budget === 'auto' ? TURN_STORE_CALLS : budget;
  }

  readonly #run = (): void => {
    this.#scheduled = false;
    const deferred = this.#deferred;
    this.#deferred = false;
    const handed = this.#flush();
    if (!deferred || !this.#adaptive) return;
    if (handed > 1) {
      this.#budget = 1;
      this.#lone = 0;
    } else if (handed === 1 && this.#budget < TURN_STORE_CALLS && ++this.#lone >= LONE_FLUSHES_TO_GROW) {
      this.#budget = Math.min(TURN_STORE_CALLS, this.#budget * 2);
      this.#lone = 0;
    }
  };

  readonly #reset = (): void => {
    this.#calls = 0;
    this.#resetScheduled = false;
  };

  /** The budget in force now (for tests). */
  get budget(): number {
    return this.#budget;
  }

  /** Flush soon (once, however often this is called before then). */
  schedule(): void {
    if (this.#scheduled) return;
    this.#scheduled = true;
    // A reaction on a settled promise, not queueMicrotask: Node wraps each queueMicrotask callback
    // in a new AsyncResource and a bound function, which cost more than the rest of a serial push.
    void SETTLED.then(this.#run);
  }

  /** Count one store call. False when this turn's budget is spent: a flush then runs next turn. */
  admit(): boolean {
    if (this.#calls >= this.#budget) {
      if (!this.#scheduled) {
        this.#scheduled = true;
        this.#deferred = true;
        setImmediate(this.#run);
      }
      return false;
    }
    this.#calls++;
    if (!this.#resetScheduled) {
      // Scheduled before any deferred flush of this turn, so the budget is fresh when that runs.
      this.#resetScheduled = true;
      setImmediate(this.#reset);
    }
    return true;
  }
}

/**
 * A pipeline's flush: hands batches to the store while each one is finished during the call
 * (`Store.done`), completing it before handing over the next, in a loop. Completing a batch may
 * admit more operations (capacity freed, a push made by a diagnostics subscriber); a flush asked
 * for meanwhile returns at once and leaves them to the loop, so the stack does not grow with the
 * number of batches.
 */
export class FlushLoop {
  readonly #handOver: () => number;
  readonly #finishedAtOnce: () => boolean;
  readonly #complete: () => void;
  #running = false;

  /**
   * `handOver` hands the next batch to the store and returns how many operations it holds (0:
   * none now); `finishedAtOnce` says whether the store finished that batch during the call, which
   * `complete` then completes.
   */
  constructor(handOver: () => number, finishedAtOnce: () => boolean, complete: () => void) {
    this.#handOver = handOver;
    this.#finishedAtOnce = finishedAtOnce;
    this.#complete = complete;
  }

  /** Returns how many operations the first batch handed over held (0: none now, or a loop is running). */
  run(): number {
    if (this.#running) return 0;
    this.#running = true;
    let first = -1;
    try {
      for (;;) {
        const handed = this.#handOver();
        if (first < 0) first = handed;
        if (handed === 0 || !this.#finishedAtOnce()) break;
        this.#complete();
      }
    } finally {
      this.#running = false;
    }
    return first;
  }
}
