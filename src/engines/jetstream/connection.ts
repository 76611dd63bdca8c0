// What one open JetStream queue knows of its connection: whether it is up now, a notice that
// rejects when a request sent before it can no longer be answered, a wait for the connection to
// come back (bounded by the caller's timeout), and the reconnects, at which the pulls are asked
// again and the stream is checked for acked messages a crash brought back. The client drops what
// is published while it is disconnected (it empties its outbound buffer each time it dials), so
// nothing is sent until the connection is up again.
import type { NatsConnection } from '@nats-io/transport-node';

/** A promise rejected at the next disconnect, reconnect or close; nobody need be waiting on it. */
function lossNotice(): { promise: Promise<never>; reject: (e: Error) => void } {
  let reject!: (e: Error) => void;
  const promise = new Promise<never>((_, r) => (reject = r));
  promise.catch(() => {});
  return { promise, reject };
}

/** The error a loss notice rejects with. @internal */
export class ConnectionLost extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConnectionLost';
  }
}

/** @internal */
export class ConnectionWatch {
  readonly #nc: NatsConnection;
  #up: boolean;
  #loss = lossNotice();
  readonly #upWaiters = new Set<() => void>();
  readonly #reconnectListeners = new Set<() => void>();
  #status: { stop?: () => void } | undefined;

  constructor(nc: NatsConnection) {
    this.#nc = nc;
    this.#up = !nc.isClosed();
    this.#watch();
  }

  /**
   * True when a request sent now reaches the server. The status reports come a few microtasks
   * after the socket closed; the client's own flag, when it has one, says it at once, so that a
   * publish made in between waits for the reconnect rather than being dropped by the client.
   */
  get up(): boolean {
    if (!this.#up || this.#nc.isClosed()) return false;
    const connected = (this.#nc as unknown as { protocol?: { connected?: unknown } }).protocol?.connected;
    return typeof connected === 'boolean' ? connected : true;
  }

  /**
   * Rejects (with `ConnectionLost`) at the next disconnect, reconnect or close: a request sent
   * before it will never be answered (sent before a disconnect, it went to a connection that is
   * gone; sent while disconnected, the client dropped it when it dialled again).
   */
  get lost(): Promise<never> {
    return this.#loss.promise;
  }

  /** Resolves true once the connection is up (at once if it is), false after `ms` or once it is closed. */
  whenUp(ms: number): Promise<boolean> {
    if (this.up) return Promise.resolve(true);
    if (this.#nc.isClosed() || ms <= 0) return Promise.resolve(false);
    return new Promise((resolve) => {
      const done = (value: boolean): void => {
        clearTimeout(timer);
        this.#upWaiters.delete(wake);
        resolve(value);
      };
      const wake = (): void => done(this.up);
      const timer = setTimeout(() => done(this.up), ms);
      this.#upWaiters.add(wake);
    });
  }

  /** Call `fn` at each reconnect; returns the way to take it back. */
  onReconnect(fn: () => void): () => void {
    this.#reconnectListeners.add(fn);
    return () => this.#reconnectListeners.delete(fn);
  }

  /** Stop following the connection's reports; waits for the connection end now. */
  close(): void {
    this.#status?.stop?.();
    this.#status = undefined;
    for (const wake of [...this.#upWaiters]) wake();
  }

  #lose(message: string): void {
    const loss = this.#loss;
    this.#loss = lossNotice();
    loss.reject(new ConnectionLost(message));
  }

  #watch(): void {
    let status: AsyncIterable<{ type: string }>;
    try {
      status = this.#nc.status();
    } catch {
      return; // a closed connection reports nothing; isClosed() says it
    }
    this.#status = status as { stop?: () => void };
    void (async () => {
      try {
        for await (const event of status) {
          if (event.type === 'disconnect') {
            this.#up = false;
            this.#lose('The connection to the server was lost before it answered');
          } else if (event.type === 'reconnect') {
            this.#up = true;
            // A request sent between the socket's end and the disconnect report was dropped by
            // the client when it dialled again.
            this.#lose('The connection was down when the request was sent');
            for (const wake of [...this.#upWaiters]) wake();
            for (const listener of [...this.#reconnectListeners]) listener();
          } else if (event.type === 'close') {
            break;
          }
        }
      } catch {
        // The report stream ended with an error: isClosed() tells the rest.
      }
      this.#up = false;
      this.#lose('The connection closed before the server answered');
      for (const wake of [...this.#upWaiters]) wake();
    })();
  }
}
