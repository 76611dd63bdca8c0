// JetStreamConsumer.process(): workers that take an item, run the handler, and ack it, or nak it
// with the retry policy's delay (the server holds it back meanwhile), or move it into the dead
// letters once it had its maxDeliveries. The options are those of the embedded process(), less
// batch mode.
import { setMaxListeners } from 'node:events';
import { QueueError } from '../../contract/errors.js';
import { errorMessage } from '../../core/deliveries.js';
import { delayMs } from '../../core/retry.js';
import type { HandlerContext, WorkerOptions } from '../../api/types.js';
import { expectation, knownKeys, optionalSignal, optionsObject, positiveInteger } from '../../lib/validate.js';
import type { JetStreamCore } from './core.js';
import type { JetStreamConsumer } from './handles.js';
import type { JetStreamReserved } from './reserved.js';

/** A `process()` handler: resolving acks the item, throwing (or timing out) retries it. */
export type JetStreamProcessHandler<T = Uint8Array> = (item: JetStreamReserved<T>, context: HandlerContext) => unknown;

/** The options of {@link JetStreamConsumer.process}: those of the embedded queue but `batch` and `groupConcurrency`. */
export type JetStreamProcessOptions = WorkerOptions;

/** @internal */
export interface Settings {
  readonly concurrency: number;
  readonly signal: AbortSignal | undefined;
  readonly onError: JetStreamProcessOptions['onError'];
  readonly timeoutMs: number;
  readonly heartbeat: boolean;
}

/** @internal */
export function processOptions(options: JetStreamProcessOptions | undefined): Settings {
  const o = optionsObject('options', options);
  knownKeys('options', o, ['concurrency', 'signal', 'onError', 'timeoutMs', 'heartbeat', 'batch', 'groupConcurrency']);
  if (o.batch !== undefined) throw new QueueError('ERR_UNSUPPORTED', 'A JetStream queue has no batch mode in process()');
  if (o.groupConcurrency !== undefined) throw new QueueError('ERR_UNSUPPORTED', "A JetStream queue keeps no group limits: its consumers in other processes share no count of a group's items in flight");
  if (o.heartbeat !== undefined && typeof o.heartbeat !== 'boolean') throw new TypeError(expectation('options.heartbeat', 'a boolean', o.heartbeat));
  const concurrency = o.concurrency === undefined ? 1 : positiveInteger('options.concurrency', o.concurrency);
  const signal = optionalSignal('options.signal', o.signal);
  let timeoutMs = Infinity;
  if (o.timeoutMs !== undefined && o.timeoutMs !== Infinity) {
    timeoutMs = delayMs('options.timeoutMs', o.timeoutMs);
    if (timeoutMs === 0) throw new RangeError(expectation('options.timeoutMs', 'a positive number of ms', 0));
  }
  if (o.onError !== undefined && typeof o.onError !== 'function') throw new TypeError(expectation('options.onError', 'a function', o.onError));
  return { concurrency, signal, onError: o.onError as Settings['onError'], timeoutMs, heartbeat: o.heartbeat === true };
}

class Context implements HandlerContext {
  readonly controller = new AbortController();
  get signal(): AbortSignal {
    return this.controller.signal;
  }
}

function report(settings: Settings, error: unknown, item: JetStreamReserved<unknown>): void {
  if (settings.onError === undefined) return;
  const warn = (e: unknown): void => {
    process.emitWarning(`process() onError threw: ${errorMessage(e)}`, { type: 'PersistentQueueWarning', code: 'PQ_ON_ERROR_FAILED' });
  };
  try {
    const result = settings.onError(error, { seq: item.seq, deliveries: item.deliveries });
    if (result !== null && typeof result === 'object' && typeof (result as PromiseLike<unknown>).then === 'function') (result as PromiseLike<unknown>).then(undefined, warn);
  } catch (thrown) {
    warn(thrown);
  }
}

/** Run the handler, bounded by `timeoutMs` and by the item's lease (kept alive with `heartbeat`). */
function runHandler(core: JetStreamCore, handler: JetStreamProcessHandler<unknown>, item: JetStreamReserved<unknown>, context: Context, settings: Settings): Promise<unknown> {
  const time = core.s.time;
  return new Promise((resolve, reject) => {
    let timer: unknown;
    let beat: unknown;
    const done = (): void => {
      item.onLeaseExpired(undefined);
      if (timer !== undefined) time.clearTimeout(timer);
      if (beat !== undefined) time.clearTimeout(beat);
      timer = beat = undefined;
    };
    const fail = (error: unknown): void => {
      done();
      context.controller.abort(error);
      reject(error);
    };
    item.onLeaseExpired(fail);
    if (settings.timeoutMs !== Infinity) {
      timer = time.setTimeout(() => fail(new DOMException(`The handler ran longer than timeoutMs (${settings.timeoutMs} ms)`, 'TimeoutError')), settings.timeoutMs);
    }
    if (settings.heartbeat && item.leaseMs !== Infinity) {
      const arm = (): void => {
        beat = time.setTimeout(() => {
          item.extend().then(arm, () => {});
        }, item.leaseMs / 2);
      };
      arm();
    }
    let result: unknown;
    try {
      result = handler(item, context);
    } catch (error) {
      fail(error);
      return;
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
export async function runProcess(core: JetStreamCore, consumer: JetStreamConsumer<unknown>, handler: JetStreamProcessHandler<unknown>, settings: Settings): Promise<void> {
  const stop = new AbortController();
  // Each waiting worker listens on it: one listener per worker is expected, not a leak.
  setMaxListeners(settings.concurrency + 10, stop.signal);
  const running = new Set<Context>();
  const onAbort = (): void => {
    stop.abort(settings.signal!.reason);
    for (const context of running) context.controller.abort(settings.signal!.reason);
  };
  if (settings.signal?.aborted) return;
  settings.signal?.addEventListener('abort', onAbort, { once: true });
  let fatal: { error: unknown } | undefined;

  const worker = async (): Promise<void> => {
    while (!stop.signal.aborted) {
      let item: JetStreamReserved<unknown> | null;
      try {
        item = await consumer.take(stop.signal, core.s.leaseMs);
      } catch (error) {
        if (stop.signal.aborted) return;
        throw error;
      }
      if (item === null) return;
      const context = new Context();
      running.add(context);
      let failure: { error: unknown } | undefined;
      try {
        await runHandler(core, handler, item, context, settings);
      } catch (error) {
        failure = { error };
      } finally {
        running.delete(context);
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
  const workers: Promise<void>[] = [];
  for (let i = 0; i < settings.concurrency; i++) {
    workers.push(
      worker().catch((error: unknown) => {
        fatal ??= { error };
        stop.abort(error);
      }),
    );
  }
  await Promise.all(workers);
  settings.signal?.removeEventListener('abort', onAbort);
  if (fatal) throw fatal.error;
  if (core.closed) await core.close();
}
