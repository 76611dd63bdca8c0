// The streams and the consumer a JetStream queue runs on: found, checked, or created. The queue
// stream keeps items until they are acked (work-queue retention); the dead-letter stream keeps
// what is moved into it until it is purged or redriven (limits retention, no limits set). Every
// existing one is looked up and checked before anything is created, so that a refused open
// leaves the server as it found it.
import { AckPolicy, DeliverPolicy, DiscardPolicy, JetStreamApiCodes, JetStreamApiError, type JetStreamManager, RetentionPolicy, StorageType, type ConsumerInfo, type StreamInfo } from '@nats-io/jetstream';
import { OpenError, QueueError } from '../errors.js';

/** Where a queue lives on the server. @internal */
export interface Names {
  readonly stream: string;
  readonly subject: string;
  readonly consumer: string;
  readonly deadLetterStream: string;
  readonly deadLetterSubject: string;
}

/** @internal */
export interface SetupSettings {
  readonly names: Names;
  /** Never create: the streams and the consumer must exist. */
  readonly bind: boolean;
  readonly replicas: number;
  /** The ack wait of a consumer this creates. */
  readonly ackWaitMs: number;
  /** How many messages may be delivered and unacked at once, across every process. */
  readonly maxAckPending: number;
}

/** True when `subject` (no wildcards) is one that `filter` (maybe with `*` and `>`) takes. @internal */
export function subjectMatches(filter: string, subject: string): boolean {
  const f = filter.split('.');
  const t = subject.split('.');
  for (let i = 0; i < f.length; i++) {
    if (f[i] === '>') return t.length > i;
    if (i >= t.length || (f[i] !== '*' && f[i] !== t[i])) return false;
  }
  return f.length === t.length;
}

function takes(subjects: readonly string[] | undefined, subject: string): boolean {
  return (subjects ?? []).some((filter) => subjectMatches(filter, subject));
}

function apiCode(error: unknown): number | undefined {
  return error instanceof JetStreamApiError ? error.code : undefined;
}

async function streamInfo(jsm: JetStreamManager, name: string): Promise<StreamInfo | undefined> {
  try {
    return await jsm.streams.info(name);
  } catch (error) {
    if (apiCode(error) === JetStreamApiCodes.StreamNotFound) return undefined;
    throw error;
  }
}

async function consumerInfo(jsm: JetStreamManager, stream: string, name: string): Promise<ConsumerInfo | undefined> {
  try {
    return await jsm.consumers.info(stream, name);
  } catch (error) {
    if (apiCode(error) === JetStreamApiCodes.ConsumerNotFound) return undefined;
    throw error;
  }
}

/** The server's duplicate window when a stream is created without one. */
const DEFAULT_DUPLICATE_WINDOW_MS = 120_000;
const NS_PER_MS = 1e6;

/** A limit that is set: the server reports an unset one as -1 (counts, sizes) or 0 (ages). */
const isSet = (limit: number | undefined): boolean => limit !== undefined && limit > 0;

/**
 * Why a work-queue stream cannot hold the queue's items, or undefined. Retention is not enough:
 * a stream also deletes messages by age, and, when a limit is reached with discard `old`, its
 * oldest messages, acked or not; the queue would lose items nobody settled.
 */
function queueStreamRefusal(info: StreamInfo, names: Names): string | undefined {
  const c = info.config;
  if (c.retention !== RetentionPolicy.Workqueue) return `has ${c.retention} retention; a queue needs a work-queue stream, where an ack removes the item`;
  // A push to a subject the stream does not take would be stored nowhere.
  if (!takes(c.subjects, names.subject)) return `does not take subject ${names.subject} (it takes ${(c.subjects ?? []).join(', ')}): give the queue its subject`;
  if (isSet(c.max_age)) return `has max_age ${Math.round(c.max_age / NS_PER_MS)} ms: the server would delete items older than that, acked or not`;
  if (c.discard !== DiscardPolicy.New) {
    for (const key of ['max_msgs', 'max_bytes', 'max_msgs_per_subject'] as const) {
      if (isSet(c[key])) return `has ${key} ${c[key]} with discard ${c.discard}: at the limit the server would delete the oldest items, acked or not (discard new refuses pushes instead)`;
    }
  }
  return undefined;
}

/**
 * Why a consumer cannot deliver the queue's items, or undefined: an ack that does not remove the
 * item, a push consumer, a filter that leaves the queue's subject out, a server delivery limit
 * (an item past it stays in the work-queue stream for good, never delivered, never
 * dead-lettered), or a start other than the first item (the older items would never be
 * delivered; the server refuses that on a work-queue stream today, the check stays for one that
 * would not). @internal
 */
export function consumerRefusal(info: ConsumerInfo, names: Names): string | undefined {
  const c = info.config;
  if (c.ack_policy !== AckPolicy.Explicit) return `has ack policy ${c.ack_policy}; a queue needs explicit acks`;
  const filter = c.filter_subject;
  if (filter !== undefined && filter !== '' && !subjectMatches(filter, names.subject)) return `filters on ${filter}, which does not take the queue's subject ${names.subject}`;
  if (c.deliver_subject !== undefined && c.deliver_subject !== '') return 'is a push consumer; a queue needs a pull consumer';
  if (isSet(c.max_deliver)) return `has max_deliver ${c.max_deliver}: an item delivered that often would stay in the stream, never delivered again; the queue's maxDeliveries moves it into the dead letters instead`;
  if (c.deliver_policy !== undefined && c.deliver_policy !== DeliverPolicy.All) return `has deliver_policy ${c.deliver_policy}: the items stored before its start would never be delivered; a queue needs deliver_policy all`;
  return undefined;
}

/**
 * The duplicate window the dead-letter stream needs: a move interrupted between its publish and
 * its ack is repeated when the item comes back, one ack wait later at the soonest, and the server
 * drops the second publish only within the window. Twice the ack wait leaves one more ack wait
 * for a consumer to pull the item again.
 */
function duplicateWindowMs(ackWaitMs: number): number {
  return Math.max(DEFAULT_DUPLICATE_WINDOW_MS, 2 * ackWaitMs);
}

function deadStreamRefusal(info: StreamInfo, names: Names, ackWaitMs: number): string | undefined {
  const c = info.config;
  if (!takes(c.subjects, names.deadLetterSubject)) return `does not take subject ${names.deadLetterSubject}: give the queue its dead-letter subject`;
  const windowMs = Math.round((c.duplicate_window ?? 0) / NS_PER_MS);
  if (windowMs < ackWaitMs) {
    return `has duplicate_window ${windowMs} ms, shorter than the consumer's ack wait (${ackWaitMs} ms): a move interrupted before its ack would be repeated after the window and store the dead letter twice; give it at least ${duplicateWindowMs(ackWaitMs)} ms`;
  }
  return undefined;
}

function refuse(what: string, reason: string | undefined): void {
  if (reason !== undefined) throw new QueueError('ERR_UNSUPPORTED', `${what} ${reason}`);
}

/** What `setUp` found or made. @internal */
export interface SetUp {
  /** The consumer's ack wait, in ms. */
  readonly ackWaitMs: number;
  /** When the queue stream was created (ISO time): a stream deleted and made again restarts its seqs. */
  readonly streamCreated: string;
  /** The queue stream's configuration, as far as what a push survives depends on it. */
  readonly storage: string;
  readonly replicas: number;
  /** `persist_mode` (servers from 2.12; undefined before). */
  readonly persistMode: string | undefined;
}

/**
 * Find or create the queue stream, its dead-letter stream and the durable consumer. An existing
 * one that cannot keep the queue's promises is refused with `ERR_UNSUPPORTED` naming the setting
 * (see `queueStreamRefusal`, `consumerRefusal`, `deadStreamRefusal`): over it, an ack would not
 * remove the item, a push would be stored nowhere, an item would be deleted unsettled or never
 * delivered, or a dead letter stored twice. Nothing is created unless every existing one passes.
 * @internal
 */
export async function setUp(jsm: JetStreamManager, s: SetupSettings): Promise<SetUp> {
  const { names } = s;
  let queue = await streamInfo(jsm, names.stream);
  let dead = await streamInfo(jsm, names.deadLetterStream);
  let consumer = queue === undefined ? undefined : await consumerInfo(jsm, names.stream, names.consumer);
  if (s.bind) {
    if (queue === undefined) throw new OpenError('ERR_NOT_FOUND', `No stream ${names.stream} on the server, and bind was asked for`);
    if (dead === undefined) throw new OpenError('ERR_NOT_FOUND', `No stream ${names.deadLetterStream} on the server, and bind was asked for`);
    if (consumer === undefined) throw new OpenError('ERR_NOT_FOUND', `No consumer ${names.consumer} on stream ${names.stream}, and bind was asked for`);
  }
  const ackWaitOf = (info: ConsumerInfo): number => Math.round((info.config.ack_wait ?? 30e9) / NS_PER_MS);
  const ackWaitMs = consumer === undefined ? s.ackWaitMs : ackWaitOf(consumer);
  if (queue !== undefined) refuse(`Stream ${names.stream}`, queueStreamRefusal(queue, names));
  if (consumer !== undefined) refuse(`Consumer ${names.consumer}`, consumerRefusal(consumer, names));
  if (dead !== undefined) refuse(`Stream ${names.deadLetterStream}`, deadStreamRefusal(dead, names, ackWaitMs));

  if (queue === undefined) {
    queue = await jsm.streams.add({
      name: names.stream,
      subjects: [names.subject],
      retention: RetentionPolicy.Workqueue,
      storage: StorageType.File,
      num_replicas: s.replicas,
    });
    refuse(`Stream ${names.stream}`, queueStreamRefusal(queue, names));
  }
  if (dead === undefined) {
    dead = await jsm.streams.add({
      name: names.deadLetterStream,
      subjects: [names.deadLetterSubject],
      retention: RetentionPolicy.Limits,
      storage: StorageType.File,
      num_replicas: s.replicas,
      duplicate_window: duplicateWindowMs(ackWaitMs) * NS_PER_MS,
    });
    refuse(`Stream ${names.deadLetterStream}`, deadStreamRefusal(dead, names, ackWaitMs));
  }
  if (consumer === undefined) {
    consumer = await jsm.consumers.add(names.stream, {
      durable_name: names.consumer,
      ack_policy: AckPolicy.Explicit,
      ack_wait: ackWaitMs * NS_PER_MS,
      // Redeliveries are counted by the server and limited by the queue (maxDeliveries), which
      // moves an item into the dead letters itself: a server limit would strand it in the stream.
      max_deliver: -1,
      deliver_policy: DeliverPolicy.All,
      max_ack_pending: s.maxAckPending,
      filter_subject: names.subject,
    });
    refuse(`Consumer ${names.consumer}`, consumerRefusal(consumer, names));
  }
  const c = queue.config as typeof queue.config & { persist_mode?: string };
  return { ackWaitMs: ackWaitOf(consumer), streamCreated: queue.created, storage: c.storage, replicas: c.num_replicas, persistMode: c.persist_mode };
}
