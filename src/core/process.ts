// Consumer.process(): workers that reserve an item, run the handler on it and settle it; a failed
// handler (a throw, or a timeout) is reported to onError and its item retried under the retry
// policy. The pool, the handler's bounds and the reporting are the ones both engines share
// (src/api/worker-pool.ts); the options are validated by the Consumer; the waiting between
// retries is delayed.ts's.
import { QueueError } from '../contract/errors.js';
import { ITEMS_PER_TURN, type Pool, RunContext, leaseExpiredError, nextTurn, report, runHandler, runPool } from '../api/worker-pool.js';
import type { QueueCore } from './queue-core.js';
import { WaitGroup } from './entry.js';
import { batchWorker } from './batches.js';
import type { Reserved } from './reserved.js';
import { type ProcessHandler, type ProcessSettings, retry } from './run-context.js';

/** @internal */
export async function runProcess(core: QueueCore, handler: ProcessHandler, settings: ProcessSettings): Promise<void> {
  // Workers waiting for an item; a stop withdraws them all at once, with one listener on the caller's signal.
  const waiting = new WaitGroup();
  // Batch workers' waits for more items (./batches.ts): withdrawn by a stop too.
  const gathering = new Set<WaitGroup>();
  const onStop = (): void => {
    core.stopWaiting(waiting);
    for (const group of gathering) core.stopWaiting(group);
  };
  const time = settings.time;

  const worker = async (slot: number, { halt, running }: Pool): Promise<void> => {
    let handled = 0;
    while (!halt.stopped) {
      const item = await core.reserveIn(waiting, settings.holder, core.leaseMs, settings.groupLimit, settings.concurrency > 1);
      if (!item) return;
      if (settings.accept !== undefined && !settings.accept(item)) continue;
      const context = new RunContext();
      if (halt.stopped) context.abort(halt.reason);
      running[slot] = context;
      let failure: { error: unknown } | undefined;
      try {
        await runHandler<Reserved>(handler, item, context, settings, time);
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
  await runPool(
    settings.concurrency,
    settings.signal,
    batch === undefined
      ? worker
      : (slot, pool) => batchWorker(core, settings, batch, { waiting, running: pool.running, halt: pool.halt, gathering }, slot),
    onStop,
  );
  // The loop ended because the queue is closing: resolve once its close() has finished, so the
  // store is released (and may be opened again) when process() resolves.
  if (core.closed) await core.close();
}
