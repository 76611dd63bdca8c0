// The forwarder's link to the server: the connection (given, or still being made when the edge
// device boots offline), what it last reported, the stream set up once it is there, and the two
// events a lane needs to resume promptly: a disconnect (the publishes in flight on the lost
// connection will never be answered) and a reconnect (a backoff need not run to its end).
// See docs/internals/jetstream.md, "Store-and-forward".
import {
  JetStreamApiCodes,
  JetStreamApiError,
  type JetStreamClient,
  type JetStreamManager,
  type JetStreamOptions,
  type StreamConfig,
  jetstream,
  jetstreamManager,
} from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { QueueError } from '../../contract/errors.js';
import { expectation } from '../../lib/validate.js';

/** A stream to create, when missing, before the first publish: its name and any of its settings. */
export type ForwardStreamConfig = Partial<StreamConfig> & { readonly name: string };

/** True for a thenable: a connection still being made. @internal */
export function isPending(value: unknown): value is PromiseLike<unknown> {
  return value !== null && typeof value === 'object' && typeof (value as { then?: unknown }).then === 'function';
}

/** True for what `connect()` resolves with. @internal */
export function isConnection(value: unknown): value is NatsConnection {
  const c = value as Partial<NatsConnection> | null;
  return (
    c !== null &&
    typeof c === 'object' &&
    typeof c.request === 'function' &&
    typeof c.isClosed === 'function' &&
    typeof c.status === 'function'
  );
}

/** What the link tells its owner. @internal */
export interface LinkEvents {
  /** A step of setting up failed and is retried: recorded as the last error. */
  readonly failed: (error: unknown) => void;
  /** The connection closed for good, or could not be made: the forwarder ends with this error. */
  readonly ended: (error: QueueError) => void;
  /** Wait out the backoff of failure `attempt` of the setup, begun in reconnect epoch `epoch`. */
  readonly backoff: (attempt: number, epoch: number) => Promise<void>;
}

/** A promise rejected at the next disconnect; nobody need be waiting on it. */
function lossNotice(): { promise: Promise<never>; reject: (e: Error) => void } {
  let reject!: (e: Error) => void;
  const promise = new Promise<never>((_, r) => (reject = r));
  promise.catch(() => {});
  return { promise, reject };
}

/** @internal */
export class Link {
  #nc: NatsConnection | undefined;
  #js: JetStreamClient | undefined;
  #jsm: Promise<JetStreamManager> | undefined;
  #connected: boolean;
  /** Reconnects so far: a failure from an earlier epoch need not wait out its backoff. */
  #epoch = 0;
  #loss = lossNotice();
  readonly #reconnectWaiters = new Set<() => void>();
  #status: { stop?: () => void } | undefined;
  #ready = false;
  /** Settles once the connection is made and the stream set up, or the forwarder stopped first. */
  readonly whenReady: Promise<void>;

  constructor(
    connection: NatsConnection | PromiseLike<NatsConnection>,
    private readonly jsOptions: JetStreamOptions | undefined,
    private readonly streamConfig: ForwardStreamConfig | undefined,
    private readonly stop: AbortSignal,
    private readonly events: LinkEvents,
  ) {
    this.#connected = !isPending(connection);
    if (!isPending(connection)) this.#attach(connection);
    this.whenReady = this.#prepare(connection).catch((error: unknown) => {
      this.events.ended(
        error instanceof QueueError
          ? error
          : new QueueError('ERR_CLOSED', `The NATS connection could not be used: ${(error as Error)?.message ?? String(error)}`, {
              cause: error,
            }),
      );
    });
  }

  /** The connection, once made. */
  get nc(): NatsConnection | undefined {
    return this.#nc;
  }

  /** The JetStream client, once the connection is made. */
  get js(): JetStreamClient | undefined {
    return this.#js;
  }

  /** True once the connection is made and the stream is set up. */
  get ready(): boolean {
    return this.#ready;
  }

  get epoch(): number {
    return this.#epoch;
  }

  /**
   * Rejects at the next disconnect, reconnect or close: a publish sent before it will never be
   * answered (sent before a disconnect, it went to a connection that is gone; sent while
   * disconnected, the client dropped it when it dialled again).
   */
  get lost(): Promise<never> {
    return this.#loss.promise;
  }

  get connected(): boolean {
    return this.#connected && this.#nc !== undefined && !this.#nc.isClosed();
  }

  /** A publish was answered: the connection is up, whatever its last report said. */
  answered(): void {
    this.#connected = true;
  }

  /** True once the connection is closed for good. */
  closed(): boolean {
    return this.#nc?.isClosed() ?? false;
  }

  /** Call `fn` at the next reconnect; returns the way to take it back. */
  onReconnect(fn: () => void): () => void {
    this.#reconnectWaiters.add(fn);
    return () => this.#reconnectWaiters.delete(fn);
  }

  /** A manager on the connection (made once). */
  manager(): Promise<JetStreamManager> {
    // No account check: it would be one more request, and an answer is what every use waits for anyway.
    this.#jsm ??= jetstreamManager(this.#nc!, { ...this.jsOptions, checkAPI: false });
    return this.#jsm;
  }

  /** Stop following the connection's reports. */
  close(): void {
    this.#status?.stop?.();
  }

  #attach(nc: NatsConnection): void {
    this.#nc = nc;
    this.#js = jetstream(nc, this.jsOptions);
    this.#connected = !nc.isClosed();
    this.#watch(nc);
  }

  async #prepare(connection: NatsConnection | PromiseLike<NatsConnection>): Promise<void> {
    if (this.#nc === undefined) {
      const nc = await this.#connection(connection as PromiseLike<NatsConnection>);
      if (nc === undefined) return;
      this.#attach(nc);
    }
    if (this.streamConfig !== undefined && !(await this.#setUpStream(this.streamConfig))) return;
    this.#ready = true;
  }

  /** The connection once made; undefined when the forwarder stops first, or it cannot be made. */
  async #connection(connection: PromiseLike<NatsConnection>): Promise<NatsConnection | undefined> {
    let onStop!: () => void;
    const stopped = new Promise<undefined>((resolve) => (onStop = () => resolve(undefined)));
    if (this.stop.aborted) return undefined;
    this.stop.addEventListener('abort', onStop, { once: true });
    try {
      const nc = await Promise.race([connection, stopped]);
      if (nc !== undefined && !isConnection(nc))
        throw new TypeError(expectation('target.connection', 'to resolve with a NATS connection', nc));
      return nc;
    } catch (error) {
      this.events.ended(
        new QueueError('ERR_CLOSED', `The NATS connection could not be made: ${(error as Error)?.message ?? String(error)}`, {
          cause: error,
        }),
      );
      return undefined;
    } finally {
      this.stop.removeEventListener('abort', onStop);
    }
  }

  /** Create the stream when it is missing, retrying until the server answers; false when the forwarder stopped first. */
  async #setUpStream(config: ForwardStreamConfig): Promise<boolean> {
    for (let attempt = 0; !this.stop.aborted; attempt++) {
      const epoch = this.#epoch;
      try {
        const jsm = await this.manager();
        try {
          await jsm.streams.info(config.name);
        } catch (error) {
          if (!(error instanceof JetStreamApiError && error.code === JetStreamApiCodes.StreamNotFound)) throw error;
          await jsm.streams.add(config);
        }
        return true;
      } catch (error) {
        this.events.failed(error);
        if (this.closed()) return false; // the close report ends the forwarder
        await this.events.backoff(attempt, epoch);
      }
    }
    return false;
  }

  /** Follow the connection's reports: disconnected from a disconnect until the next reconnect. */
  #watch(nc: NatsConnection): void {
    let status: AsyncIterable<{ type: string }>;
    try {
      status = nc.status();
    } catch {
      return; // a closed connection reports nothing; isClosed() says it
    }
    this.#status = status as { stop?: () => void };
    const lose = (message: string): void => {
      const loss = this.#loss;
      this.#loss = lossNotice();
      loss.reject(new Error(message));
    };
    void (async () => {
      try {
        for await (const event of status) {
          if (event.type === 'disconnect') {
            this.#connected = false;
            lose('The connection to the server was lost before it answered');
          } else if (event.type === 'reconnect') {
            this.#connected = true;
            this.#epoch++;
            // The client drops what it buffered while disconnected at each dial: a publish sent
            // then never reached the server, and would wait out its timeout for nothing.
            lose('The connection was down when the publish was sent');
            for (const wake of [...this.#reconnectWaiters]) wake();
          } else if (event.type === 'close') {
            this.#connected = false;
            lose('The connection closed before the server answered');
            // A lane waiting for items would notice only with the next item: end them all now.
            this.events.ended(connectionClosed());
          }
        }
      } catch {
        // The connection's report stream ended with an error: isClosed() tells the rest.
      }
      if (nc.isClosed()) {
        this.#connected = false;
        lose('The connection closed before the server answered');
        this.events.ended(connectionClosed());
      }
    })();
  }
}

/** @internal */
export function connectionClosed(): QueueError {
  return new QueueError('ERR_CLOSED', 'The NATS connection closed: the forwarder stops');
}
