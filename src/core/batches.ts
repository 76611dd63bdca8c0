// Batches: `reserveMany`, `ackMany`/`nackMany`, and `process(handler, { batch })`, for forwarders
// and bulk writers. A batch is gathered from what the core hands out one item at a time: the first
// item waits as a reserve does, the rest are taken while ready, and for up to `waitMs` more while
// fewer than `size` are in hand. Each item stays a reservation of its own, so a batch handler may
// settle items one by one (partial success) and the rest are settled by the worker.
import { QueueError } from '../contract/errors.js';
import { expectation } from '../lib/validate.js';
import type { QueueCore } from './queue-core.js';
import { type Holder, WaitGroup } from './entry.js';
import type { Reserved } from './reserved.js';
import { ITEMS_PER_TURN, RunContext, gatherWithin, leaseExpiredError, nextTurn, report, timeoutError } from '../api/worker-pool.js';
import { type BatchHandler, type ProcessSettings, retry } from './run-context.js';

/** How a consumer takes one item: the core's reserve, with a typed queue's decode step. @internal */
export interface Taker {
  /**
   * Wait in `group` for the next item (withdrawn with `core.stopWaiting(group)`); null once
   * closed or withdrawn, or once `stopped()` holds (checked before each wait: an item that failed
   * to decode sends it back to wait, and a withdraw may have come meanwhile).
   */
  waitIn(group: WaitGroup, stopped: () => boolean): Promise<Reserved | null>;
  /** The next ready item, or null. */
  now(): Reserved | null;
}

/** What may end a gather's wait early, besides its timer. @internal */
export interface GatherStop {
  /** The caller's signal: an abort ends the wait, with the items in hand. */
  readonly signal?: AbortSignal | undefined;
  /** The waits in progress, for whoever stops them all (a `process()` call's stop). */
  readonly groups?: Set<WaitGroup>;
  /** Stop waiting when this holds (a `process()` call stopped). */
  readonly stopped?: () => boolean;
}

/**
 * Up to `size` items: `first`, those ready now, and those that come within `waitMs` while fewer
 * than `size` are in hand. The wait is measured on the queue's clock; it ends early once the
 * batch is full, the queue closes, or `stop` says so. Items returned meanwhile (the queue or the
 * fork closed) are left out. If taking an item throws (a codec that cannot work), the items in
 * hand go back to the queue before the error goes on.
 * @internal
 */
export async function gather(
  core: QueueCore,
  take: Taker,
  first: Reserved,
  size: number,
  waitMs: number,
  stop: GatherStop = {},
): Promise<Reserved[]> {
  const items = [first];
  const group = new WaitGroup();
  stop.groups?.add(group);
  try {
    await gatherWithin(items, size, waitMs, core.time, stop.signal, () => stop.stopped?.() === true, {
      // The items ready now are taken together: their delivery records share one store call, and
      // the batch is handed over once they are stored.
      takeReady: (into, n) =>
        core.takeTogether(() => {
          while (into.length < n) {
            const item = take.now();
            if (item === null) break;
            into.push(item);
          }
        }).stored,
      next: (stopped) => take.waitIn(group, stopped),
      end: () => core.stopWaiting(group),
      giveBack: (held) => {
        for (const item of held) if (!item.settled) item.nack().catch(() => {});
      },
    });
  } finally {
    stop.groups?.delete(group);
    core.stopWaiting(group);
  }
  return items.filter((item) => !item.settled);
}

/** The refusal of a list of reservations to settle together, or undefined (then none is settled yet). @internal */
export function checkBatch(items: unknown, isReserved: (item: unknown) => boolean): TypeError | undefined {
  if (!Array.isArray(items)) return new TypeError(expectation('items', 'an array of reserved items', items));
  const seen = new Set<unknown>();
  for (const item of items) {
    if (!isReserved(item))
      return new TypeError(expectation('items[]', 'a reserved item (from reserve, tryReserve, reserveMany or process)', item));
    if (seen.has(item)) return new TypeError(`\`items\` holds item ${(item as Reserved).seq} twice`);
    seen.add(item);
  }
  return undefined;
}

/**
 * Settle every item with `settle`, or none: an item that may no longer be settled (settled
 * already, its lease run out, the queue closed) makes the call reject with its error before any
 * item is touched.
 * @internal
 */
export function settleAll(
  items: Reserved[],
  isReserved: (item: unknown) => boolean,
  settle: (item: Reserved) => Promise<void>,
): Promise<void> {
  const refused = checkBatch(items, isReserved);
  if (refused) return Promise.reject(refused);
  const stale = items.find((item) => item.settled);
  // Its own call rejects with the error that says why (and changes nothing).
  if (stale !== undefined) return settle(stale);
  return Promise.all(items.map(settle)).then(() => undefined);
}

/** What a batch worker shares with the other workers of its `process()` call. @internal */
export interface Workers {
  readonly waiting: WaitGroup;
  readonly running: (RunContext | undefined)[];
  readonly halt: { stopped: boolean; reason: unknown };
  /** The gathers waiting for more items: a stop withdraws them with the first-item waits. */
  readonly gathering: Set<WaitGroup>;
}

/** Run the batch handler, bounded by `timeoutMs`; resolves or rejects as the handler does. */
function runBatch(handler: BatchHandler, items: Reserved[], context: RunContext, settings: ProcessSettings): Promise<unknown> {
  const result = Promise.resolve().then(() => handler(items, context));
  if (settings.timeoutMs === Infinity) return result;
  return new Promise((resolve, reject) => {
    const timer = settings.time.setTimeout(() => {
      const error = timeoutError(settings.timeoutMs);
      context.abort(error);
      reject(error);
    }, settings.timeoutMs);
    result.then(
      (value) => {
        settings.time.clearTimeout(timer);
        resolve(value);
      },
      (error: unknown) => {
        settings.time.clearTimeout(timer);
        reject(error);
      },
    );
  });
}

/** One worker of `process(handler, { batch })`. @internal */
export async function batchWorker(
  core: QueueCore,
  settings: ProcessSettings,
  batch: { readonly size: number; readonly waitMs: number; readonly handler: BatchHandler },
  workers: Workers,
  slot: number,
): Promise<void> {
  const { waiting, running, halt, gathering } = workers;
  const holder: Holder | undefined = settings.holder;
  const accept = settings.accept;
  const take: Taker = {
    waitIn: async (group, stopped) => {
      for (;;) {
        if (stopped()) return null;
        const item = await core.reserveIn(group, holder, core.leaseMs, settings.groupLimit);
        if (item === null || accept === undefined || accept(item)) return item;
      }
    },
    now: () => {
      for (;;) {
        const item = core.tryReserve(holder, core.leaseMs, settings.groupLimit);
        if (item === null || accept === undefined || accept(item)) return item;
      }
    },
  };
  let handled = 0;
  while (!halt.stopped) {
    const first = await take.waitIn(waiting, () => halt.stopped);
    if (!first) return;
    const items = await gather(core, take, first, batch.size, batch.waitMs, { groups: gathering, stopped: () => halt.stopped });
    // Every item was returned meanwhile (the queue or the fork closed): nothing to hand out.
    if (items.length === 0) continue;
    const context = new RunContext();
    if (halt.stopped) context.abort(halt.reason);
    running[slot] = context;
    let failure: { error: unknown } | undefined;
    try {
      await runBatch(batch.handler, items, context, settings);
    } catch (error) {
      failure = { error };
    } finally {
      running[slot] = undefined;
    }
    for (const item of items) {
      // A lease that ran out while the handler ran: the item is back in the queue already.
      if (item.leaseExpired) report(settings, leaseExpiredError(item), item);
      else if (failure && !item.settled) report(settings, failure.error, item);
    }
    const settling = items
      .filter((item) => !item.settled)
      .map((item) => (failure ? retry(core, settings, item, failure.error) : item.ack()));
    for (const outcome of await Promise.allSettled(settling)) {
      if (outcome.status === 'fulfilled') continue;
      const error = outcome.reason as unknown;
      if (error instanceof QueueError && error.code === 'ERR_CLOSED') return;
      // The ack was not recorded and the item is ready again: the queue itself is healthy.
      if (!(error instanceof QueueError && error.code === 'ERR_STORE_FULL')) throw error;
    }
    // A batch retried at once comes straight back: yield after a failure, and every few hundred
    // items, as the single-item worker does.
    const before = handled;
    handled += items.length;
    if (failure !== undefined || Math.floor(before / ITEMS_PER_TURN) !== Math.floor(handled / ITEMS_PER_TURN)) await nextTurn();
  }
}
