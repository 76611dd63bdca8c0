// What `push()` and `pushMany()` take, checked once for every producer: the queue's own
// (./producer.ts) and one in another process or thread (../remote/producer.ts).
import { encodeValue, isRaw, type Codec } from '../lib/codec.js';
import { QueueError } from '../contract/errors.js';
import { isValidKey } from '../contract/records/keys.js';
import { isValidGroup } from '../contract/records/groups.js';
import { MAX_GROUP_BYTES, MAX_KEY_BYTES, PRIORITY_MAX, PRIORITY_MIN } from '../contract/store.js';
import { expectation, knownKeys, optionalSignal, optionsObject } from '../lib/validate.js';
import { encoder } from './entry.js';
import { delayMs } from './retry.js';
import type { PushOptions } from '../api/types.js';

export interface PushSettings {
  signal: AbortSignal | undefined;
  priority: number;
  /** A delay to read off the producer's clock at the call (0: none), or else a not-before time (0: none). */
  delayMs: number;
  at: number;
  /** The idempotency key, or undefined. */
  key: string | undefined;
  /** `pushMany`'s idempotency keys, one per payload, or undefined. */
  keys: string[] | undefined;
  /** The items' group, or undefined. */
  group: string | undefined;
}

/** Longest delay (about 31,000 years): the time it gives stays a safe integer. */
const MAX_DELAY_MS = 1e15;

/** What a push without options gets; shared, so that a plain push allocates nothing for them. */
const PLAIN_PUSH: PushSettings = Object.freeze({
  signal: undefined,
  priority: 0,
  delayMs: 0,
  at: 0,
  key: undefined,
  keys: undefined,
  group: undefined,
});

/** The not-before time a push asks for, in ms since the epoch (0: none), `delayMs` read off the producer's clock at the call. */
export function notBeforeOf(o: PushSettings, clock: { wallNow(): number }): number {
  return o.delayMs > 0 ? Math.ceil(clock.wallNow() + o.delayMs) : o.at;
}

/** Validate the options of `push()` and `pushMany()`. */
export function pushSettings(options: PushOptions | undefined): PushSettings {
  if (options === undefined) return PLAIN_PUSH;
  const o = optionsObject('options', options);
  knownKeys('options', o, ['signal', 'priority', 'delayMs', 'notBefore', 'key', 'keys', 'group']);
  const signal = optionalSignal('options.signal', o.signal);
  let priority = 0;
  if (o.priority !== undefined) {
    if (typeof o.priority !== 'number')
      throw new TypeError(expectation('options.priority', `an integer from ${PRIORITY_MIN} to ${PRIORITY_MAX}`, o.priority));
    if (!Number.isInteger(o.priority) || o.priority < PRIORITY_MIN || o.priority > PRIORITY_MAX) {
      throw new RangeError(expectation('options.priority', `an integer from ${PRIORITY_MIN} to ${PRIORITY_MAX}`, o.priority));
    }
    priority = o.priority === 0 ? 0 : o.priority; // -0 is 0
  }
  const { delayMs: ms, at } = delayOption(o, options);
  const key = o.key === undefined ? undefined : keyOption('options.key', o.key);
  const keys = o.keys === undefined ? undefined : keysOption(o.keys);
  const group = o.group === undefined ? undefined : groupOption('options.group', o.group);
  return { signal, priority, delayMs: ms, at, key, keys, group };
}

/** `push()`'s options: as `pushSettings`, and `keys` refused (push takes one key, as `key`). */
export function singlePushSettings(options: PushOptions | undefined): PushSettings {
  const o = pushSettings(options);
  if (o.keys !== undefined) throw new TypeError(expectation('options.keys', 'undefined: push takes one key, as options.key', o.keys));
  return o;
}

/**
 * `pushMany()`'s options and payloads: `key` refused (one key per payload, as `keys`), the payloads
 * an iterable turned into bytes by `bytesOf`, and `keys`, when given, one per payload.
 */
export function manyPushSettings<P>(
  payloads: Iterable<P>,
  options: PushOptions | undefined,
  bytesOf: (name: string, value: unknown) => Uint8Array,
): { o: PushSettings; list: Uint8Array[] } {
  const o = pushSettings(options);
  if (o.key !== undefined)
    throw new TypeError(expectation('options.key', 'undefined: pushMany takes one key per payload, as options.keys', o.key));
  if (payloads === null || typeof payloads !== 'object' || typeof (payloads as Iterable<unknown>)[Symbol.iterator] !== 'function') {
    throw new TypeError(expectation('payloads', 'an iterable of Uint8Array or string', payloads));
  }
  const list: Uint8Array[] = [];
  let i = 0;
  for (const p of payloads) list.push(bytesOf(`payloads[${i++}]`, p));
  if (o.keys !== undefined && o.keys.length !== list.length) {
    throw new RangeError(expectation('options.keys', `an array of ${list.length} keys, one per payload`, o.keys));
  }
  return { o, list };
}

/**
 * The bytes a producer stores for `value`: the payload itself (a string as UTF-8), or what `codec`
 * encodes it to. `copy` makes the bytes the caller's buffer no longer shares. Throws `TypeError`
 * for what is not a payload, `ERR_ENCODE`/`ERR_INVALID` for a value the codec refuses.
 */
export function payloadBytes(codec: Codec<unknown>, name: string, value: unknown, copy: (bytes: Uint8Array) => Uint8Array): Uint8Array {
  let out: unknown = value;
  if (!isRaw(codec)) {
    out = encodeValue(codec, value);
    if (out instanceof QueueError) throw out;
  }
  if (typeof out === 'string') return encoder.encode(out);
  if (out instanceof Uint8Array) return copy(out);
  throw new TypeError(expectation(name, 'a Uint8Array or a string', out));
}

/** A group given as `name`: a string of 1 to `MAX_GROUP_BYTES` UTF-8 bytes (`isValidGroup`, the stores' rule too). */
export function groupOption(name: string, value: unknown): string {
  const what = `a string of 1 to ${MAX_GROUP_BYTES} UTF-8 bytes`;
  if (typeof value !== 'string') throw new TypeError(expectation(name, what, value));
  if (!isValidGroup(value)) throw new RangeError(expectation(name, what, value));
  return value;
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

/**
 * `delayMs` or `notBefore` of a push's options, checked (never both): the delay in ms and the time,
 * 0 each when not given. Shared by both engines' producers.
 */
export function delayOption(o: Record<string, unknown>, options: unknown): { delayMs: number; at: number } {
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
  return { delayMs: ms, at };
}
