// A request the queue needs answered (a publish, an ack), sent so that it rides out an outage
// within the caller's timeout: it waits for the connection to be up before it is sent (the client
// would drop it), a request whose connection was lost before the answer is sent again when that
// is safe (an ack, a publish under a message id), and a request nobody received (no responders:
// a stream without a leader during an election) is sent again after a pause. Whatever fails
// says whether the server may have acted on it.
import type { Msg, MsgHdrs, NatsConnection } from '@nats-io/transport-node';
import { ConnectionLost, type ConnectionWatch } from './connection.js';

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

const isNoResponders = (error: unknown): boolean => (error as { isNoResponders?: () => boolean })?.isNoResponders?.() === true;
const pause = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms).unref());

/** Send `data` to `subject` and wait for the answer (see the top of this file). @internal */
export async function request(watch: ConnectionWatch, nc: NatsConnection, subject: string, data: Uint8Array | string, options: RequestOptions): Promise<Msg> {
  // True once a copy was sent whose fate is unknown (its connection was lost before the answer).
  let earlier = false;
  let pauseMs = NO_RESPONDERS_PAUSE_MS;
  for (;;) {
    let remaining = options.deadline - performance.now();
    if (!watch.up) {
      if (!(await watch.whenUp(remaining))) {
        throw new RequestFailure(nc.isClosed() ? 'the connection closed' : 'no connection to the server within the timeout', earlier);
      }
      remaining = options.deadline - performance.now();
    }
    if (remaining < 1) throw new RequestFailure('no answer within the timeout', earlier);
    const lost = watch.lost;
    try {
      return await Promise.race([nc.request(subject, data, { timeout: Math.ceil(remaining), headers: options.headers }), lost]);
    } catch (error) {
      if (error instanceof ConnectionLost) {
        if (!options.resend) throw new RequestFailure(error.message, true, error);
        earlier = true;
        continue;
      }
      if (isNoResponders(error)) {
        // Nobody received it: a stream with no leader (an election) or none at all. The server
        // did not act on this copy; an earlier one may have reached it.
        const wait = Math.min(pauseMs, options.deadline - performance.now());
        if (wait < 1) throw new RequestFailure('no stream leader answered within the timeout (an election under way, or no stream takes the subject)', earlier, error);
        await pause(wait);
        pauseMs = Math.min(NO_RESPONDERS_PAUSE_MAX_MS, pauseMs * 2);
        continue;
      }
      if ((error as Error)?.name === 'TimeoutError') throw new RequestFailure('no answer within the timeout', true, error);
      throw new RequestFailure(String((error as Error)?.message ?? error), true, error);
    }
  }
}

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

/** Publish and wait for the stream's answer. Rejects with a `RequestFailure` or a `PublishRefused`. @internal */
export async function publish(watch: ConnectionWatch, nc: NatsConnection, subject: string, data: Uint8Array, options: RequestOptions): Promise<Stored> {
  const msg = await request(watch, nc, subject, data, options);
  let answer: { seq?: unknown; duplicate?: unknown; error?: { err_code?: number; code?: number; description?: string } };
  try {
    answer = JSON.parse(decoder.decode(msg.data)) as typeof answer;
  } catch (error) {
    throw new RequestFailure(`an answer that is not a publish ack (${msg.data.length} bytes)`, true, error);
  }
  if (answer.error !== undefined) throw new PublishRefused(answer.error.err_code ?? answer.error.code ?? 0, answer.error.description ?? 'refused');
  if (typeof answer.seq !== 'number') throw new RequestFailure('an answer that is not a publish ack', true);
  return { seq: answer.seq, duplicate: answer.duplicate === true };
}
