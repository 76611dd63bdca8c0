// The producer `connect()` returns: the Producer interface of a queue held by another process (or
// thread), over the owner's endpoint (./client.ts) or the spool (../stores/log/engine/spool-producer.ts). Values
// are checked and encoded here, by the same code as the queue's own producer
// (../core/push-options.ts), so a push that would be refused locally is refused before it leaves.
import type { QueueProducer } from '../api/handles.js';
import type { Codec } from '../lib/codec.js';
import { QueueError } from '../contract/errors.js';
import type { PushValue } from '../core/producer.js';
import { type PushSettings, manyPushSettings, notBeforeOf, payloadBytes, singlePushSettings } from '../core/push-options.js';
import type { PushOptions } from '../api/types.js';
import type { ProducerBackend } from './backend.js';
import type { RemotePushOptions } from '../contract/owner-surface.js';

/** `delayMs` becomes a not-before time on this process's clock, at the call. */
const wallClock = { wallNow: () => Date.now() };

/** The caller's bytes are copied into a frame (or a spool record) before `push` returns: no copy of them is kept. */
const asIs = (bytes: Uint8Array): Uint8Array => bytes;

/**
 * A producer of a queue another process (or thread) holds, made by {@link connect}. `push` and
 * `pushMany` take what the queue's own producer takes and resolve as it does: with the seqs, once
 * the owner stored the items under its durability policy (through the spool: with 0 per item, once
 * they are in the spool under this producer's policy; the owner numbers them when it takes them in).
 */
export class RemoteProducer<T = Uint8Array> implements QueueProducer<T> {
  readonly #backend: ProducerBackend;
  readonly #codec: Codec<unknown>;
  readonly #bytesOf = (name: string, value: unknown): Uint8Array => payloadBytes(this.#codec, name, value, asIs);
  #closed = false;

  /** @internal */
  constructor(backend: ProducerBackend, codec: Codec<unknown>) {
    this.#backend = backend;
    this.#codec = codec;
  }

  /** `'endpoint'`: the pushes go to the process that holds the queue; `'spool'`: no process did at `connect()`. */
  get mode(): 'endpoint' | 'spool' {
    return this.#backend.mode;
  }

  /**
   * Store one item; resolves with its seq once the owner stored it under its durability policy.
   * While the owner's queue is at capacity, the push waits, as a local one does; aborting
   * `options.signal` meanwhile withdraws it, with nothing stored. `delayMs` is read off this
   * process's clock at the call. Rejects with `ERR_OWNER_GONE` when the owner went away before it
   * answered (the item may or may not be stored), `ERR_TOO_LARGE` for a payload over the owner's
   * `maxItemBytes`, and with whatever the owner's push rejected with.
   */
  push(value: PushValue<T>, options?: PushOptions): Promise<number> {
    let o: PushSettings;
    let bytes: Uint8Array;
    try {
      o = singlePushSettings(options);
      bytes = this.#bytesOf('payload', value);
    } catch (error) {
      return Promise.reject(error);
    }
    if (this.#closed) return Promise.reject(closedError());
    if (o.group !== undefined) return Promise.reject(noGroups());
    return this.#backend.pushMany([bytes], remoteOptions(o, o.key === undefined ? undefined : [o.key]), o.signal).then(first);
  }

  /**
   * Store a batch; resolves with the seqs in order, as the queue's own `pushMany`. A batch larger
   * than one frame of the endpoint (the owner's `maxItemBytes` plus 64 KiB) is sent as several
   * pushes, one after the other: each is admitted and stored on its own.
   */
  pushMany(values: Iterable<PushValue<T>>, options?: PushOptions): Promise<number[]> {
    let o: PushSettings;
    let list: Uint8Array[];
    try {
      ({ o, list } = manyPushSettings(values, options, this.#bytesOf));
    } catch (error) {
      return Promise.reject(error);
    }
    if (this.#closed) return Promise.reject(closedError());
    if (o.group !== undefined) return Promise.reject(noGroups());
    if (list.length === 0) return o.signal?.aborted ? Promise.reject(o.signal.reason) : Promise.resolve([]);
    return this.#backend.pushMany(list, remoteOptions(o, o.keys), o.signal);
  }

  /**
   * Close the connection: pushes still waiting for capacity at the owner are withdrawn (they
   * reject with `ERR_CLOSED`), the others get their answer first. Idempotent.
   */
  close(): Promise<void> {
    this.#closed = true;
    return this.#backend.close();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}

/**
 * Neither the endpoint's frames (FORMAT §15) nor a spool file's records (§14) carry a group: a
 * push that asks for one is refused rather than stored without it.
 */
function noGroups(): QueueError {
  return new QueueError(
    'ERR_UNSUPPORTED',
    'A push from another process cannot carry a group: the endpoint and the spool do not keep one; push it in the owner process',
  );
}

function remoteOptions(o: PushSettings, keys: readonly string[] | undefined): RemotePushOptions {
  const notBefore = notBeforeOf(o, wallClock);
  if (o.priority === 0 && notBefore === 0 && keys === undefined) return PLAIN;
  return keys === undefined ? { priority: o.priority, notBefore } : { priority: o.priority, notBefore, keys };
}

const PLAIN: RemotePushOptions = Object.freeze({});

function first(seqs: number[]): number {
  return seqs[0]!;
}

function closedError(): QueueError {
  return new QueueError('ERR_CLOSED', 'The producer is closed');
}
