// The worker pool of `process()` on both engines: the common options, the context a handler run
// gets, how a handler is bounded by its timeout and its item's lease (kept alive by a heartbeat),
// how a failure is reported, and the pool itself (start the workers, stop them all on the caller's
// signal or the first fatal error, and wait for them). What a worker takes and how it settles an
// item are each engine's own: the embedded queue's workers take from the core and retry there,
// the JetStream queue's ask the server.
import { type TimeSource, unrefTimer } from '../lib/clock.js';
import { QueueError } from '../contract/errors.js';
import { expectation, knownKeys, optionalSignal, optionsObject, positiveInteger } from '../lib/validate.js';
import type { HandlerContext, HandlerErrorInfo, WorkerOptions } from './types.js';

/** What the pool needs of an item: who it is, and its lease. */
export interface PoolItem {
  readonly seq: number;
  readonly deliveries: number;
  /** The lease's length, Infinity without one. */
  readonly leaseMs: number;
  readonly leaseExpired: boolean;
  /** Called once when the lease runs out (undefined: no longer). */
  onLeaseExpired(callback: ((error: unknown) => void) | undefined): void;
  extend(): Promise<void>;
}

/** The options both engines' `process()` take, checked. @internal */
export interface WorkerSettings {
  readonly concurrency: number;
  readonly signal: AbortSignal | undefined;
  readonly onError: ((error: unknown, item: HandlerErrorInfo) => unknown) | undefined;
  /** Infinity: no timeout. */
  readonly timeoutMs: number;
  /** Extend each running handler's lease when half of it has passed. */
  readonly heartbeat: boolean;
}

/** The keys of `process()`'s options an engine may know beyond {@link WorkerOptions}'s. */
const WORKER_KEYS = ['concurrency', 'signal', 'onError', 'timeoutMs', 'heartbeat'] as const;

/**
 * Check `process()`'s options: those of {@link WorkerOptions}, and `more`, the keys the engine
 * reads itself (returned in `o` for it to check). Throws TypeError or RangeError naming the option.
 * @internal
 */
export function workerSettings(
  options: WorkerOptions | undefined,
  more: readonly string[],
): { settings: WorkerSettings; o: Record<string, unknown> } {
  const o = optionsObject('options', options);
  knownKeys('options', o, [...WORKER_KEYS, ...more]);
  if (o.heartbeat !== undefined && typeof o.heartbeat !== 'boolean')
    throw new TypeError(expectation('options.heartbeat', 'a boolean', o.heartbeat));
  const concurrency = o.concurrency === undefined ? 1 : positiveInteger('options.concurrency', o.concurrency);
  const signal = optionalSignal('options.signal', o.signal);
  let timeoutMs = Infinity;
  if (o.timeoutMs !== undefined && o.timeoutMs !== Infinity) {
    const t = o.timeoutMs;
    if (typeof t !== 'number') throw new TypeError(expectation('options.timeoutMs', 'a finite number of ms, 0 or more', t));
    if (!Number.isFinite(t) || t < 0) throw new RangeError(expectation('options.timeoutMs', 'a finite number of ms, 0 or more', t));
    if (t === 0) throw new RangeError(expectation('options.timeoutMs', 'a positive number of ms', 0));
    timeoutMs = t;
  }
  if (o.onError !== undefined && typeof o.onError !== 'function')
    throw new TypeError(expectation('options.onError', 'a function', o.onError));
  return {
    settings: { concurrency, signal, onError: o.onError as WorkerSettings['onError'], timeoutMs, heartbeat: o.heartbeat === true },
    o,
  };
}

/** Items handled by one worker between two turns of the event loop it yields. @internal */
export const ITEMS_PER_TURN = 256;

/** @internal */
export const nextTurn = (): Promise<void> => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * One handler run's context. Its AbortController is made only when the handler reads `signal`:
 * most handlers never do, and a controller per item would cost every delivery.
 * @internal
 */
export class RunContext implements HandlerContext {
  #controller: AbortController | undefined;
  #aborted: { reason: unknown } | undefined;

  get signal(): AbortSignal {
    if (this.#controller === undefined) {
      this.#controller = new AbortController();
      if (this.#aborted) this.#controller.abort(this.#aborted.reason);
    }
    return this.#controller.signal;
  }

  abort(reason: unknown): void {
    if (this.#aborted) return;
    this.#aborted = { reason };
    this.#controller?.abort(reason);
  }
}

/** @internal */
export function leaseExpiredError(item: { readonly seq: number }): QueueError {
  return new QueueError('ERR_LEASE_EXPIRED', `The lease of item ${item.seq} ran out: it was returned to the queue`);
}

/** @internal */
export function timeoutError(timeoutMs: number): DOMException {
  return new DOMException(`The handler ran longer than timeoutMs (${timeoutMs} ms)`, 'TimeoutError');
}

/** An onError that fails must not stop the workers, nor go unseen: it becomes a process warning. */
function onErrorFailed(error: unknown): void {
  const message = error instanceof Error ? error.message : String(error);
  process.emitWarning(`process() onError threw: ${message}`, { type: 'PersistentQueueWarning', code: 'PQ_ON_ERROR_FAILED' });
}

/** Tell `onError` of a failed handler run. @internal */
export function report(settings: WorkerSettings, error: unknown, item: HandlerErrorInfo): void {
  const onError = settings.onError;
  if (onError === undefined) return;
  try {
    const result = onError(error, { seq: item.seq, deliveries: item.deliveries });
    if (result !== null && typeof result === 'object' && typeof (result as PromiseLike<unknown>).then === 'function') {
      (result as PromiseLike<unknown>).then(undefined, onErrorFailed);
    }
  } catch (thrown) {
    onErrorFailed(thrown);
  }
}

/**
 * Run the handler, bounded by `timeoutMs` and by its item's lease. When the time is up, or the
 * lease runs out, the context's signal aborts and the returned promise rejects with the
 * TimeoutError or the ERR_LEASE_EXPIRED error; the handler's own result is then ignored (the race
 * keeps a handler on it, so a late rejection is not unhandled). With `heartbeat`, the lease is
 * extended each time half of it has passed, for as long as the handler runs. A handler that throws
 * at once throws here.
 * @internal
 */
export function runHandler<I extends PoolItem>(
  handler: (item: I, context: RunContext) => unknown,
  item: I,
  context: RunContext,
  settings: WorkerSettings,
  time: TimeSource,
): unknown {
  const { timeoutMs, heartbeat } = settings;
  // Without a lease or a timeout the handler runs bare: no closure, no timer per item. (A lease
  // the handler itself gives its item is still fenced; the worker reports its expiry afterwards.)
  if (timeoutMs === Infinity && item.leaseMs === Infinity) return handler(item, context);
  let leaseLost: ((error: unknown) => void) | undefined;
  item.onLeaseExpired((error) => leaseLost?.(error));
  let result: unknown;
  try {
    result = handler(item, context);
  } catch (error) {
    item.onLeaseExpired(undefined);
    throw error;
  }
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
          item.extend().then(
            () => {
              if (leaseLost !== undefined) arm();
            },
            () => {},
          );
        }, lengthMs / 2);
        // Unref'd as a lease timer is: the handler's own work keeps the process alive, a
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

/** What the workers of one pool share. @internal */
export interface Pool {
  /** Set once the pool stops (the caller's signal, a fatal error, the queue closing): workers end. */
  readonly halt: { stopped: boolean; reason: unknown };
  /** The context of each worker's running handler, by worker: a slot write per item, not a set. */
  readonly running: (RunContext | undefined)[];
}

/**
 * Run `concurrency` workers until each returns; stop them all when `signal` aborts or one throws
 * (`onStop` withdraws the takes they wait in, the running handlers' signals abort). Rejects with
 * the first error a worker threw.
 * @internal
 */
export async function runPool(
  concurrency: number,
  signal: AbortSignal | undefined,
  worker: (slot: number, pool: Pool) => Promise<void>,
  onStop: (reason: unknown) => void,
): Promise<void> {
  const pool: Pool = { halt: { stopped: false, reason: undefined }, running: new Array(concurrency) };
  let fatal: { error: unknown } | undefined;
  const stop = (reason: unknown): void => {
    if (pool.halt.stopped) return;
    pool.halt.stopped = true;
    pool.halt.reason = reason;
    onStop(reason);
    for (const context of pool.running) context?.abort(reason);
  };
  const onAbort = (): void => stop(signal!.reason);
  if (signal?.aborted) stop(signal.reason);
  else signal?.addEventListener('abort', onAbort, { once: true });
  const workers: Promise<void>[] = [];
  for (let i = 0; i < concurrency; i++) {
    workers.push(
      worker(i, pool).catch((error: unknown) => {
        fatal ??= { error };
        stop(error);
      }),
    );
  }
  await Promise.all(workers);
  signal?.removeEventListener('abort', onAbort);
  if (fatal) throw fatal.error;
}

/** Where a gather takes its items: those ready now, and a wait for the next. @internal */
export interface GatherSource<I> {
  /** Take the items ready now into `items` until it holds `size`; a promise when handing them over waits for a store or a server. */
  takeReady(items: I[], size: number): Promise<void> | undefined;
  /** Wait for the next item; null once the wait is ended (`end`, `stopped`) or the queue closed. */
  next(stopped: () => boolean): Promise<I | null>;
  /** End the wait in progress: the time is up, or the caller's signal aborted. */
  end(): void;
  /** A take threw (a codec that cannot work): give back the items in hand before the error goes on. */
  giveBack(items: I[]): unknown;
}

/**
 * The gather loop of `reserveMany()` and of batch workers on both engines: add to `items` those
 * ready now, then those that come within `waitMs` (on the queue's clock) while fewer than `size`
 * are in hand. The wait ends early once the batch is full, the queue closes, `signal` aborts or
 * `stopped` holds. If taking an item throws, the items in hand go back first.
 * @internal
 */
export async function gatherWithin<I>(
  items: I[],
  size: number,
  waitMs: number,
  time: TimeSource,
  signal: AbortSignal | undefined,
  stopped: () => boolean,
  source: GatherSource<I>,
): Promise<void> {
  let timedOut = false;
  let timer: unknown;
  const end = (): void => {
    timedOut = true;
    source.end();
  };
  try {
    let ready = source.takeReady(items, size);
    if (ready !== undefined) await ready;
    if (items.length < size && waitMs > 0 && !signal?.aborted && !stopped()) {
      timer = time.setTimeout(end, waitMs);
      signal?.addEventListener('abort', end, { once: true });
      const over = (): boolean => timedOut || stopped();
      while (items.length < size && !over()) {
        const item = await source.next(over);
        if (item === null) break;
        items.push(item);
        ready = source.takeReady(items, size);
        if (ready !== undefined) await ready;
      }
    }
  } catch (error) {
    await source.giveBack(items);
    throw error;
  } finally {
    if (timer !== undefined) time.clearTimeout(timer);
    signal?.removeEventListener('abort', end);
  }
}
