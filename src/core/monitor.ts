// What a queue tells the outside about itself: the cumulative counters of `stats()`, the messages
// of its diagnostics channels (src/lib/diagnostics.ts), and the waiters of `drained()` and `onIdle()`.
// The core calls in at each event; what it decides stays in the core.
import {
  ackChannel,
  deadLetterChannel,
  deliverChannel,
  failStopChannel,
  nackChannel,
  pushChannel,
  retryChannel,
} from '../lib/diagnostics.js';
import type { ItemMessage } from '../lib/diagnostics.js';
import type { QueueError } from '../contract/errors.js';
import { type Entry, type Waiter, abortReason, closedError, detachAbort, waitIn } from './entry.js';

/** The id of the last queue opened in this process. */
let lastQueueId = 0;

/**
 * Counters and channel messages of one queue. The counters are plain increments; a message is
 * built only when its channel has a subscriber, so an unwatched queue pays one property read
 * per event. Each counter moves before its message is published, and the core calls in once its
 * own state includes the event, so a subscriber that reads `stats()` sees the event counted.
 */
export class QueueMonitor {
  readonly queueId = ++lastQueueId;
  /** The store's class name, as the messages give it. */
  readonly store: string;
  /** Items whose push resolved. */
  pushedCount = 0;
  /** Items whose ack resolved. */
  ackedCount = 0;
  /** Items nacked. */
  nackedCount = 0;
  /** Deliveries after an item's first one in this process. */
  redeliveredCount = 0;
  /** Handler failures that process() retried. */
  retriedCount = 0;
  /** Items moved into the dead-letter queue. */
  deadLetteredCount = 0;

  constructor(store: object) {
    const name = (store.constructor as { name?: unknown } | undefined)?.name;
    this.store = typeof name === 'string' && name.length > 0 ? name : 'Store';
  }

  /** A batch was stored: its pushes resolve now. */
  stored(items: readonly Entry[]): void {
    this.pushedCount += items.length;
    if (!pushChannel.hasSubscribers) return;
    for (let i = 0; i < items.length; i++) {
      const entry = items[i]!;
      pushChannel.publish({ queueId: this.queueId, store: this.store, seq: entry.seq, byteLength: entry.bytes.byteLength });
    }
  }

  /** `entry` was handed to the consumer; `entry.deliveries` already counts this delivery. */
  delivered(entry: Entry): void {
    const again = entry.deliveries > 1;
    if (again) this.redeliveredCount++;
    if (deliverChannel.hasSubscribers) deliverChannel.publish(this.#item(entry));
    if (again && retryChannel.hasSubscribers) retryChannel.publish(this.#item(entry));
  }

  /** The acks of `entries` resolved. */
  acked(entries: readonly Entry[]): void {
    this.ackedCount += entries.length;
    if (!ackChannel.hasSubscribers) return;
    for (let i = 0; i < entries.length; i++) ackChannel.publish(this.#item(entries[i]!));
  }

  nacked(entry: Entry): void {
    this.nackedCount++;
    if (nackChannel.hasSubscribers) nackChannel.publish(this.#item(entry));
  }

  /** process() retries an item whose handler failed (its nack follows). */
  /** `entries` are dead letters now, for `reasons` (one per entry). */
  deadLettered(entries: readonly Entry[], reasons: readonly string[]): void {
    this.deadLetteredCount += entries.length;
    if (!deadLetterChannel.hasSubscribers) return;
    for (let i = 0; i < entries.length; i++) deadLetterChannel.publish({ ...this.#item(entries[i]!), reason: reasons[i]! });
  }

  retried(): void {
    this.retriedCount++;
  }

  /** The queue failed; `error` is what every operation now rejects with. */
  failed(error: QueueError): void {
    if (failStopChannel.hasSubscribers) failStopChannel.publish({ queueId: this.queueId, store: this.store, error });
  }

  #item(entry: Entry): ItemMessage {
    return { queueId: this.queueId, store: this.store, seq: entry.seq, byteLength: entry.bytes.byteLength, deliveries: entry.deliveries };
  }
}

/**
 * The callers waiting for one condition on the queue's state (`drained()`, `onIdle()`). The core
 * decides when the condition holds; this only keeps the waiters, and removes each one's abort
 * listener when it settles, so nothing stays registered on a caller's signal.
 */
export class Watch {
  readonly #waiters: Waiter<void>[] = [];

  /** How many callers wait; the core checks the condition only when this is not 0. */
  get size(): number {
    return this.#waiters.length;
  }

  wait(signal: AbortSignal | undefined): Promise<void> {
    return waitIn(this.#waiters, signal);
  }

  resolveAll(): void {
    for (const w of this.#take()) w.resolve();
  }

  rejectAll(error: unknown): void {
    for (const w of this.#take()) w.reject(error);
  }

  #take(): Waiter<void>[] {
    const waiters = this.#waiters.splice(0);
    for (const w of waiters) detachAbort(w);
    return waiters;
  }
}

/**
 * The waiters of `drained()` and `onIdle()`. The core gives the two conditions as functions of its
 * state and calls `settle()` wherever one may have become true; this keeps the waiters, answers a
 * new one at once when it can, and ends them all at close or fail-stop.
 */
export class QueueWatches {
  readonly #drained = new Watch();
  readonly #idle = new Watch();
  /** Set once close has finished what it finishes: from then on new waiters settle at once. */
  #final = false;

  constructor(
    /** Every push so far is stored and handed to the consumer. */
    private readonly isDrained: () => boolean,
    /** Drained, and every stored item acked. */
    private readonly isIdle: () => boolean,
  ) {}

  /** Somebody waits for onIdle(). */
  get idleWaiting(): boolean {
    return this.#idle.size !== 0;
  }

  /** Somebody waits for drained(). */
  get drainedWaiting(): boolean {
    return this.#drained.size !== 0;
  }

  /**
   * Wait for drained (`idle` false) or idle. A failed queue rejects at once; a read that failed
   * rejects only when the condition does not already hold.
   */
  wait(idle: boolean, signal: AbortSignal | undefined, failure: QueueError | undefined, readError: QueueError | undefined): Promise<void> {
    if (failure) return Promise.reject(failure);
    if (signal?.aborted) return Promise.reject(abortReason(signal));
    if (idle ? this.isIdle() : this.isDrained()) return Promise.resolve();
    if (readError) return Promise.reject(readError);
    if (this.#final) return Promise.reject(closedError());
    return (idle ? this.#idle : this.#drained).wait(signal);
  }

  /** Resolve the waiters whose condition now holds. */
  settle(): void {
    if (this.#drained.size !== 0 && this.isDrained()) this.#drained.resolveAll();
    if (this.#idle.size !== 0 && this.isIdle()) this.#idle.resolveAll();
  }

  /** Reject every waiter with `error` (a read failed, the queue failed). */
  rejectAll(error: unknown): void {
    this.#drained.rejectAll(error);
    this.#idle.rejectAll(error);
  }

  /**
   * Close has stored or rejected every push and ack it was going to: whatever does not hold now
   * never will. Resolving instead would tell a waiter that items were handed out or acked when
   * close returned them to the store.
   */
  finalize(): void {
    this.#final = true;
    this.settle();
    this.rejectAll(closedError());
  }
}
