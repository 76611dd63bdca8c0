// The shared state of one open JetStream queue: the connection and what is known of it, the
// names, the settings, the counters, the consumers opened on it, the moves into the dead letters,
// the key records and the check for acked messages a crash brought back. The server owns the
// items, their order, their delivery counts and their ack waits; this object owns only what one
// process knows: its reservations, its leases, and its counters.
import { headers, type NatsConnection } from '@nats-io/transport-node';
import type { JetStreamManager } from '@nats-io/jetstream';
import type { Codec } from '../../lib/codec.js';
import { QueueError } from '../../contract/errors.js';
import type { TimeSource } from '../../lib/clock.js';
import { boundedReason, errorMessage } from '../../core/deliveries.js';
import type { RetryDelayFunction } from '../../core/retry.js';
import type { ConnectionWatch } from './connection.js';
import { DelayedMover, itemSeqOf } from './delayed.js';
import type { JetStreamDurability } from './durability.js';
import type { KeyRecords } from './keys.js';
import type { Delivery } from './message.js';
import { PublishRefused, RequestFailure, type Requester, type Stored } from './request.js';
import type { Names } from './setup.js';
import type { JetStreamQueueStats } from './stats.js';
import type { Sweeper } from './sweep.js';

/** Headers of a dead letter: the item's history, as the embedded dead letters keep it. @internal */
export const DEAD_HEADERS = {
  seq: 'Pq-Seq',
  stream: 'Pq-Stream',
  deliveries: 'Pq-Deliveries',
  firstDeliveredAt: 'Pq-First-Delivered-At',
  lastDeliveredAt: 'Pq-Last-Delivered-At',
  deadAt: 'Pq-Dead-At',
  reason: 'Pq-Reason',
} as const;

/**
 * The message id of the dead letter of item `seq`. A stream deleted and made again restarts its
 * seqs at 1, so the stream's creation time is part of the id: with the name and the seq alone,
 * the first move in the new stream would repeat the id of an earlier one, and the server would
 * drop it as a duplicate. @internal
 */
export function deadLetterId(stream: string, streamCreated: string, seq: number): string {
  return `${stream}:${streamCreated}:${seq}`;
}

/** The error of an operation the server did not confirm: its outcome is unknown. @internal */
export function unconfirmed(what: string, cause: unknown): QueueError {
  if (cause instanceof QueueError) return cause;
  return new QueueError('ERR_STORE', `The server did not confirm ${what}: ${errorMessage(cause)}`, { cause });
}

/** The error of a read the server did not answer (stats, a dead-letter listing): nothing changed. @internal */
export function unanswered(what: string, cause: unknown): QueueError {
  if (cause instanceof QueueError) return cause;
  return new QueueError('ERR_STORE', `The server did not answer ${what}: ${errorMessage(cause)}`, { cause });
}

/**
 * The error of a publish that failed, saying whether it may be stored: never sent, refused, or
 * nobody received it is "not stored"; a lost connection or a timeout leaves it unknown. A stream
 * limit reached (discard new) is `ERR_STORE_FULL`, a message over the stream's `max_msg_size`
 * `ERR_TOO_LARGE`: retrying those at once would fail the same way. @internal
 */
export function publishError(what: string, cause: unknown): QueueError {
  if (cause instanceof QueueError) return cause;
  if (cause instanceof PublishRefused) {
    if (cause.errCode === 10054)
      return new QueueError('ERR_TOO_LARGE', `The server refused ${what}: ${cause.message}; it was not stored`, { cause });
    const full = cause.errCode === 10023 || /maximum (messages|bytes)/i.test(cause.message);
    return new QueueError(full ? 'ERR_STORE_FULL' : 'ERR_STORE', `The server refused ${what}: ${cause.message}; it was not stored`, {
      cause,
    });
  }
  if (cause instanceof RequestFailure && !cause.mayHaveActed)
    return new QueueError('ERR_STORE', `The server did not store ${what}: ${cause.message}; it was not stored`, { cause });
  return new QueueError('ERR_STORE', `The server did not confirm ${what}: ${errorMessage(cause)}; it may or may not be stored`, { cause });
}

/** Delivery times this process saw, kept for the dead letters; bounded, oldest forgotten first. */
const HISTORY_MAX = 65_536;

/** @internal */
export interface CoreSettings {
  readonly nc: NatsConnection;
  readonly watch: ConnectionWatch;
  readonly requester: Requester;
  readonly jsm: JetStreamManager;
  readonly apiPrefix: string;
  readonly names: Names;
  /** When the queue stream was created: with its name, what tells this stream from one made again under it. */
  readonly streamCreated: string;
  readonly codec: Codec<unknown>;
  readonly maxDeliveries: number;
  /** The lease of a reservation by default; Infinity: none. */
  readonly leaseMs: number;
  /** The consumer's ack wait: held items are kept alive with in-progress replies within it. */
  readonly ackWaitMs: number;
  readonly retryDelays: RetryDelayFunction;
  readonly time: TimeSource;
  /** How long a publish or an ack waits for the server's answer. */
  readonly timeoutMs: number;
  /** How long a waiting pull request lasts on the server. */
  readonly pullExpiresMs: number;
  /** What a push the server acknowledged survives, found at open. */
  readonly durability: JetStreamDurability;
  /** The largest message the queue stream takes, in bytes; -1: only the server's max_payload. */
  readonly maxMsgSize: number;
  /** Why a delayed push cannot be kept (`ERR_UNSUPPORTED`), or undefined. */
  readonly noDelays: string | undefined;
  readonly keys: KeyRecords;
  readonly sweeper: Sweeper;
}

/** The counters of {@link JetStreamQueueStats} this process keeps. @internal */
export type Counters = Pick<
  JetStreamQueueStats,
  'pushed' | 'acked' | 'nacked' | 'redelivered' | 'retried' | 'deadLettered' | 'leaseExpired' | 'pendingPushes' | 'pendingAcks'
>;

interface History {
  first: number;
  last: number;
  error: string | undefined;
}

/** A consumer opened on the queue: closed with it, told when the server lost its pull requests. @internal */
export interface Closable {
  /** With `failure`, the queue failed: waiting reserves reject with it instead of resolving null. */
  closeNow(failure?: QueueError): Promise<void>;
  /** The server no longer has this consumer's waiting pull requests: ask again now. */
  pullsLost(): void;
}

/** @internal */
export class JetStreamCore {
  readonly s: CoreSettings;
  readonly counters: Counters = {
    pushed: 0,
    acked: 0,
    nacked: 0,
    redelivered: 0,
    retried: 0,
    deadLettered: 0,
    leaseExpired: 0,
    pendingPushes: 0,
    pendingAcks: 0,
  };
  readonly consumers = new Set<Closable>();
  /** Operations under way that close() waits for: pushes, acks, moves. */
  readonly #pending = new Set<Promise<unknown>>();
  readonly #history = new Map<number, History>();
  /** Moves into the dead letters under way: a listing waits for them, so it sees what this process moved. */
  readonly moves = new Set<Promise<unknown>>();
  #closed = false;
  #closing: Promise<void> | undefined;
  #failure: QueueError | undefined;

  readonly #stopWatching: () => void;
  #advisories: { unsubscribe(): void } | undefined;
  /** Moves delayed items into the queue stream as they fall due, once a consumer asks for items. */
  readonly mover: DelayedMover;

  constructor(settings: CoreSettings) {
    this.s = settings;
    this.mover = new DelayedMover(this);
    // A connection closed under the queue ends it: nothing can be pushed or settled any more.
    settings.nc.closed().then(
      () => this.#fail(new QueueError('ERR_STORE_FAILED', 'The NATS connection closed under the queue')),
      () => {},
    );
    this.#stopWatching = settings.watch.onReconnect(() => this.#serverChanged());
    // A consumer leader that died took the waiting pull requests with it, while this connection
    // stayed up (another node of a cluster): the new leader's election says so at once.
    const { stream, consumer, delayedConsumer } = settings.names;
    try {
      // `*`: the consumer of the queue's subject, and the one of its delayed items.
      this.#advisories = settings.nc.subscribe(`$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.${stream}.*`, {
        callback: (_, msg) => {
          const which = msg.subject.slice(msg.subject.lastIndexOf('.') + 1);
          if (which === consumer || which === delayedConsumer) this.#serverChanged();
        },
      });
    } catch {
      // A closed connection: the queue fails on its own.
    }
    // In the background: close() does not wait for it, and it never rejects.
    void settings.sweeper.sweep();
  }

  /** The server restarted, or the consumer has a new leader: pulls are asked again, and the stream is checked for acked messages it brought back. */
  #serverChanged(): void {
    if (this.#closed) return;
    for (const c of this.consumers) c.pullsLost();
    this.mover.pullsLost();
    void this.s.sweeper.sweep();
  }

  /**
   * Run a request of the JetStream API (an info, a listing, a purge) once the connection is up,
   * within the timeout; its failure becomes `ERR_STORE`, never the client's own error. `what`
   * names the operation; `change`: it changes the server's state, whose outcome is then unknown.
   */
  async api<T>(what: string, fn: () => Promise<T>, change = false): Promise<T> {
    const error = this.operationalError();
    if (error) throw error;
    if (!(await this.s.watch.whenUp(this.s.timeoutMs))) {
      throw new QueueError('ERR_STORE', `The server could not be reached for ${what} within ${this.s.timeoutMs} ms: nothing was asked`);
    }
    try {
      // A connection lost under the request ends it at once, rather than at the timeout.
      return await Promise.race([fn(), this.s.watch.lost]);
    } catch (cause) {
      throw change ? unconfirmed(what, cause) : unanswered(what, cause);
    }
  }

  /** Publish into a stream; `msgID`: under that id, sent again if the connection is lost before the answer. */
  publish(subject: string, bytes: Uint8Array, msgID?: string, hdrs = msgID === undefined ? undefined : headers()): Promise<Stored> {
    if (msgID !== undefined) hdrs!.set('Nats-Msg-Id', msgID);
    return this.s.requester.publish(subject, bytes, {
      headers: hdrs,
      deadline: performance.now() + this.s.timeoutMs,
      resend: msgID !== undefined,
    });
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** The error an operation rejects with now (closed, or the connection gone), or undefined. */
  operationalError(): QueueError | undefined {
    if (this.#failure) return this.#failure;
    if (this.#closed) return new QueueError('ERR_CLOSED', 'The queue is closed');
    return undefined;
  }

  /** Track an operation that close() waits for. */
  track<T>(promise: Promise<T>): Promise<T> {
    this.#pending.add(promise);
    const done = (): void => void this.#pending.delete(promise);
    promise.then(done, done);
    return promise;
  }

  /** Note a delivery this process hands out: its time, for the dead letter it may become. */
  saw(seq: number, deliveries: number): void {
    const now = this.s.time.wallNow();
    if (deliveries > 1) this.counters.redelivered++;
    const h = this.#history.get(seq);
    if (h !== undefined) {
      h.last = now;
      return;
    }
    if (this.#history.size >= HISTORY_MAX) this.#history.delete(this.#history.keys().next().value!);
    this.#history.set(seq, { first: deliveries === 1 ? now : 0, last: now, error: undefined });
  }

  noteError(seq: number, error: string): void {
    const h = this.#history.get(seq);
    if (h !== undefined) h.error = error;
  }

  lastError(seq: number): string | undefined {
    return this.#history.get(seq)?.error;
  }

  forget(seq: number): void {
    this.#history.delete(seq);
  }

  /**
   * Move a delivered message into the dead-letter stream, then ack it in the queue stream. The
   * dead letter is published with a message id of the stream and seq (`deadLetterId`), so that a
   * move repeated after a crash between the two steps is dropped by the server's duplicate
   * window, not stored twice. When the server says the publish was a duplicate, the letter it
   * kept is read back and the item acked only if that letter has this id: an ack over a letter
   * that is not there would lose the item. Resolves once the server confirmed both steps.
   */
  moveToDeadLetters(delivery: Delivery, deliveries: number, reason: string): Promise<void> {
    // The history and the letter's id go by the message's place in the stream; the letter tells
    // the item's seq, which for an item that waited in the delayed stream is the one its push had.
    const seq = delivery.info.streamSeq;
    const itemSeq = itemSeqOf(delivery);
    const h = this.#history.get(seq);
    const hdrs = headers();
    hdrs.set(DEAD_HEADERS.seq, String(itemSeq));
    hdrs.set(DEAD_HEADERS.stream, this.s.names.stream);
    hdrs.set(DEAD_HEADERS.deliveries, String(deliveries));
    hdrs.set(DEAD_HEADERS.firstDeliveredAt, String(h?.first ?? 0));
    hdrs.set(DEAD_HEADERS.lastDeliveredAt, String(h?.last ?? 0));
    hdrs.set(DEAD_HEADERS.deadAt, String(Math.floor(this.s.time.wallNow())));
    // A header value is one line: the reason is kept percent-encoded.
    hdrs.set(DEAD_HEADERS.reason, encodeURIComponent(boundedReason(reason)));
    const move = (async () => {
      try {
        const id = deadLetterId(this.s.names.stream, this.s.streamCreated, seq);
        const ack = await this.publish(this.s.names.deadLetterSubject, delivery.bytes, id, hdrs);
        if (ack.duplicate) await this.#letterKept(ack.seq, id, seq);
        // A dead-lettered item's key stays remembered, as an acked one's does.
        await this.s.keys.remember(delivery, itemSeq);
        await delivery.ackAck();
      } catch (cause) {
        throw unconfirmed(
          `the move of item ${itemSeq} into the dead letters (it is in the queue, or in both for the duplicate window)`,
          cause,
        );
      }
      this.counters.deadLettered++;
      this.#history.delete(seq);
    })();
    this.moves.add(move);
    const done = (): void => void this.moves.delete(move);
    move.then(done, done);
    return this.track(move);
  }

  /** Resolve if the dead-letter stream holds, at `at`, the letter published under `id`; else reject, and the item is not acked. */
  async #letterKept(at: number, id: string, seq: number): Promise<void> {
    const letter = await this.s.jsm.streams.getMessage(this.s.names.deadLetterStream, { seq: at }).catch(() => null);
    if (letter?.header?.get('Nats-Msg-Id') !== id) {
      throw new QueueError(
        'ERR_STORE',
        `The server dropped the dead letter of item ${seq} as a duplicate of ${id}, but does not hold that letter; the item stays in the queue`,
      );
    }
  }

  /** Close every consumer (their items go back), wait for the operations under way. Idempotent. */
  close(): Promise<void> {
    return this.#shutDown(undefined);
  }

  #shutDown(failure: QueueError | undefined): Promise<void> {
    this.#closing ??= (async () => {
      this.#closed = true;
      this.#stopWatching();
      this.s.sweeper.close();
      this.mover.close();
      try {
        this.#advisories?.unsubscribe();
      } catch {
        // The connection closed: nothing to take back.
      }
      await Promise.all([...this.consumers].map((c) => c.closeNow(failure)));
      await Promise.allSettled([...this.#pending]);
      this.s.requester.close();
      this.s.watch.close();
    })();
    return this.#closing;
  }

  /**
   * The connection is gone: every waiting and later call rejects with `error`, as the embedded
   * queue's do when it fails. A reserve resolving null, or process() resolving, would tell a
   * supervised worker it was asked to stop, and it would exit instead of being restarted.
   */
  #fail(error: QueueError): void {
    if (this.#closed) return;
    this.#failure = error;
    void this.#shutDown(error);
  }
}
