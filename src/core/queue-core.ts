// The core: the one owner of a queue's in-memory state: the stored count, the in-flight
// reservations and the items returned by nack. The push pipeline (push-pipeline.ts: capacity,
// seq assignment, group commit of appends), the ack pipeline (ack-pipeline.ts), the read-ahead
// (read-ahead.ts), the schedule of priorities and not-before times (schedule.ts), the delivery
// ledger (deliveries.ts) and the counters, channel messages and drained/idle waiters (monitor.ts)
// are objects of their own that it drives. Producer and Consumer are thin handles on it.
import { ByteArena, unpinned } from '../lib/bytes.js';
import { type Codec, bytes } from '../lib/codec.js';
import { OpenError, QueueError } from '../contract/errors.js';
import {
  type DeadLetter,
  type ScheduleFire,
  type Store,
  type StoreRecovery,
  STORE_ID_PATTERN,
  isScheduled,
  keepsKeys,
  keepsSchedules,
} from '../contract/store.js';
import { Schedules } from './schedules.js';
import {
  type Entry,
  type Holder,
  type PushMeta,
  type WaitGroup,
  type Waiter,
  PLAIN,
  abortReason,
  busyStores,
  closedError,
  detachAbort,
  entryOf,
  waitIn,
  waitInGroup,
  withdrawGroup,
} from './entry.js';
import { KeepAlive, type TimeSource } from '../lib/clock.js';
import { DelayedItems } from './delayed.js';
import { DeliveryLedger, type ExactCounts, errorMessage } from './deliveries.js';
import { DropGuards } from './drop-guard.js';
import { AckPipeline } from './ack-pipeline.js';
import { SETTLED, type TurnBudget } from './flush.js';
import { ByteBudget } from './byte-budget.js';
import { PushPipeline } from './push-pipeline.js';
import { IdempotencyKeys, type KeyWindow } from './idempotency.js';
import { Reserved } from './reserved.js';
import { type AckPolicy, LazyAcks } from './lazy-acks.js';
import { QueueMonitor, QueueWatches } from './monitor.js';
import { READ_PENDING, ReadAhead } from './read-ahead.js';
import { type Lease, Leases } from './leases.js';
import { Schedule } from './schedule.js';
import { GroupGate, PARKED_MAX_ITEMS } from './groups.js';
import { type GroupReport, type GroupSummary, groupReport, groupSummary } from './group-report.js';
import { type RateLimit, RateLimiter } from './rate-limit.js';
import type { AckDurability, Durability, QueueStats } from '../api/types.js';

/** How many items one store read fetches while the schedule is loaded at open. */
const SCHEDULE_SCAN_COUNT = 4096;

function leaseExpiredError(entry: Entry): QueueError {
  return new QueueError('ERR_LEASE_EXPIRED', `The lease of item ${entry.seq} ran out: it was returned to the queue`);
}

/** What a run whose records were stored within the call resolves with. */
const STORED = Promise.resolve();

function rejectAll(waiters: Waiter<Reserved | null>[], error: unknown): void {
  for (const w of waiters) {
    detachAbort(w);
    w.reject(error);
  }
}

/** One spool record as the core ingests it. */
export interface IngestRecord {
  readonly record: number;
  readonly bytes: Uint8Array;
  readonly priority: number;
  readonly notBefore: number;
  readonly key: string | undefined;
}

function unsupported(what: string): QueueError {
  return new QueueError('ERR_UNSUPPORTED', `${what} needs a store that keeps delivery counts and dead letters (features.deliveries)`);
}

/** What a queue is built from: its store, what the store recovered, and the Builder's settings. @internal */
export interface CoreSettings {
  readonly store: Store;
  readonly capacity: number;
  readonly durability: Durability;
  readonly acks: AckPolicy;
  readonly recovery: StoreRecovery;
  readonly storeCallsPerTurn: TurnBudget;
  readonly deliveries: { readonly maxDeliveries: number; readonly keep: boolean };
  readonly leaseMs: number;
  readonly time: TimeSource;
  readonly keyWindow: KeyWindow;
  /** Set with `capacityBytes`: the limit and the payload bytes the store holds at open. */
  readonly bytes?: { readonly capacity: number; readonly recovered: number } | undefined;
  readonly rateLimit?: RateLimit | undefined;
}

/** The single owner of a queue's in-memory state. @internal */
export class QueueCore {
  readonly store: Store;
  readonly capacity: number;
  /** The clocks and timers of this queue: the system's, or the one given to `Builder.clock`. */
  readonly time: TimeSource;
  /** How values become payloads and back (`Builder.codec`); set by the builder before the queue is handed out. */
  codec: Codec<unknown> = bytes();
  readonly durability: Durability;
  /** Where pushed payloads are copied; one per queue, so no view exposes another queue's data. */
  readonly arena = new ByteArena();
  /** The ack policy in force (see `AckPolicy`): whether ack calls sync, and who syncs lazy ones. */
  readonly ackDurability: AckDurability | 'none';
  readonly #lazyAcks: LazyAcks | undefined;

  #state: 'open' | 'closing' | 'closed' = 'open';
  #failure: QueueError | undefined;
  #readError: QueueError | undefined;
  #closePromise: Promise<void> | undefined;

  /** Stored, unacked items: ready, in the read-ahead, in flight, or with an ack pending. */
  #storedCount: number;
  /** Their payload bytes, counted only under a byte capacity (`Builder.capacityBytes`). */
  readonly #bytes: ByteBudget | undefined;

  /** Capacity, admitted pushes, seq assignment and the batch being stored (`./push-pipeline.ts`). */
  readonly #pushes: PushPipeline;

  /** Idempotency keys, over a store that keeps them (`./idempotency.ts`). */
  readonly keys: IdempotencyKeys | undefined;

  /** Durable schedules, over a store that keeps them (`./schedules.ts`). */
  readonly schedules: Schedules | undefined;

  /** The acks handed to the store, in batches (`./ack-pipeline.ts`). */
  readonly #acks: AckPipeline;

  // Consumer side.
  readonly #readAhead: ReadAhead;
  /**
   * Items returned to the queue (nacked, dropped, their lease or retry delay over) and items
   * pushed with a priority or a not-before time: the ready ones by priority then seq, the others
   * until their time comes (./schedule.ts). Plain items come from the read-ahead instead.
   */
  readonly #schedule: Schedule;
  /** Items nacked with a delay, not ready until their time comes; in memory only. */
  readonly #delayed: DelayedItems;
  /** Items in flight per group, and the items set aside while their group is at a consumer's limit (`./groups.ts`). */
  readonly #groups = new GroupGate();
  /** The rate limit's windows and the items set aside for them (`./rate-limit.ts`); undefined without a limit. */
  readonly #limiter: RateLimiter | undefined;
  /** Reserved items not yet settled. */
  #inFlightCount = 0;
  #reserveWaiters: Waiter<Reserved | null>[] = [];
  readonly #keepAlive = new KeepAlive();
  #nextToken = 1;
  /** The lease a reservation gets unless its reserve() says otherwise; Infinity: none. */
  readonly leaseMs: number;
  /** The running leases of in-flight reservations; in memory only. */
  readonly #leases: Leases;
  /** Leases that ran out, since open. */
  #leaseExpiredCount = 0;
  /** The group new deliveries join (`./drop-guard.ts`), so that dropped reservations come back. */
  readonly #dropGuards = new DropGuards(this);
  /** Delivery counts and dead-letter moves, over a store that keeps them. */
  readonly ledger: DeliveryLedger | undefined;
  /** Reservations in flight, tracked once scheduled items exist over a ledger (see `#addScheduled`). */
  #inFlightEntries: Set<Entry> | undefined;
  /** An item is moved to the dead letters instead of being handed out more often than this. */
  readonly #maxDeliveries: number;
  /** Settle when the queue is quiet (nothing being stored or acked); used by close. */
  #quietWaiters: (() => void)[] = [];

  // Observability: counters and channel messages, and the waiters of drained() and onIdle().
  readonly #monitor: QueueMonitor;
  readonly #watches = new QueueWatches(
    () => this.#isDrained(),
    () => this.#isIdle(),
  );
  /** The store's identity, when it reported a well-formed one at open. */
  readonly #storeId: string | undefined;

  constructor(settings: CoreSettings) {
    const { store, capacity, durability, acks, recovery, storeCallsPerTurn, deliveries, leaseMs, time, keyWindow, bytes, rateLimit } =
      settings;
    this.leaseMs = leaseMs;
    this.time = time;
    this.#schedule = new Schedule(time, () => this.#serveWaiters());
    this.#delayed = new DelayedItems((entries) => this.#releaseDelayed(entries), time);
    this.#leases = new Leases((leases) => this.#leasesExpired(leases), time);
    this.#limiter = rateLimit === undefined ? undefined : new RateLimiter(rateLimit, time, (entries) => this.#windowOpened(entries));
    const { nextSeq, count } = recovery;
    this.storedAtOpen = nextSeq;
    // A malformed identity is not one: leaving it out makes store-and-forward ask for an origin.
    if (typeof recovery.storeId === 'string' && STORE_ID_PATTERN.test(recovery.storeId)) this.#storeId = recovery.storeId;
    this.store = store;
    this.#monitor = new QueueMonitor(store);
    this.capacity = capacity;
    this.#bytes = bytes === undefined ? undefined : new ByteBudget(bytes.capacity, recovery, bytes.recovered);
    this.durability = durability;
    this.ackDurability = acks.policy;
    this.#lazyAcks = acks.lazy && new LazyAcks(acks.lazy.store, acks.lazy.bound, (error) => this.#fail(error));
    this.#acks = new AckPipeline(
      store,
      {
        failure: () => this.#failure,
        fail: (error) => {
          this.#fail(error);
          return this.#failure!;
        },
        acked: (entries) => this.#acked(entries),
        freed: () => {
          this.#pushes.admitWaiting();
          if (this.#watches.idleWaiting) this.#watches.settle();
        },
        notAcked: (entries) => {
          if (this.#state === 'open') for (const entry of entries) this.#schedule.ready(entry);
        },
        serve: () => this.#serveWaiters(),
        quiet: () => this.#checkQuiet(),
      },
      { oneByOne: acks.policy === 'sync', sync: acks.policy === 'sync' || acks.policy === 'group', storeCallsPerTurn },
    );
    this.#pushes = new PushPipeline(
      store,
      {
        refusal: () => this.operationalError(),
        failure: () => this.#failure,
        fail: (error) => {
          this.#fail(error);
          return this.#failure!;
        },
        storedCount: () => this.#storedCount,
        storedBytes: () => this.#bytes!.used,
        stored: (items, scheduled, redrive) => this.#stored(items, scheduled, redrive),
        serve: () => this.#serveWaiters(),
        quiet: () => this.#checkQuiet(),
        settleWatches: () => this.#watches.settle(),
        now: () => this.time.wallNow(),
      },
      { capacity, capacityBytes: bytes?.capacity ?? Infinity, durability, nextSeq, storeCallsPerTurn },
    );
    this.#storedCount = count;
    this.keys = keepsKeys(store) ? new IdempotencyKeys(store, keyWindow, () => time.wallNow()) : undefined;
    this.schedules = keepsSchedules(store)
      ? new Schedules({
          store,
          time,
          sync: durability !== 'none',
          fire: (bytes, fires, priority, group) => this.#fireSchedule(bytes, fires, priority, group),
          refusal: () => this.operationalError(),
          fail: (error) => {
            this.#fail(error);
            return this.#failure!;
          },
        })
      : undefined;
    this.#maxDeliveries = deliveries.maxDeliveries;
    this.ledger = deliveries.keep
      ? new DeliveryLedger(store, recovery, {
          fail: (error) => this.#fail(error),
          covered: () => this.#serveWaiters(),
          moved: (entries, reasons) => this.#moved(entries, reasons),
          notMoved: (entries) => {
            // Still stored and unacked: ready again, as after an ack the disk had no room for.
            if (this.#state === 'open') for (const entry of entries) this.#schedule.ready(entry);
            this.#serveWaiters();
            this.#checkQuiet();
          },
        })
      : undefined;
    this.#readAhead = new ReadAhead(store, {
      committedBefore: () => this.#pushes.committedBefore,
      readyNotReturned: () => this.#ready() - this.#schedule.readyCount - this.#parked(),
      appendInFlight: () => this.#pushes.appendInFlight,
      isOpen: () => this.#state === 'open',
      readFailed: (error) => this.#readFailed(error),
      fail: (error) => this.#fail(error),
      fetched: () => this.#serveWaiters(),
    });
  }

  /**
   * Read the items stored from `from` on (`StoreRecovery.scheduledFrom`) once, at open, and hold
   * those with a priority or a not-before time in the schedule; the read-ahead skips them. Plain
   * items are read and dropped: their turn comes through the read-ahead.
   */
  async loadSchedule(from: number): Promise<void> {
    const before = this.#pushes.committedBefore;
    let after = from - 1;
    while (after < before - 1) {
      const items = await this.store.read({ after, before, limit: SCHEDULE_SCAN_COUNT });
      if (items.length === 0) return;
      for (const item of items) {
        if (!(item.seq > after && item.seq < before))
          throw new OpenError(
            'ERR_STORE',
            `Store read returned seq ${item.seq} out of order or out of range while the scheduled items were read at open`,
          );
        after = item.seq;
        if (isScheduled(item)) this.#addScheduled(entryOf(item));
      }
    }
  }

  /** An open that failed after the core was made: drop what it holds (the schedule's timer and items). */
  discard(): void {
    this.#state = 'closed';
    this.schedules?.stop();
    this.#schedule.clear();
    this.#groups.clear();
    this.#limiter?.clear();
  }

  /** Ready items set aside for a limit (a group's concurrency, a rate window): held in memory, not in the read-ahead. */
  #parked(): number {
    return this.#groups.parked + (this.#limiter?.parked ?? 0);
  }

  get closed(): boolean {
    return this.#state !== 'open';
  }

  operationalError(): QueueError | undefined {
    if (this.#failure) return this.#failure;
    if (this.#state !== 'open') return closedError();
    return undefined;
  }

  stats(): QueueStats {
    const m = this.#monitor;
    const stats: QueueStats = {
      ready: this.#ready(),
      inFlight: this.#inFlightCount,
      capacity: this.capacity,
      pendingPushes: this.#pendingPushes(),
      pendingAcks: this.#acks.pending,
      durability: this.durability,
      ackDurability: this.ackDurability,
      unsyncedAcks: this.#lazyAcks?.unsynced ?? 0,
      closed: this.#state !== 'open',
      queueId: m.queueId,
      pushed: m.pushedCount,
      acked: m.ackedCount,
      nacked: m.nackedCount,
      redelivered: m.redeliveredCount,
      delayed: this.#delayed.size + this.#schedule.waitingCount,
      leased: this.#leases.size,
      retried: m.retriedCount,
      deadLettered: m.deadLetteredCount,
      deadLetters: this.ledger?.deadLetters ?? 0,
      leaseExpired: this.#leaseExpiredCount,
      uncountedDeliveries: this.ledger?.uncounted ?? 0,
      deadLettering: this.ledger?.moving ?? 0,
      groupLimited: this.#groups.parked,
      rateLimited: 0,
    };
    const limiter = this.#limiter;
    if (limiter !== undefined) {
      // Under a limit for the queue nothing is set aside: while its window is shut, every ready
      // item not already waiting for its group waits for the window.
      stats.rateLimited = limiter.byGroup ? limiter.parked : limiter.closed ? stats.ready - stats.groupLimited : 0;
    }
    if (this.#bytes !== undefined) {
      stats.capacityBytes = this.#bytes.capacity;
      stats.bytes = this.#bytes.used;
      stats.bytesExact = this.#bytes.exact;
    }
    if (this.#storeId !== undefined) stats.storeId = this.#storeId;
    // A closed store may be open again elsewhere already: its usage is no longer this queue's.
    if (this.store.usage && this.#state === 'open') {
      const usage = this.store.usage();
      stats.bytesOnDisk = usage.bytesOnDisk;
      stats.segments = usage.segments;
    }
    return stats;
  }

  /** The groups with items in flight or waiting aside, the busiest `limit` listed (`./group-report.ts`). */
  groupReport(limit: number): GroupReport {
    return groupReport(this.#groups, this.#limiter, limit);
  }

  /** How many groups have items in flight, and how many have items waiting for their limit. */
  groupSummary(): GroupSummary {
    return groupSummary(this.#groups);
  }

  #pendingPushes(): number {
    return this.#pushes.pending;
  }

  #ready(): number {
    return (
      this.#storedCount -
      this.#inFlightCount -
      this.#acks.pending -
      this.#delayed.size -
      this.#schedule.waitingCount -
      (this.ledger?.moving ?? 0)
    );
  }

  // ---------------------------------------------------------------- producer

  push(payloads: Uint8Array[], single: boolean, signal: AbortSignal | undefined, meta: PushMeta = PLAIN): Promise<number | number[]> {
    return this.#pushes.push(payloads, single, signal, meta);
  }

  /** Push one payload without a signal or meta: `push([bytes], true)` without a pending record (`OnePush`). */
  pushOne(bytes: Uint8Array): Promise<number> {
    return this.#pushes.pushOne(bytes);
  }

  /** Push one payload under an idempotency key (see `./idempotency.ts`). */
  pushKeyed(payload: Uint8Array, key: string, signal: AbortSignal | undefined, meta: PushMeta = PLAIN): Promise<number> {
    const error = this.operationalError();
    if (error) return Promise.reject(error);
    if (this.keys === undefined) {
      return Promise.reject(
        new QueueError('ERR_UNSUPPORTED', 'An idempotency key needs a store that keeps keys (features.idempotency); this store does not'),
      );
    }
    return this.keys.push(
      key,
      signal,
      (keyedAt) => this.#pushes.push([payload], true, signal, { ...meta, keys: [key], keyedAt }) as Promise<number>,
    );
  }

  /** Push a batch under idempotency keys, one per payload (see `./idempotency.ts`). */
  pushManyKeyed(
    payloads: Uint8Array[],
    keys: readonly string[],
    signal: AbortSignal | undefined,
    meta: PushMeta = PLAIN,
  ): Promise<number[]> {
    const error = this.operationalError();
    if (error) return Promise.reject(error);
    if (this.keys === undefined) {
      return Promise.reject(
        new QueueError('ERR_UNSUPPORTED', 'An idempotency key needs a store that keeps keys (features.idempotency); this store does not'),
      );
    }
    return this.keys.pushMany(
      keys,
      signal,
      (indices, keyedAt) =>
        this.#pushes.push(
          indices.map((i) => payloads[i]!),
          false,
          signal,
          { ...meta, keys: indices.map((i) => keys[i]!), keyedAt },
        ) as Promise<number[]>,
      (i) => (keyedAt) => this.#pushes.push([payloads[i]!], true, signal, { ...meta, keys: [keys[i]!], keyedAt }) as Promise<number>,
    );
  }

  /**
   * Records of a spool file (`src/stores/log/engine/spool-ingest.ts`), pushed in their order, each item stored
   * with its origin. A record with a key is pushed as a keyed push is: a remembered key stores
   * nothing. Resolves once every record is stored (or found a duplicate).
   */
  ingest(file: string, records: readonly IngestRecord[]): Promise<void> {
    const error = this.operationalError();
    if (error) return Promise.reject(error);
    const pushes: Promise<unknown>[] = [];
    for (const r of records) {
      const sources = [{ file, record: r.record }];
      const key = r.key;
      if (key !== undefined && this.keys !== undefined) {
        pushes.push(
          this.keys.push(
            key,
            undefined,
            (keyedAt) =>
              this.#pushes.push([r.bytes], true, undefined, {
                priority: r.priority,
                notBefore: r.notBefore,
                keys: [key],
                keyedAt,
                sources,
              }) as Promise<number>,
          ),
        );
      } else {
        pushes.push(this.#pushes.push([r.bytes], true, undefined, { priority: r.priority, notBefore: r.notBefore, sources }));
      }
    }
    return Promise.all(pushes).then(() => undefined);
  }

  /** The items of schedules' slots: one push of one item per slot, each carrying its slot. */
  #fireSchedule(bytes: Uint8Array[], fires: ScheduleFire[], priority: number, group: string | undefined): Promise<unknown> {
    // Each item its own copy: a handler that changes an item's bytes must not change its siblings' or the schedule's.
    const payloads = bytes.map((b) => this.arena.copy(b));
    return this.#pushes.push(payloads, false, undefined, { priority, group, fires });
  }

  /** A batch is stored (`PushHost.stored`): count it, and hand its items to the consumer side. */
  #stored(items: Entry[], scheduled: boolean, redrive: boolean): void {
    this.#storedCount += items.length;
    this.#bytes?.stored(items);
    if (redrive) this.ledger!.deadLetters -= items.length;
    if (scheduled) {
      // Scheduled items wait in the schedule; the read-ahead skips them when it meets them in the
      // store. A batch stored while the queue closes stays in the store only.
      const plain: Entry[] = [];
      const open = this.#state === 'open';
      for (const item of items) {
        if (item.priority !== 0 || item.notBefore !== 0) {
          if (open) this.#addScheduled(item);
        } else plain.push(item);
      }
      if (plain.length > 0) this.#readAhead.stored(plain);
    } else {
      this.#readAhead.stored(items);
    }
    this.#monitor.stored(items);
  }

  // ---------------------------------------------------------------- consumer

  /** `process()` loops running now: the queue has a consumer even between two of its items. */
  loops = 0;

  /** A consumer waits for items, holds some, or runs a `process()` loop: another process should not take them (`pq pop`). */
  get consuming(): boolean {
    return this.loops > 0 || this.#reserveWaiters.length > 0 || this.#inFlightCount > 0;
  }

  /** `groupLimit`: hand out no item of a group that has this many in flight (`process({ groupConcurrency })`). */
  tryReserve(holder?: Holder, leaseMs = this.leaseMs, groupLimit = Infinity): Reserved | null {
    if (this.#failure) throw this.#failure;
    if (this.#state !== 'open' || holder?.closed) return null;
    const entry = this.#takeNext(groupLimit);
    return entry ? this.#deliver(entry, leaseMs, holder) : null;
  }

  /**
   * What `reserve()` would resolve with at once, without a promise: a reservation, null when the
   * consumer is closed, undefined when it would wait (nothing ready, or other reserves wait before
   * it). Throws what `reserve()` would reject with at once (the queue's failure, an aborted
   * `signal`, damage met reading). `reserve()` itself answers through this.
   */
  reserveNow(holder?: Holder, leaseMs = this.leaseMs, signal?: AbortSignal, groupLimit = Infinity): Reserved | null | undefined {
    if (this.#failure) throw this.#failure;
    if (this.#state !== 'open' || holder?.closed) return null;
    if (signal?.aborted) throw abortReason(signal);
    if (this.#reserveWaiters.length !== 0) return undefined;
    const entry = this.#takeNext(groupLimit);
    return entry === null ? undefined : this.#deliver(entry, leaseMs, holder);
  }

  reserve(signal: AbortSignal | undefined, leaseMs = this.leaseMs, holder?: Holder, groupLimit = Infinity): Promise<Reserved | null> {
    return (
      this.#reserveAtOnce(signal, leaseMs, holder, groupLimit) ??
      this.#wait(waitIn(this.#reserveWaiters, signal, leaseMs, holder, this.#waitersLeft, groupLimit))
    );
  }

  /**
   * reserve() for process(): waits in `group`, which `stopWaiting` withdraws whole, with no
   * listener per worker; `groupLimit` as for `tryReserve`.
   *
   * `gather`: the caller is one of several workers that reserve together (`process()` with a
   * concurrency above 1). Over a store that keeps delivery counts, its reserve then waits in line
   * even when an item is ready, and the waiters that joined in the same run of microtasks are
   * served together, in one pass whose hand-outs share one delivery record: workers draining a
   * backlog each come back for their next item at nearly the same moment, and taking them one by
   * one wrote a record per item (one write(2) each under `lazy` and `none`).
   */
  reserveIn(group: WaitGroup, holder?: Holder, leaseMs = this.leaseMs, groupLimit = Infinity, gather = false): Promise<Reserved | null> {
    if (gather && this.ledger !== undefined) {
      if (this.#failure) return Promise.reject(this.#failure);
      if (this.#state !== 'open' || holder?.closed) return Promise.resolve(null);
      const waiting = this.#wait(waitInGroup(this.#reserveWaiters, group, leaseMs, holder, groupLimit));
      if (!this.#serveSoon) {
        this.#serveSoon = true;
        void SETTLED.then(this.#servePending);
      }
      return waiting;
    }
    return (
      this.#reserveAtOnce(undefined, leaseMs, holder, groupLimit) ??
      this.#wait(waitInGroup(this.#reserveWaiters, group, leaseMs, holder, groupLimit))
    );
  }

  /** A pass over the waiters is due in a microtask (`reserveIn` with `gather`). */
  #serveSoon = false;
  readonly #servePending = (): void => {
    this.#serveSoon = false;
    // Closing or failed meanwhile: the close or the failure settled the waiters already.
    if (this.#state === 'open' && !this.#failure) this.#serveWaiters();
  };

  /**
   * Close a forked consumer: its waiting reserves resolve null (its process() loops end), and the
   * items it holds go back to the queue, as dropped reservations do; its handles' later calls
   * reject with ERR_CLOSED.
   */
  closeHolder(holder: Holder): void {
    if (holder.closed) return;
    holder.closed = true;
    const waiters = this.#reserveWaiters;
    for (let i = waiters.length - 1; i >= 0; i--) {
      const waiter = waiters[i]!;
      if (waiter.holder !== holder) continue;
      waiters.splice(i, 1);
      detachAbort(waiter);
      waiter.resolve(null);
    }
    this.#waitersLeft();
    if (this.#state !== 'open' || this.#failure) return;
    const held = [...holder.held];
    for (const entry of held) this.#endLease(entry);
    this.#returnEntries(held);
  }

  stopWaiting(group: WaitGroup): void {
    withdrawGroup(this.#reserveWaiters, group, null);
    this.#hold(this.#reserveWaiters.length > 0);
  }

  /**
   * A consumer waits: an item still to fall due keeps the process alive meanwhile, as a retry
   * does. Without a waiter it does not (a process that only pushes delayed items may exit).
   */
  #wait(waiting: Promise<Reserved | null>): Promise<Reserved | null> {
    this.#hold(true);
    // It waits behind others, whose group limits may be lower than its own: parked items they
    // cannot take may be its to take (`#serveWaiters` looks past the ones that cannot).
    if (this.#groups.parked > 0) this.#serveWaiters();
    return waiting;
  }

  /** Reserve waiters left the list (served, aborted, withdrawn): the schedule's timer holds the process only while one waits. */
  readonly #waitersLeft = (): void => {
    this.#hold(this.#reserveWaiters.length > 0);
  };

  /**
   * Whether a consumer waits: while one does, the process stays alive (a worker daemon over an
   * idle queue must not exit with its store unclosed), and so does the timer of an item still to
   * fall due.
   */
  #hold(waiting: boolean): void {
    this.#schedule.hold(waiting);
    this.schedules?.hold(waiting);
    this.#limiter?.hold(waiting);
    this.#keepAlive.hold(waiting);
  }

  /** A rate window opened: the items it held aside are ready again, and waiting consumers are served. */
  #windowOpened(entries: Entry[]): void {
    if (this.#state !== 'open' || this.#failure) return;
    for (const entry of entries) this.#schedule.ready(entry);
    this.#serveWaiters();
  }

  /** The answer of a reserve that need not wait, or undefined when it must. */
  #reserveAtOnce(
    signal: AbortSignal | undefined,
    leaseMs: number,
    holder: Holder | undefined,
    groupLimit = Infinity,
  ): Promise<Reserved | null> | undefined {
    let now: Reserved | null | undefined;
    try {
      now = this.reserveNow(holder, leaseMs, signal, groupLimit);
    } catch (error) {
      return Promise.reject(error);
    }
    return now === undefined ? undefined : Promise.resolve(now);
  }

  /**
   * The next item to deliver: the ready item of highest priority, the lowest seq among those; the
   * plain items in the read-ahead (refilled from the store) have priority 0. Returns null when
   * nothing is ready or a fetch from an asynchronous store is in progress.
   */
  #takeNext(groupLimit = Infinity): Entry | null {
    if (this.#readError) throw this.#readError;
    const ledger = this.ledger;
    const schedule = this.#schedule;
    if (this.#groups.parked > 0) {
      // Items set aside under a lower limit than this taker's may be its to take.
      const back = this.#groups.reopenFor(groupLimit);
      if (back !== undefined) for (const entry of back) schedule.ready(entry);
    }
    const limiter = this.#limiter;
    if (limiter !== undefined) {
      if (limiter.parked > 0) for (const entry of limiter.due()) schedule.ready(entry);
      // A limit for the queue whose window is shut: nothing may go (the timer serves the waiters when it opens).
      if (!limiter.byGroup && limiter.queueShut()) return null;
    }
    for (;;) {
      let lane = schedule.best();
      if (lane !== undefined && lane.priority <= 0) {
        // The read-ahead's head is the lowest-seq plain item: it goes before every lower priority,
        // and before the items of priority 0 that come after it. While a read is out, whether one
        // comes first is not known yet: wait for it.
        const below = lane.priority === 0 ? lane.first()!.seq : Infinity;
        const head = this.#readAhead.headSeq(below);
        // A read it ran that failed must fail this call, as a failed take does.
        if (this.#readError) throw this.#readError;
        if (this.#failure) throw this.#failure;
        if (head === READ_PENDING) return null;
        if (head < below) lane = undefined;
      }
      const entry = lane !== undefined ? schedule.take(lane) : this.#readAhead.take();
      if (entry === null) {
        // A read that failed must fail this call, not look like "nothing ready".
        if (this.#readError) throw this.#readError;
        if (this.#failure) throw this.#failure;
        return null;
      }
      if (ledger !== undefined) {
        ledger.adopt(entry);
        if (entry.deliveries >= this.#maxDeliveries) {
          this.#moveOut(
            entry,
            entry.lastError !== '' ? entry.lastError : `handed out ${entry.deliveries} times (maxDeliveries ${this.#maxDeliveries})`,
          );
          continue;
        }
      }
      const group = entry.group;
      const atLimit = group !== undefined && groupLimit !== Infinity && this.#groups.inFlight(group) >= groupLimit;
      if (atLimit || (limiter?.byGroup && !limiter.allows(entry))) {
        // Its group is at the limit, or its rate window is full: it waits aside, and the next
        // item is taken in its place. Too many aside already: this taker waits instead.
        if (this.#parked() >= PARKED_MAX_ITEMS) {
          if (lane !== undefined) schedule.putBack(lane, entry);
          else schedule.ready(entry);
          return null;
        }
        if (atLimit) this.#groups.park(entry, groupLimit);
        else limiter!.park(entry);
        this.#outOfOrder();
        continue;
      }
      if (ledger === undefined || ledger.ready(entry)) return entry;
      // It waits, first in line, for its mark or for the bound that covers it; every item after
      // it waits behind it, so the order holds.
      if (lane !== undefined) schedule.putBack(lane, entry);
      else schedule.ready(entry);
      return null;
    }
  }

  /** Move an entry that is neither ready nor in flight into the dead letters (maxDeliveries). */
  #moveOut(entry: Entry, reason: string): void {
    this.ledger!.deadLetter(entry, reason).catch(() => {
      // Reported through the ledger: the queue failed, or the entry is ready again.
    });
  }

  /** Dead letters now: the items left the queue. */
  #moved(entries: Entry[], reasons: string[]): void {
    this.#storedCount -= entries.length;
    this.#bytes?.removed(entries);
    this.#monitor.deadLettered(entries, reasons);
    this.#pushes.admitWaiting();
    this.#watches.settle();
    this.#checkQuiet();
  }

  /** `item.deadLetter(reason)`: settle the reservation by moving the item into the dead letters. */
  deadLetter(reserved: Reserved<unknown>, entry: Entry, reason: string): Promise<void> {
    const error = this.#settleable(reserved, entry);
    if (error) return Promise.reject(error);
    if (this.ledger === undefined) return Promise.reject(unsupported('deadLetter()'));
    reserved.markSettled();
    this.#endLease(entry);
    const freed = this.#landed(entry);
    const moved = this.ledger.deadLetter(entry, reason);
    if (freed) this.#serveWaiters();
    return moved;
  }

  /** Dead letters with `seq > after`, at most `limit`, from the store. */
  async readDeadLetters(after: number, limit: number): Promise<readonly DeadLetter[]> {
    const error = this.operationalError();
    if (error) throw error;
    if (this.ledger === undefined) throw unsupported('deadLetters');
    return await this.store.readDeadLetters!({ after, limit });
  }

  /** Put dead letters back as new items (through the push pipeline, under capacity). */
  redriveLetters(letters: readonly DeadLetter[]): Promise<number[]> {
    if (this.ledger === undefined) return Promise.reject(unsupported('deadLetters.redrive()'));
    return this.push(
      letters.map((l) => l.bytes),
      false,
      undefined,
      { from: letters.map((l) => l.seq) },
    ) as Promise<number[]>;
  }

  /** Delete dead letters the store holds. */
  dropDeadLetters(seqs: number[]): Promise<void> {
    const error = this.operationalError();
    if (error) return Promise.reject(error);
    if (this.ledger === undefined) return Promise.reject(unsupported('deadLetters.purge()'));
    return this.ledger.drop(seqs);
  }

  /** Resolves once the entry's count and last error are stored, when it has an error to keep; rejects as the queue failed. */
  #marked(entry: Entry): Promise<void> {
    // It had its last delivery: the next take moves it, it is never handed out again.
    if (entry.deliveries >= this.#maxDeliveries) return Promise.resolve();
    return this.ledger!.noteNack(entry).catch((error: unknown) => {
      throw this.#failure ?? error;
    });
  }

  /** Note a handler's error on its item: the dead letter it may become keeps the message. */
  noteError(entry: Entry, error: unknown): void {
    if (this.ledger !== undefined) entry.lastError = errorMessage(error);
  }

  get maxDeliveries(): number {
    return this.#maxDeliveries;
  }

  #readFailed(error: unknown): void {
    if (error instanceof QueueError && error.code === 'ERR_CORRUPT') {
      // Damage met while reading: the item is never delivered, and nothing after it in its place.
      this.#readError = error;
      // The damaged item can never be handed out: neither drained() nor onIdle() can come true.
      this.#watches.rejectAll(error);
      return;
    }
    this.#fail(error);
  }

  #deliver(entry: Entry, leaseMs: number, holder: Holder | undefined): Reserved {
    entry.deliveries++;
    if (entry.group !== undefined) this.#groups.delivered(entry.group);
    if (this.#limiter !== undefined) this.#limiter.handedOut(entry);
    if (this.ledger !== undefined) this.ledger.delivered(entry, this.time.wallNow());
    entry.token = this.#nextToken++;
    entry.inFlight = true;
    this.#inFlightCount++;
    const guard = this.#dropGuards.track(entry, entry.token);
    const slot = guard.members.length - 2;
    // No lease by default: a plain reserve pays one comparison for them.
    const lease = leaseMs === Infinity ? undefined : (entry.lease = this.#leases.grant(entry, leaseMs));
    this.#monitor.delivered(entry);
    if (this.#watches.drainedWaiting) this.#watches.settle();
    if (holder !== undefined) {
      entry.holder = holder;
      holder.held.add(entry);
    }
    this.#inFlightEntries?.add(entry);
    return new Reserved(this, entry, guard, slot, lease, holder);
  }

  /** Index in the waiting list of the waiter `#takeFor` took its item for. */
  #takenFor = 0;

  /**
   * The next item for the waiting reserves: the first waiter's, under its group limit; when that
   * limit leaves it nothing while items are set aside for their groups, the first later waiter
   * whose higher limit (or none) lets it take one gets it (`#takenFor` says which), so that a
   * consumer with a low limit never holds up one with a higher limit behind it.
   */
  #takeFor(waiters: Waiter<Reserved | null>[]): Entry | null {
    this.#takenFor = 0;
    let limit = waiters[0]!.groupLimit ?? Infinity;
    const entry = this.#takeNext(limit);
    if (entry !== null || this.#groups.parked === 0) return entry;
    for (let i = 1; i < waiters.length; i++) {
      const higher = waiters[i]!.groupLimit ?? Infinity;
      if (higher <= limit) continue;
      limit = higher;
      const next = this.#takeNext(limit);
      if (next !== null) {
        this.#takenFor = i;
        return next;
      }
      if (this.#groups.parked === 0) return null;
    }
    return null;
  }

  #serveWaiters(): void {
    const waiters = this.#reserveWaiters;
    if (waiters.length === 0) return this.#hold(false);
    const ledger = this.ledger;
    if (ledger === undefined) {
      while (waiters.length > 0) {
        let entry: Entry | null;
        try {
          entry = this.#takeFor(waiters);
        } catch (error) {
          rejectAll(waiters.splice(0), error);
          return;
        }
        if (!entry) return;
        const taken = this.#takenFor;
        const waiter = taken === 0 ? waiters.shift()! : waiters.splice(taken, 1)[0]!;
        detachAbort(waiter);
        waiter.resolve(this.#deliver(entry, waiter.leaseMs ?? this.leaseMs, waiter.holder));
      }
      return this.#hold(false);
    }
    // Over a ledger, the waiters served in this pass share one store call for their records, and
    // are handed their items once it has stored them.
    const served: Waiter<Reserved | null>[] = [];
    const handed: Reserved[] = [];
    let failure: { error: unknown } | undefined;
    ledger.beginRun();
    while (waiters.length > 0) {
      let entry: Entry | null;
      try {
        entry = this.#takeFor(waiters);
      } catch (error) {
        failure = { error };
        break;
      }
      if (!entry) break;
      const taken = this.#takenFor;
      const waiter = taken === 0 ? waiters.shift()! : waiters.splice(taken, 1)[0]!;
      detachAbort(waiter);
      served.push(waiter);
      handed.push(this.#deliver(entry, waiter.leaseMs ?? this.leaseMs, waiter.holder));
    }
    this.#handOver(served, handed);
    if (failure !== undefined) rejectAll(waiters.splice(0), failure.error);
    if (waiters.length === 0) this.#hold(false);
  }

  /** End the ledger's run: each waiter gets its item once the records of the run are stored. */
  #handOver(served: Waiter<Reserved | null>[], handed: Reserved[]): void {
    const give = (error?: unknown): void => {
      if (error !== undefined) return rejectAll(served, this.#failure ?? error);
      // Closed while the records were being stored: the items went back with the close. A waiter
      // whose consumer closed meanwhile gets nothing either: its item went back with it
      // (`closeHolder`), and may be in other hands already.
      const open = this.#state === 'open' && !this.#failure;
      for (let i = 0; i < served.length; i++) served[i]!.resolve(open && !served[i]!.holder?.closed ? handed[i]! : null);
    };
    let now: boolean;
    try {
      now = this.ledger!.endRun(give);
    } catch (error) {
      return give(error);
    }
    if (now) give();
    // Failed during the run (a read of the store that threw while it took items): the ledger,
    // stopped, stores nothing more and would never call back, so the waiters it served are told now.
    else if (this.#failure) give(this.#failure);
  }

  /**
   * Take items with `take` (`tryReserve` calls, for a batch), their delivery records stored in one
   * store call. Returns what `take` returned, and a promise that resolves once the records are
   * stored, or undefined when they are already: the items may be given to user code only then.
   */
  takeTogether<T>(take: () => T): { taken: T; stored: Promise<void> | undefined } {
    if (this.ledger === undefined) return { taken: take(), stored: undefined };
    this.ledger.beginRun();
    let taken: T;
    try {
      taken = take();
    } catch (error) {
      // The items taken are the caller's to put back; their records are stored all the same.
      this.#endRun().catch(() => {});
      throw error;
    }
    const stored = this.#endRun();
    return { taken, stored: stored === STORED ? undefined : stored };
  }

  /** End the ledger's run: undefined when its records are stored already, else a promise of their storing. */
  #endRun(): Promise<void> {
    let outcome: { error?: unknown } | undefined;
    let settle: ((error?: unknown) => void) | undefined;
    let now: boolean;
    try {
      now = this.ledger!.endRun((error) => (settle !== undefined ? settle(error) : (outcome = { error })));
    } catch (error) {
      return Promise.reject(this.#failure ?? error);
    }
    if (now) return STORED;
    return new Promise<void>((resolve, reject) => {
      settle = (error) => (error === undefined ? resolve() : reject(this.#failure ?? error));
      if (outcome !== undefined) settle(outcome.error);
    });
  }

  /** Settle check shared by ack, nack, deadLetter and extend: the error, or undefined when `reserved` may still settle. */
  #settleable(reserved: Reserved<unknown>, entry: Entry): QueueError | undefined {
    if (this.#failure) return this.#failure;
    if (this.#state !== 'open') return closedError();
    // Checked before `settled`: a stale holder learns its lease ran out, whatever happened to the item since.
    if (reserved.leaseExpired) return leaseExpiredError(entry);
    if (reserved.holder?.closed)
      return new QueueError('ERR_CLOSED', `This consumer is closed: item ${entry.seq} was returned to the queue`);
    if (reserved.settled) return new QueueError('ERR_ALREADY_SETTLED', `Item ${entry.seq} was already settled`);
    return undefined;
  }

  /** The reservation of `entry` is settled or returned: its lease no longer runs, no consumer holds it. */
  #endLease(entry: Entry): void {
    if (entry.holder !== undefined) this.#unhold(entry);
    this.#inFlightEntries?.delete(entry);
    const lease = entry.lease;
    if (lease === undefined) return;
    entry.lease = undefined;
    this.#leases.end(lease);
  }

  /**
   * `item.extend(ms)`: the reservation's lease runs out `lengthMs` from now; an item without a
   * lease gets one; with no length (and no lease) only the refusals apply. Returns the lease, or
   * the error that refuses the call (nothing changes then).
   */
  extend(reserved: Reserved<unknown>, entry: Entry, lengthMs: number | undefined): Lease | QueueError | undefined {
    const error = this.#settleable(reserved, entry);
    if (error) return error;
    if (lengthMs === undefined) return undefined;
    const lease = entry.lease;
    if (lease !== undefined) {
      this.#leases.renew(lease, lengthMs);
      return lease;
    }
    return (entry.lease = this.#leases.grant(entry, lengthMs));
  }

  /** The forked consumer holding `entry` no longer does. */
  #unhold(entry: Entry): void {
    entry.holder!.held.delete(entry);
    entry.holder = undefined;
  }

  /**
   * An item with a priority or a not-before time joins the schedule. From then on first deliveries
   * may come out of seq order, so the reservations in flight are tracked for the counts a clean
   * close stores (`#exactCounts`); until then, a plain delivery pays nothing for it.
   */
  #addScheduled(entry: Entry): void {
    this.#outOfOrder();
    this.#schedule.add(entry);
  }

  /**
   * First deliveries may come out of seq order from now on (an item with a priority or a
   * not-before time, an item set aside for its group's limit): the ledger marks them one by one,
   * and the reservations in flight are tracked for the counts a clean close stores.
   */
  #outOfOrder(): void {
    if (this.ledger !== undefined && this.#inFlightEntries === undefined) {
      this.#inFlightEntries = new Set();
      this.ledger.scheduled();
    }
  }

  /** Leases that ran out: their items are ready again, as dropped reservations are. */
  #leasesExpired(leases: Lease[]): void {
    if (this.#state !== 'open' || this.#failure) return;
    for (const lease of leases) {
      lease.expired = true;
      lease.entry.lease = undefined;
      if (lease.entry.holder !== undefined) this.#unhold(lease.entry);
      this.#inFlightEntries?.delete(lease.entry);
      this.#leaseExpiredCount++;
    }
    this.#returnEntries(leases.map((lease) => lease.entry));
    // Told after every item is back, so that a holder reacting at once finds its lease gone.
    for (const lease of leases) lease.onExpire?.(leaseExpiredError(lease.entry));
  }

  ack(reserved: Reserved<unknown>, entry: Entry): Promise<void> {
    const error = this.#settleable(reserved, entry);
    if (error) return Promise.reject(error);
    reserved.markSettled();
    this.#endLease(entry);
    if (!this.#landed(entry)) return this.#acks.ack(entry);
    // An item of its group was set aside: it may go, once this one counts as being acked.
    const acked = this.#acks.ack(entry);
    this.#serveWaiters();
    return acked;
  }

  /** Ready again at once, or after `delayMs` outside the ready items; `retried`: by process(). */
  nack(reserved: Reserved<unknown>, entry: Entry, delayMs = 0, retried = false): Promise<void> {
    const error = this.#settleable(reserved, entry);
    if (error) return Promise.reject(error);
    reserved.markSettled();
    this.#endLease(entry);
    if (retried) this.#monitor.retried();
    if (delayMs <= 0) {
      this.#returnEntry(entry, true);
      // Resolves once the item may be handed out again: its next delivery is counted in the store.
      return this.ledger === undefined || this.#state !== 'open' ? Promise.resolve() : this.#marked(entry);
    }
    const freed = this.#landed(entry);
    // Held for the delay: a view into a store's read chunk would keep the whole chunk alive.
    entry.bytes = unpinned(entry.bytes);
    this.#delayed.add(entry, delayMs);
    this.#monitor.nacked(entry);
    if (freed) this.#serveWaiters();
    // Its next delivery is counted now, during the wait, so that it is ready the moment the wait
    // ends. A crash during the wait makes it count one delivery it did not have.
    return this.ledger === undefined ? Promise.resolve() : this.#marked(entry);
  }

  /**
   * `item.rateLimited(ms)`: the delivery was refused for its rate (a 429): the item is ready again
   * after `ms`, this delivery is not counted (its count goes back, so `maxDeliveries` never moves
   * it for being throttled), and under a rate limit its window (the queue's, or its group's) hands
   * out nothing for `ms`.
   */
  rateLimited(reserved: Reserved<unknown>, entry: Entry, ms: number): Promise<void> {
    const error = this.#settleable(reserved, entry);
    if (error) return Promise.reject(error);
    reserved.markSettled();
    this.#endLease(entry);
    // The store holds a record counting this delivery already (it was stored before the hand-out):
    // the next hand-out is counted by it, and stores nothing new.
    entry.deliveries--;
    this.#limiter?.pause(entry, ms);
    // Under a rate limit the item's window is paused for `ms` (above): the item waits in it as a
    // ready one, and leaves in its group's order when the window has room again. Held aside on a
    // timer of its own, it could come back after that window had reopened and handed out the item
    // behind it.
    if (ms <= 0 || this.#limiter !== undefined) {
      this.#returnEntry(entry, true);
      return Promise.resolve();
    }
    const freed = this.#landed(entry);
    entry.bytes = unpinned(entry.bytes);
    this.#delayed.add(entry, ms);
    this.#monitor.nacked(entry);
    if (freed) this.#serveWaiters();
    return Promise.resolve();
  }

  /** Their time came: ready again, by seq among the ready items (delivery is lowest seq first). */
  #releaseDelayed(entries: Entry[]): void {
    if (this.#state !== 'open') return;
    for (const entry of entries) this.#schedule.ready(entry);
    this.#serveWaiters();
  }

  /** Several reservations back at once: every item is back before a waiter is served, so seq order holds among them. */
  #returnEntries(entries: Entry[]): void {
    for (const entry of entries) {
      this.#landed(entry);
      this.#schedule.ready(entry);
    }
    this.#serveWaiters();
  }

  /**
   * `entry` is no longer in flight. When its group had items set aside for its limit, the best of
   * them is ready again (one slot was freed): true then, and the caller serves the waiters.
   */
  #landed(entry: Entry): boolean {
    entry.inFlight = false;
    this.#inFlightCount--;
    const group = entry.group;
    if (group === undefined) return false;
    const next = this.#groups.released(group);
    if (next === undefined) return false;
    this.#schedule.ready(next);
    return true;
  }

  #returnEntry(entry: Entry, nacked: boolean): void {
    this.#landed(entry);
    this.#schedule.ready(entry);
    // Published before the item can be delivered again: its retry message comes after this one.
    if (nacked) this.#monitor.nacked(entry);
    this.#serveWaiters();
  }

  /** Called for a group of reservations that became unreachable (`./drop-guard.ts`). */
  returnDropped(entry: Entry, token: number): void {
    // Only a reservation still in flight under the same token was dropped unsettled.
    if (entry.token !== token || !entry.inFlight || this.#state !== 'open') return;
    this.#endLease(entry);
    this.#returnEntry(entry, false);
  }

  /** The store removed these items (`AckHost.acked`): count them out. */
  #acked(entries: Entry[]): void {
    this.#storedCount -= entries.length;
    this.#bytes?.removed(entries);
    this.#lazyAcks?.written(entries.length);
    this.#monitor.acked(entries);
  }

  // ---------------------------------------------------------------- what processed sets ask

  /**
   * The seqs stored when the queue opened are those below this. A processed set holding a seq at
   * or above it was not filled by this queue before it opened; a live bound would grow with every
   * push and let a set of a store since recreated pass (seqs start at 1 again).
   */
  readonly storedAtOpen: number;
  /** Processed sets that passed `effectivelyOnce`'s checks against this queue instance. */
  readonly checkedSets = new WeakSet<object>();

  /** Resolves once every ack resolved before the call is durable (`Consumer.acksDurable`); `now` starts the sync at once. */
  acksDurable(now: boolean): Promise<void> {
    if (this.#failure) return Promise.reject(this.#failure);
    return this.#lazyAcks?.covered(now) ?? Promise.resolve();
  }

  // ---------------------------------------------------------------- drained() and onIdle()

  /** Every push so far is stored and handed to the consumer: nothing ready, no push pending. */
  #isDrained(): boolean {
    // An item on its way into the dead letters is still in the queue until its move lands.
    return (
      this.#ready() === 0 &&
      this.#delayed.size === 0 &&
      this.#schedule.waitingCount === 0 &&
      this.#pendingPushes() === 0 &&
      (this.ledger?.moving ?? 0) === 0
    );
  }

  /** Drained, and every stored item acked, its ack stored: nothing in flight or pending. */
  #isIdle(): boolean {
    return this.#storedCount === 0 && this.#pendingPushes() === 0;
  }

  drained(signal: AbortSignal | undefined): Promise<void> {
    return this.#watches.wait(false, signal, this.#failure, this.#readError);
  }

  onIdle(signal: AbortSignal | undefined): Promise<void> {
    return this.#watches.wait(true, signal, this.#failure, this.#readError);
  }

  // ---------------------------------------------------------------- failure and close

  /** Fail-stop: every pending and later operation rejects with ERR_STORE_FAILED. */
  #fail(cause: unknown): void {
    if (this.#failure) return;
    const message = cause instanceof Error ? cause.message : String(cause);
    this.#failure =
      cause instanceof QueueError && cause.code === 'ERR_STORE_FAILED'
        ? cause
        : new QueueError('ERR_STORE_FAILED', `The store failed; close and reopen to recover: ${message}`, { cause });
    const failure = this.#failure;
    this.#pushes.failAll(failure);
    this.#acks.failAll(failure);
    this.#lazyAcks?.stop(failure);
    // The reservations can no longer settle: no lease of theirs needs to run out.
    this.#leases.clear();
    this.ledger?.stop(failure);
    for (const w of this.#reserveWaiters.splice(0)) {
      detachAbort(w);
      w.reject(failure);
    }
    // Nothing will be handed out: no item still to fall due holds the process, nor any consumer.
    this.schedules?.stop();
    this.#schedule.clear();
    this.#groups.clear();
    this.#limiter?.clear();
    this.#keepAlive.release();
    this.#watches.rejectAll(failure);
    this.#checkQuiet();
    this.#monitor.failed(failure);
  }

  #checkQuiet(): void {
    if (this.#pushes.appendInFlight || this.#acks.inFlight) return;
    if (!this.#failure && this.ledger !== undefined && this.ledger.moving > 0) return;
    if (!this.#failure && (this.#pushes.hasAdmitted || this.#acks.queued)) return;
    for (const resolve of this.#quietWaiters.splice(0)) resolve();
  }

  /**
   * What a clean close stores so that the next open counts exactly the deliveries each item had.
   * - Items nacked and not handed out again had their next delivery counted ahead: their counts
   *   are put back, so a reopen does not count a delivery they never had. That holds too for a
   *   mark asked for and not stored yet (`marked` negative): one already sent is stored by the
   *   call in flight, which ends before the counts are put back.
   * - The lowest seq of an item never handed out: with priorities and not-before times, first
   *   deliveries come out of seq order, so the bound may have to be lower than the highest seq
   *   handed out; every item at or above it that was handed out then gets a mark of its count.
   */
  #exactCounts(): ExactCounts {
    const known = [...this.#schedule.entries(), ...this.#delayed.entries(), ...this.#groups.entries(), ...(this.#limiter?.entries() ?? [])];
    const countedAhead = known.filter((e) => e.deliveries > 0 && (e.marked > e.deliveries || e.marked < 0));
    let lowestUndelivered = this.#readAhead.lowestUnread();
    for (const e of known) if (e.deliveries === 0 && e.seq < lowestUndelivered) lowestUndelivered = e.seq;
    const delivered = known.filter((e) => e.deliveries > 0);
    if (this.#inFlightEntries !== undefined) for (const e of this.#inFlightEntries) delivered.push(e);
    return { countedAhead, lowestUndelivered, delivered };
  }

  close(): Promise<void> {
    this.#closePromise ??= this.#close();
    return this.#closePromise;
  }

  async #close(): Promise<void> {
    this.#state = 'closing';
    this.schedules?.stop();
    const closed = closedError();
    // Pushes still waiting for capacity were never admitted: they are rejected, never half-stored.
    this.#pushes.rejectWaiting(closed);
    for (const w of this.#reserveWaiters.splice(0)) {
      detachAbort(w);
      w.resolve(null);
    }
    this.#keepAlive.release();
    const exact = this.ledger === undefined ? undefined : this.#exactCounts();
    // Unsettled reservations go back to the store as not acked; their ack or nack now rejects ERR_CLOSED.
    // (Reserved.settled reports them settled because the queue is closed.)
    this.#inFlightCount = 0;
    this.#schedule.clear();
    this.#groups.clear();
    this.#limiter?.clear();
    this.ledger?.clear();
    this.#delayed.clear();
    this.#leases.clear();
    this.#readAhead.clear();
    // A read still in flight finishes before the store closes (its answer is dropped).
    const fetchDone = this.#readAhead.fetchDone;
    if (fetchDone) await fetchDone;
    // Admitted pushes and issued acks are finished: each is stored (or acked) or rejected.
    await new Promise<void>((resolve) => {
      this.#quietWaiters.push(resolve);
      this.#checkQuiet();
      this.#pushes.flush();
      this.#acks.flush();
    });
    this.#watches.finalize();
    // The next open counts as delivered exactly the items handed out, not the whole block ahead.
    if (exact !== undefined && !this.#failure) await this.ledger!.storeExactBound(exact).catch((error: unknown) => this.#fail(error));
    await this.ledger?.idle();
    // A clean close loses no ack: the lazy ones written since the last sync are synced now.
    const failedBefore = this.#failure !== undefined;
    if (!failedBefore) await this.#lazyAcks?.flush().catch((error: unknown) => this.#fail(error));
    // The store closes only after every call on it settled, a lazy sync started before a failure too.
    await this.#lazyAcks?.settled();
    const syncFailure = failedBefore ? undefined : this.#failure;
    try {
      await this.store.close();
    } catch (error) {
      if (!this.#failure)
        throw new QueueError('ERR_STORE_FAILED', `The store failed to close: ${(error as Error)?.message ?? error}`, { cause: error });
    } finally {
      this.#state = 'closed';
      busyStores.delete(this.store);
    }
    if (syncFailure) throw syncFailure;
  }
}
