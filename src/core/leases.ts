// Leases (visibility timeouts) of reservations: in memory only, ordered by due time, behind one
// timer, as delayed.ts keeps the retries. When a lease runs out before its reservation is settled,
// the core returns the item to the queue as it returns a dropped reservation.
import type { QueueError } from '../contract/errors.js';
import { expectation } from '../lib/validate.js';
import type { TimeSource } from '../lib/clock.js';
import { DueList } from './due-list.js';
import type { Entry } from './entry.js';

/**
 * The lease of one reservation. The Reserved handle and the list below refer to it; it refers to
 * the entry only, never to the handle, so a leased reservation that is dropped can still be
 * collected and returned (drop-guard.ts).
 */
export interface Lease {
  readonly entry: Entry;
  /** The monotonic time (`TimeSource.monoNow()`) at which the lease runs out. */
  dueMs: number;
  /** The length `extend()` renews it by when given no length. */
  lengthMs: number;
  /** Set when the lease ran out: the holder's reservation is stale from then on. */
  expired: boolean;
  /** Told when the lease runs out (process() aborts the handler's signal). */
  onExpire: ((error: QueueError) => void) | undefined;
}

/** A lease length: a positive finite number of ms, or Infinity (no lease) when `allowInfinity`. */
export function leaseLength(name: string, value: unknown, allowInfinity: boolean): number {
  const what = allowInfinity ? 'a positive number of ms or Infinity' : 'a positive finite number of ms';
  if (typeof value !== 'number') throw new TypeError(expectation(name, what, value));
  if (allowInfinity && value === Infinity) return value;
  if (!Number.isFinite(value) || value <= 0) throw new RangeError(expectation(name, what, value));
  return value;
}

/** The lease length `extend(ms)` asks for: undefined for none given; throws on a bad one. */
export function extendLength(ms: unknown): number | undefined {
  return ms === undefined ? undefined : leaseLength('ms', ms, false);
}

/**
 * The unsettled leases of a queue, sorted by due time (ties keep grant order), behind one timer
 * (due-list.ts). The list holds only reservations in flight (every settle ends its lease), so it
 * is never longer than the in-flight count.
 *
 * The timer is unref'd, unlike the retry timer: a lease guards work in progress, and that work (a
 * handler's I/O, a pending reserve) keeps the process alive by itself. When nothing else does, the
 * holder can never settle nor anyone take the item again, and a lease alone should not hold the
 * process open until it runs out.
 */
export class Leases {
  readonly #list: DueList<Lease>;
  readonly #time: TimeSource;

  /** `expire` gets the leases that ran out, in due order, already out of the list. */
  constructor(expire: (leases: Lease[]) => void, time: TimeSource) {
    this.#time = time;
    this.#list = new DueList(expire, true, time);
  }

  get size(): number {
    return this.#list.size;
  }

  grant(entry: Entry, lengthMs: number): Lease {
    const lease: Lease = { entry, dueMs: this.#time.monoNow() + lengthMs, lengthMs, expired: false, onExpire: undefined };
    this.#list.add(lease);
    return lease;
  }

  /** Renew `lease` (in the list) to now + `lengthMs`. */
  renew(lease: Lease, lengthMs: number): void {
    this.#list.remove(lease);
    lease.dueMs = this.#time.monoNow() + lengthMs;
    lease.lengthMs = lengthMs;
    this.#list.add(lease);
  }

  /** The reservation was settled: its lease no longer runs. */
  end(lease: Lease): void {
    this.#list.remove(lease);
  }

  /** Forget every lease and the timer (close and fail-stop: the reservations are gone). */
  clear(): void {
    this.#list.clear();
  }
}
