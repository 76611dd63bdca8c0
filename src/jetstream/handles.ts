// The handles of a JetStream queue: JetStreamProducer and JetStreamConsumer (JetStreamReserved is
// in reserved.ts), with the calls and the argument checks of the embedded Producer and Consumer.
// The server decides order, delivery counts, the ack wait and delays; this process keeps its
// waiting reserves, its reservations and its counters.
import { encodeValue, isRaw } from '../codec.js';
import { QueueError } from '../errors.js';
import { errorMessage } from '../queue/deliveries.js';
import { type PushValue, keyOption, keysOption } from '../queue/handles.js';
import { leaseLength } from '../queue/leases.js';
import { settleAll } from '../queue/batches.js';
import { delayMs } from '../queue/retry.js';
import type { NackOptions, PushOptions, ReserveManyOptions, ReserveOptions } from '../queue/types.js';
import { expectation, knownKeys, optionalSignal, optionsObject, positiveInteger } from '../validate.js';
import { type JetStreamCore, publishError, unanswered } from './core.js';
import { keyMessageId } from './keys.js';
import { JetStreamDeadLetters } from './dead-letters.js';
import type { Delivery } from './message.js';
import { Puller } from './puller.js';
import { type JetStreamProcessHandler, type JetStreamProcessOptions, processOptions, runProcess } from './process.js';
import { JetStreamReserved } from './reserved.js';
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

/**
 * The push options: those of the embedded queue, of which a JetStream stream keeps no schedule.
 * `single`: for `push`, which takes one `key`; `pushMany` takes `keys`, one per payload. Returns
 * the signal and the keys, one per payload, or undefined.
 */
function pushSettings(options: PushOptions | undefined, single: boolean): { signal: AbortSignal | undefined; keys: string[] | undefined } {
  const o = optionsObject('options', options);
  knownKeys('options', o, ['signal', 'priority', 'delayMs', 'notBefore', 'key', 'keys']);
  const signal = optionalSignal('options.signal', o.signal);
  for (const key of ['priority', 'delayMs', 'notBefore'] as const) {
    if (o[key] !== undefined) throw new QueueError('ERR_UNSUPPORTED', `A JetStream queue keeps no ${key}: the stream delivers in the order it stored`);
  }
  const key = o.key === undefined ? undefined : keyOption('options.key', o.key);
  const keys = o.keys === undefined ? undefined : keysOption(o.keys);
  if (single && keys !== undefined) throw new TypeError(expectation('options.keys', 'undefined: push takes one key, as options.key', keys));
  if (!single && key !== undefined) throw new TypeError(expectation('options.key', 'undefined: pushMany takes one key per payload, as options.keys', key));
  return { signal, keys: key === undefined ? keys : [key] };
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

/** The bytes of the header block a publish under message id `id` carries (the ids are ASCII: percent-encoded keys). */
function headerBytes(id: string): number {
  return `NATS/1.0\r\nNats-Msg-Id: ${id}\r\n\r\n`.length;
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
  if (maxMsgSize >= 0 && total > maxMsgSize) return `stream ${core.s.names.stream} takes messages of at most ${maxMsgSize} bytes (max_msg_size)`;
  return undefined;
}

/** The producing handle. Any number of producers, in any number of processes, may push at once. */
export class JetStreamProducer<T = Uint8Array> {
  readonly #core: JetStreamCore;

  /** @internal */
  constructor(core: JetStreamCore) {
    this.#core = core;
  }

  /**
   * Store one item. Resolves with its seq (the stream sequence) once the server acknowledged the
   * publish: stored under the stream's replication (a quorum of its replicas). A publish whose
   * answer does not come within the timeout rejects with `ERR_STORE`; it may have been stored.
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

  /**
   * Publish each payload; with `keys`, each under its key's message id, so that the server drops
   * a key it has seen within its duplicate window and answers with the seq it stored the first
   * time (README, "A JetStream queue": idempotency keys). A key whose item was acked is looked up
   * in the key stream first (see keys.ts): the queue stream forgets it when the server restarts.
   * A key repeated within the batch is published once and its later payloads get the first
   * one's seq: a replicated stream refuses a message id while the first message under it is
   * still being stored. `single`: for `push`.
   */
  #publish(payloads: Iterable<PushValue<T>>, options: PushOptions | undefined, single: boolean): Promise<number[]> {
    let list: Uint8Array[];
    let signal: AbortSignal | undefined;
    let keys: string[] | undefined;
    let ids: string[] | undefined;
    try {
      ({ signal, keys } = pushSettings(options, single));
      if (payloads === null || typeof payloads !== 'object' || typeof (payloads as Iterable<unknown>)[Symbol.iterator] !== 'function') {
        throw new TypeError(expectation('payloads', 'an iterable of values', payloads));
      }
      list = [];
      let i = 0;
      for (const p of payloads) list.push(bytesOf(this.#core, `payloads[${i++}]`, p));
      if (keys !== undefined && keys.length !== list.length) {
        throw new RangeError(expectation('options.keys', `an array of ${list.length} keys, one per payload`, keys));
      }
      ids = keys?.map(keyMessageId);
    } catch (error) {
      return Promise.reject(error);
    }
    const error = this.#core.operationalError();
    if (error) return Promise.reject(error);
    if (signal?.aborted) return Promise.reject(signal.reason);
    for (let i = 0; i < list.length; i++) {
      const why = tooLarge(this.#core, list[i]!.length, ids === undefined ? 0 : headerBytes(ids[i]!));
      if (why !== undefined) {
        const which = single ? 'The payload' : `payloads[${i}]`;
        return Promise.reject(new QueueError('ERR_TOO_LARGE', `${which} is ${list[i]!.length} bytes: ${why}; nothing was stored`));
      }
    }
    const core = this.#core;
    const { names } = core.s;
    const counters = core.counters;
    counters.pendingPushes += list.length;
    const stored = (seq: number, duplicate: boolean): number => {
      // A duplicate stored nothing: the server answers with the seq of the first publish.
      if (!duplicate) counters.pushed++;
      return seq;
    };
    let all: Promise<number[]>;
    if (ids === undefined) {
      all = Promise.all(
        list.map((bytes) =>
          core.publish(names.subject, bytes).then(
            (ack) => stored(ack.seq, ack.duplicate),
            (cause: unknown) => {
              throw publishError('the push', cause);
            },
          ),
        ),
      );
    } else {
      const firstOf = firstIndexes(ids);
      const publishes: Promise<number>[] = [];
      list.forEach((bytes, i) => {
        const first = firstOf[i]!;
        if (first !== i) {
          publishes.push(publishes[first]!);
          return;
        }
        publishes.push(this.#publishKeyed(bytes, ids![i]!, stored));
      });
      all = Promise.all(publishes);
    }
    return core.track(
      all.finally(() => {
        counters.pendingPushes -= list.length;
      }),
    );
  }

  /** Publish one payload under a key's message id, unless the key stream remembers the key. */
  async #publishKeyed(bytes: Uint8Array, id: string, stored: (seq: number, duplicate: boolean) => number): Promise<number> {
    const core = this.#core;
    const known = await core.api('the look-up of an idempotency key (nothing was stored)', () => core.s.keys.seqOf(id));
    if (known !== undefined) return known;
    try {
      const ack = await core.publish(core.s.names.subject, bytes, id);
      return stored(ack.seq, ack.duplicate);
    } catch (cause) {
      throw publishError('the push', cause);
    }
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

interface Waiter<T> {
  readonly leaseMs: number;
  resolve(item: JetStreamReserved<T> | null): void;
  fail(error: unknown): void;
}

const isReserved = (item: unknown): boolean => item instanceof JetStreamReserved;

/** A message a cancelled pull brought after its reserve stopped waiting, held for the next one. */
interface Stray {
  readonly delivery: Delivery;
  /** In-progress replies: the server's ack wait must not run out while it is held. */
  readonly keepAlive: ReturnType<typeof setInterval>;
  /** Past it, the message goes back to the queue for any consumer. */
  readonly giveUp: ReturnType<typeof setTimeout>;
}

/** The consuming handle. Consumers in any number of processes compete for the same items. */
export class JetStreamConsumer<T = Uint8Array> {
  readonly #core: JetStreamCore;
  readonly #puller: Puller;
  readonly #waiters: Waiter<T>[] = [];
  /** Messages that came when nobody waited; there are none while a reserve waits. */
  readonly #strays: Stray[] = [];
  /** The reservations this consumer holds. @internal */
  readonly held = new Set<JetStreamReserved<T>>();
  #closed = false;
  readonly #root: boolean;
  /** The dead-letter stream: list, count, redrive, purge. */
  readonly deadLetters: JetStreamDeadLetters;

  /** @internal */
  constructor(core: JetStreamCore, root: boolean) {
    this.#core = core;
    this.#root = root;
    this.deadLetters = new JetStreamDeadLetters(core);
    const s = core.s;
    this.#puller = new Puller({
      nc: s.nc,
      watch: s.watch,
      requester: s.requester,
      apiPrefix: s.apiPrefix,
      stream: s.names.stream,
      consumer: s.names.consumer,
      expiresMs: s.pullExpiresMs,
      timeoutMs: s.timeoutMs,
      deliver: (delivery) => this.#deliver(delivery),
    });
    core.consumers.add(this);
  }

  get closed(): boolean {
    return this.#closed || this.#core.closed;
  }

  /** Another consumer of the same queue, with its own pulls and reservations. */
  fork(): JetStreamConsumer<T> {
    const error = this.#core.operationalError();
    if (error) throw error;
    return new JetStreamConsumer<T>(this.#core, false);
  }

  /**
   * The item, if it may be handed out: undefined when it had its `maxDeliveries` or fails to
   * decode, and is being moved into the dead letters instead.
   */
  #accept(delivery: Delivery, leaseMs: number): JetStreamReserved<T> | undefined {
    const core = this.#core;
    const { deliveries, streamSeq } = delivery.info;
    const max = core.s.maxDeliveries;
    if (deliveries > max) {
      // Not handed out: its last delivery time stays the one before.
      const reason = core.lastError(streamSeq) ?? `handed out ${max} times (maxDeliveries ${max})`;
      core.moveToDeadLetters(delivery, deliveries - 1, reason).catch(() => {});
      return undefined;
    }
    core.saw(streamSeq, deliveries);
    const item = new JetStreamReserved<T>(core, this, delivery, leaseMs);
    const codec = core.s.codec;
    if (!isRaw(codec)) {
      const reason = item.decode();
      if (reason !== undefined) {
        core.moveToDeadLetters(delivery, deliveries, reason).catch(() => {});
        return undefined;
      }
    }
    this.held.add(item);
    item.startLease();
    return item;
  }

  #deliver(delivery: Delivery): void {
    if (this.closed) {
      // Closed meanwhile: it goes back at once.
      delivery.nak(0).catch(() => {});
      return;
    }
    const waiter = this.#waiters.shift();
    if (waiter === undefined) {
      this.#hold(delivery);
      return;
    }
    try {
      const item = this.#accept(delivery, waiter.leaseMs);
      // Moved into the dead letters: the waiter waits on.
      if (item === undefined) this.#waiters.unshift(waiter);
      else waiter.resolve(item);
    } catch (error) {
      // The codec cannot work (a schema answering asynchronously): the item goes back.
      delivery.nak(0).catch(() => {});
      waiter.fail(error);
    }
    this.#puller.want(this.#waiters.length);
  }

  /**
   * Keep a message nobody waits for (its reserve was aborted while the pull that brings it was
   * on its way) for the next reserve, rather than return it at once: a nak would count a
   * delivery that no handler saw, and the server could hand it straight back to a request still
   * open, a loop that ends in the dead letters. It is held at most one pull's expiry
   * (`pullExpiresMs`), so that a consumer nobody uses any more does not keep it from the others.
   */
  #hold(delivery: Delivery): void {
    const { ackWaitMs, pullExpiresMs } = this.#core.s;
    const keepAlive = setInterval(() => delivery.working(), Math.max(1, ackWaitMs / 2));
    keepAlive.unref();
    const giveUp = setTimeout(() => {
      const i = this.#strays.findIndex((stray) => stray.delivery === delivery);
      if (i < 0) return;
      this.#strays.splice(i, 1);
      clearInterval(keepAlive);
      delivery.nak(0).catch(() => {});
    }, pullExpiresMs);
    giveUp.unref();
    this.#strays.push({ delivery, keepAlive, giveUp });
  }

  /** The next held message that may be handed out, as an item; undefined when none is held. */
  #takeStray(leaseMs: number): JetStreamReserved<T> | undefined {
    for (let stray = this.#strays.shift(); stray !== undefined; stray = this.#strays.shift()) {
      clearInterval(stray.keepAlive);
      clearTimeout(stray.giveUp);
      let item: JetStreamReserved<T> | undefined;
      try {
        item = this.#accept(stray.delivery, leaseMs);
      } catch (error) {
        // The codec cannot work (a schema answering asynchronously): the item goes back.
        stray.delivery.nak(0).catch(() => {});
        throw error;
      }
      if (item !== undefined) return item;
    }
    return undefined;
  }

  /** Wait for the next item; resolves `null` once the queue (or this fork) is closed. @internal */
  take(signal: AbortSignal | undefined, leaseMs: number): Promise<JetStreamReserved<T> | null> {
    const error = this.#core.operationalError();
    if (error) return error.code === 'ERR_CLOSED' ? Promise.resolve(null) : Promise.reject(error);
    if (this.#closed) return Promise.resolve(null);
    if (signal?.aborted) return Promise.reject(signal.reason);
    try {
      const stray = this.#takeStray(leaseMs);
      if (stray !== undefined) return Promise.resolve(stray);
    } catch (error) {
      return Promise.reject(error);
    }
    return new Promise((resolve, reject) => {
      const waiter: Waiter<T> = {
        leaseMs,
        resolve: (item) => {
          signal?.removeEventListener('abort', onAbort);
          resolve(item);
        },
        fail: (e) => {
          remove();
          reject(e);
        },
      };
      const remove = (): void => {
        const i = this.#waiters.indexOf(waiter);
        if (i >= 0) this.#waiters.splice(i, 1);
        signal?.removeEventListener('abort', onAbort);
        this.#puller.want(this.#waiters.length);
      };
      const onAbort = (): void => {
        remove();
        reject(signal!.reason);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#waiters.push(waiter);
      this.#puller.want(this.#waiters.length);
    });
  }

  /** Wait for the next item; resolves `null` once the queue is closed, rejects with `ERR_STORE_FAILED` once the connection closed under it. */
  reserve(options?: ReserveOptions): Promise<JetStreamReserved<T> | null> {
    let signal: AbortSignal | undefined;
    let leaseMs: number;
    try {
      const o = optionsObject('options', options);
      knownKeys('options', o, ['signal', 'leaseMs']);
      signal = optionalSignal('options.signal', o.signal);
      leaseMs = o.leaseMs === undefined ? this.#core.s.leaseMs : leaseLength('options.leaseMs', o.leaseMs, true);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.take(signal, leaseMs);
  }

  /**
   * The next item if the server has one ready now, else `null`. Unlike the embedded queue's, it
   * cannot answer synchronously: it asks the server once (a pull that does not wait) and
   * resolves with its answer. While the connection is down it waits for it, up to `timeoutMs`;
   * when no answer comes it rejects with `ERR_STORE` (it never resolves `null` for a server it
   * could not ask).
   */
  async tryReserve(): Promise<JetStreamReserved<T> | null> {
    const error = this.#core.operationalError();
    if (error) {
      if (error.code === 'ERR_CLOSED') return null;
      throw error;
    }
    if (this.#closed) return null;
    const stray = this.#takeStray(this.#core.s.leaseMs);
    if (stray !== undefined) return stray;
    for (;;) {
      let delivery;
      try {
        delivery = await this.#puller.tryOne();
      } catch (cause) {
        // No answer is not "empty": the caller must not take it for an empty queue.
        throw unanswered('tryReserve()', cause);
      }
      if (delivery === null) return null;
      if (this.closed) {
        await delivery.nak(0).catch(() => {});
        return null;
      }
      let item: JetStreamReserved<T> | undefined;
      try {
        item = this.#accept(delivery, this.#core.s.leaseMs);
      } catch (error) {
        // The codec cannot work (a schema answering asynchronously): the item goes back.
        delivery.nak(0).catch(() => {});
        throw error;
      }
      if (item !== undefined) return item;
    }
  }

  /**
   * Up to `n` items: waits for the first as `reserve()` does, then takes those the server has
   * ready (pulls that do not wait), and those that come within `waitMs` (on the queue's clock)
   * while fewer than `n` are in hand. Resolves `[]` once the queue is closed.
   */
  async reserveMany(n: number, options?: ReserveManyOptions): Promise<JetStreamReserved<T>[]> {
    let signal: AbortSignal | undefined;
    let waitMs: number;
    let leaseMs: number;
    try {
      positiveInteger('n', n);
      const o = optionsObject('options', options);
      knownKeys('options', o, ['signal', 'waitMs', 'leaseMs']);
      signal = optionalSignal('options.signal', o.signal);
      waitMs = o.waitMs === undefined ? 0 : delayMs('options.waitMs', o.waitMs);
      leaseMs = o.leaseMs === undefined ? this.#core.s.leaseMs : leaseLength('options.leaseMs', o.leaseMs, true);
    } catch (error) {
      return Promise.reject(error);
    }
    const first = await this.take(signal, leaseMs);
    if (first === null) return [];
    const items = [first];
    try {
      await this.#fill(items, n, leaseMs);
      if (items.length < n && waitMs > 0 && !signal?.aborted) {
        const time = this.#core.s.time;
        const stop = new AbortController();
        const end = (): void => stop.abort();
        const timer = time.setTimeout(end, waitMs);
        signal?.addEventListener('abort', end, { once: true });
        try {
          while (items.length < n && !stop.signal.aborted) {
            const item = await this.take(stop.signal, leaseMs).catch(() => null);
            if (item === null) break;
            items.push(item);
            await this.#fill(items, n, leaseMs);
          }
        } finally {
          time.clearTimeout(timer);
          signal?.removeEventListener('abort', end);
        }
      }
    } catch (error) {
      // A codec that cannot work: the items in hand go back before the error goes on.
      await Promise.allSettled(items.map((item) => item.giveBack()));
      throw error;
    }
    return items.filter((item) => !item.settled);
  }

  /** Take what the server has ready now, until `items` holds `n`. */
  async #fill(items: JetStreamReserved<T>[], n: number, leaseMs: number): Promise<void> {
    while (items.length < n && !this.closed) {
      // The server gone in between: the batch is what is in hand.
      const deliveries = await this.#puller.tryMany(n - items.length).catch(() => []);
      if (deliveries.length === 0) return;
      for (let i = 0; i < deliveries.length; i++) {
        const delivery = deliveries[i]!;
        if (this.closed) {
          delivery.nak(0).catch(() => {});
          continue;
        }
        let item: JetStreamReserved<T> | undefined;
        try {
          item = this.#accept(delivery, leaseMs);
        } catch (error) {
          for (const rest of deliveries.slice(i)) rest.nak(0).catch(() => {});
          throw error;
        }
        if (item !== undefined) items.push(item);
      }
    }
  }

  /** Ack every item, or none: one that may no longer be settled makes the call reject with its error, before any is acked. */
  ackMany(items: JetStreamReserved<T>[]): Promise<void> {
    return settleAll(items as never, isReserved, (item) => (item as unknown as JetStreamReserved<T>).ack());
  }

  /** Nack every item (as `item.nack(options)`), or none, as `ackMany` does. */
  nackMany(items: JetStreamReserved<T>[], options?: NackOptions): Promise<void> {
    return settleAll(items as never, isReserved, (item) => (item as unknown as JetStreamReserved<T>).nack(options));
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<JetStreamReserved<T>, void, undefined> {
    for (;;) {
      const item = await this.take(undefined, this.#core.s.leaseMs);
      if (item === null) return;
      yield item;
    }
  }

  /**
   * Run `handler` on each item, up to `concurrency` at once: ack when it resolves; when it throws
   * (or runs past `timeoutMs`), report to `onError` and nak the item with the delay of the retry
   * policy, or move it into the dead letters once it had its `maxDeliveries`. Resolves once
   * `signal` aborts and the running handlers have settled, or once the queue is closed; rejects
   * with `ERR_STORE_FAILED` once the running handlers have settled if the connection closed under
   * the queue.
   */
  process(handler: JetStreamProcessHandler<T>, options?: JetStreamProcessOptions): Promise<void> {
    let settings;
    try {
      if (typeof handler !== 'function') throw new TypeError(expectation('handler', 'a function', handler));
      settings = processOptions(options);
    } catch (error) {
      return Promise.reject(error);
    }
    return runProcess(this.#core, this as JetStreamConsumer<unknown>, handler as JetStreamProcessHandler<unknown>, settings);
  }

  stats(): Promise<JetStreamQueueStats> {
    return queueStats(this.#core, this as JetStreamConsumer<unknown>);
  }

  /** @internal */
  pullsLost(): void {
    this.#puller.reset();
  }

  /** Close this consumer's pulls, return what it holds; waiting reserves reject with `failure` if given, else resolve null. @internal */
  async closeNow(failure?: QueueError): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#core.consumers.delete(this);
    this.#puller.close();
    for (const stray of this.#strays.splice(0)) {
      clearInterval(stray.keepAlive);
      clearTimeout(stray.giveUp);
      stray.delivery.nak(0).catch(() => {});
    }
    for (const waiter of this.#waiters.splice(0)) {
      if (failure === undefined) waiter.resolve(null);
      else waiter.fail(failure);
    }
    const held = [...this.held];
    this.held.clear();
    await Promise.allSettled(held.map((item) => item.giveBack()));
  }

  /**
   * Close the queue (every handle). On a consumer made by `fork()`, close that consumer only:
   * its items go back to the queue, which stays open. The connection stays open either way.
   */
  close(): Promise<void> {
    return this.#root ? this.#core.close() : this.closeNow();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}
