/**
 * Store-and-forward: drain a local durable queue into a NATS JetStream stream.
 *
 * Each item is published with the message id `<origin>:<seq>`, where the origin is the local
 * store's identity (`stats().storeId`, created with the store) unless the caller names one. The
 * local ack happens only once the server has acknowledged the publish, so a forwarder that dies
 * in between publishes the item again after a restart, under the same id, and JetStream drops it
 * as a duplicate within the stream's duplicate window. Seqs alone would not do: they start again
 * at 1 in a store deleted and created again, and the new items would be dropped as duplicates of
 * the old ones. See docs/guides/scaling-out.md, "Store-and-forward", and docs/internals/jetstream.md, "Store-and-forward".
 *
 * While the server cannot be reached the forwarder keeps the items it holds and publishes them
 * again after a bounded, jittered backoff; the local queue goes on taking pushes meanwhile, from
 * the start when the connection is still being made (an edge device that boots offline). Items
 * are never nacked for a failed publish (that would count deliveries toward `maxDeliveries` while
 * the network is down); they go back to the queue only when the forwarder stops. The connection
 * itself, its reports and the stream set up on it are `forward-link.ts`'s.
 */
import type { JetStreamOptions, PubAck } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { isQueueError, QueueError } from '../../contract/errors.js';
import { Consumer, type Reserved } from '../../core/handles.js';
import { type Clock, checkClock } from '../../lib/clock.js';
import { STORE_ID_PATTERN } from '../../contract/store.js';
import { expectation, knownKeys, nonEmptyString, optionalSignal, optionsObject, positiveInteger } from '../../lib/validate.js';
import { type JetStreamDurability, type ServerSyncInterval, durabilityOf, serverSyncOption, warnIfWeaker } from './durability.js';
import { type ForwardStreamConfig, Link, connectionClosed, isConnection, isPending } from './forward-link.js';
import { subjectMatches } from './setup.js';

export type { ForwardStreamConfig } from './forward-link.js';

/** Where the items go. */
export interface ForwardTarget {
  /**
   * A connection (`connect()` of `@nats-io/transport-node`), or the promise of one still being
   * made: `connect({ servers, waitOnFirstConnect: true, maxReconnectAttempts: -1 })` not awaited,
   * so that a device that boots with no server in reach forwards once one answers. Reconnecting is
   * the connection's job: `maxReconnectAttempts: -1` never gives up. A connection that closes, or
   * a promise that rejects, ends the forwarder with `ERR_CLOSED`.
   */
  readonly connection: NatsConnection | PromiseLike<NatsConnection>;
  /** The subject every item is published to; a stream must capture it. */
  readonly subject: string;
  /**
   * The stream that must store the items (the server refuses a publish that would land in any
   * other: `expect.streamName`). Its name, or its configuration: then it is created, when
   * missing, once the server answers and before the first publish (its `subjects` default to
   * `[subject]`, and must take `subject` when given). An existing stream is used as it is.
   */
  readonly stream?: string | ForwardStreamConfig;
  /** Options of the JetStream client (`jetstream(connection, options)`): domain, API prefix. */
  readonly jetstream?: JetStreamOptions;
  /**
   * The server's `sync_interval`, as its operator set it: `'always'` or ms between fsyncs. A server
   * from 2.10 does not tell a client; with this, `stats().durability` and the
   * `PQ_JETSTREAM_DURABILITY` warning go by what you state instead of calling it unknown.
   */
  readonly serverSyncInterval?: ServerSyncInterval;
}

/** Options of {@link forward}. */
export interface ForwardOptions {
  /**
   * Most items one lane reserves and publishes at once.
   * @default 64
   */
  batch?: number;
  /**
   * Lanes: batches in flight at once. Each lane reserves its batch, publishes it, and acks what
   * the server acknowledged before it takes the next.
   * @default 1
   */
  concurrency?: number;
  /** Stop: items in hand are put back (nacked), publishes in flight are waited for first. */
  signal?: AbortSignal;
  /**
   * The first part of every message id, in place of the store's identity: 1 to 64 characters from
   * `[A-Za-z0-9._-]`. Required over a store without an identity. Whoever names it promises that
   * no other store's items are published under it, and that a store created again gets a new one.
   * @default the store's identity, `stats().storeId`
   */
  origin?: string;
  /**
   * How long a publish waits for the server's acknowledgement, in ms.
   * @default 5000
   */
  publishTimeoutMs?: number;
  /**
   * The first wait after a failed publish, in ms; each failure in a row doubles it, up to
   * `backoffMaxMs`. Each wait is drawn between half of it and all of it (jitter), so that many
   * forwarders cut off together do not come back together.
   * @default 100
   */
  backoffMs?: number;
  /** @default 30000 */
  backoffMaxMs?: number;
  /** The clock the waits run on (a test moves it itself). @default the system's timers */
  clock?: Clock;
  /** Where the jitter comes from: a function returning numbers in [0, 1). @default Math.random */
  random?: () => number;
}

/** What {@link Forwarder.stats} reports. Counters count from `forward()`. */
export interface ForwardStats {
  /** The first part of every message id: the store's identity or the `origin` option. */
  readonly origin: string;
  /** Items the local queue holds and has not acked: ready, reserved (by the forwarder or not) and delayed. The lag. */
  readonly backlog: number;
  /** Items the forwarder holds: reserved, not yet acked nor put back. */
  readonly inHand: number;
  /** Publishes sent and waiting for the server's acknowledgement. */
  readonly inFlight: number;
  /** Items acked locally after the server acknowledged them (duplicates included). */
  readonly forwarded: number;
  /** Of those, the ones the server had already (a redelivery within its duplicate window). */
  readonly duplicates: number;
  /** Failed publishes, each retried after a backoff (those moved to the dead letters too). */
  readonly failedPublishes: number;
  /** Items moved to the dead letters because the server can never take them (too large). */
  readonly deadLettered: number;
  /** The connection's state as it last reported it; false from a disconnect to the next reconnect. */
  readonly connected: boolean;
  /** The last publish error and when it happened (ms on the forwarder's clock); null when none yet. */
  readonly lastError: { readonly message: string; readonly at: number } | null;
  /** The backoff a lane is waiting out, in ms (the longest when several are); 0 when none. */
  readonly backoffMs: number;
  /** True once the forwarder has stopped: `done` has settled or is about to. */
  readonly stopped: boolean;
  /**
   * What an item the server acknowledged survives there (its fsync setting, as far as it can be
   * known, and the stream's storage and replicas), learned once the first publish is acknowledged;
   * null until then.
   */
  readonly durability: JetStreamDurability | null;
}

/** A running forwarder. */
export interface Forwarder {
  /**
   * Resolves once the forwarder has stopped: `signal` aborted, or the queue closed. Rejects when
   * the queue fails (`ERR_STORE_FAILED`), or with `ERR_CLOSED` when the NATS connection closes;
   * either way every item in hand was put back first, when the queue still takes it.
   */
  readonly done: Promise<void>;
  stats(): ForwardStats;
}

/** The message id of item `seq` forwarded under `origin`: `<origin>:<seq>`, the seq in decimal. */
export function messageId(origin: string, seq: number): string {
  return `${origin}:${seq}`;
}

const DEFAULT_BATCH = 64;
const DEFAULT_PUBLISH_TIMEOUT_MS = 5000;
const DEFAULT_BACKOFF_MS = 100;
const DEFAULT_BACKOFF_MAX_MS = 30_000;

interface Settings {
  readonly batch: number;
  readonly concurrency: number;
  readonly signal: AbortSignal | undefined;
  readonly origin: string;
  readonly publishTimeoutMs: number;
  readonly backoffMs: number;
  readonly backoffMaxMs: number;
  readonly clock: Clock;
  readonly random: () => number;
}

/** The system's timers; `now()` is the wall clock, so that `lastError.at` reads as a date. */
const systemClock: Clock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

/**
 * Forward every item of `rx` into the JetStream stream that captures `target.subject`, until
 * `options.signal` aborts or the queue closes. Validates its arguments first (`TypeError`,
 * `RangeError`, nothing started). See {@link ForwardOptions} and docs/guides/scaling-out.md, "Store-and-forward".
 */
export function forward<T>(rx: Consumer<T>, target: ForwardTarget, options?: ForwardOptions): Forwarder {
  if (!(rx instanceof Consumer)) throw new TypeError(expectation('rx', 'a Consumer', rx));
  if (target === undefined) throw new TypeError(expectation('target', 'an object', target));
  const t = targetOf(target);
  const settings = settingsOf(rx, options);
  if (rx.closed) throw new QueueError('ERR_CLOSED', 'The queue is closed');
  const run = new ForwardRun(rx as Consumer<unknown>, t, settings);
  return { done: run.done, stats: () => run.stats() };
}

interface Target {
  readonly connection: NatsConnection | PromiseLike<NatsConnection>;
  readonly subject: string;
  readonly stream: string | undefined;
  readonly streamConfig: ForwardStreamConfig | undefined;
  readonly jsOptions: JetStreamOptions | undefined;
  readonly serverSyncInterval: ServerSyncInterval | undefined;
}

function targetOf(target: ForwardTarget): Target {
  const t = optionsObject('target', target);
  knownKeys('target', t, ['connection', 'subject', 'stream', 'jetstream', 'serverSyncInterval']);
  const connection = t.connection;
  if (!isConnection(connection) && !isPending(connection)) {
    throw new TypeError(expectation('target.connection', 'a NATS connection, or the promise of one', connection));
  }
  const subject = nonEmptyString('target.subject', t.subject);
  let stream: string | undefined;
  let streamConfig: ForwardStreamConfig | undefined;
  if (typeof t.stream === 'object' && t.stream !== null) {
    const c = t.stream as Record<string, unknown>;
    stream = nonEmptyString('target.stream.name', c.name);
    const subjects = c.subjects === undefined ? [subject] : c.subjects;
    if (!Array.isArray(subjects) || !subjects.every((x) => typeof x === 'string')) {
      throw new TypeError(expectation('target.stream.subjects', 'an array of subjects', c.subjects));
    }
    if (!subjects.some((filter: string) => subjectMatches(filter, subject))) {
      throw new RangeError(expectation('target.stream.subjects', `subjects one of which takes target.subject (${subject})`, subjects));
    }
    streamConfig = { ...(c as ForwardStreamConfig), subjects };
  } else if (t.stream !== undefined) {
    stream = nonEmptyString('target.stream', t.stream);
  }
  const jsOptions = t.jetstream === undefined ? undefined : (optionsObject('target.jetstream', t.jetstream) as JetStreamOptions);
  const serverSyncInterval = serverSyncOption('target.serverSyncInterval', t.serverSyncInterval);
  return { connection: connection as Target['connection'], subject, stream, streamConfig, jsOptions, serverSyncInterval };
}

function settingsOf(rx: Consumer<unknown>, options: ForwardOptions | undefined): Settings {
  const o = optionsObject('options', options);
  knownKeys('options', o, ['batch', 'concurrency', 'signal', 'origin', 'publishTimeoutMs', 'backoffMs', 'backoffMaxMs', 'clock', 'random']);
  const batch = o.batch === undefined ? DEFAULT_BATCH : positiveInteger('options.batch', o.batch);
  const concurrency = o.concurrency === undefined ? 1 : positiveInteger('options.concurrency', o.concurrency);
  const signal = optionalSignal('options.signal', o.signal);
  const publishTimeoutMs =
    o.publishTimeoutMs === undefined ? DEFAULT_PUBLISH_TIMEOUT_MS : positiveInteger('options.publishTimeoutMs', o.publishTimeoutMs);
  const backoffMs = o.backoffMs === undefined ? DEFAULT_BACKOFF_MS : positiveInteger('options.backoffMs', o.backoffMs);
  const backoffMaxMs = o.backoffMaxMs === undefined ? DEFAULT_BACKOFF_MAX_MS : positiveInteger('options.backoffMaxMs', o.backoffMaxMs);
  if (backoffMaxMs < backoffMs)
    throw new RangeError(expectation('options.backoffMaxMs', `at least options.backoffMs (${backoffMs})`, backoffMaxMs));
  const clock = o.clock === undefined ? systemClock : checkClock(o.clock);
  if (o.random !== undefined && typeof o.random !== 'function') throw new TypeError(expectation('options.random', 'a function', o.random));
  const random = (o.random as (() => number) | undefined) ?? Math.random;
  let origin: string;
  if (o.origin !== undefined) {
    origin = nonEmptyString('options.origin', o.origin);
    if (!STORE_ID_PATTERN.test(origin))
      throw new RangeError(expectation('options.origin', '1 to 64 characters from [A-Za-z0-9._-]', o.origin));
  } else {
    const storeId = rx.stats().storeId;
    if (storeId === undefined) {
      throw new TypeError(expectation('options.origin', "a name for this store's items (the store has no identity of its own)", o.origin));
    }
    origin = storeId;
  }
  return { batch, concurrency, signal, origin, publishTimeoutMs, backoffMs, backoffMaxMs, clock, random };
}

/** JetStream's error code for a message larger than the stream's `max_msg_size`. */
const JS_MESSAGE_TOO_LARGE = 10054;

/**
 * Why a publish can never succeed, or undefined when it may on a later try: a payload above the
 * server's `max_payload` (the client refuses it) or the stream's `max_msg_size` (the server does).
 */
function neverPublishable(error: unknown): string | undefined {
  const e = error as { name?: unknown; code?: unknown; message?: unknown } | null;
  if (e === null || typeof e !== 'object') return undefined;
  if (e.name === 'InvalidArgumentError' && String(e.message).includes('max_payload'))
    return 'the payload is larger than the server takes (max_payload)';
  if (e.name === 'JetStreamApiError' && e.code === JS_MESSAGE_TOO_LARGE)
    return 'the payload is larger than the stream takes (max_msg_size)';
  return undefined;
}

/** One forwarder: its lanes, counters and the connection's state. */
class ForwardRun {
  readonly done: Promise<void>;
  #inHand = 0;
  #inFlight = 0;
  #forwarded = 0;
  #duplicates = 0;
  #failed = 0;
  #deadLettered = 0;
  #lastError: { message: string; at: number } | null = null;
  /** The backoff each waiting lane is in. */
  readonly #waits = new Set<{ readonly ms: number }>();
  #stopped = false;
  /** The first fatal error: it ends every lane. */
  #fatal: unknown = undefined;
  /** Aborted when the forwarder stops for any reason: ends waits for items and backoffs. */
  readonly #stop = new AbortController();
  readonly #link: Link;
  #durability: JetStreamDurability | null = null;
  /** The look-up of the stream's settings under way, if any: `done` waits for it. */
  #learning: Promise<void> | undefined;

  constructor(
    private readonly rx: Consumer<unknown>,
    private readonly t: Target,
    private readonly s: Settings,
  ) {
    const signal = s.signal;
    const onAbort = (): void => this.#stop.abort();
    if (signal?.aborted) this.#stop.abort();
    else signal?.addEventListener('abort', onAbort, { once: true });
    this.#link = new Link(t.connection, t.jsOptions, t.streamConfig, this.#stop.signal, {
      failed: (error) => (this.#lastError = { message: errorMessage(error), at: this.s.clock.now() }),
      ended: (error) => {
        if (!this.#stopped) this.#failWith(error);
      },
      backoff: (attempt, epoch) => this.#backoff(attempt, epoch, false),
    });
    const lanes = Array.from({ length: s.concurrency }, () => this.#lane());
    this.done = Promise.all(lanes).then(async () => {
      signal?.removeEventListener('abort', onAbort);
      // The lanes may end with the queue while the link still waits for the connection or the stream.
      this.#stop.abort();
      this.#stopped = true;
      await this.#learning;
      this.#link.close();
      if (this.#fatal !== undefined) throw this.#fatal;
    });
  }

  stats(): ForwardStats {
    const q = this.rx.stats();
    return {
      origin: this.s.origin,
      backlog: q.ready + q.inFlight + q.delayed,
      inHand: this.#inHand,
      inFlight: this.#inFlight,
      forwarded: this.#forwarded,
      duplicates: this.#duplicates,
      failedPublishes: this.#failed,
      deadLettered: this.#deadLettered,
      connected: this.#link.connected,
      lastError: this.#lastError,
      backoffMs: Math.max(0, ...[...this.#waits].map((w) => w.ms)),
      stopped: this.#stopped,
      durability: this.#durability,
    };
  }

  #failWith(error: unknown): void {
    if (this.#fatal === undefined) this.#fatal = error;
    this.#stop.abort();
  }

  async #lane(): Promise<void> {
    while (!this.#stop.signal.aborted) {
      let items: Reserved<unknown>[];
      try {
        items = (await this.rx.reserveMany(this.s.batch, { signal: this.#stop.signal })) as unknown as Reserved<unknown>[];
      } catch (error) {
        // Stopping ends the wait for items with the signal's reason: not an error.
        if (!this.#stop.signal.aborted) this.#failWith(error);
        return;
      }
      if (items.length === 0) return; // the queue closed
      this.#inHand += items.length;
      try {
        await this.#forwardBatch(items);
      } catch (error) {
        this.#failWith(error);
      }
    }
  }

  /** Publish `items` until each is acknowledged, then ack it; put back what is left at a stop. */
  async #forwardBatch(items: Reserved<unknown>[]): Promise<void> {
    let pending = items;
    let attempt = 0;
    try {
      // Booted offline: the batch waits, in hand, for the connection and the stream.
      if (!this.#link.ready && !(await this.#untilReady())) return;
      // A closed queue took the items back itself (a later open hands them out again).
      while (pending.length > 0 && !this.#stop.signal.aborted && !this.rx.closed) {
        if (this.#link.closed()) throw connectionClosed();
        const epoch = this.#link.epoch;
        const results = await Promise.allSettled(pending.map((item) => this.#publish(item)));
        const acked: Reserved<unknown>[] = [];
        const failed: Reserved<unknown>[] = [];
        const refused: [Reserved<unknown>, string][] = [];
        let error: unknown;
        results.forEach((r, i) => {
          if (r.status === 'fulfilled') {
            acked.push(pending[i]!);
            if (r.value.duplicate) this.#duplicates++;
            if (this.#durability === null) this.#learn(r.value.stream);
          } else {
            const never = neverPublishable(r.reason);
            if (never !== undefined) refused.push([pending[i]!, never]);
            else {
              failed.push(pending[i]!);
              error = r.reason;
            }
          }
        });
        // Until each step is done, what it handles is still in hand (and put back, below, if it throws).
        pending = [...failed, ...refused.map(([item]) => item)];
        await this.#ackLocally(acked);
        this.#failed += failed.length + refused.length;
        const stuck = await this.#deadLetter(refused);
        pending = [...failed, ...stuck.items];
        if (stuck.failure !== undefined) throw stuck.failure;
        if (failed.length === 0) break;
        this.#lastError = { message: errorMessage(error), at: this.s.clock.now() };
        // A stop puts the rest back (below); a closed connection ends the forwarder (above).
        if (this.#stop.signal.aborted || this.#link.closed()) continue;
        await this.#backoff(attempt++, epoch, true);
      }
    } finally {
      if (pending.length > 0) await this.#putBack(pending);
    }
  }

  /**
   * Wait, with a batch in hand, until the link is ready. False when the forwarder stops or the
   * queue closes first: `onIdle()` settles then, and not before, since the batch in hand keeps the
   * queue from being idle.
   */
  async #untilReady(): Promise<boolean> {
    const queueEnded = new AbortController();
    const signal = this.#stop.signal;
    if (signal.aborted) return false;
    let onStop!: () => void;
    try {
      await new Promise<void>((resolve) => {
        onStop = resolve;
        signal.addEventListener('abort', onStop, { once: true });
        this.#link.whenReady.then(resolve, resolve);
        this.rx.onIdle({ signal: queueEnded.signal }).then(resolve, resolve);
      });
    } finally {
      signal.removeEventListener('abort', onStop);
      queueEnded.abort();
    }
    return this.#link.ready && !signal.aborted && !this.rx.closed;
  }

  /**
   * Publish one item. A publish sent before a disconnect is failed at the disconnect rather than
   * left to time out: the server it went to will never answer it, and waiting `publishTimeoutMs`
   * would hold the lane (and everything behind it) that long after the reconnect. Published again
   * under the same message id, a copy the server did store is dropped as a duplicate.
   */
  #publish(item: Reserved<unknown>): Promise<PubAck> {
    this.#inFlight++;
    const msgID = messageId(this.s.origin, item.seq);
    const stream = this.t.stream;
    const options =
      stream === undefined
        ? { msgID, timeout: this.s.publishTimeoutMs }
        : { msgID, timeout: this.s.publishTimeoutMs, expect: { streamName: stream } };
    let sent: Promise<PubAck>;
    try {
      sent = this.#link.js!.publish(this.t.subject, item.bytes, options);
    } catch (error) {
      sent = Promise.reject(error);
    }
    return Promise.race([sent, this.#link.lost]).then(
      (ack) => {
        this.#inFlight--;
        this.#link.answered();
        return ack;
      },
      (error: unknown) => {
        this.#inFlight--;
        throw error;
      },
    );
  }

  /**
   * Learn what an item stored in `stream` survives there, once, from the first acknowledged
   * publish (the ack names the stream that stored it), and warn when that is less than the local
   * queue's policy. A failed look-up is tried again after a later acknowledgement.
   */
  #learn(stream: string): void {
    if (this.#learning !== undefined) return;
    this.#learning = (async () => {
      try {
        const jsm = await this.#link.manager();
        // As a publish: a look-up the lost connection will never answer is failed at the disconnect.
        const info = await Promise.race([jsm.streams.info(stream), this.#link.lost]);
        const c = info.config as typeof info.config & { persist_mode?: string };
        const durability = durabilityOf({
          serverVersion: this.#link.nc?.info?.version,
          stated: this.t.serverSyncInterval,
          stream,
          storage: c.storage,
          replicas: c.num_replicas,
          persistMode: c.persist_mode,
        });
        this.#durability = durability;
        const policy = this.rx.stats().durability;
        const kept = policy === 'none' ? 'survives a crash of this process' : 'survives a power loss';
        warnIfWeaker(
          durability,
          policy,
          `forward() into stream ${stream}`,
          `the local queue it forwards from (durability ${policy}) ${kept}`,
        );
      } catch {
        // Asked again after the next acknowledged publish.
      } finally {
        this.#learning = undefined;
      }
    })();
  }

  /**
   * Ack what the server stored. An item that can no longer be acked (its lease ran out, the queue
   * took it back, or the queue closed) is back in the queue, or will be at its next open: it is
   * published again later under the same message id, and the server drops it within the duplicate
   * window. Any other failure is the queue's, and ends the forwarder.
   */
  async #ackLocally(items: Reserved<unknown>[]): Promise<void> {
    if (items.length === 0) return;
    this.#inHand -= items.length;
    const results = await Promise.allSettled(items.map((item) => item.ack()));
    for (const r of results) {
      if (r.status === 'fulfilled') this.#forwarded++;
      else if (
        !isQueueError(r.reason, 'ERR_ALREADY_SETTLED') &&
        !isQueueError(r.reason, 'ERR_LEASE_EXPIRED') &&
        !isQueueError(r.reason, 'ERR_CLOSED')
      )
        throw r.reason;
    }
  }

  /**
   * Move items the server will never take (larger than it or the stream allows) into the dead
   * letters, with the reason: retrying them would hold their lane forever. Returns the items that
   * could not be moved and the first error: over a store without dead letters that is
   * `ERR_UNSUPPORTED`, and the forwarder stops with it, the items put back: nothing is dropped.
   */
  async #deadLetter(refused: [Reserved<unknown>, string][]): Promise<{ items: Reserved<unknown>[]; failure: unknown }> {
    const stuck: { items: Reserved<unknown>[]; failure: unknown } = { items: [], failure: undefined };
    if (refused.length === 0) return stuck;
    this.#lastError = { message: refused[0]![1], at: this.s.clock.now() };
    const results = await Promise.allSettled(refused.map(([item, reason]) => item.deadLetter(`forward: ${reason}`)));
    results.forEach((r, i) => {
      if (r.status === 'fulfilled') {
        this.#inHand--;
        this.#deadLettered++;
      } else {
        stuck.items.push(refused[i]![0]);
        stuck.failure ??= r.reason;
      }
    });
    return stuck;
  }

  /** Put items back into the queue (a stop, or a fatal error); a closed or failed queue keeps them anyway. */
  async #putBack(items: Reserved<unknown>[]): Promise<void> {
    this.#inHand -= items.length;
    await Promise.allSettled(items.map((item) => item.nack()));
  }

  /**
   * Wait out the backoff of failure `attempt` (0 for the first in a row) of what was tried in
   * reconnect epoch `epoch`. A stop ends it early, and so does a reconnect: the failure was the
   * lost connection's, and the server is back. A lane (`untilQueueEnds`) also stops waiting when
   * the queue closes or fails: `onIdle()` settles then, and not before, since the items the lane
   * holds keep the queue from being idle.
   */
  #backoff(attempt: number, epoch: number, untilQueueEnds: boolean): Promise<void> {
    // Reconnected since the attempt went out: try again at once.
    if (this.#link.epoch !== epoch) return Promise.resolve();
    const ceiling = Math.min(this.s.backoffMaxMs, this.s.backoffMs * 2 ** Math.min(attempt, 30));
    const ms = Math.round(ceiling / 2 + (ceiling / 2) * this.s.random());
    const signal = this.#stop.signal;
    const wait = { ms };
    const queueEnded = new AbortController();
    return new Promise<void>((resolve) => {
      let handle: unknown;
      let done = false;
      const end = (): void => {
        if (done) return;
        done = true;
        this.s.clock.clearTimeout(handle);
        this.#waits.delete(wait);
        signal.removeEventListener('abort', end);
        forget();
        queueEnded.abort();
        resolve();
      };
      const forget = this.#link.onReconnect(end);
      this.#waits.add(wait);
      signal.addEventListener('abort', end, { once: true });
      if (untilQueueEnds) {
        this.rx.onIdle({ signal: queueEnded.signal }).then(end, () => {
          if (!queueEnded.signal.aborted) end();
        });
      }
      handle = this.s.clock.setTimeout(end, ms);
    });
  }
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
