// One message a JetStream pull consumer delivered, and the replies that settle it. The server
// names the message in its reply subject ($JS.ACK...): the stream sequence, how many times it
// was delivered, and when it was stored. Replies go back on that subject: +ACK (sent as a request,
// so that the server's answer confirms it), -NAK with a delay, +WPI (in progress: the ack wait
// starts again).
import type { Msg, NatsConnection } from '@nats-io/transport-node';
import type { ConnectionWatch } from './connection.js';
import type { Requester } from './request.js';

/** What the reply subject of a delivered message tells. @internal */
export interface DeliveryInfo {
  readonly stream: string;
  readonly consumer: string;
  /** Times the server has delivered it, this delivery included. */
  readonly deliveries: number;
  /** Its sequence in the stream: our seq. */
  readonly streamSeq: number;
  /** When the server stored it, in ms since the epoch. */
  readonly storedAt: number;
}

/**
 * Parse `$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>`, and the longer
 * form with a domain and an account hash after `$JS.ACK` (and a random token at the end) that
 * newer servers send. Undefined for anything else: such a message is not a delivery.
 * @internal
 */
export function parseReply(reply: string | undefined): DeliveryInfo | undefined {
  if (reply === undefined || !reply.startsWith('$JS.ACK.')) return undefined;
  const t = reply.split('.');
  let i: number;
  if (t.length === 9) i = 2;
  else if (t.length >= 11) i = 4;
  else return undefined;
  const deliveries = Number(t[i + 2]);
  const streamSeq = Number(t[i + 3]);
  const storedNs = Number(t[i + 5]);
  if (!Number.isSafeInteger(deliveries) || deliveries < 1 || !Number.isSafeInteger(streamSeq) || streamSeq < 1) return undefined;
  return {
    stream: t[i]!,
    consumer: t[i + 1]!,
    deliveries,
    streamSeq,
    storedAt: Number.isFinite(storedNs) ? Math.floor(storedNs / 1e6) : 0,
  };
}

/** A delivered message and its replies. @internal */
export class Delivery {
  readonly info: DeliveryInfo;
  readonly msg: Msg;
  readonly #nc: NatsConnection;
  readonly #requester: Requester;
  readonly #watch: ConnectionWatch;
  readonly #timeoutMs: number;

  constructor(nc: NatsConnection, requester: Requester, msg: Msg, info: DeliveryInfo, timeoutMs: number) {
    this.#nc = nc;
    this.#requester = requester;
    this.#watch = requester.watch;
    this.msg = msg;
    this.info = info;
    this.#timeoutMs = timeoutMs;
  }

  get bytes(): Uint8Array {
    return this.msg.data;
  }

  /**
   * Ack, resolving once the server confirms it (the stream then no longer holds the message).
   * Sent again if the connection is lost before the answer (a second ack changes nothing), and
   * held while the connection is down, within the timeout. Rejects with a `RequestFailure`.
   */
  async ackAck(): Promise<void> {
    await this.#requester.request(this.msg.reply!, '+ACK', { deadline: performance.now() + this.#timeoutMs, resend: true });
  }

  /**
   * Return it, to be delivered again after `delayMs` (0: at once). Resolves once the server has
   * it; held while the connection is down, within the timeout (the client would drop it).
   */
  async nak(delayMs: number): Promise<void> {
    const body = delayMs > 0 ? `-NAK ${JSON.stringify({ delay: Math.round(delayMs * 1e6) })}` : '-NAK';
    if (!(await this.#watch.whenUp(this.#timeoutMs))) throw new Error('no connection to the server within the timeout');
    this.#nc.publish(this.msg.reply!, body);
    await this.#nc.flush();
  }

  /**
   * Tell the server the work goes on: its ack wait starts again. Sent from timers, so it never
   * throws: over a closed connection there is nobody to tell, and the queue fails on its own.
   */
  working(): void {
    // While the connection is down the client would drop it; the next one goes out once it is up.
    if (!this.#watch.up) return;
    try {
      this.#nc.publish(this.msg.reply!, '+WPI');
    } catch {
      // The connection closed: the item comes back after the ack wait.
    }
  }
}
