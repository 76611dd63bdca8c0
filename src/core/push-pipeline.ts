// The push pipeline: capacity and its waiters, the pushes admitted into the next batch, seq
// assignment, and the one batch the store is writing (group commit: a batch gathers what was
// pushed while the one before it was stored). The core owns every count the consumer side reads;
// it answers this object's questions, and hears of each stored batch, through a host.
import { QueueError } from '../contract/errors.js';
import type { Store } from '../contract/store.js';
import { expectation } from '../lib/validate.js';
import {
  type Entry,
  type OnePush,
  type PendingPush,
  type PushMeta,
  NO_ENTRIES,
  PLAIN,
  NO_PUSHES,
  abortReason,
  detachAbort,
  keyedEntry,
  newEntry,
  unset,
  withFire,
  withSource,
} from './entry.js';
import { FlushLoop, FlushScheduler, type TurnBudget } from './flush.js';
import type { Durability } from '../api/types.js';
import { payloadBytes } from './byte-budget.js';

/** A push waiting for capacity, admitted, or in the batch being stored. */
type Push = PendingPush | OnePush;

/** A OnePush: every PendingPush has its payloads, and a OnePush has none (its entry holds them). */
function isOne(push: Push): push is OnePush {
  return (push as PendingPush).payloads === undefined;
}

/** Items the push stores. */
function itemCount(push: Push): number {
  return isOne(push) ? 1 : push.payloads.length;
}

/** Payload bytes the push stores. */
function pushBytes(push: Push): number {
  return isOne(push) ? push.entry.bytes.byteLength : payloadBytes(push.payloads);
}

/** The push moves dead letters back (`redrive`), which go to the store in a call of their own. */
function isRedrive(push: Push): boolean {
  return !isOne(push) && push.from !== undefined;
}

/** What the push pipeline asks of the core. */
export interface PushHost {
  /** Why a push is refused now (the queue failed, or is closed), or undefined. */
  refusal(): QueueError | undefined;
  /** The failure of the queue, if it failed. */
  failure(): QueueError | undefined;
  /** Fail the queue (fail-stop) for `error`; returns the failure pushes reject with. */
  fail(error: unknown): QueueError;
  /** Stored, unacked items: what the capacity counts beside the admitted pushes. */
  storedCount(): number;
  /** Payload bytes of the stored, unacked items (an upper bound until exact): what `capacityBytes` counts beside the admitted pushes. */
  storedBytes(): number;
  /** A batch is stored: count its items and hand them to the consumer side. */
  stored(items: Entry[], scheduled: boolean, redrive: boolean): void;
  /** The pushes of a stored batch have resolved: waiting consumers may be served. */
  serve(): void;
  /** The pipeline may have gone quiet (nothing admitted, nothing being stored). */
  quiet(): void;
  /** drained()/onIdle() may hold now. */
  settleWatches(): void;
  /** The queue clock's wall time, in ms since the epoch. */
  now(): number;
}

export class PushPipeline {
  readonly #store: Store;
  readonly #host: PushHost;
  readonly #capacity: number;
  /** Bound on unacked payload bytes; Infinity: none, and no byte is counted. */
  readonly #capacityBytes: number;
  /** Under `sync` each push is its own batch: one fsync per operation. */
  readonly #oneByOne: boolean;
  readonly #syncWrites: boolean;
  /** Seq the next stored item gets. */
  #nextSeq: number;
  /** Every item with a seq below this is stored (its push resolved), or was never assigned. */
  #committedBefore: number;
  #capacityWaiters: Push[] = [];
  #capacityHead = 0;
  #admitted: Push[] = [];
  /** Items admitted under capacity and not yet stored. */
  #admittedCount = 0;
  /** Payload bytes of the items admitted and not yet stored (counted under a byte capacity only). */
  #admittedBytes = 0;
  #appendInFlight = false;
  /** Redrives among the admitted pushes. */
  #redrivesAdmitted = 0;
  /** The batch the store is writing now, and its first seq (it ends at `#nextSeq`). */
  #appendBatch: Push[] = NO_PUSHES;
  #appendItems: Entry[] = NO_ENTRIES;
  #appendFirstSeq = 0;
  /** The batch in flight holds items with a priority or a not-before time. */
  #appendScheduled = false;
  readonly #appendFlush: FlushScheduler;
  /** The store's `done` (`Store.done`): an append that returns it is stored already. */
  readonly #done: Promise<void> | undefined;
  /** The last append returned the store's `done`: the next push goes to the store at once. */
  #atOnce = false;
  readonly #flushLoop = new FlushLoop(
    () => this.#handOver(),
    () => this.#atOnce,
    () => void this.#completeAppend(),
  );

  constructor(
    store: Store,
    host: PushHost,
    options: { capacity: number; capacityBytes: number; durability: Durability; nextSeq: number; storeCallsPerTurn: TurnBudget },
  ) {
    this.#store = store;
    this.#host = host;
    this.#capacity = options.capacity;
    this.#capacityBytes = options.capacityBytes;
    this.#oneByOne = options.durability === 'sync';
    this.#syncWrites = options.durability !== 'none';
    this.#nextSeq = options.nextSeq;
    this.#committedBefore = options.nextSeq;
    this.#appendFlush = new FlushScheduler(() => this.flush(), options.storeCallsPerTurn);
    this.#done = store.done instanceof Promise ? store.done : undefined;
  }

  /** Every item with a seq below this is stored (its push resolved). */
  get committedBefore(): number {
    return this.#committedBefore;
  }

  /** A batch is being stored now. */
  get appendInFlight(): boolean {
    return this.#appendInFlight;
  }

  /** Pushes admitted and not yet handed to the store. */
  get hasAdmitted(): boolean {
    return this.#admitted.length > 0;
  }

  /** Pushes not yet resolved: waiting for capacity, admitted, or in the batch being stored. */
  get pending(): number {
    return this.#appendBatch.length + this.#admitted.length + this.#capacityWaiters.length - this.#capacityHead;
  }

  /** Reject every push still waiting for capacity (close, fail-stop): never admitted, never half-stored. */
  rejectWaiting(error: QueueError): void {
    for (let i = this.#capacityHead; i < this.#capacityWaiters.length; i++) {
      const p = this.#capacityWaiters[i]!;
      if (!isOne(p)) detachAbort(p);
      p.reject(error);
    }
    this.#capacityWaiters = [];
    this.#capacityHead = 0;
  }

  /** Fail-stop: reject every push admitted and waiting, with the queue's failure. */
  failAll(failure: QueueError): void {
    this.#redrivesAdmitted = 0;
    for (const p of this.#admitted.splice(0)) {
      if (!isOne(p)) detachAbort(p);
      p.reject(failure);
    }
    this.#admittedCount = 0;
    this.#admittedBytes = 0;
    this.rejectWaiting(failure);
  }

  /**
   * `push(bytes)` without options: what `push` checks and does for one payload with no signal and
   * no meta: the item's entry is made here, beside a record of the push's resolving functions
   * (`OnePush`), with no pending record or payload array.
   */
  pushOne(bytes: Uint8Array): Promise<number> {
    const error = this.#host.refusal() ?? this.#tooLarge(bytes) ?? this.#overByteCapacity(bytes.byteLength);
    if (error) return Promise.reject(error);
    const one: OnePush = { entry: newEntry(0, bytes), resolve: unset, reject: unset };
    const promise = new Promise<number>((resolve, reject) => {
      one.resolve = resolve;
      one.reject = reject;
    });
    if (this.#capacityHead === this.#capacityWaiters.length && this.#fits(one)) {
      this.#admit(one);
    } else {
      this.#capacityWaiters.push(one);
    }
    return promise;
  }

  /** A check added here that a push of one payload with no signal and no meta can fail belongs in `pushOne` too. */
  push(payloads: Uint8Array[], single: boolean, signal: AbortSignal | undefined, meta: PushMeta = PLAIN): Promise<number | number[]> {
    const { from, priority = 0, keys, keyedAt = 0, sources, group, fires } = meta;
    let notBefore = meta.notBefore ?? 0;
    const error = this.#host.refusal();
    if (error) return Promise.reject(error);
    if (signal?.aborted) return Promise.reject(abortReason(signal));
    if ((priority !== 0 || notBefore !== 0) && this.#store.features.scheduling !== true) {
      return Promise.reject(
        new QueueError('ERR_UNSUPPORTED', 'A priority or a delay needs a store that keeps them (features.scheduling); this store does not'),
      );
    }
    if (group !== undefined && this.#store.features.groups !== true) {
      return Promise.reject(
        new QueueError('ERR_UNSUPPORTED', 'A group needs a store that keeps groups (features.groups); this store does not'),
      );
    }
    // A time already come is no delay: the item is stored as a plain one.
    if (notBefore !== 0 && notBefore <= this.#host.now()) notBefore = 0;
    for (const p of payloads) {
      const tooLarge = this.#tooLarge(p);
      if (tooLarge) return Promise.reject(tooLarge);
    }
    if (payloads.length > this.#capacity) {
      return Promise.reject(new RangeError(expectation('payloads.length', `at most the capacity (${this.#capacity})`, payloads.length)));
    }
    if (this.#capacityBytes !== Infinity) {
      const over = this.#overByteCapacity(payloadBytes(payloads));
      if (over) return Promise.reject(over);
    }
    const pending: PendingPush = {
      payloads,
      single,
      priority,
      notBefore,
      group,
      resolve: unset,
      reject: unset,
      signal,
      onAbort: undefined,
    };
    if (from !== undefined) pending.from = from;
    if (keys !== undefined) {
      pending.keys = keys;
      pending.keyedAt = keyedAt;
    }
    if (sources !== undefined) pending.sources = sources;
    if (fires !== undefined) pending.fires = fires;
    // An executor that closes over `pending` alone: one per push, so its context stays small.
    const promise = new Promise<number | number[]>((resolve, reject) => {
      pending.resolve = resolve;
      pending.reject = reject;
    });
    // Listening before admitting: over a store that stores at once (`Store.done`) the push is
    // stored, and its listener detached, within #admit.
    if (signal) {
      pending.onAbort = () => this.#abortPush(pending);
      signal.addEventListener('abort', pending.onAbort, { once: true });
    }
    if (this.#capacityHead === this.#capacityWaiters.length && this.#fits(pending)) {
      this.#admit(pending);
    } else {
      this.#capacityWaiters.push(pending);
    }
    return promise;
  }

  /** `ERR_TOO_LARGE` for a payload over the store's limit, or undefined. */
  #tooLarge(payload: Uint8Array): QueueError | undefined {
    const max = this.#store.maxItemBytes;
    if (payload.byteLength <= max) return undefined;
    return new QueueError('ERR_TOO_LARGE', `Item of ${payload.byteLength} bytes exceeds the store's limit of ${max} bytes`);
  }

  /**
   * The `RangeError` of a push of `bytes` payload bytes that could never fit under the byte
   * capacity, or undefined: it would wait forever, so it is refused now, as a batch over the
   * capacity is.
   */
  #overByteCapacity(bytes: number): RangeError | undefined {
    if (bytes <= this.#capacityBytes) return undefined;
    return new RangeError(expectation('payload bytes', `at most the byte capacity (${this.#capacityBytes})`, bytes));
  }

  #fits(pending: Push): boolean {
    if (this.#host.storedCount() + this.#admittedCount + itemCount(pending) > this.#capacity) return false;
    return this.#capacityBytes === Infinity || this.#host.storedBytes() + this.#admittedBytes + pushBytes(pending) <= this.#capacityBytes;
  }

  #admit(pending: Push): void {
    if (isRedrive(pending)) this.#redrivesAdmitted++;
    // A literal of one, not a push into an empty array, which allocates room for seventeen: a
    // serial producer's batch holds one push.
    if (this.#admitted.length === 0) this.#admitted = [pending];
    else this.#admitted.push(pending);
    this.#admittedCount += itemCount(pending);
    if (this.#capacityBytes !== Infinity) this.#admittedBytes += pushBytes(pending);
    this.#scheduleAppend();
  }

  /** An aborted push leaves no trace: it is only abortable until its batch is handed to the store. */
  #abortPush(pending: PendingPush): void {
    let i = this.#admitted.indexOf(pending);
    if (i >= 0) {
      this.#admitted.splice(i, 1);
      this.#admittedCount -= pending.payloads.length;
      if (this.#capacityBytes !== Infinity) this.#admittedBytes -= payloadBytes(pending.payloads);
      this.admitWaiting();
    } else {
      i = this.#capacityWaiters.indexOf(pending, this.#capacityHead);
      if (i < 0) return;
      this.#capacityWaiters.splice(i, 1);
      // The aborted push may have been the head that blocked smaller ones behind it.
      this.admitWaiting();
    }
    pending.reject(abortReason(pending.signal!));
    this.#host.settleWatches();
  }

  /** Admit capacity waiters in FIFO order while they fit (capacity was freed). */
  admitWaiting(): void {
    const waiters = this.#capacityWaiters;
    while (this.#capacityHead < waiters.length && this.#host.refusal() === undefined) {
      const next = waiters[this.#capacityHead]!;
      if (!this.#fits(next)) break;
      waiters[this.#capacityHead++] = undefined as unknown as Push;
      this.#admit(next);
    }
    if (this.#capacityHead === waiters.length) {
      waiters.length = 0;
      this.#capacityHead = 0;
    } else if (this.#capacityHead > 1024 && this.#capacityHead * 2 > waiters.length) {
      this.#capacityWaiters = waiters.slice(this.#capacityHead);
      this.#capacityHead = 0;
    }
  }

  #scheduleAppend(): void {
    // While a batch is in flight, its completion flushes what gathered meanwhile.
    if (this.#appendInFlight) return;
    // A store that stored the last batch at once gains nothing from a batch gathered over a
    // microtask: the push goes to it now (the per-turn budget still hands the event loop its
    // turn). One that made the core wait (a subclass of MemStore whose calls wait) gets batches.
    if (this.#atOnce) this.flush();
    else this.#appendFlush.schedule();
  }

  /**
   * Hand the next batch to the store. Under `sync` each push is its own batch (one fsync per
   * operation). Returns how many pushes it handed over in its first batch (0: none now). Batches
   * the store finished during the call are completed in a loop (FlushLoop).
   */
  flush(): number {
    return this.#flushLoop.run();
  }

  /** Hand the next batch to the store; returns how many pushes it holds (0: none now). */
  #handOver(): number {
    if (this.#appendInFlight || this.#admitted.length === 0 || this.#host.failure()) {
      this.#host.quiet();
      return 0;
    }
    if (!this.#appendFlush.admit()) return 0;
    let batch: Push[];
    const redrive = isRedrive(this.#admitted[0]!);
    if (this.#oneByOne || redrive) {
      batch = [this.#admitted.shift()!];
    } else {
      // A redrive goes to the store in a call of its own: the batch stops before the next one.
      const cut = this.#redrivesAdmitted === 0 ? -1 : this.#admitted.findIndex(isRedrive);
      batch = cut < 0 ? this.#admitted : this.#admitted.splice(0, cut);
      if (cut < 0) this.#admitted = [];
    }
    if (redrive) this.#redrivesAdmitted--;
    const firstSeq = this.#nextSeq;
    // Sized up front: pushes into an empty array would allocate room for seventeen for a batch of one.
    let count = 0;
    for (let p = 0; p < batch.length; p++) count += itemCount(batch[p]!);
    const items = new Array<Entry>(count);
    let seq = firstSeq;
    let scheduled = false;
    for (let p = 0, k = 0; p < batch.length; p++) {
      const pending = batch[p]!;
      if (isOne(pending)) {
        const entry = pending.entry;
        (entry as { seq: number }).seq = seq++;
        items[k++] = entry;
        continue;
      }
      detachAbort(pending);
      const { priority, notBefore, group } = pending;
      if (priority !== 0 || notBefore !== 0) scheduled = true;
      const keys = pending.keys;
      const payloads = pending.payloads;
      const firstItem = k;
      if (keys !== undefined)
        for (let i = 0; i < keys.length; i++)
          items[k++] = keyedEntry(seq++, payloads[i]!, priority, notBefore, keys[i]!, pending.keyedAt!, group);
      else for (let i = 0; i < payloads.length; i++) items[k++] = newEntry(seq++, payloads[i]!, priority, notBefore, group);
      const sources = pending.sources;
      if (sources !== undefined) for (let i = 0; i < sources.length; i++) withSource(items[firstItem + i]!, sources[i]!);
      const fires = pending.fires;
      if (fires !== undefined) for (let i = 0; i < fires.length; i++) withFire(items[firstItem + i]!, fires[i]!);
    }
    this.#appendScheduled = scheduled;
    this.#nextSeq = seq;
    this.#appendInFlight = true;
    this.#appendBatch = batch;
    this.#appendItems = items;
    this.#appendFirstSeq = firstSeq;
    let result: Promise<void>;
    try {
      if (redrive) {
        const from = (batch[0] as PendingPush).from!;
        result = this.#store.redrive!(
          items.map((item, i) => ({ from: from[i]!, item })),
          this.#syncWrites,
        );
      } else {
        result = this.#store.append(items, this.#syncWrites);
      }
    } catch (error) {
      result = Promise.reject(error);
    }
    // A redrive is waited for as it always was; only append calls may finish at once.
    this.#atOnce = !redrive && result === this.#done;
    if (!this.#atOnce) result.then(this.#appendDone, this.#appendFailed);
    return batch.length;
  }

  /** The batch the store finished (stored or failed), no longer in flight. */
  #takeAppendBatch(): { batch: Push[]; items: Entry[]; firstSeq: number; count: number } {
    const batch = this.#appendBatch;
    const items = this.#appendItems;
    const firstSeq = this.#appendFirstSeq;
    const count = this.#nextSeq - firstSeq;
    this.#appendItems = NO_ENTRIES;
    this.#appendInFlight = false;
    this.#appendBatch = NO_PUSHES;
    this.#admittedCount -= count;
    if (this.#capacityBytes !== Infinity) for (const pending of batch) this.#admittedBytes -= pushBytes(pending);
    return { batch, items, firstSeq, count };
  }

  readonly #appendDone = (): void => {
    if (this.#completeAppend()) this.flush();
  };

  /** The batch in flight is stored: count it, hand it on, resolve its pushes. False when the queue failed meanwhile. */
  #completeAppend(): boolean {
    const { batch, items, firstSeq, count } = this.#takeAppendBatch();
    const failure = this.#host.failure();
    if (failure) {
      // The queue failed while this batch was being stored: report the failure, as for every pending operation.
      for (const pending of batch) pending.reject(failure);
      this.#host.quiet();
      return false;
    }
    this.#committedBefore = firstSeq + count;
    this.#host.stored(items, this.#appendScheduled, isRedrive(batch[0]!));
    let seq = firstSeq;
    for (const pending of batch) {
      if (isOne(pending)) {
        pending.resolve(seq++);
        continue;
      }
      if (pending.single) {
        pending.resolve(seq++);
        continue;
      }
      const seqs = new Array<number>(pending.payloads.length);
      for (let i = 0; i < seqs.length; i++) seqs[i] = seq++;
      pending.resolve(seqs);
    }
    this.#host.serve();
    return true;
  }

  readonly #appendFailed = (error: unknown): void => {
    const { batch, firstSeq } = this.#takeAppendBatch();
    if (error instanceof QueueError && error.code === 'ERR_STORE_FULL' && !this.#host.failure()) {
      // Nothing of the batch was stored and the store is consistent: only this batch fails, and its seqs are reused.
      this.#nextSeq = firstSeq;
      for (const pending of batch) pending.reject(error);
      this.admitWaiting();
      this.flush();
      this.#host.settleWatches();
      return;
    }
    const failure = this.#host.fail(error);
    for (const pending of batch) pending.reject(failure);
    this.#host.quiet();
  };
}
