// The consuming handle of a JetStream queue, JetStreamConsumer (JetStreamProducer is in
// producer.ts, JetStreamReserved in reserved.ts), with the calls and the argument checks of the
// embedded Consumer. The server decides order, delivery counts, the ack wait and delays; this
// process keeps its waiting reserves, its reservations and its counters.
import type { QueueConsumer } from '../../api/handles.js';
import { gatherWithin } from '../../api/worker-pool.js';
import { isRaw } from '../../lib/codec.js';
import { QueueError } from '../../contract/errors.js';
import { leaseLength } from '../../core/leases.js';
import { settleAll } from '../../core/batches.js';
import { delayMs } from '../../core/retry.js';
import type { NackOptions, ReserveManyOptions, ReserveOptions } from '../../api/types.js';
import { expectation, knownKeys, optionalSignal, optionsObject, positiveInteger } from '../../lib/validate.js';
import { type JetStreamCore, unanswered } from './core.js';
import { JetStreamDeadLetters } from './dead-letters.js';
import type { Delivery } from './message.js';
import { Puller } from './puller.js';
import { type JetStreamProcessHandler, type JetStreamProcessOptions, processOptions, runProcess } from './process.js';
import { unsupportedFlow } from './producer.js';
import { JetStreamReserved } from './reserved.js';
import { type JetStreamQueueStats, queueStats } from './stats.js';

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
export class JetStreamConsumer<T = Uint8Array> implements QueueConsumer<T, JetStreamReserved<T>> {
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
    // A process that consumes moves delayed items as they fall due (a producer alone does not).
    this.#core.mover.start();
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
      knownKeys('options', o, ['signal', 'leaseMs', 'groupConcurrency']);
      if (o.groupConcurrency !== undefined) throw new QueueError('ERR_UNSUPPORTED', unsupportedFlow.group);
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
    this.#core.mover.start();
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
      knownKeys('options', o, ['signal', 'waitMs', 'leaseMs', 'groupConcurrency']);
      if (o.groupConcurrency !== undefined) throw new QueueError('ERR_UNSUPPORTED', unsupportedFlow.group);
      signal = optionalSignal('options.signal', o.signal);
      waitMs = o.waitMs === undefined ? 0 : delayMs('options.waitMs', o.waitMs);
      leaseMs = o.leaseMs === undefined ? this.#core.s.leaseMs : leaseLength('options.leaseMs', o.leaseMs, true);
    } catch (error) {
      return Promise.reject(error);
    }
    const first = await this.take(signal, leaseMs);
    if (first === null) return [];
    const items = [first];
    // The takes that wait for the next item listen on it: the end of the wait aborts them.
    const waiting = new AbortController();
    await gatherWithin(items, n, waitMs, this.#core.s.time, signal, () => false, {
      takeReady: (into, size) => this.#fill(into, size, leaseMs),
      next: () => this.take(waiting.signal, leaseMs).catch(() => null),
      end: () => waiting.abort(),
      // A codec that cannot work: the items in hand go back before the error goes on.
      giveBack: (held) => Promise.allSettled(held.map((item) => item.giveBack())),
    });
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
