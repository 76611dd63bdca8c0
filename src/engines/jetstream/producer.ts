// The producing handle of a JetStream queue, with the calls and argument checks of the embedded
// Producer: a plain push publishes on the queue's subject; a delayed one on the delayed subject,
// where it waits for its time (delayed.ts moves it); a keyed one is looked up in the key stream
// first and recorded there once stored (keys.ts).
import type { QueueProducer } from '../../api/handles.js';
import { headers } from '@nats-io/transport-node';
import { encodeValue, isRaw } from '../../lib/codec.js';
import { QueueError } from '../../contract/errors.js';
import { type PushValue, delayOption, keyOption, keysOption } from '../../core/handles.js';
import type { PushOptions } from '../../api/types.js';
import { PRIORITY_MAX, PRIORITY_MIN } from '../../contract/store.js';
import { expectation, knownKeys, optionalSignal, optionsObject } from '../../lib/validate.js';
import { type JetStreamCore, publishError } from './core.js';
import { NOT_BEFORE_HEADER } from './delayed.js';
import { keyMessageId } from './keys.js';
import { type JetStreamQueueStats, queueStats } from './stats.js';

const encoder = new TextEncoder();

function bytesOf(core: JetStreamCore, name: string, value: unknown): Uint8Array {
  const codec = core.s.codec;
  let out: unknown = value;
  if (!isRaw(codec)) {
    const encoded = encodeValue(codec, value);
    if (encoded instanceof QueueError) throw encoded;
    out = encoded;
  }
  if (typeof out === 'string') return encoder.encode(out);
  if (out instanceof Uint8Array) return out;
  throw new TypeError(expectation(name, 'a Uint8Array or a string', out));
}

interface PushSettings {
  readonly signal: AbortSignal | undefined;
  /** The keys, one per payload, or undefined. */
  readonly keys: string[] | undefined;
  /** A delay (0: none), else a not-before time in ms since the epoch (0: none). */
  readonly delayMs: number;
  readonly at: number;
}

/**
 * The push options, checked as the embedded queue checks them. A priority other than 0 is
 * `ERR_UNSUPPORTED` (docs/guides/scaling-out.md, "The JetStream queue"). `single`: for `push`, which takes one `key`;
 * `pushMany` takes `keys`, one per payload.
 */
function pushSettings(options: PushOptions | undefined, single: boolean): PushSettings {
  const o = optionsObject('options', options);
  knownKeys('options', o, ['signal', 'priority', 'delayMs', 'notBefore', 'key', 'keys', 'group']);
  if (o.group !== undefined) throw new QueueError('ERR_UNSUPPORTED', unsupportedFlow.group);
  const signal = optionalSignal('options.signal', o.signal);
  if (o.priority !== undefined) {
    const what = `an integer from ${PRIORITY_MIN} to ${PRIORITY_MAX}`;
    if (typeof o.priority !== 'number') throw new TypeError(expectation('options.priority', what, o.priority));
    if (!Number.isInteger(o.priority) || o.priority < PRIORITY_MIN || o.priority > PRIORITY_MAX)
      throw new RangeError(expectation('options.priority', what, o.priority));
    if (o.priority !== 0)
      throw new QueueError(
        'ERR_UNSUPPORTED',
        'A JetStream queue keeps no priority: its consumer delivers in the order the stream stored (README, "The JetStream queue")',
      );
  }
  const { delayMs: ms, at } = delayOption(o, options);
  const key = o.key === undefined ? undefined : keyOption('options.key', o.key);
  const keys = o.keys === undefined ? undefined : keysOption(o.keys);
  if (single && keys !== undefined) throw new TypeError(expectation('options.keys', 'undefined: push takes one key, as options.key', keys));
  if (!single && key !== undefined)
    throw new TypeError(expectation('options.key', 'undefined: pushMany takes one key per payload, as options.keys', key));
  return { signal, keys: key === undefined ? keys : [key], delayMs: ms, at };
}

/** For each key, the index of its first occurrence in `keys`. */
function firstIndexes(keys: readonly string[]): number[] {
  const seen = new Map<string, number>();
  return keys.map((key, i) => {
    const first = seen.get(key);
    if (first !== undefined) return first;
    seen.set(key, i);
    return i;
  });
}

/** The bytes of a header block holding `entries` (names and values are ASCII: ids of percent-encoded keys, digits). */
function headerBytes(entries: readonly (readonly [string, string])[]): number {
  if (entries.length === 0) return 0;
  return 'NATS/1.0\r\n\r\n'.length + entries.reduce((n, [k, v]) => n + k.length + 2 + v.length + 2, 0);
}

/**
 * Why a message of `bytes` (with a header block of `headerLength`) cannot be published, or
 * undefined: the server refuses more than its `max_payload` (the client throws before sending),
 * a stream more than its `max_msg_size`. Known before sending, so a push over it is
 * `ERR_TOO_LARGE` and stores nothing, never an outcome left unknown that a retry would repeat.
 */
function tooLarge(core: JetStreamCore, bytes: number, headerLength: number): string | undefined {
  const total = bytes + headerLength;
  const maxPayload = core.s.nc.info?.max_payload;
  if (maxPayload !== undefined && total > maxPayload) return `the server's max_payload is ${maxPayload} bytes`;
  const maxMsgSize = core.s.maxMsgSize;
  if (maxMsgSize >= 0 && total > maxMsgSize)
    return `stream ${core.s.names.stream} takes messages of at most ${maxMsgSize} bytes (max_msg_size)`;
  return undefined;
}

/** Why the JetStream queue refuses the flow controls of the embedded queue (docs/guides/scaling-out.md, "The JetStream queue"). */
export const unsupportedFlow = {
  group:
    "A JetStream queue keeps no group limits: its consumers in other processes share no count of a group's items in flight, so groups and groupConcurrency are refused",
  schedule: 'A JetStream queue keeps no schedules: the server holds no schedule whose progress a fire could store in the write of its item',
} as const;

/** The producing handle. Any number of producers, in any number of processes, may push at once. */
export class JetStreamProducer<T = Uint8Array> implements QueueProducer<T> {
  readonly #core: JetStreamCore;

  /** @internal */
  constructor(core: JetStreamCore) {
    this.#core = core;
  }

  /**
   * Store one item. Resolves with its seq (the stream sequence) once the server acknowledged the
   * publish: stored under the stream's replication (a quorum of its replicas). A publish whose
   * answer does not come within the timeout rejects with `ERR_STORE`; it may have been stored.
   * With `delayMs` or `notBefore`, it is handed out once that time has come (the wall clock).
   */
  push(payload: PushValue<T>, options?: PushOptions): Promise<number> {
    return this.#publish([payload], options, true).then((seqs) => seqs[0]!);
  }

  /**
   * Store a batch; resolves with the seqs in order. The items are published one by one, all at
   * once: the batch is not atomic, and a failure rejects with the first error, the others stored.
   */
  pushMany(payloads: Iterable<PushValue<T>>, options?: PushOptions): Promise<number[]> {
    return this.#publish(payloads, options, false);
  }

  /** Refused with `ERR_UNSUPPORTED`: see {@link unsupportedFlow}. */
  schedule(..._args: unknown[]): Promise<never> {
    return Promise.reject(new QueueError('ERR_UNSUPPORTED', unsupportedFlow.schedule));
  }

  /** Refused with `ERR_UNSUPPORTED`: see {@link unsupportedFlow}. */
  unschedule(..._args: unknown[]): Promise<never> {
    return Promise.reject(new QueueError('ERR_UNSUPPORTED', unsupportedFlow.schedule));
  }

  /**
   * Publish each payload; with `keys`, each under its key's message id, so that the server drops
   * a key it has seen within its duplicate window and answers with the seq it stored the first
   * time (docs/guides/scaling-out.md, "The JetStream queue": idempotency keys). A key is looked up in the key stream
   * first and recorded there once stored (see keys.ts): the queue stream forgets the keys of acked
   * items when the server restarts, and a delayed item moves. A key repeated
   * within the batch is published once and its later payloads get the first one's seq: a
   * replicated stream refuses a message id while the first message under it is still being
   * stored. `single`: for `push`.
   */
  #publish(payloads: Iterable<PushValue<T>>, options: PushOptions | undefined, single: boolean): Promise<number[]> {
    const core = this.#core;
    let list: Uint8Array[];
    let o: PushSettings;
    let ids: string[] | undefined;
    let notBefore = 0;
    try {
      o = options === undefined ? PLAIN : pushSettings(options, single);
      if (payloads === null || typeof payloads !== 'object' || typeof (payloads as Iterable<unknown>)[Symbol.iterator] !== 'function') {
        throw new TypeError(expectation('payloads', 'an iterable of values', payloads));
      }
      list = [];
      let i = 0;
      for (const p of payloads) list.push(bytesOf(core, `payloads[${i++}]`, p));
      if (o.keys !== undefined && o.keys.length !== list.length) {
        throw new RangeError(expectation('options.keys', `an array of ${list.length} keys, one per payload`, o.keys));
      }
      ids = o.keys?.map(keyMessageId);
      // A time already come is no delay: the item is stored as a plain one.
      const now = Date.now();
      notBefore = o.delayMs > 0 ? Math.ceil(now + o.delayMs) : o.at > now ? o.at : 0;
      if (notBefore > 0 && core.s.noDelays !== undefined)
        throw new QueueError('ERR_UNSUPPORTED', `A delayed push cannot be kept: ${core.s.noDelays}`);
    } catch (error) {
      return Promise.reject(error);
    }
    const error = core.operationalError();
    if (error) return Promise.reject(error);
    if (o.signal?.aborted) return Promise.reject(o.signal.reason);
    const delayed = notBefore > 0;
    for (let i = 0; i < list.length; i++) {
      const entries: [string, string][] = [];
      if (ids !== undefined) entries.push(['Nats-Msg-Id', ids[i]!]);
      if (delayed) entries.push([NOT_BEFORE_HEADER, String(notBefore)]);
      const why = tooLarge(core, list[i]!.length, headerBytes(entries));
      if (why !== undefined) {
        const which = single ? 'The payload' : `payloads[${i}]`;
        return Promise.reject(new QueueError('ERR_TOO_LARGE', `${which} is ${list[i]!.length} bytes: ${why}; nothing was stored`));
      }
    }
    const counters = core.counters;
    counters.pendingPushes += list.length;
    const firstOf = ids === undefined ? undefined : firstIndexes(ids);
    const publishes: Promise<number>[] = [];
    list.forEach((bytes, i) => {
      const first = firstOf?.[i];
      if (first !== undefined && first !== i) publishes.push(publishes[first]!);
      else if (ids !== undefined) publishes.push(this.#publishKeyed(bytes, ids[i]!, notBefore));
      else publishes.push(this.#publishOne(bytes, undefined, notBefore));
    });
    return core.track(
      Promise.all(publishes).finally(() => {
        counters.pendingPushes -= list.length;
      }),
    );
  }

  /** Publish one payload (under message id `id`), into the delayed stream when `notBefore` is set. */
  async #publishOne(bytes: Uint8Array, id: string | undefined, notBefore: number): Promise<number> {
    const core = this.#core;
    const { subject, delayedSubject } = core.s.names;
    let hdrs;
    if (notBefore > 0) {
      hdrs = headers();
      hdrs.set(NOT_BEFORE_HEADER, String(notBefore));
    }
    try {
      const ack = await core.publish(notBefore > 0 ? delayedSubject : subject, bytes, id, hdrs);
      // A duplicate stored nothing: the server answers with the seq of the first publish.
      if (!ack.duplicate) core.counters.pushed++;
      return ack.seq;
    } catch (cause) {
      throw publishError('the push', cause);
    }
  }

  /**
   * Publish one payload under a key's message id, unless the key stream remembers the key; then
   * record the key with its seq, so that a later push of it finds it whichever stream holds the
   * item, and after a restart of the server.
   */
  async #publishKeyed(bytes: Uint8Array, id: string, notBefore: number): Promise<number> {
    const core = this.#core;
    const known = await core.api('the look-up of an idempotency key (nothing was stored)', () => core.s.keys.seqOf(id));
    if (known !== undefined) return known;
    const seq = await this.#publishOne(bytes, id, notBefore);
    try {
      await core.s.keys.record(id, seq);
    } catch (cause) {
      throw publishError(`the record of the push's key (item ${seq} is stored; push again under the key)`, cause);
    }
    return seq;
  }

  stats(): Promise<JetStreamQueueStats> {
    return queueStats(this.#core, undefined);
  }

  /** Close the queue (both handles, and every fork). Idempotent. The connection stays open. */
  close(): Promise<void> {
    return this.#core.close();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}

/** What a push without options gets: shared, so that a plain push allocates nothing for them. */
const PLAIN: PushSettings = Object.freeze({ signal: undefined, keys: undefined, delayMs: 0, at: 0 });
