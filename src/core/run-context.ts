// What the embedded queue's workers of `process()` share, one item at a time (./process.ts) or in
// batches (./batches.ts), beyond the pool both engines share (src/api/worker-pool.ts): their
// settings and how a failed item is retried. Kept apart from both so that neither imports the other.
import type { TimeSource } from '../lib/clock.js';
import type { QueueCore } from './queue-core.js';
import { errorMessage } from './deliveries.js';
import type { Holder } from './entry.js';
import type { Reserved } from './reserved.js';
import type { RetryDelayFunction } from './retry.js';
import type { HandlerContext } from '../api/types.js';
import type { WorkerSettings } from '../api/worker-pool.js';

/** A `process()` handler: resolving acks the item, throwing (or timing out) retries it. */
export type ProcessHandler<T = Uint8Array> = (item: Reserved<T>, context: HandlerContext) => unknown;

/** A batch handler of `process(handler, { batch })`: resolving acks every item it left unsettled, throwing retries them. */
export type BatchHandler<T = Uint8Array> = (items: Reserved<T>[], context: HandlerContext) => unknown;

/** @internal */
export interface ProcessSettings extends WorkerSettings {
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
