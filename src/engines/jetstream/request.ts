// Requests the queue needs answered (publishes, acks), sent so that they ride out an outage within
// the caller's timeout: a request waits for the connection to be up before it is sent (the client
// would drop it), one whose connection was lost before the answer is sent again when that is safe
// (an ack, a publish under a message id), and one nobody received (no responders: a stream without
// a leader during an election) is sent again after a pause. Whatever fails says whether the server
// may have acted on it.
//
// The answers come to one subscription of the queue's own (`<inbox>.*`, a token per request), not
// through the client's `request()`: that one makes two Error objects per call (a stack for its
// async trace, and its timeout's), which took 30 % of the CPU of a queue acking 10,000 items a
// second. Here a request costs a publish, a timer and an entry in a map.
import { type Msg, type MsgHdrs, type NatsConnection, type Subscription, createInbox } from '@nats-io/transport-node';
import type { ConnectionWatch } from './connection.js';

/** The pause before a request nobody received is sent again, doubling up to the longest. */
const NO_RESPONDERS_PAUSE_MS = 50;
const NO_RESPONDERS_PAUSE_MAX_MS = 1000;

/** Why a request got no answer. @internal */
export class RequestFailure extends Error {
  /**
   * False when the server certainly did not act on it (never sent, or nobody received it): a
   * publish was not stored. True when it may have: a publish may be stored, an ack taken.
   */
  readonly mayHaveActed: boolean;

  constructor(message: string, mayHaveActed: boolean, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'RequestFailure';
    this.mayHaveActed = mayHaveActed;
  }
}

/** @internal */
export interface RequestOptions {
  readonly headers?: MsgHdrs;
  /** When to give up, on `performance.now()`. */
  readonly deadline: number;
  /**
   * Send it again when the connection was lost before the answer: true when a second copy does
   * no harm (an ack; a publish under a message id, which the server drops within its window).
   */
  readonly resend: boolean;
}

/** How one sending of a request ended, when it got no answer. */
const TIMED_OUT = 1;
const LOST = 2;
const NO_RESPONDERS = 3;
/** The client refused to send it (a closed connection). */
class NotSent {
  constructor(readonly error: unknown) {}
}
type Outcome = Msg | typeof TIMED_OUT | typeof LOST | typeof NO_RESPONDERS | NotSent;

interface Pending {
  readonly settle: (outcome: Outcome) => void;
  readonly timer: ReturnType<typeof setTimeout>;
}

const pause = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms).unref());

/** What the server answered a publish with. @internal */
export interface Stored {
  readonly seq: number;
  /** The server dropped it as a duplicate of the message id's first publish, stored at `seq`. */
  readonly duplicate: boolean;
}

/** The server refused a publish: nothing was stored. @internal */
export class PublishRefused extends Error {
  /** The JetStream error code (10054: larger than the stream's max_msg_size; 10077: a limit reached with discard new). */
  readonly errCode: number;

  constructor(errCode: number, description: string) {
    super(description);
    this.name = 'PublishRefused';
    this.errCode = errCode;
  }
}

const decoder = new TextDecoder();

/** Sends requests and matches their answers, for one open queue. @internal */
export class Requester {
  readonly #nc: NatsConnection;
  readonly #watch: ConnectionWatch;
  readonly #pending = new Map<string, Pending>();
  #sub: Subscription | undefined;
  #prefix = '';
  #next = 0;
  #closed = false;

  constructor(nc: NatsConnection, watch: ConnectionWatch) {
    this.#nc = nc;
    this.#watch = watch;
    this.#followLosses();
  }

  get watch(): ConnectionWatch {
    return this.#watch;
  }

  /** Stop: requests under way end as lost. */
  close(): void {
    this.#closed = true;
    this.#lose();
    try {
      this.#sub?.unsubscribe();
    } catch {
      // The connection closed: nothing to take back.
    }
    this.#sub = undefined;
  }

  /** At each loss of the connection, what was sent before it will not be answered. */
  #followLosses(): void {
    this.#watch.lost.catch(() => {
      this.#lose();
      if (!this.#closed) this.#followLosses();
    });
  }

  #lose(): void {
    const pending = [...this.#pending.values()];
    this.#pending.clear();
    for (const p of pending) {
      clearTimeout(p.timer);
      p.settle(LOST);
    }
  }

  #answer(msg: Msg): void {
    const token = msg.subject.slice(this.#prefix.length);
    const p = this.#pending.get(token);
    if (p === undefined) return;
    this.#pending.delete(token);
    clearTimeout(p.timer);
    // A status with no payload: nobody subscribed to the subject received the request.
    p.settle(msg.data.length === 0 && msg.headers?.code === 503 ? NO_RESPONDERS : msg);
  }

  /** Send once; how it ended. */
  #once(subject: string, data: Uint8Array | string, headers: MsgHdrs | undefined, ms: number): Promise<Outcome> {
    if (this.#sub === undefined) {
      const inbox = createInbox();
      this.#prefix = `${inbox}.`;
      this.#sub = this.#nc.subscribe(`${inbox}.*`, { callback: (error, msg) => (error ? undefined : this.#answer(msg)) });
    }
    const token = (this.#next++).toString(36);
    return new Promise<Outcome>((settle) => {
      const timer = setTimeout(() => {
        this.#pending.delete(token);
        settle(TIMED_OUT);
      }, ms);
      this.#pending.set(token, { settle, timer });
      try {
        this.#nc.publish(subject, data, { reply: this.#prefix + token, headers });
      } catch (error) {
        clearTimeout(timer);
        this.#pending.delete(token);
        settle(new NotSent(error));
      }
    });
  }

  /** Send `data` to `subject` and wait for the answer (see the top of this file). Rejects with a `RequestFailure`. */
  async request(subject: string, data: Uint8Array | string, options: RequestOptions): Promise<Msg> {
    // True once a copy was sent whose fate is unknown (its connection was lost before the answer).
    let earlier = false;
    let pauseMs = NO_RESPONDERS_PAUSE_MS;
    for (;;) {
      if (this.#closed) throw new RequestFailure('the queue closed', earlier);
      let remaining = options.deadline - performance.now();
      if (!this.#watch.up) {
        if (!(await this.#watch.whenUp(remaining))) {
          throw new RequestFailure(
            this.#nc.isClosed() ? 'the connection closed' : 'no connection to the server within the timeout',
            earlier,
          );
        }
        remaining = options.deadline - performance.now();
      }
      if (remaining < 1) throw new RequestFailure('no answer within the timeout', earlier);
      const outcome = await this.#once(subject, data, options.headers, Math.ceil(remaining));
      if (outcome === LOST) {
        if (!options.resend) throw new RequestFailure('the connection to the server was lost before it answered', true);
        earlier = true;
        continue;
      }
      if (outcome === NO_RESPONDERS) {
        // Nobody received it: a stream with no leader (an election) or none at all. The server
        // did not act on this copy; an earlier one may have reached it.
        const wait = Math.min(pauseMs, options.deadline - performance.now());
        if (wait < 1)
          throw new RequestFailure(
            'no stream leader answered within the timeout (an election under way, or no stream takes the subject)',
            earlier,
          );
        await pause(wait);
        pauseMs = Math.min(NO_RESPONDERS_PAUSE_MAX_MS, pauseMs * 2);
        continue;
      }
      if (outcome === TIMED_OUT) throw new RequestFailure('no answer within the timeout', true);
      if (outcome instanceof NotSent)
        throw new RequestFailure(String((outcome.error as Error)?.message ?? outcome.error), earlier, outcome.error);
      return outcome;
    }
  }

  /** Publish and wait for the stream's answer. Rejects with a `RequestFailure` or a `PublishRefused`. */
  async publish(subject: string, data: Uint8Array, options: RequestOptions): Promise<Stored> {
    const msg = await this.request(subject, data, options);
    let answer: { seq?: unknown; duplicate?: unknown; error?: { err_code?: number; code?: number; description?: string } };
    try {
      answer = JSON.parse(decoder.decode(msg.data)) as typeof answer;
    } catch (error) {
      throw new RequestFailure(`an answer that is not a publish ack (${msg.data.length} bytes)`, true, error);
    }
    if (answer.error !== undefined)
      throw new PublishRefused(answer.error.err_code ?? answer.error.code ?? 0, answer.error.description ?? 'refused');
    if (typeof answer.seq !== 'number') throw new RequestFailure('an answer that is not a publish ack', true);
    return { seq: answer.seq, duplicate: answer.duplicate === true };
  }
}
