/** JetStreamBuilder, which configures and opens a queue on a JetStream server, and the checks of its options. */
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { type Codec, bytes, checkCodec, isRaw } from '../../lib/codec.js';
import { OpenError, QueueError } from '../../contract/errors.js';
import { type Clock, type TimeSource, checkClock, systemTime, timeOf } from '../../lib/clock.js';
import { leaseLength } from '../../core/leases.js';
import { type RetryDelayFunction, type RetryPolicyInput, defaultRetryDelays, retryDelays } from '../../core/retry.js';
import { expectation, knownKeys, optionsObject, positiveInteger } from '../../lib/validate.js';
import { ConnectionWatch } from './connection.js';
import { JetStreamCore } from './core.js';
import { KeyRecords } from './keys.js';
import { Requester } from './request.js';
import { Sweeper } from './sweep.js';
import { JetStreamConsumer } from './handles.js';
import { JetStreamProducer } from './producer.js';
import { type ServerSyncInterval, durabilityOf, serverSyncOption, warnIfWeaker } from './durability.js';
import { NAME_BYTES_MAX, type Names, type SetUp, setUp, subjectMatches } from './setup.js';

/** Where the queue lives on the server, and how the module talks to it. */
export interface JetStreamQueueOptions {
  /** The queue stream's name. Created (work-queue retention) if missing, unless `bind`. */
  stream: string;
  /** The subject items are published on; the stream created takes only it. @default `pq.<stream>` */
  subject?: string;
  /** The durable pull consumer's name, shared by every consumer process. @default 'pq' */
  consumer?: string;
  /** The dead-letter stream's name. @default `<stream>_DEAD` */
  deadLetterStream?: string;
  /** The subject of the dead-letter stream. @default `<subject>.dead` */
  deadLetterSubject?: string;
  /**
   * The stream that remembers the idempotency keys of acked items for the duplicate window, on
   * subjects `<subject>.keys.*`. @default `<stream>_KEYS`
   */
  keyStream?: string;
  /**
   * Never create anything: the queue, dead-letter and key streams and the consumer must exist
   * (`ERR_NOT_FOUND` otherwise); without the delayed subject and its consumer, delayed pushes
   * are `ERR_UNSUPPORTED`. @default false
   */
  bind?: boolean;
  /** Replicas of the streams created (1, 3 or 5 on a cluster). @default 1 */
  replicas?: number;
  /** How long a publish, an ack or a move waits for the server's answer, in ms. @default 5000 */
  timeoutMs?: number;
  /** How long a waiting pull request lasts on the server before it is renewed, in ms. @default 10000 */
  pullExpiresMs?: number;
  /** Most items delivered and unacked at once, across every process (a consumer created). @default 10000 */
  maxAckPending?: number;
  /**
   * The server's `sync_interval`, as its operator set it: `'always'` or ms between fsyncs. A
   * server from 2.10 does not tell a client; with this, `stats().durability` and the
   * `PQ_JETSTREAM_DURABILITY` warning go by what you state instead of calling it unknown. A
   * server before 2.10 has no setting (it fsyncs every 2 minutes), and this is not needed there.
   */
  serverSyncInterval?: ServerSyncInterval;
}

/** The ack wait of a consumer created for a queue without a lease: how soon a dead process's items come back. */
const DEFAULT_ACK_WAIT_MS = 30_000;
/** Names the server accepts for streams and consumers: no dots, wildcards, separators or spaces. */
const NAME = /^[^.*>/\\\s]+$/;
/** A subject without wildcards: items are published on it. */
const SUBJECT = /^[^.*>\s]+(\.[^.*>\s]+)*$/;

function nameOption(name: string, value: unknown, fallback: string | undefined, pattern: RegExp, what: string): string {
  if (value === undefined && fallback !== undefined) return fallback;
  if (typeof value !== 'string') throw new TypeError(expectation(name, what, value));
  if (!pattern.test(value)) throw new RangeError(expectation(name, what, value));
  return value;
}

const utf8Bytes = (text: string): number => new TextEncoder().encode(text).length;

/**
 * Check every stream and consumer name against the server's limit before anything is made: a
 * long stream name gives derived names (`<stream>_DEAD`, `<stream>_KEYS`) longer still, which the
 * server would refuse only after the queue stream was created.
 */
function checkLengths(names: Names, given: Record<string, unknown>): void {
  // Each name, the option that sets it, and what it is made from when it is derived.
  const each: [keyof Names, string, string | undefined][] = [
    ['stream', 'options.stream', undefined],
    ['deadLetterStream', 'options.deadLetterStream', given.deadLetterStream === undefined ? 'options.stream (<stream>_DEAD)' : undefined],
    ['keyStream', 'options.keyStream', given.keyStream === undefined ? 'options.stream (<stream>_KEYS)' : undefined],
    ['consumer', 'options.consumer', undefined],
    ['delayedConsumer', 'options.consumer', 'options.consumer (<consumer>_delayed, the consumer of delayed items)'],
  ];
  for (const [key, option, derivedFrom] of each) {
    const name = names[key];
    const bytes = utf8Bytes(name);
    if (bytes <= NAME_BYTES_MAX) continue;
    const derived =
      derivedFrom === undefined
        ? ''
        : `; ${JSON.stringify(name.length > 40 ? `${name.slice(0, 40)}…` : name)} is derived from ${derivedFrom}`;
    throw new RangeError(
      `Expected \`${option}\` to make names of at most ${NAME_BYTES_MAX} UTF-8 bytes (the server's limit), got ${bytes} bytes${derived}`,
    );
  }
}

function isConnection(nc: unknown): nc is NatsConnection {
  const c = nc as Partial<NatsConnection> | null;
  return (
    c !== null &&
    typeof c === 'object' &&
    typeof c.publish === 'function' &&
    typeof c.subscribe === 'function' &&
    typeof c.request === 'function' &&
    typeof c.closed === 'function'
  );
}

interface Settings {
  names: Names;
  bind: boolean;
  replicas: number;
  timeoutMs: number;
  pullExpiresMs: number;
  maxAckPending: number;
  serverSyncInterval: ServerSyncInterval | undefined;
}

function settingsOf(options: JetStreamQueueOptions): Settings {
  const o = optionsObject('options', options === undefined ? null : options);
  knownKeys('options', o, [
    'stream',
    'subject',
    'consumer',
    'deadLetterStream',
    'deadLetterSubject',
    'keyStream',
    'bind',
    'replicas',
    'timeoutMs',
    'pullExpiresMs',
    'maxAckPending',
    'serverSyncInterval',
    'rateLimit',
  ]);
  if (o.rateLimit !== undefined) {
    throw new QueueError(
      'ERR_UNSUPPORTED',
      'A JetStream queue keeps no rate limit: a window kept in each process would let every process take the limit, and the server counts every delivery (no throttled delivery can go uncounted)',
    );
  }
  const streamWhat = 'a stream name (no dots, wildcards, slashes or spaces)';
  const stream = nameOption('options.stream', o.stream, undefined, NAME, streamWhat);
  const subject = nameOption('options.subject', o.subject, `pq.${stream}`, SUBJECT, 'a subject without wildcards');
  const consumer = nameOption('options.consumer', o.consumer, 'pq', NAME, 'a consumer name (no dots, wildcards, slashes or spaces)');
  const names: Names = {
    stream,
    subject,
    consumer,
    deadLetterStream: nameOption('options.deadLetterStream', o.deadLetterStream, `${stream}_DEAD`, NAME, streamWhat),
    deadLetterSubject: nameOption(
      'options.deadLetterSubject',
      o.deadLetterSubject,
      `${subject}.dead`,
      SUBJECT,
      'a subject without wildcards',
    ),
    keyStream: nameOption('options.keyStream', o.keyStream, `${stream}_KEYS`, NAME, streamWhat),
    keySubject: `${subject}.keys`,
    delayedSubject: `${subject}.delayed`,
    delayedConsumer: `${consumer}_delayed`,
  };
  if (names.deadLetterStream === stream)
    throw new RangeError(expectation('options.deadLetterStream', `a stream other than options.stream (${stream})`, names.deadLetterStream));
  if (names.keyStream === stream || names.keyStream === names.deadLetterStream)
    throw new RangeError(
      expectation('options.keyStream', `a stream other than options.stream and options.deadLetterStream`, names.keyStream),
    );
  if (names.deadLetterSubject === names.delayedSubject)
    throw new RangeError(
      expectation('options.deadLetterSubject', `a subject other than the delayed items' ${names.delayedSubject}`, names.deadLetterSubject),
    );
  if (names.deadLetterSubject === subject)
    throw new RangeError(
      expectation('options.deadLetterSubject', `a subject other than options.subject (${subject})`, names.deadLetterSubject),
    );
  if (subjectMatches(`${names.keySubject}.*`, names.deadLetterSubject))
    throw new RangeError(
      expectation('options.deadLetterSubject', `a subject outside the key records' ${names.keySubject}.*`, names.deadLetterSubject),
    );
  checkLengths(names, o);
  if (o.bind !== undefined && typeof o.bind !== 'boolean') throw new TypeError(expectation('options.bind', 'a boolean', o.bind));
  const replicas = o.replicas === undefined ? 1 : positiveInteger('options.replicas', o.replicas);
  if (replicas > 5) throw new RangeError(expectation('options.replicas', 'a positive integer of at most 5', replicas));
  return {
    names,
    bind: o.bind === true,
    replicas,
    timeoutMs: o.timeoutMs === undefined ? 5000 : positiveInteger('options.timeoutMs', o.timeoutMs),
    pullExpiresMs: o.pullExpiresMs === undefined ? 10_000 : positiveInteger('options.pullExpiresMs', o.pullExpiresMs),
    maxAckPending: o.maxAckPending === undefined ? 10_000 : positiveInteger('options.maxAckPending', o.maxAckPending),
    serverSyncInterval: serverSyncOption('options.serverSyncInterval', o.serverSyncInterval),
  };
}

/**
 * Configures and opens a queue on a JetStream server, over a connection the caller made (and
 * closes: `close()` leaves it open). The calls mirror the embedded `Builder`'s.
 */
export class JetStreamBuilder<T = Uint8Array> {
  readonly #nc: NatsConnection;
  readonly #settings: Settings;
  #codec: Codec<unknown> = bytes();
  #leaseMs = Infinity;
  #maxDeliveries = Infinity;
  #retryDelays: RetryDelayFunction = defaultRetryDelays;
  #time: TimeSource = systemTime;

  constructor(nc: NatsConnection, options: JetStreamQueueOptions) {
    if (!isConnection(nc)) throw new TypeError(expectation('nc', 'a NATS connection (from @nats-io/transport-node connect())', nc));
    this.#nc = nc;
    this.#settings = settingsOf(options);
  }

  /**
   * The lease of every reservation, in ms, or Infinity for none; `reserve({ leaseMs })` overrides
   * it. A consumer this creates gets it as its ack wait (30 s without a lease): while this process
   * holds an item it keeps the server's ack wait from running out, so the ack wait is how soon
   * the items of a process that died come back.
   * @default Infinity
   */
  leaseMs(ms: number): this {
    this.#leaseMs = leaseLength('leaseMs', ms, true);
    return this;
  }

  /** Hand an item out at most `n` times, then move it into the dead-letter stream. @default Infinity */
  maxDeliveries(n: number): this {
    this.#maxDeliveries = positiveInteger('maxDeliveries', n, true);
    return this;
  }

  /** How `process()` retries a failed item: the delay its nak asks the server for. As `Builder.retry`. */
  retry(policy: RetryPolicyInput): this {
    this.#retryDelays = retryDelays(policy);
    return this;
  }

  /** The clock of leases and `process()` timeouts. Nack delays run on the server's clock. */
  clock(clock: Clock): this {
    this.#time = timeOf(checkClock(clock));
    return this;
  }

  /** How values become payloads and back, as `Builder.codec`. */
  codec<U>(codec: Codec<U>): JetStreamBuilder<U> {
    this.#codec = isRaw(codec as Codec<unknown>) ? (codec as Codec<unknown>) : (checkCodec(codec) as Codec<unknown>);
    return this as unknown as JetStreamBuilder<U>;
  }

  /** Find or create the streams and the consumer, and return the queue's two handles. */
  async open(): Promise<[JetStreamProducer<T>, JetStreamConsumer<T>]> {
    const nc = this.#nc;
    if (nc.isClosed()) throw new QueueError('ERR_CLOSED', 'The NATS connection is closed');
    const s = this.#settings;
    let found: SetUp;
    let jsm;
    const watch = new ConnectionWatch(nc);
    try {
      // Opened while the connection is down (a server restarting), the requests would be dropped.
      if (!(await watch.whenUp(s.timeoutMs)))
        throw new OpenError('ERR_STORE', `JetStream could not open the queue: no connection to the server within ${s.timeoutMs} ms`);
      jsm = await jetstreamManager(nc, { timeout: s.timeoutMs });
      found = await setUp(jsm, {
        names: s.names,
        bind: s.bind,
        replicas: s.replicas,
        ackWaitMs: this.#leaseMs === Infinity ? DEFAULT_ACK_WAIT_MS : Math.max(1, Math.ceil(this.#leaseMs)),
        maxAckPending: s.maxAckPending,
      });
    } catch (error) {
      watch.close();
      if (error instanceof QueueError) throw error;
      throw new OpenError('ERR_STORE', `JetStream could not open the queue: ${(error as Error)?.message ?? error}`, { cause: error });
    }
    const durability = durabilityOf({
      serverVersion: nc.info?.version,
      stated: s.serverSyncInterval,
      stream: s.names.stream,
      storage: found.storage,
      replicas: found.replicas,
      persistMode: found.persistMode,
    });
    // Measured against the embedded queue's default policy, `group`, under which a push that
    // resolved survives a power loss: the promise a user of the embedded queue is used to.
    warnIfWeaker(
      durability,
      'group',
      `JetStream queue ${s.names.stream}`,
      "the embedded queue's default policy (group) survives a power loss",
    );
    const requester = new Requester(nc, watch);
    const core = new JetStreamCore({
      nc,
      watch,
      requester,
      jsm,
      apiPrefix: '$JS.API',
      names: s.names,
      streamCreated: found.streamCreated,
      codec: this.#codec,
      maxDeliveries: this.#maxDeliveries,
      leaseMs: this.#leaseMs,
      ackWaitMs: found.ackWaitMs,
      retryDelays: this.#retryDelays,
      time: this.#time,
      timeoutMs: s.timeoutMs,
      pullExpiresMs: s.pullExpiresMs,
      durability,
      maxMsgSize: found.maxMsgSize,
      noDelays: found.noDelays,
      keys: new KeyRecords({
        requester,
        jsm,
        keyStream: s.names.keyStream,
        keySubject: s.names.keySubject,
        streamCreated: found.streamCreated,
        timeoutMs: s.timeoutMs,
      }),
      sweeper: new Sweeper({
        jsm,
        stream: s.names.stream,
        targets: [
          { consumer: s.names.consumer, subject: s.names.subject },
          ...(found.noDelays === undefined ? [{ consumer: s.names.delayedConsumer, subject: s.names.delayedSubject }] : []),
        ],
        lost: () => watch.lost,
        againAfterMs: found.ackWaitMs,
      }),
    });
    return [new JetStreamProducer<T>(core), new JetStreamConsumer<T>(core, true)];
  }
}
