// Consumer.process(): workers that reserve an item, run the handler on it and settle it; a failed
// handler (a throw, or a timeout) is reported to onError and its item retried under the retry
// policy. The options are validated by the Consumer; the waiting between retries is delayed.ts's.
import { unrefTimer } from '../lib/clock.js';
import { QueueError } from '../contract/errors.js';
import type { QueueCore } from './queue-core.js';
import { WaitGroup } from './entry.js';
import { batchWorker } from './batches.js';
import type { Reserved } from './reserved.js';
import { ITEMS_PER_TURN, type ProcessHandler, type ProcessSettings, RunContext, leaseExpiredError, nextTurn, report, retry, timeoutError } from './run-context.js';

/**
 * Run the handler, bounded by `timeoutMs` and by its item's lease. When the time is up, or the
 * lease runs out, the context's signal aborts and the returned promise rejects with the
 * TimeoutError or the ERR_LEASE_EXPIRED error; the handler's own result is then ignored (the race
 * keeps a handler on it, so a late rejection is not unhandled). With `heartbeat`, the lease is
 * extended each time half of it has passed, for as long as the handler runs.
 */
function runHandler(handler: ProcessHandler, item: Reserved, context: RunContext, settings: ProcessSettings): unknown {
  const { timeoutMs, heartbeat, time } = settings;
  // Without a lease or a timeout the handler runs bare: no closure, no timer per item. (A lease
  // the handler itself gives its item is still fenced; the worker reports its expiry afterwards.)
  if (timeoutMs === Infinity && item.leaseMs === Infinity) return handler(item, context);
  let leaseLost: ((error: unknown) => void) | undefined;
  item.onLeaseExpired((error) => leaseLost?.(error));
  const result = handler(item, context);
  return new Promise((resolve, reject) => {
    let timer: unknown;
    let beat: unknown;
    const done = (): void => {
      leaseLost = undefined;
      item.onLeaseExpired(undefined);
      if (timer !== undefined) time.clearTimeout(timer);
      if (beat !== undefined) time.clearTimeout(beat);
      beat = undefined;
    };
    const fail = (error: unknown): void => {
      done();
      context.abort(error);
      reject(error);
    };
    leaseLost = fail;
    if (item.leaseExpired) {
      // It ran out while the handler's synchronous part ran.
      fail(leaseExpiredError(item));
      return;
    }
    if (timeoutMs !== Infinity) timer = time.setTimeout(() => fail(timeoutError(timeoutMs)), timeoutMs);
    if (heartbeat) {
      const arm = (): void => {
        const lengthMs = item.leaseMs;
        if (lengthMs === Infinity) return;
        beat = time.setTimeout(() => {
          beat = undefined;
          // A refusal (settled by the handler, the queue closed) ends the heartbeat; an expiry is
          // reported through the lease itself.
          item.extend().then(() => {
            if (leaseLost !== undefined) arm();
          }, () => {});
        }, lengthMs / 2);
        // Unref'd as the lease timer is: the handler's own work keeps the process alive, a
        // heartbeat alone must not keep a hung handler's process running.
        unrefTimer(beat);
      };
      arm();
    }
    Promise.resolve(result).then(
      (value) => {
        done();
        resolve(value);
      },
      (error: unknown) => {
        done();
        reject(error);
      },
    );
  });
}

/** @internal */
export async function runProcess(core: QueueCore, handler: ProcessHandler, settings: ProcessSettings): Promise<void> {
  // Workers waiting for an item; stop() withdraws them all at once, with one listener on the caller's signal.
  const waiting = new WaitGroup();
  // The context of each worker's running handler, by worker: a slot write per item, not a set.
  const running: (RunContext | undefined)[] = new Array(settings.concurrency);
  // An object, not a `let`: the workers read it after awaits, where a narrowed local would mislead.
  const halt: { stopped: boolean; reason: unknown } = { stopped: false, reason: undefined };
  // Batch workers' waits for more items (./batches.ts): withdrawn by stop() too.
  const gathering = new Set<WaitGroup>();
  let fatal: { error: unknown } | undefined;
  const stop = (reason: unknown): void => {
    if (halt.stopped) return;
    halt.stopped = true;
    halt.reason = reason;
    core.stopWaiting(waiting);
    for (const group of gathering) core.stopWaiting(group);
    for (const context of running) context?.abort(reason);
  };
  const signal = settings.signal;
  const onAbort = (): void => stop(signal!.reason);
  if (signal?.aborted) stop(signal.reason);
  else signal?.addEventListener('abort', onAbort, { once: true });

  const worker = async (slot: number): Promise<void> => {
    let handled = 0;
    while (!halt.stopped) {
      const item = await core.reserveIn(waiting, settings.holder, core.leaseMs, settings.groupLimit);
      if (!item) return;
      if (settings.accept !== undefined && !settings.accept(item)) continue;
      const context = new RunContext();
      if (halt.stopped) context.abort(halt.reason);
      running[slot] = context;
      let failure: { error: unknown } | undefined;
      try {
        await runHandler(handler, item, context, settings);
        // A lease that ran out unwatched (one the handler gave its item) is reported all the same.
        if (item.leaseExpired) failure = { error: leaseExpiredError(item) };
      } catch (error) {
        failure = { error };
      } finally {
        running[slot] = undefined;
      }
      if (failure) report(settings, failure.error, item);
      let yieldTurn = failure !== undefined || ++handled % ITEMS_PER_TURN === 0;
      if (!item.settled) {
        try {
          await (failure ? retry(core, settings, item, failure.error) : item.ack());
        } catch (error) {
          if (error instanceof QueueError && error.code === 'ERR_CLOSED') return;
          // The ack was not recorded and the item is ready again: the queue itself is healthy.
          if (!(error instanceof QueueError && error.code === 'ERR_STORE_FULL')) throw error;
          yieldTurn = true;
        }
      }
      // An item retried at once comes straight back: without a turn of the event loop, a handler
      // that always throws would starve timers, I/O, abort signals and close().
      if (yieldTurn) await nextTurn();
    }
  };
  const batch = settings.batch;
  const workers: Promise<void>[] = [];
  for (let i = 0; i < settings.concurrency; i++) {
    const run = batch === undefined ? worker(i) : batchWorker(core, settings, batch, { waiting, running, halt, gathering }, i);
    workers.push(
      run.catch((error: unknown) => {
        fatal ??= { error };
        stop(error);
      }),
    );
  }
  await Promise.all(workers);
  signal?.removeEventListener('abort', onAbort);
  if (fatal) throw fatal.error;
  // The loop ended because the queue is closing: resolve once its close() has finished, so the
  // store is released (and may be opened again) when process() resolves.
  if (core.closed) await core.close();
}
