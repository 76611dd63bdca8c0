// The producing handle users hold: Producer, a thin layer over QueueCore that checks what is
// pushed and how, and the check of `drained()`/`onIdle()` both handles share.
import type { QueueProducer } from '../api/handles.js';
import { optionalSignal, optionsObject } from '../lib/validate.js';
import type { QueueCore } from './queue-core.js';
import { abortReason, pushMeta } from './entry.js';
import { type PushSettings, manyPushSettings, notBeforeOf, payloadBytes, singlePushSettings } from './push-options.js';
import type { PushOptions, PushValue, QueueStats, WaitOptions } from '../api/types.js';
import { QueueError } from '../contract/errors.js';
import type { ByteArena } from '../lib/bytes.js';
import { isRaw } from '../lib/codec.js';
import { scheduleDefinition, type ScheduleOptions, type ScheduleSpec } from './schedule-slots.js';
import { type ScheduleInfo, scheduleName } from './schedules.js';

export { keyOption, keysOption } from './push-options.js';

export type { PushValue } from '../api/types.js';

/** The producing handle: push items. Any number of callers may push concurrently. */
export class Producer<T = Uint8Array> implements QueueProducer<T> {
  readonly #core: QueueCore;
  /** The queue's arena: each payload is copied into it, so the caller may reuse its buffer at once. */
  readonly #arena: ByteArena;
  /** Copies a caller's buffer into the queue's arena. */
  readonly #copy: (bytes: Uint8Array) => Uint8Array;
  readonly #bytesOf = (name: string, value: unknown): Uint8Array => payloadBytes(this.#core.codec, name, value, this.#copy);

  /** @internal */
  constructor(core: QueueCore) {
    this.#core = core;
    const arena = core.arena;
    this.#arena = arena;
    this.#copy = (bytes) => arena.copy(bytes);
  }

  /**
   * Store one item. Resolves with its seq once it is stored under the queue's durability policy.
   * Waits while the queue is at capacity. Strings are stored as UTF-8. With a codec, the value
   * is encoded first; one that fails to encode (or to validate) rejects with `ERR_ENCODE` (or
   * `ERR_INVALID`) and stores nothing.
   */
  push(payload: PushValue<T>, options?: PushOptions): Promise<number> {
    // The plain push of bytes, the README's: no options to read, nothing to encode. The same
    // checks and the same copy as below, without the layers that read options and meta, and no
    // pending record (measured: about 4 % of a push's main-thread time in the `group` cell without
    // the disk for the first, 5 % for the second).
    if (options === undefined && isRaw(this.#core.codec) && payload instanceof Uint8Array) {
      let bytes: Uint8Array;
      try {
        bytes = this.#arena.copy(payload);
      } catch (error) {
        // A detached buffer: refused as the long way refuses it, by a rejection.
        return Promise.reject(error);
      }
      return this.#core.pushOne(bytes);
    }
    let bytes: Uint8Array;
    let o: PushSettings;
    try {
      o = singlePushSettings(options);
      bytes = this.#bytesOf('payload', payload);
    } catch (error) {
      return Promise.reject(error);
    }
    const meta = pushMeta(o.priority, notBeforeOf(o, this.#core.time), o.group);
    if (o.key !== undefined) return this.#core.pushKeyed(bytes, o.key, o.signal, meta);
    return this.#core.push([bytes], true, o.signal, meta) as Promise<number>;
  }

  /**
   * Store a batch behind one durability wait; resolves with the seqs in order. The batch is
   * admitted whole: it waits until all of it fits under the capacity. With `keys` (one per
   * payload, not `key`), each payload is pushed as `push` with its key would be: a remembered key
   * gives its seq and stores nothing, a key twice in the batch gives its first payload's seq, and
   * the rest are stored as one batch. See docs/guides/effectively-once.md, "Idempotency keys".
   */
  pushMany(payloads: Iterable<PushValue<T>>, options?: PushOptions): Promise<number[]> {
    let list: Uint8Array[];
    let o: PushSettings;
    try {
      ({ o, list } = manyPushSettings(payloads, options, this.#bytesOf));
    } catch (error) {
      return Promise.reject(error);
    }
    if (list.length === 0) {
      const error = this.#core.operationalError();
      if (error) return Promise.reject(error);
      if (o.signal?.aborted) return Promise.reject(abortReason(o.signal));
      // As a non-empty batch would: refused over a store that cannot keep what was asked for.
      const time = notBeforeOf(o, this.#core.time);
      if ((o.priority !== 0 || time !== 0) && this.#core.store.features.scheduling !== true)
        return this.#core.push([], false, undefined, pushMeta(o.priority, time, undefined)) as Promise<number[]>;
      if (o.group !== undefined && this.#core.store.features.groups !== true)
        return this.#core.push([], false, undefined, pushMeta(0, 0, o.group)) as Promise<number[]>;
      if (o.keys !== undefined && this.#core.keys === undefined) return this.#core.pushManyKeyed([], [], undefined);
      return Promise.resolve([]);
    }
    const meta = pushMeta(o.priority, notBeforeOf(o, this.#core.time), o.group);
    if (o.keys !== undefined) return this.#core.pushManyKeyed(list, o.keys, o.signal, meta);
    return this.#core.push(list, false, o.signal, meta) as Promise<number[]>;
  }

  /**
   * Keep a schedule in the store: from now on, an item of `value` is pushed at each of its slots,
   * `{ everyMs }` (the multiples of the period since the Unix epoch) or `{ cron, tz }` (a cron
   * expression in an IANA time zone, `'UTC'` by default; needs the optional package `cron-parser`).
   * Each slot fires once, across restarts, crashes and power losses: the item and the slot's
   * progress are stored in one write. Slots that pass while no queue is open over the store fire
   * at the next open as `options.catchUp` says (`'none'`, `'last'` (the default) or `'all'`, the
   * latest `maxCatchUp` at most). The items are ordinary items (`priority`, `group`, retries and
   * dead letters apply). Scheduling a name again with the same spec, value and options changes
   * nothing (declare schedules at every start); with others it replaces the schedule, which fires
   * from then on. Resolves once the schedule is stored under the queue's durability, with what
   * `schedules()` lists of it. Needs a store with `features.schedules` (`MemStore`, `LogStore`).
   * See docs/guides/schedules.md, "Schedules".
   */
  schedule(name: string, spec: ScheduleSpec, value: PushValue<T>, options?: ScheduleOptions): Promise<ScheduleInfo> {
    let bytes: Uint8Array;
    try {
      scheduleName(name);
      const definition = scheduleDefinition(spec, options);
      bytes = this.#bytesOf('value', value);
      const schedules = this.#core.schedules;
      if (schedules === undefined)
        throw new QueueError('ERR_UNSUPPORTED', 'A schedule needs a store that keeps schedules (features.schedules); this store does not');
      if (definition.priority !== 0 && this.#core.store.features.scheduling !== true)
        throw new QueueError(
          'ERR_UNSUPPORTED',
          "A schedule's priority needs a store that keeps priorities (features.scheduling); this store does not",
        );
      if (definition.group !== undefined && this.#core.store.features.groups !== true)
        throw new QueueError(
          'ERR_UNSUPPORTED',
          "A schedule's group needs a store that keeps groups (features.groups); this store does not",
        );
      const error = this.#core.operationalError();
      if (error) throw error;
      return schedules.schedule(name, spec, bytes, options);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * Delete the schedule `name` from the store: no slot of it fires once this resolved (an item
   * fired before stays an item). Resolves with true, or false when there was none.
   */
  unschedule(name: string): Promise<boolean> {
    try {
      scheduleName(name);
      const schedules = this.#core.schedules;
      if (schedules === undefined)
        throw new QueueError('ERR_UNSUPPORTED', 'A schedule needs a store that keeps schedules (features.schedules); this store does not');
      const error = this.#core.operationalError();
      if (error) throw error;
      return schedules.unschedule(name);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** The schedules the store keeps, by name, with when each fires next. Empty over a store without schedules. */
  schedules(): ScheduleInfo[] {
    return this.#core.schedules?.list() ?? [];
  }

  stats(): QueueStats {
    return this.#core.stats();
  }

  /** As {@link Consumer.drained}: the same queue, the same promise semantics. */
  drained(options?: WaitOptions): Promise<void> {
    return waitFor(this.#core, 'drained', options);
  }

  /** As {@link Consumer.onIdle}: the same queue, the same promise semantics. */
  onIdle(options?: WaitOptions): Promise<void> {
    return waitFor(this.#core, 'onIdle', options);
  }

  /** Close the queue (both handles). Idempotent. */
  close(): Promise<void> {
    return this.#core.close();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.#core.close();
  }
}

/** Validate the options of `drained()` and `onIdle()`, then wait in the core. @internal */
export function waitFor(core: QueueCore, which: 'drained' | 'onIdle', options: WaitOptions | undefined): Promise<void> {
  let signal: AbortSignal | undefined;
  try {
    signal = optionalSignal('options.signal', optionsObject('options', options).signal);
  } catch (error) {
    return Promise.reject(error);
  }
  return which === 'drained' ? core.drained(signal) : core.onIdle(signal);
}
