// The handles of a JetStream queue: JetStreamProducer, JetStreamConsumer and JetStreamReserved,
// with the calls and the argument checks of the embedded Producer, Consumer and Reserved.
// Where the server decides (order, delivery counts, the ack wait, delays) it does so here too;
// leases and the counters are kept in this process.
import { AsyncSchemaError, encodeValue, isRaw } from '../codec.js';
import { QueueError } from '../errors.js';
import { leaseLength } from '../queue/leases.js';
import { delayMs } from '../queue/retry.js';
import { errorMessage } from '../queue/deliveries.js';
import type { PushValue } from '../queue/handles.js';
import type { HandlerContext, NackOptions, PushOptions, ReserveOptions } from '../queue/types.js';
import { expectation, knownKeys, optionalSignal, optionsObject } from '../validate.js';
import type { JetStreamCore } from './core.js';
import { JetStreamDeadLetters } from './dead-letters.js';
import type { Delivery } from './message.js';
import { Puller } from './puller.js';
import { type JetStreamProcessHandler, type JetStreamProcessOptions, processOptions, runProcess } from './process.js';

const encoder = new TextEncoder();

/** What {@link JetStreamConsumer.stats} tells: the server's counts, and this process's counters. */
export interface JetStreamQueueStats {
  /** Messages the consumer has not delivered yet (the server's `num_pending`). */
  ready: number;
  /** Delivered and not yet acked, by any process (the server's `num_ack_pending`). */
  inFlight: number;
  /** Redelivered and not yet acked, by any process (the server's `num_redelivered`). */
  redeliveries: number;
  /** Messages the queue stream holds (ready, in flight, and waiting for a nack delay). */
  streamMessages: number;
  /** Dead letters the dead-letter stream holds. */
  deadLetters: number;
  /** Reservations this process holds. */
  held: number;
  /** Of those, reservations with a lease running. */
  leased: number;
  /** Pushes this process issued and the server has not confirmed yet. */
  pendingPushes: number;
  /** Acks this process issued and the server has not confirmed yet. */
  pendingAcks: number;
  closed: boolean;
  /** Counters of this process since `open()`, as the embedded queue's: */
  pushed: number;
  acked: number;
  nacked: number;
  redelivered: number;
  retried: number;
  deadLettered: number;
  leaseExpired: number;
}

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

/** The push options: those of the embedded queue, of which a JetStream stream keeps no schedule. */
function pushSignal(options: PushOptions | undefined): AbortSignal | undefined {
  const o = optionsObject('options', options);
  knownKeys('options', o, ['signal', 'priority', 'delayMs', 'notBefore']);
  const signal = optionalSignal('options.signal', o.signal);
  for (const key of ['priority', 'delayMs', 'notBefore'] as const) {
    if (o[key] !== undefined) throw new QueueError('ERR_UNSUPPORTED', `A JetStream queue keeps no ${key}: the stream delivers in the order it stored`);
  }
  return signal;
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
    return this.pushMany([payload], options).then((seqs) => seqs[0]!);
  }

  /**
   * Store a batch; resolves with the seqs in order. The items are published one by one, all at
   * once: the batch is not atomic, and a failure rejects with the first error, the others stored.
   */
  pushMany(payloads: Iterable<PushValue<T>>, options?: PushOptions): Promise<number[]> {
    let list: Uint8Array[];
    let signal: AbortSignal | undefined;
    try {
      signal = pushSignal(options);
      if (payloads === null || typeof payloads !== 'object' || typeof (payloads as Iterable<unknown>)[Symbol.iterator] !== 'function') {
        throw new TypeError(expectation('payloads', 'an iterable of values', payloads));
      }
      list = [];
      let i = 0;
      for (const p of payloads) list.push(bytesOf(this.#core, `payloads[${i++}]`, p));
    } catch (error) {
      return Promise.reject(error);
    }
    const error = this.#core.operationalError();
    if (error) return Promise.reject(error);
    if (signal?.aborted) return Promise.reject(signal.reason);
    const { js, names, timeoutMs } = this.#core.s;
    const counters = this.#core.counters;
    counters.pendingPushes += list.length;
    const all = Promise.all(
      list.map((bytes) =>
        js.publish(names.subject, bytes, { timeout: timeoutMs }).then(
          (ack) => {
            counters.pushed++;
            return ack.seq;
          },
          (cause: unknown) => {
            throw new QueueError('ERR_STORE', `The server did not confirm the publish: ${errorMessage(cause)}; the item may or may not be stored`, { cause });
          },
        ),
      ),
    ).finally(() => {
      counters.pendingPushes -= list.length;
    });
    return this.#core.track(all);
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

/** The consuming handle. Consumers in any number of processes compete for the same items. */
export class JetStreamConsumer<T = Uint8Array> {
  readonly #core: JetStreamCore;
  readonly #puller: Puller;
  readonly #waiters: Waiter<T>[] = [];
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
    const waiter = this.#waiters.shift();
    this.#puller.want(this.#waiters.length);
    if (waiter === undefined || this.closed) {
      // Nobody waits any more (an abort, a close): it goes back at once.
      delivery.nak(0).catch(() => {});
      return;
    }
    let item: JetStreamReserved<T> | undefined;
    try {
      item = this.#accept(delivery, waiter.leaseMs);
    } catch (error) {
      // The codec cannot work (a schema answering asynchronously): the item goes back.
      delivery.nak(0).catch(() => {});
      waiter.fail(error);
      return;
    }
    if (item !== undefined) {
      waiter.resolve(item);
      return;
    }
    // Moved into the dead letters: the waiter waits on.
    this.#waiters.unshift(waiter);
    this.#puller.want(this.#waiters.length);
  }

  /** Wait for the next item; resolves `null` once the queue (or this fork) is closed. @internal */
  take(signal: AbortSignal | undefined, leaseMs: number): Promise<JetStreamReserved<T> | null> {
    const error = this.#core.operationalError();
    if (error) return error.code === 'ERR_CLOSED' ? Promise.resolve(null) : Promise.reject(error);
    if (this.#closed) return Promise.resolve(null);
    if (signal?.aborted) return Promise.reject(signal.reason);
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

  /** Wait for the next item; resolves `null` once the queue is closed. */
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
   * resolves with its answer.
   */
  async tryReserve(): Promise<JetStreamReserved<T> | null> {
    const error = this.#core.operationalError();
    if (error) {
      if (error.code === 'ERR_CLOSED') return null;
      throw error;
    }
    if (this.#closed) return null;
    for (;;) {
      const delivery = await this.#puller.tryOne();
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
   * `signal` aborts and the running handlers have settled, or once the queue is closed.
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

  /** Close this consumer's pulls, return what it holds. @internal */
  async closeNow(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#core.consumers.delete(this);
    this.#puller.close();
    for (const waiter of this.#waiters.splice(0)) waiter.resolve(null);
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

/** A reserved item: ack it to remove it, nack it to have it delivered again. */
export class JetStreamReserved<T = Uint8Array> {
  readonly #core: JetStreamCore;
  readonly #consumer: JetStreamConsumer<T>;
  readonly #delivery: Delivery;
  #value: unknown;
  #settled = false;
  #expired = false;
  #leaseMs: number;
  #dueMs = Infinity;
  #leaseTimer: unknown;
  #keepAlive: ReturnType<typeof setInterval> | undefined;
  #onExpire: ((error: QueueError) => void) | undefined;

  /** @internal */
  constructor(core: JetStreamCore, consumer: JetStreamConsumer<T>, delivery: Delivery, leaseMs: number) {
    this.#core = core;
    this.#consumer = consumer;
    this.#delivery = delivery;
    this.#leaseMs = leaseMs;
  }

  /** The stream sequence: stable across redeliveries, unique in the stream. Dedupe on it. */
  get seq(): number {
    return this.#delivery.info.streamSeq;
  }

  /** 1 on first delivery, +1 on each redelivery, as the server counts them (every process's). */
  get deliveries(): number {
    return this.#delivery.info.deliveries;
  }

  /** The payload as pushed. */
  get bytes(): Uint8Array {
    return this.#delivery.bytes;
  }

  /** The value, decoded by the queue's codec; the payload bytes for a byte queue. */
  get value(): T {
    return (isRaw(this.#core.s.codec) ? this.#delivery.bytes : this.#value) as T;
  }

  /** True once acked, nacked, dead-lettered, returned by close, or once its lease ran out. */
  get settled(): boolean {
    return this.#settled || this.#expired || this.#core.closed || this.#consumer.closed;
  }

  /** When the lease runs out, in ms since the epoch; Infinity without a lease. */
  get leaseExpiresAt(): number {
    if (this.#dueMs === Infinity) return Infinity;
    const time = this.#core.s.time;
    return time.wallNow() + (this.#dueMs - time.monoNow());
  }

  /** @internal */
  get leaseMs(): number {
    return this.#leaseMs;
  }

  /** @internal */
  get leaseExpired(): boolean {
    return this.#expired;
  }

  /** @internal */
  onLeaseExpired(callback: ((error: QueueError) => void) | undefined): void {
    this.#onExpire = callback;
  }

  /** Decode the payload; the reason it could not be, or undefined. @internal */
  decode(): string | undefined {
    const codec = this.#core.s.codec;
    try {
      this.#value = codec.decode(this.#delivery.bytes);
      return undefined;
    } catch (error) {
      if (error instanceof AsyncSchemaError) throw error;
      const message = (error as Error)?.message ?? String(error);
      return error instanceof QueueError && error.code === 'ERR_INVALID' ? `${codec.name}: ${message}` : `${codec.name} could not decode the payload: ${message}`;
    }
  }

  /**
   * Start the lease and keep the server's ack wait from running out while this process holds
   * the item: an in-progress reply every half ack wait. If the process dies, the replies stop and
   * the server delivers the item again after its ack wait. @internal
   */
  startLease(): void {
    const { time, ackWaitMs } = this.#core.s;
    this.#keepAlive = setInterval(() => this.#delivery.working(), Math.max(1, ackWaitMs / 2));
    this.#keepAlive.unref();
    this.#arm(time.monoNow() + this.#leaseMs);
  }

  #arm(dueMs: number): void {
    const time = this.#core.s.time;
    if (this.#leaseTimer !== undefined) time.clearTimeout(this.#leaseTimer);
    this.#leaseTimer = undefined;
    this.#dueMs = dueMs;
    if (dueMs === Infinity) return;
    this.#leaseTimer = time.setTimeout(() => this.#expire(), dueMs - time.monoNow());
    (this.#leaseTimer as { unref?: () => void } | null)?.unref?.();
  }

  #stopTimers(): void {
    if (this.#keepAlive !== undefined) clearInterval(this.#keepAlive);
    this.#keepAlive = undefined;
    if (this.#leaseTimer !== undefined) this.#core.s.time.clearTimeout(this.#leaseTimer);
    this.#leaseTimer = undefined;
  }

  #expire(): void {
    this.#leaseTimer = undefined;
    if (this.#settled || this.#expired) return;
    this.#expired = true;
    this.#stopTimers();
    this.#consumer.held.delete(this);
    this.#core.counters.leaseExpired++;
    // Back to the queue now, as the embedded queue returns it, not after the server's ack wait.
    this.#delivery.nak(0).catch(() => {});
    this.#onExpire?.(new QueueError('ERR_LEASE_EXPIRED', `The lease of item ${this.seq} ran out: it was returned to the queue`));
  }

  /** Why this reservation may not be settled now, or undefined. */
  #refusal(): QueueError | undefined {
    const error = this.#core.operationalError();
    if (error) return error;
    if (this.#consumer.closed) return new QueueError('ERR_CLOSED', 'The consumer is closed: its items went back to the queue');
    if (this.#expired) return new QueueError('ERR_LEASE_EXPIRED', `The lease of item ${this.seq} ran out: it was returned to the queue`);
    if (this.#settled) return new QueueError('ERR_ALREADY_SETTLED', `Item ${this.seq} was already settled`);
    return undefined;
  }

  #settle(): QueueError | undefined {
    const refused = this.#refusal();
    if (refused) return refused;
    this.#settled = true;
    this.#stopTimers();
    this.#consumer.held.delete(this);
    return undefined;
  }

  /** Remove the item. Resolves once the server confirmed the ack (it no longer holds the item). */
  ack(): Promise<void> {
    const refused = this.#settle();
    if (refused) return Promise.reject(refused);
    const counters = this.#core.counters;
    counters.pendingAcks++;
    const done = this.#delivery.ackAck().then(
      () => {
        counters.pendingAcks--;
        counters.acked++;
        this.#core.forget(this.seq);
      },
      (cause: unknown) => {
        counters.pendingAcks--;
        throw new QueueError('ERR_STORE', `The server did not confirm the ack of item ${this.seq}: ${errorMessage(cause)}; it may be delivered again`, { cause });
      },
    );
    return this.#core.track(done);
  }

  /** Return the item, delivered again at once or, with `delayMs`, once that time has passed (the server's clock). */
  nack(options?: NackOptions): Promise<void> {
    let delay = 0;
    try {
      const o = optionsObject('options', options);
      knownKeys('options', o, ['delayMs']);
      if (o.delayMs !== undefined) delay = delayMs('options.delayMs', o.delayMs);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.retryAfter(delay, false);
  }

  /** @internal */
  retryAfter(delay: number, retried: boolean): Promise<void> {
    const refused = this.#settle();
    if (refused) return Promise.reject(refused);
    this.#core.counters.nacked++;
    if (retried) this.#core.counters.retried++;
    return this.#core.track(this.#delivery.nak(delay));
  }

  /** Renew the lease: it runs out `ms` from now (default: the reservation's lease length). */
  extend(ms?: number): Promise<void> {
    let lengthMs: number | undefined;
    try {
      if (ms !== undefined) lengthMs = leaseLength('ms', ms, false);
    } catch (error) {
      return Promise.reject(error);
    }
    const refused = this.#refusal();
    if (refused) return Promise.reject(refused);
    if (lengthMs !== undefined) this.#leaseMs = lengthMs;
    this.#delivery.working();
    this.#arm(this.#core.s.time.monoNow() + this.#leaseMs);
    return Promise.resolve();
  }

  /** Move the item into the dead-letter stream with `reason`, instead of acking it. */
  deadLetter(reason?: string): Promise<void> {
    if (reason !== undefined && typeof reason !== 'string') return Promise.reject(new TypeError(expectation('reason', 'a string', reason)));
    const refused = this.#settle();
    if (refused) return Promise.reject(refused);
    return this.#core.moveToDeadLetters(this.#delivery, this.deliveries, reason ?? 'dead-lettered by the consumer');
  }

  /** @internal */
  noteError(error: unknown): void {
    this.#core.noteError(this.seq, errorMessage(error));
  }

  /** Returned by a close: back to the queue at once. @internal */
  giveBack(): Promise<void> {
    if (this.#settled || this.#expired) return Promise.resolve();
    this.#settled = true;
    this.#stopTimers();
    return this.#delivery.nak(0);
  }

  /** Nack the item if it is still unsettled (for `await using`). */
  async [Symbol.asyncDispose](): Promise<void> {
    if (this.settled) return;
    await this.nack();
  }
}

/** The server's counts and this process's counters. */
async function queueStats(core: JetStreamCore, consumer: JetStreamConsumer<unknown> | undefined): Promise<JetStreamQueueStats> {
  const c = core.counters;
  let held = 0;
  let leased = 0;
  for (const x of consumer === undefined ? [] : [consumer]) {
    held += x.held.size;
    for (const item of x.held) if (item.leaseMs !== Infinity) leased++;
  }
  const local = {
    held,
    leased,
    pendingPushes: c.pendingPushes,
    pendingAcks: c.pendingAcks,
    closed: core.closed,
    pushed: c.pushed,
    acked: c.acked,
    nacked: c.nacked,
    redelivered: c.redelivered,
    retried: c.retried,
    deadLettered: c.deadLettered,
    leaseExpired: c.leaseExpired,
  };
  const error = core.operationalError();
  if (error) return { ready: 0, inFlight: 0, redeliveries: 0, streamMessages: 0, deadLetters: 0, ...local };
  const { jsm, names } = core.s;
  const [info, stream, dead] = await Promise.all([jsm.consumers.info(names.stream, names.consumer), jsm.streams.info(names.stream), jsm.streams.info(names.deadLetterStream)]);
  return {
    ready: info.num_pending,
    inFlight: info.num_ack_pending,
    redeliveries: info.num_redelivered,
    streamMessages: stream.state.messages,
    deadLetters: dead.state.messages,
    ...local,
  };
}

export type { HandlerContext };
