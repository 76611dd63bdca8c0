// Lazy acks: acks that resolve once written to the store, made durable by a later `Store.sync()`
// within a bound (a delay and a count). At-least-once tolerates redelivery, so an ack lost to a
// power loss before its sync only redelivers its item; it never loses one.
import type { Store } from '../contract/store.js';
import type { AckDurability, Durability } from '../api/types.js';

/** The bound of the `lazy` ack policy (`Builder.ackDurability('lazy', options)`). */
export interface LazyAckBound {
  /** A sync starts at most this long after the first ack it covers was written. */
  readonly maxDelayMs: number;
  /** A sync starts as soon as this many written acks wait for one. */
  readonly maxPending: number;
}

/** The ack policy a queue runs with, decided at open from what was asked and what the store can do. */
export interface AckPolicy {
  /** `none` under `durability('none')`: no ack is ever synced there, whatever was asked. */
  readonly policy: AckDurability | 'none';
  /** Set under `lazy`: the store that syncs and the bound. */
  readonly lazy?: { readonly store: Store & { sync(): Promise<void> }; readonly bound: LazyAckBound };
}

/**
 * The policy in force for `requested` over `store`. Under `none` the items themselves may be
 * lost to a power loss, so syncing their acks would buy nothing. A store without `sync()` cannot
 * make written acks durable later: it keeps them under `group`, which is stronger, never weaker.
 */
export function resolveAckPolicy(store: Store, durability: Durability, requested: AckDurability, bound: LazyAckBound): AckPolicy {
  if (durability === 'none') return { policy: 'none' };
  if (requested !== 'lazy') return { policy: requested };
  if (typeof store.sync !== 'function') return { policy: 'group' };
  return { policy: 'lazy', lazy: { store: store as Store & { sync(): Promise<void> }, bound } };
}

/** A `covered()` caller: resolved once `target` syncs have completed. */
interface CoverWaiter {
  readonly target: number;
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
}

/**
 * Counts the acks written and not yet covered by a sync, and starts `store.sync()` when the
 * bound says so. At most one sync is in flight: acks written while it runs are not covered by it
 * (it may have started before their write), so they wait for the next one, which starts when the
 * running one ends if their bound has passed meanwhile.
 */
export class LazyAcks {
  readonly #sync: () => Promise<void>;
  readonly #bound: LazyAckBound;
  readonly #fail: (error: unknown) => void;
  /** Acks written since the last sync started. */
  #unsynced = 0;
  /** Acks the sync in flight covers. */
  #syncing = 0;
  /** Armed when the first ack after a sync start is written; its firing starts the next sync. */
  #timer: ReturnType<typeof setTimeout> | undefined;
  #inFlight: Promise<void> | undefined;
  /** The bound passed while a sync was in flight: start the next one when it ends. */
  #due = false;
  #stopped = false;
  /** Syncs started and completed since open; they complete in the order they started. */
  #started = 0;
  #completed = 0;
  /** `covered()` callers: each resolves once `#completed` reaches its target. */
  #coverWaiters: CoverWaiter[] = [];

  constructor(store: Store & { sync(): Promise<void> }, bound: LazyAckBound, fail: (error: unknown) => void) {
    this.#sync = () => store.sync();
    this.#bound = bound;
    this.#fail = fail;
  }

  /** Acks written whose covering sync has not completed: what a power loss now may redeliver. */
  get unsynced(): number {
    return this.#unsynced + this.#syncing;
  }

  /** `count` acks were written to the store (their store call resolved). */
  written(count: number): void {
    if (this.#stopped) return;
    this.#unsynced += count;
    if (this.#unsynced >= this.#bound.maxPending) {
      this.#start();
    } else if (this.#timer === undefined) {
      this.#timer = setTimeout(this.#onTimer, this.#bound.maxDelayMs);
      // Written acks survive the process exiting; only a power loss needs the sync. A pending
      // timer must not keep a process alive that forgot to close its queue.
      this.#timer.unref?.();
    }
  }

  readonly #onTimer = (): void => {
    this.#timer = undefined;
    this.#start();
  };

  #start(): void {
    if (this.#timer !== undefined) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
    }
    if (this.#stopped || this.#unsynced === 0) return;
    if (this.#inFlight !== undefined) {
      this.#due = true;
      return;
    }
    this.#syncing = this.#unsynced;
    this.#unsynced = 0;
    this.#started++;
    let result: Promise<void>;
    try {
      result = this.#sync();
    } catch (error) {
      result = Promise.reject(error);
    }
    this.#inFlight = result.then(this.#synced, this.#failed);
  }

  readonly #synced = (): void => {
    this.#inFlight = undefined;
    this.#syncing = 0;
    this.#completedOne();
    if (this.#due) {
      this.#due = false;
      this.#start();
    }
  };

  readonly #failed = (error: unknown): void => {
    this.#inFlight = undefined;
    this.stop();
    // A failed sync may have dropped acks that already resolved: the queue fails (fail-stop).
    this.#fail(error);
  };

  /**
   * Make every written ack durable (close): wait for the sync in flight, then sync once more if
   * acks were written after it started. Rejects when that sync fails.
   */
  async flush(): Promise<void> {
    if (this.#timer !== undefined) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
    }
    this.#due = false;
    if (this.#inFlight !== undefined) await this.#inFlight;
    if (this.#stopped || this.#unsynced === 0) return;
    this.#syncing = this.#unsynced;
    this.#unsynced = 0;
    this.#started++;
    await this.#sync();
    this.#syncing = 0;
    this.#completedOne();
  }

  /**
   * Resolves once every ack written before the call is durable: the acks the sync in flight
   * covers need it to complete, the acks written since it started need the next one. Starts no
   * sync of its own unless `now` (the bound or the close starts it, so that waiting costs no
   * fsync); with `now`, the next sync starts at once, or as soon as the one in flight ends.
   * Rejects with `error` of {@link stop}. A processed set forgets an item only once this says its
   * ack can no longer be undone.
   */
  covered(now: boolean): Promise<void> {
    if (this.#unsynced === 0 && this.#syncing === 0) return Promise.resolve();
    const target = this.#started + (this.#unsynced > 0 ? 1 : 0);
    const promise = new Promise<void>((resolve, reject) => this.#coverWaiters.push({ target, resolve, reject }));
    // The bound's timer is unref'd: a caller waiting on it alone could let the process exit.
    if (now && this.#unsynced > 0) this.#start();
    return promise;
  }

  #completedOne(): void {
    this.#completed++;
    if (this.#coverWaiters.length === 0) return;
    const waiting: CoverWaiter[] = [];
    for (const w of this.#coverWaiters) {
      if (w.target <= this.#completed) w.resolve();
      else waiting.push(w);
    }
    this.#coverWaiters = waiting;
  }

  /** Resolves once no sync is running (its outcome already handled): the store may close then. */
  async settled(): Promise<void> {
    while (this.#inFlight !== undefined) await this.#inFlight;
  }

  /** No further sync (the queue failed); `covered()` callers reject with `error` once it is given. */
  stop(error?: unknown): void {
    this.#stopped = true;
    if (error !== undefined) for (const w of this.#coverWaiters.splice(0)) w.reject(error);
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
  }
}
