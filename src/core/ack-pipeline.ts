// The ack pipeline: the acks handed to the store, in batches that share one call (group commit of
// acks), one call in flight at a time. The core owns the counts the rest of the queue reads; it
// hears of each batch the store finished through a host, as it does from the push pipeline.
import { QueueError } from '../contract/errors.js';
import type { Store } from '../contract/store.js';
import { type AckBatch, type Entry, newAckBatch } from './entry.js';
import { FlushLoop, FlushScheduler, type TurnBudget } from './flush.js';

/** What the ack pipeline asks of the core. */
export interface AckHost {
  /** The failure of the queue, if it failed. */
  failure(): QueueError | undefined;
  /** Fail the queue (fail-stop) for `error`; returns the failure acks reject with. */
  fail(error: unknown): QueueError;
  /** The store removed these items: count them out. Called before their acks resolve. */
  acked(entries: Entry[]): void;
  /** Their acks resolved: the capacity they held is free again. */
  freed(): void;
  /** The store had no room for these acks (`ERR_STORE_FULL`): the items are still stored, ready again. */
  notAcked(entries: Entry[]): void;
  /** Items may be ready again: waiting consumers may be served. */
  serve(): void;
  /** The pipeline may have gone quiet (nothing queued, nothing in flight). */
  quiet(): void;
}

export class AckPipeline {
  readonly #store: Store;
  readonly #host: AckHost;
  /** Under `sync` every ack is its own batch: one fsync per operation. */
  readonly #oneByOne: boolean;
  /** Whether ack calls ask the store to sync (`sync`, `group`); lazy ones are synced elsewhere. */
  readonly #sync: boolean;
  /** Batches waiting for the store; under `group` and `none` new acks join the last one. */
  #queue: AckBatch[] = [];
  /** The batch new acks join (group and none), until it is handed to the store. */
  #open: AckBatch | undefined;
  #inFlight: AckBatch | undefined;
  readonly #flush: FlushScheduler;
  /** The store's `done` (`Store.done`): an ack call that returns it is done already. */
  readonly #storeDone: Promise<void> | undefined;
  /** The last ack call returned the store's `done`: the next ack goes to the store at once. */
  #atOnce = false;
  readonly #flushLoop = new FlushLoop(
    () => this.#handOver(),
    () => this.#atOnce,
    () => void this.#complete(),
  );
  /** Acks handed over but not yet resolved (queued or in flight). */
  #pending = 0;

  constructor(store: Store, host: AckHost, options: { oneByOne: boolean; sync: boolean; storeCallsPerTurn: TurnBudget }) {
    this.#store = store;
    this.#host = host;
    this.#oneByOne = options.oneByOne;
    this.#sync = options.sync;
    this.#flush = new FlushScheduler(() => this.flush(), options.storeCallsPerTurn);
    this.#storeDone = store.done instanceof Promise ? store.done : undefined;
  }

  /** Acks handed over and not yet resolved. */
  get pending(): number {
    return this.#pending;
  }

  /** Batches wait to be handed to the store. */
  get queued(): boolean {
    return this.#queue.length > 0;
  }

  /** A batch is in the store's hands now. */
  get inFlight(): boolean {
    return this.#inFlight !== undefined;
  }

  /** Ack `entry` (its reservation is settled): resolves once the store removed it under the ack policy. */
  ack(entry: Entry): Promise<void> {
    this.#pending++;
    let batch = this.#open;
    if (!batch) {
      batch = newAckBatch(entry);
      this.#queue.push(batch);
      if (!this.#oneByOne) this.#open = batch;
    } else {
      batch.entries.push(entry);
      batch.seqs.push(entry.seq);
    }
    // While a batch is in flight, its completion flushes what gathered meanwhile.
    if (this.#inFlight) return batch.promise;
    // A store that acked the last batch at once gains nothing from a batch gathered over a microtask.
    if (this.#atOnce) this.flush();
    else this.#flush.schedule();
    return batch.promise;
  }

  /** Fail-stop: reject every queued ack with the queue's failure (the one in flight settles on its own). */
  failAll(failure: QueueError): void {
    for (const batch of this.#queue.splice(0)) {
      this.#pending -= batch.entries.length;
      batch.reject(failure);
    }
    this.#open = undefined;
  }

  /**
   * Hand the next batch to the store. Returns how many acks it handed over in its first batch (0:
   * none now). Batches the store finished during the call are completed in a loop (FlushLoop).
   */
  flush(): number {
    return this.#flushLoop.run();
  }

  /** Hand the next batch to the store; returns how many acks it holds (0: none now). */
  #handOver(): number {
    if (this.#inFlight || this.#queue.length === 0 || this.#host.failure()) {
      this.#host.quiet();
      return 0;
    }
    if (!this.#flush.admit()) return 0;
    const batch = this.#queue.shift()!;
    if (batch === this.#open) this.#open = undefined;
    this.#inFlight = batch;
    let result: Promise<void>;
    try {
      result = this.#store.ack(batch.seqs, this.#sync);
    } catch (error) {
      result = Promise.reject(error);
    }
    this.#atOnce = result === this.#storeDone;
    if (!this.#atOnce) result.then(this.#done, this.#failed);
    return batch.entries.length;
  }

  /** The batch the store finished (acked or failed), no longer in flight. */
  #take(): AckBatch {
    const batch = this.#inFlight!;
    this.#inFlight = undefined;
    this.#pending -= batch.entries.length;
    return batch;
  }

  readonly #done = (): void => {
    if (this.#complete()) this.flush();
  };

  /** The batch in flight is acked: count it out, resolve its acks. False when the queue failed meanwhile. */
  #complete(): boolean {
    const batch = this.#take();
    const failure = this.#host.failure();
    if (failure) {
      batch.reject(failure);
      this.#host.quiet();
      return false;
    }
    this.#host.acked(batch.entries);
    batch.resolve();
    this.#host.freed();
    return true;
  }

  readonly #failed = (error: unknown): void => {
    const batch = this.#take();
    if (error instanceof QueueError && error.code === 'ERR_STORE_FULL' && !this.#host.failure()) {
      // The acks were not recorded: the items are still stored and unacked, so they are ready again.
      this.#host.notAcked(batch.entries);
      batch.reject(error);
      this.#host.serve();
      this.flush();
      return;
    }
    const failure = this.#host.fail(error);
    batch.reject(failure);
    this.#host.quiet();
  };
}
