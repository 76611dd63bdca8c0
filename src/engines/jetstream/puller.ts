// Pull requests to a JetStream consumer, made by hand. Each request has an inbox and a
// subscription of its own (a delivered message carries the subject it was published on, not the
// inbox: only the subscription tells which request brought it), so that the status that ends a
// request (404 no messages, 408 expired, 409 refused, 503 no JetStream answered) tells how many
// messages it will no longer bring. A request the server lost (a node stopped, a leader changed)
// ends on a local timer a little after its expiry, or at once when the queue learns of it: at a
// reconnect (a restarted server has no waiting requests) and when the consumer elects a leader
// (see `reset`). Nothing is asked while the connection is down: the client would drop the
// request. A pull that does not wait and could not be answered (the connection lost under it, a
// 503) fails rather than ending empty, which would read as an empty queue. The client's own
// pull API is not used here: it cannot ask for no_wait (it wants expiries of 1 s or more), which
// `tryReserve()` needs, and one place for pulls keeps their count exact.
import { createInbox, type Msg, type NatsConnection, type Subscription } from '@nats-io/transport-node';
import type { ConnectionWatch } from './connection.js';
import { Delivery, parseReply } from './message.js';
import { RequestFailure, type Requester } from './request.js';

/** Most messages one pull request asks for. */
const BATCH_MAX = 256;
/**
 * How long past its expiry a request is given before it is taken as lost. A pull that does not
 * wait has no expiry: a 2.9 server answers it at once (404) when it has nothing, but holds it
 * while it counts messages pending redelivery that it cannot deliver yet; its timer ends it then.
 */
const LOST_AFTER_MS = 2000;
/**
 * A request refused (409: too many waiting requests on the consumer, the consumer deleted) is
 * asked again after a pause that doubles up to the longest, so that refusals do not become a
 * loop of requests; a delivered message ends the pause.
 */
const REFUSED_PAUSE_MS = 50;
const REFUSED_PAUSE_MAX_MS = 2000;

interface PullRequest {
  /** Messages it may still bring. */
  remaining: number;
  timer: ReturnType<typeof setTimeout>;
  sub: Subscription;
  /**
   * A one-shot request (tryReserve, reserveMany) takes its messages itself, then null once it
   * ended (`failed`: the server could not be asked, so an empty answer says nothing of the
   * queue: the connection was lost under it, or no JetStream answered); undefined for the shared
   * ones.
   */
  sink?: (delivery: Delivery | null, failed?: boolean) => void;
}

/** @internal */
export interface PullerSettings {
  readonly nc: NatsConnection;
  readonly watch: ConnectionWatch;
  /** Sends the acks of what it delivers. */
  readonly requester: Requester;
  /** `$JS.API` unless the account uses a JetStream domain or prefix. */
  readonly apiPrefix: string;
  readonly stream: string;
  readonly consumer: string;
  /** How long a waiting pull request lasts on the server. */
  readonly expiresMs: number;
  /** Timeout of the server's answers (acks). */
  readonly timeoutMs: number;
  /** A message for the shared requests: the consumer hands it out, or returns it. */
  readonly deliver: (delivery: Delivery) => void;
}

/** @internal */
export class Puller {
  readonly #s: PullerSettings;
  readonly #requests = new Map<string, PullRequest>();
  #nextId = 1;
  /** Messages the consumer wants now (its waiting reserves). */
  #wanted = 0;
  /** Messages the shared requests may still bring. */
  #asked = 0;
  #closed = false;
  /** The pause after the last refusal (0: none); the pump waits for `#resume` meanwhile. */
  #pauseMs = 0;
  #resume: ReturnType<typeof setTimeout> | undefined;

  constructor(settings: PullerSettings) {
    this.#s = settings;
    this.#followLosses();
  }

  /**
   * At each loss of the connection, end the one-shot requests under way as failed: their answer
   * will not come, and an empty one would read as an empty queue. (The shared ones are asked
   * again at the reconnect.)
   */
  #followLosses(): void {
    this.#s.watch.lost.catch(() => {
      if (this.#closed) return;
      for (const [id, request] of [...this.#requests]) if (request.sink !== undefined) this.#end(id, false, true);
      this.#followLosses();
    });
  }

  /**
   * Ask for messages until `n` are wanted in all. When fewer are wanted than the open requests
   * may bring (a reserve aborted, a process() stopped), the newest requests are cancelled until
   * they no longer bring more than wanted, and the shortfall (at most part of one request) is
   * asked again: a request left open would go on bringing messages that nobody waits for, each
   * one a delivery on the server.
   */
  want(n: number): void {
    this.#wanted = n;
    if (this.#asked > n) this.#cancelSurplus();
    this.#pump();
  }

  /** One message if the consumer has one ready for us now, else null; never waits on the server's side. */
  tryOne(): Promise<Delivery | null> {
    return this.tryMany(1).then((list) => list[0] ?? null);
  }

  /**
   * Up to `n` messages the consumer has ready for us now (maybe none); never waits on the
   * server's side. While the connection is down it waits for it, up to the answer timeout.
   * Rejects with a `RequestFailure` when no answer came and no message either: an empty answer
   * must mean the consumer had nothing, not that the server was gone.
   */
  async tryMany(n: number): Promise<Delivery[]> {
    if (this.#closed) return [];
    if (!(await this.#s.watch.whenUp(this.#s.timeoutMs))) throw new RequestFailure('no connection to the server within the timeout', false);
    if (this.#closed) return [];
    const got: Delivery[] = [];
    return new Promise((resolve, reject) =>
      this.#request(n, true, (delivery, failed) => {
        if (delivery !== null) got.push(delivery);
        else if (failed === true && got.length === 0)
          reject(new RequestFailure('the server could not be asked for items (the connection was lost, or no JetStream answered)', false));
        else resolve(got);
      }),
    );
  }

  /**
   * The server no longer has the waiting requests (it restarted: a reconnect; the consumer's
   * leader changed): end them all now rather than on their timers, and ask again. Without it, a
   * consumer sat idle for up to a pull's expiry after every restart.
   */
  reset(): void {
    if (this.#closed) return;
    for (const [id, request] of [...this.#requests]) {
      this.#requests.delete(id);
      clearTimeout(request.timer);
      if (request.sink !== undefined) {
        request.sub.unsubscribe();
        request.sink(null, true);
        continue;
      }
      this.#asked -= request.remaining;
      // Drained, not dropped: a leader that stepped down may still send what it had.
      this.#cancel(request);
    }
    this.#pauseMs = 0;
    if (this.#resume !== undefined) clearTimeout(this.#resume);
    this.#resume = undefined;
    this.#pump();
  }

  /**
   * Stop asking. Requests still waiting on the server end with their subscriptions (the server
   * drops a pull request whose inbox has no interest; a message it sent meanwhile comes back
   * after the ack wait).
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const [, request] of this.#requests) {
      clearTimeout(request.timer);
      request.sub.unsubscribe();
      request.sink?.(null, false);
    }
    this.#requests.clear();
    this.#asked = 0;
    if (this.#resume !== undefined) clearTimeout(this.#resume);
    this.#resume = undefined;
  }

  #cancelSurplus(): void {
    const shared = [...this.#requests].filter(([, request]) => request.sink === undefined).reverse();
    for (const [id, request] of shared) {
      if (this.#asked <= this.#wanted) return;
      this.#requests.delete(id);
      clearTimeout(request.timer);
      this.#asked -= request.remaining;
      this.#cancel(request);
    }
  }

  /**
   * End a request on the server. The server drops a pull request once its inbox has no interest;
   * the subscription is drained, not just unsubscribed, so that a message the server sent before
   * it saw the interest go still reaches `#receive`, which hands it to `deliver` (no request
   * known: a stray the consumer holds for its next waiter) instead of dropping it here, where it
   * would stay delivered and unacked until the ack wait ran out.
   */
  #cancel(request: PullRequest): void {
    try {
      request.sub.drain().catch(() => {});
    } catch {
      // The connection is closing: the server drops the request with it.
    }
  }

  #pump(): void {
    if (this.#closed || this.#resume !== undefined) return;
    // Sent now, a request would be dropped by the client; the reconnect pumps again.
    if (!this.#s.watch.up) return;
    while (this.#wanted > this.#asked) {
      const n = Math.min(BATCH_MAX, this.#wanted - this.#asked);
      this.#asked += n;
      this.#request(n, false, undefined);
    }
  }

  #request(batch: number, noWait: boolean, sink: PullRequest['sink']): void {
    const id = String(this.#nextId++);
    const waitMs = noWait ? 0 : this.#s.expiresMs;
    const timer = setTimeout(() => this.#end(id), waitMs + LOST_AFTER_MS);
    // A lost request must not keep the process alive: the consumer's own waits do.
    timer.unref();
    const inbox = createInbox();
    try {
      const sub = this.#s.nc.subscribe(inbox, { callback: (error, msg) => (error ? undefined : this.#receive(id, msg)) });
      this.#requests.set(id, { remaining: batch, timer, sink, sub });
      const body = noWait ? { batch, no_wait: true } : { batch, expires: waitMs * 1e6 };
      this.#s.nc.publish(`${this.#s.apiPrefix}.CONSUMER.MSG.NEXT.${this.#s.stream}.${this.#s.consumer}`, JSON.stringify(body), {
        reply: inbox,
      });
    } catch {
      // The connection is closed or closing: the request ends, the consumer learns it elsewhere.
      clearTimeout(timer);
      if (this.#requests.has(id)) this.#end(id);
      else if (sink !== undefined) sink(null, true);
      else this.#asked -= batch;
    }
  }

  /**
   * A request ended: what it would have brought is asked for again, if still wanted (after a
   * pause if it was refused). `refused`: a 409, or a 503 (no JetStream answered); for a one-shot
   * request, that or a lost connection means the server could not be asked.
   */
  #end(id: string, refused = false, failed = refused): void {
    const request = this.#requests.get(id);
    if (request === undefined) return;
    this.#requests.delete(id);
    clearTimeout(request.timer);
    request.sub.unsubscribe();
    if (request.sink !== undefined) {
      request.sink(null, failed);
      return;
    }
    this.#asked -= request.remaining;
    if (refused) this.#pause();
    this.#pump();
  }

  #pause(): void {
    this.#pauseMs = Math.min(REFUSED_PAUSE_MAX_MS, this.#pauseMs === 0 ? REFUSED_PAUSE_MS : this.#pauseMs * 2);
    if (this.#resume !== undefined || this.#closed) return;
    this.#resume = setTimeout(() => {
      this.#resume = undefined;
      this.#pump();
    }, this.#pauseMs);
    this.#resume.unref();
  }

  #receive(id: string, msg: Msg): void {
    const request = this.#requests.get(id);
    const info = parseReply(msg.reply);
    if (info === undefined) {
      // A status: 100 is an idle heartbeat; 404 (nothing for no_wait) and 408 (expired) end the
      // request; 409 refuses it.
      const code = msg.headers?.code ?? 0;
      if (code >= 400) this.#end(id, code === 409 || code === 503, code === 503);
      return;
    }
    this.#pauseMs = 0;
    const delivery = new Delivery(this.#s.nc, this.#s.requester, msg, info, this.#s.timeoutMs);
    if (request !== undefined) {
      request.remaining--;
      if (request.sink !== undefined) {
        request.sink(delivery);
        if (request.remaining === 0) this.#end(id);
        return;
      }
      this.#asked--;
      if (request.remaining === 0) {
        this.#requests.delete(id);
        clearTimeout(request.timer);
        request.sub.unsubscribe();
      }
    }
    this.#s.deliver(delivery);
  }
}
