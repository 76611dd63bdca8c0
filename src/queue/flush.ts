// When the core hands its next batch to the store: group commit and the per-turn budget of store calls.

/**
 * Store calls one pipeline may make in one turn of the event loop, by default
 * (`Builder.storeCallsPerTurn`); past that, the next call waits for the next turn. Operations
 * chained in promise callbacks (a consumer that acks as soon as it reserves, a producer that
 * pushes as soon as its push resolved) never leave the microtask queue,
 * so without a budget a store that resolves at once (`none`, MemStore) is handed one item per call:
 * measured in `bench/profile.mjs logstore none 64 128 e2e`, 1 item per ack call, one write(2) per
 * message. Past the budget, everything issued meanwhile joins one batch on the next turn, and
 * timers and I/O get their turn too. A serial caller pays one `setImmediate` per budget of calls.
 */
export const TURN_STORE_CALLS = 16;

/**
 * When one pipeline (appends or acks) hands its next batch to the store. `schedule()` flushes in
 * a microtask, so every operation issued in the same synchronous run joins one batch; `admit()`
 * counts store calls against the per-turn budget and, once it is spent, moves the flush to the
 * next turn.
 */
export class FlushScheduler {
  readonly #flush: () => void;
  readonly #budget: number;
  #scheduled = false;
  #calls = 0;
  #resetScheduled = false;

  constructor(flush: () => void, budget: number) {
    this.#flush = flush;
    this.#budget = budget;
  }

  readonly #run = (): void => {
    this.#scheduled = false;
    this.#flush();
  };

  readonly #reset = (): void => {
    this.#calls = 0;
    this.#resetScheduled = false;
  };

  /** Flush soon (once, however often this is called before then). */
  schedule(): void {
    if (this.#scheduled) return;
    this.#scheduled = true;
    queueMicrotask(this.#run);
  }

  /** Count one store call. False when this turn's budget is spent: a flush then runs next turn. */
  admit(): boolean {
    if (this.#calls >= this.#budget) {
      if (!this.#scheduled) {
        this.#scheduled = true;
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

