// Leases (visibility timeouts) of reservations: in memory only, ordered by due time, behind one
// timer, as delayed.ts keeps the retries. When a lease runs out before its reservation is settled,
// the core returns the item to the queue as it returns a dropped reservation.
import type { QueueError } from '../errors.js';
import { expectation } from '../validate.js';
import type { Entry } from './entry.js';

/** setTimeout's longest delay (2^31 − 1 ms); a longer wait is armed again when it fires. */
const TIMER_MS_MAX = 2_147_483_647;

/**
 * The lease of one reservation. The Reserved handle and the list below refer to it; it refers to
 * the entry only, never to the handle, so a leased reservation that is dropped can still be
 * collected and returned (drop-guard.ts).
 */
export interface Lease {
  readonly entry: Entry;
  /** `performance.now()` at which the lease runs out. */
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

/**
 * The unsettled leases of a queue, sorted by due time (ties keep grant order), and one timer armed
 * for the earliest. The list holds only reservations in flight (every settle ends its lease), so
 * it is never longer than the in-flight count; a sorted array with a binary search is enough. The
 * clock is monotonic (`performance.now()`), so a wall-clock step neither ends a lease early nor
 * stretches it.
 */
export class Leases {
  readonly #expire: (leases: Lease[]) => void;
  #list: Lease[] = [];
  #timer: ReturnType<typeof setTimeout> | undefined;
  #timerDueMs = Infinity;

  /** `expire` gets the leases that ran out, in due order, already out of the list. */
  constructor(expire: (leases: Lease[]) => void) {
    this.#expire = expire;
  }

  get size(): number {
    return this.#list.length;
  }

  grant(entry: Entry, lengthMs: number): Lease {
    const lease: Lease = { entry, dueMs: performance.now() + lengthMs, lengthMs, expired: false, onExpire: undefined };
    this.#insert(lease);
    return lease;
  }

  /** Renew `lease` (in the list) to now + `lengthMs`. */
  renew(lease: Lease, lengthMs: number): void {
    this.#remove(lease);
    lease.dueMs = performance.now() + lengthMs;
    lease.lengthMs = lengthMs;
    this.#insert(lease);
  }

  /** The reservation was settled: its lease no longer runs. */
  end(lease: Lease): void {
    this.#remove(lease);
    if (this.#list.length === 0) this.#disarm();
  }

  /** Forget every lease and the timer (close and fail-stop: the reservations are gone). */
  clear(): void {
    this.#list = [];
    this.#disarm();
  }

  #insert(lease: Lease): void {
    const list = this.#list;
    let lo = 0;
    let hi = list.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (list[mid]!.dueMs <= lease.dueMs) lo = mid + 1;
      else hi = mid;
    }
    list.splice(lo, 0, lease);
    if (lease.dueMs < this.#timerDueMs) this.#arm(lease.dueMs);
  }

  #remove(lease: Lease): void {
    const list = this.#list;
    // The first lease due at or after this one's time, then forward over the ties.
    let lo = 0;
    let hi = list.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (list[mid]!.dueMs < lease.dueMs) lo = mid + 1;
      else hi = mid;
    }
    for (let i = lo; i < list.length && list[i]!.dueMs === lease.dueMs; i++) {
      if (list[i] === lease) {
        list.splice(i, 1);
        return;
      }
    }
  }

  #arm(dueMs: number): void {
    this.#disarm();
    this.#timerDueMs = dueMs;
    const waitMs = Math.min(TIMER_MS_MAX, Math.max(0, Math.ceil(dueMs - performance.now())));
    this.#timer = setTimeout(this.#fire, waitMs);
    // Unref'd, unlike the retry timer: a lease guards work in progress, and that work (a handler's
    // I/O, a pending reserve) keeps the process alive by itself. When nothing else does, the
    // holder can never settle nor anyone take the item again, and a lease alone should not hold
    // the process open until it runs out.
    (this.#timer as { unref?: () => void }).unref?.();
  }

  #disarm(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#timerDueMs = Infinity;
  }

  readonly #fire = (): void => {
    this.#timer = undefined;
    this.#timerDueMs = Infinity;
    const now = performance.now();
    const list = this.#list;
    let n = 0;
    while (n < list.length && list[n]!.dueMs <= now) n++;
    const due = list.splice(0, n);
    // A timer may fire a fraction of a millisecond early, and a wait longer than setTimeout allows
    // fires early on purpose: arm again.
    if (list.length > 0) this.#arm(list[0]!.dueMs);
    if (due.length > 0) this.#expire(due);
  };
}
