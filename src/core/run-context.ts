// What the workers of `process()` share, one item at a time (./process.ts) or in batches
// (./batches.ts): their settings, the context a handler run gets, how a failure is reported and
// retried, and when a worker yields. Kept apart from both so that neither imports the other.
import type { TimeSource } from '../lib/clock.js';
import { QueueError } from '../contract/errors.js';
import type { QueueCore } from './queue-core.js';
import { errorMessage } from './deliveries.js';
import type { Holder } from './entry.js';
import type { Reserved } from './reserved.js';
import type { RetryDelayFunction } from './retry.js';
import type { HandlerContext, HandlerErrorInfo } from '../api/types.js';

/** A `process()` handler: resolving acks the item, throwing (or timing out) retries it. */
export type ProcessHandler<T = Uint8Array> = (item: Reserved<T>, context: HandlerContext) => unknown;

/** A batch handler of `process(handler, { batch })`: resolving acks every item it left unsettled, throwing retries them. */
export type BatchHandler<T = Uint8Array> = (items: Reserved<T>[], context: HandlerContext) => unknown;

/** @internal */
export interface ProcessSettings {
  readonly concurrency: number;
  readonly signal: AbortSignal | undefined;
  readonly onError: ((error: unknown, item: HandlerErrorInfo) => unknown) | undefined;
  /** Infinity: no timeout. */
  readonly timeoutMs: number;
  /** Extend each running handler's lease when half of it has passed. */
  readonly heartbeat: boolean;
  readonly retryDelays: RetryDelayFunction;
  /** The queue's timers (the system's, or an injected clock's). */
  readonly time: TimeSource;
  /** The forked consumer running the loop; undefined for the queue's own. */
  readonly holder: Holder | undefined;
  /** A typed queue's decode step: false when the item was moved to the dead letters instead. */
  readonly accept: ((item: Reserved) => boolean) | undefined;
  /** No item of a group with this many in flight is taken (`groupConcurrency`); Infinity: no limit. */
  readonly groupLimit: number;
  /** Batch mode (`process(handler, { batch })`): the handler gets up to `size` items at once. */
  readonly batch?: { readonly size: number; readonly waitMs: number; readonly handler: BatchHandler } | undefined;
}

/** Items handled by one worker between two turns of the event loop it yields. @internal */
export const ITEMS_PER_TURN = 256;

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
export function leaseExpiredError(item: Reserved): QueueError {
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

/** @internal */
export function report(settings: ProcessSettings, error: unknown, item: Reserved): void {
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
 * Retry a failed item after the policy's delay, or move it into the dead letters when it has had
 * its `maxDeliveries` (at once: no point waiting out a delay first). A policy that throws is
 * fatal, after the item is returned.
 * @internal
 */
export async function retry(core: QueueCore, settings: ProcessSettings, item: Reserved, error: unknown): Promise<void> {
  item.noteError(error);
  if (item.deliveries >= core.maxDeliveries) {
    await item.deadLetter(errorMessage(error));
    return;
  }
  let delayMs: number;
  try {
    delayMs = settings.retryDelays(item.deliveries, error);
  } catch (policyError) {
    await item.nack();
    throw policyError;
  }
  await item.retryAfter(delayMs);
}

/** @internal */
export const nextTurn = (): Promise<void> => new Promise<void>((resolve) => setImmediate(resolve));
