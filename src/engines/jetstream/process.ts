// JetStreamConsumer.process(): workers that take an item, run the handler, and ack it, or nak it
// with the retry policy's delay (the server holds it back meanwhile), or move it into the dead
// letters once it had its maxDeliveries. The pool, the options, the handler's bounds and the
// reporting are the ones the embedded queue's process() uses (src/api/worker-pool.ts), less batch
// mode and group limits.
import { setMaxListeners } from 'node:events';
import { QueueError } from '../../contract/errors.js';
import { errorMessage } from '../../core/deliveries.js';
import type { HandlerContext, WorkerOptions } from '../../api/types.js';
import { type Pool, RunContext, type WorkerSettings, report, runHandler, runPool, workerSettings } from '../../api/worker-pool.js';
import type { JetStreamCore } from './core.js';
import type { JetStreamConsumer } from './handles.js';
import type { JetStreamReserved } from './reserved.js';

/** A `process()` handler: resolving acks the item, throwing (or timing out) retries it. */
export type JetStreamProcessHandler<T = Uint8Array> = (item: JetStreamReserved<T>, context: HandlerContext) => unknown;

/** The options of {@link JetStreamConsumer.process}: those of the embedded queue but `batch` and `groupConcurrency`. */
export type JetStreamProcessOptions = WorkerOptions;

/** @internal */
export type Settings = WorkerSettings;

/** @internal */
export function processOptions(options: JetStreamProcessOptions | undefined): Settings {
  const { settings, o } = workerSettings(options, ['batch', 'groupConcurrency']);
  if (o.batch !== undefined) throw new QueueError('ERR_UNSUPPORTED', 'A JetStream queue has no batch mode in process()');
  if (o.groupConcurrency !== undefined)
    throw new QueueError(
      'ERR_UNSUPPORTED',
      "A JetStream queue keeps no group limits: its consumers in other processes share no count of a group's items in flight",
    );
  return settings;
}

/** @internal */
export async function runProcess(
  core: JetStreamCore,
  consumer: JetStreamConsumer<unknown>,
  handler: JetStreamProcessHandler<unknown>,
  settings: Settings,
): Promise<void> {
  // The workers' takes wait on it: a stop aborts them all.
  const stop = new AbortController();
  // Each waiting worker listens on it: one listener per worker is expected, not a leak.
  setMaxListeners(settings.concurrency + 10, stop.signal);
  const time = core.s.time;

  const worker = async (slot: number, { halt, running }: Pool): Promise<void> => {
    while (!halt.stopped) {
      let item: JetStreamReserved<unknown> | null;
      try {
        item = await consumer.take(stop.signal, core.s.leaseMs);
      } catch (error) {
        if (halt.stopped) return;
        throw error;
      }
      if (item === null) return;
      const context = new RunContext();
      if (halt.stopped) context.abort(halt.reason);
      running[slot] = context;
      let failure: { error: unknown } | undefined;
      try {
        await runHandler(handler, item, context, settings, time);
      } catch (error) {
        failure = { error };
      } finally {
        running[slot] = undefined;
      }
      if (failure) report(settings, failure.error, item);
      if (item.settled) continue;
      try {
        if (failure === undefined) await item.ack();
        else {
          item.noteError(failure.error);
          if (item.deliveries >= core.s.maxDeliveries) await item.deadLetter(errorMessage(failure.error));
          else await item.retryAfter(core.s.retryDelays(item.deliveries, failure.error), true);
        }
      } catch (error) {
        if (error instanceof QueueError && (error.code === 'ERR_CLOSED' || error.code === 'ERR_LEASE_EXPIRED')) continue;
        // A settle the server did not confirm: the item comes back after its ack wait at worst.
        if (error instanceof QueueError && error.code === 'ERR_STORE') continue;
        throw error;
      }
    }
  };
  await runPool(settings.concurrency, settings.signal, worker, (reason) => stop.abort(reason));
  if (core.closed) await core.close();
}
