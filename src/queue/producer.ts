// The producing handle users hold: Producer, a thin layer over QueueCore that checks what is
// pushed and how, and the check of `drained()`/`onIdle()` both handles share.
import { encodeValue, isRaw } from '../codec.js';
import { QueueError } from '../errors.js';
import { MAX_KEY_BYTES, PRIORITY_MAX, PRIORITY_MIN } from '../store.js';
import { isValidKey } from '../key-records.js';
import { expectation, knownKeys, optionalSignal, optionsObject } from '../validate.js';
import type { QueueCore } from './core.js';
import { type PushPayload, toBytes, abortReason } from './entry.js';
import { delayMs } from './retry.js';
import type { PushOptions, QueueStats, WaitOptions } from './types.js';

/**
 * What `push` takes: a value of the queue's type, through its codec (`Builder.codec`); for the
 * default byte queue, a `Uint8Array` or a string (stored as UTF-8).
 */
export type PushValue<T> = 0 extends 1 & T ? T : [T] extends [Uint8Array] ? PushPayload : T;

/** The producing handle: push items. Any number of callers may push concurrently. */
export class Producer<T = Uint8Array> {
  readonly #core: QueueCore;

  /** @internal */
  constructor(core: QueueCore) {
    this.#core = core;
  }

  /** The bytes the store keeps for `value`: the payload itself, or what the queue's codec encodes it to. */
  #bytesOf(name: string, value: unknown): Uint8Array {
    const codec = this.#core.codec;
    if (isRaw(codec)) return toBytes(name, value, this.#core.arena);
    const out = encodeValue(codec, value);
    if (out instanceof QueueError) throw out;
    return toBytes(name, out, this.#core.arena);
  }

  /**
   * Store one item. Resolves with its seq once it is stored under the queue's durability policy.
   * Waits while the queue is at capacity. Strings are stored as UTF-8. With a codec, the value
   * is encoded first; one that fails to encode (or to validate) rejects with `ERR_ENCODE` (or
   * `ERR_INVALID`) and stores nothing.
   */
  push(payload: PushValue<T>, options?: PushOptions): Promise<number> {
    let bytes: Uint8Array;
    let o: PushSettings;
    try {
      o = pushSettings(options);
      bytes = this.#bytesOf('payload', payload);
    } catch (error) {
      return Promise.reject(error);
    }
    if (o.keys !== undefined) return Promise.reject(new TypeError(expectation('options.keys', 'undefined: push takes one key, as options.key', o.keys)));
    if (o.key !== undefined) return this.#core.pushKeyed(bytes, o.key, o.signal, o.priority, notBeforeOf(o, this.#core));
    return this.#core.push([bytes], true, o.signal, undefined, o.priority, notBeforeOf(o, this.#core)) as Promise<number>;
  }

  /**
   * Store a batch behind one durability wait; resolves with the seqs in order. The batch is
   * admitted whole: it waits until all of it fits under the capacity. With `keys` (one per
   * payload, not `key`), each payload is pushed as `push` with its key would be: a remembered key
   * gives its seq and stores nothing, a key twice in the batch gives its first payload's seq, and
   * the rest are stored as one batch. See README, "Idempotency keys".
   */
  pushMany(payloads: Iterable<PushValue<T>>, options?: PushOptions): Promise<number[]> {
    let list: Uint8Array[];
    let o: PushSettings;
    try {
      o = pushSettings(options);
      if (o.key !== undefined) throw new TypeError(expectation('options.key', 'undefined: pushMany takes one key per payload, as options.keys', o.key));
      if (payloads === null || typeof payloads !== 'object' || typeof (payloads as Iterable<unknown>)[Symbol.iterator] !== 'function') {
        throw new TypeError(expectation('payloads', 'an iterable of Uint8Array or string', payloads));
      }
      list = [];
      let i = 0;
      for (const p of payloads) list.push(this.#bytesOf(`payloads[${i++}]`, p));
      if (o.keys !== undefined && o.keys.length !== list.length) {
        throw new RangeError(expectation('options.keys', `an array of ${list.length} keys, one per payload`, o.keys));
      }
    } catch (error) {
      return Promise.reject(error);
    }
    if (list.length === 0) {
      const error = this.#core.operationalError();
      if (error) return Promise.reject(error);
      if (o.signal?.aborted) return Promise.reject(abortReason(o.signal));
      // As a non-empty batch would: refused over a store that cannot keep what was asked for.
      const time = notBeforeOf(o, this.#core);
      if ((o.priority !== 0 || time !== 0) && this.#core.store.features.scheduling !== true) return this.#core.push([], false, undefined, undefined, o.priority, time) as Promise<number[]>;
      if (o.keys !== undefined && this.#core.keys === undefined) return this.#core.pushManyKeyed([], [], undefined, 0, 0);
      return Promise.resolve([]);
    }
    if (o.keys !== undefined) return this.#core.pushManyKeyed(list, o.keys, o.signal, o.priority, notBeforeOf(o, this.#core));
    return this.#core.push(list, false, o.signal, undefined, o.priority, notBeforeOf(o, this.#core)) as Promise<number[]>;
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

interface PushSettings {
  signal: AbortSignal | undefined;
  priority: number;
  /** A delay to read off the queue's clock at the call (0: none), or else a not-before time (0: none). */
  delayMs: number;
  at: number;
  /** The idempotency key, or undefined. */
  key: string | undefined;
  /** `pushMany`'s idempotency keys, one per payload, or undefined. */
  keys: string[] | undefined;
}

/** Longest delay (about 31,000 years): the time it gives stays a safe integer. */
const MAX_DELAY_MS = 1e15;

/** What a push without options gets; shared, so that a plain push allocates nothing for them. */
const PLAIN_PUSH: PushSettings = Object.freeze({ signal: undefined, priority: 0, delayMs: 0, at: 0, key: undefined, keys: undefined });

/** The not-before time a push asks for, in ms since the epoch (0: none). */
function notBeforeOf(o: PushSettings, core: QueueCore): number {
  return o.delayMs > 0 ? Math.ceil(core.time.wallNow() + o.delayMs) : o.at;
}

/** Validate the options of `push()` and `pushMany()`. */
function pushSettings(options: PushOptions | undefined): PushSettings {
  if (options === undefined) return PLAIN_PUSH;
  const o = optionsObject('options', options);
  knownKeys('options', o, ['signal', 'priority', 'delayMs', 'notBefore', 'key', 'keys']);
  const signal = optionalSignal('options.signal', o.signal);
  let priority = 0;
  if (o.priority !== undefined) {
    if (typeof o.priority !== 'number') throw new TypeError(expectation('options.priority', `an integer from ${PRIORITY_MIN} to ${PRIORITY_MAX}`, o.priority));
    if (!Number.isInteger(o.priority) || o.priority < PRIORITY_MIN || o.priority > PRIORITY_MAX) {
      throw new RangeError(expectation('options.priority', `an integer from ${PRIORITY_MIN} to ${PRIORITY_MAX}`, o.priority));
    }
    priority = o.priority === 0 ? 0 : o.priority; // -0 is 0
  }
  if (o.delayMs !== undefined && o.notBefore !== undefined) {
    throw new TypeError(expectation('options', 'either delayMs or notBefore, not both', options));
  }
  let ms = 0;
  let at = 0;
  if (o.delayMs !== undefined) {
    ms = delayMs('options.delayMs', o.delayMs);
    if (ms > MAX_DELAY_MS) throw new RangeError(expectation('options.delayMs', `a number of ms from 0 to ${MAX_DELAY_MS}`, ms));
  } else if (o.notBefore !== undefined) {
    at = o.notBefore instanceof Date ? o.notBefore.getTime() : (o.notBefore as number);
    const what = 'a Date or a non-negative safe integer of ms since the epoch';
    if (typeof at !== 'number') throw new TypeError(expectation('options.notBefore', what, o.notBefore));
    if (!Number.isSafeInteger(at) || at < 0) throw new RangeError(expectation('options.notBefore', what, o.notBefore));
  }
  const key = o.key === undefined ? undefined : keyOption('options.key', o.key);
  const keys = o.keys === undefined ? undefined : keysOption(o.keys);
  return { signal, priority, delayMs: ms, at, key, keys };
}

/** `options.keys`: an array of idempotency keys, one per payload (its length is checked by the caller). */
export function keysOption(value: unknown): string[] {
  if (!Array.isArray(value)) throw new TypeError(expectation('options.keys', 'an array of keys, one per payload', value));
  return (value as unknown[]).map((k, i) => keyOption(`options.keys[${i}]`, k));
}

/** An idempotency key given as `name`: a string of 1 to `MAX_KEY_BYTES` UTF-8 bytes (`isValidKey`, the stores' rule too). */
export function keyOption(name: string, value: unknown): string {
  const what = `a string of 1 to ${MAX_KEY_BYTES} UTF-8 bytes`;
  if (typeof value !== 'string') throw new TypeError(expectation(name, what, value));
  if (!isValidKey(value)) throw new RangeError(expectation(name, what, value));
  return value;
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
