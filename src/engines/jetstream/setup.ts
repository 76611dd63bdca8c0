// The streams and the consumers a JetStream queue runs on: found, checked, or created. The queue
// stream keeps items until they are acked (work-queue retention), plain ones on the queue's
// subject and delayed ones on `<subject>.delayed` until they fall due and are moved onto the
// queue's subject (delayed.ts), each subject with a durable consumer of its own; the dead-letter stream keeps what is moved into it until it is purged or
// redriven (limits retention, no limits set); the key stream remembers the idempotency keys of
// acked items for the duplicate window (one record per key, limits retention, max_age the
// window), which the queue stream forgets when a restart rebuilds its duplicate map from the
// messages it still holds. Every existing one is looked up and checked before anything is
// created, and what an open created is deleted again when a later step fails, so that a refused
// open leaves the server as it found it.
import {
  AckPolicy,
  DeliverPolicy,
  DiscardPolicy,
  JetStreamApiCodes,
  JetStreamApiError,
  type JetStreamManager,
  RetentionPolicy,
  StorageType,
  type ConsumerConfig,
  type ConsumerInfo,
  type StreamConfig,
  type StreamInfo,
} from '@nats-io/jetstream';
import { OpenError, QueueError } from '../../contract/errors.js';

/** Where a queue lives on the server. @internal */
export interface Names {
  readonly stream: string;
  readonly subject: string;
  readonly consumer: string;
  readonly deadLetterStream: string;
  readonly deadLetterSubject: string;
  /** The stream that remembers the keys of acked items. */
  readonly keyStream: string;
  /** The key records' subjects start with it: `<keySubject>.<key, base64url>`. */
  readonly keySubject: string;
  /** The subject of the queue stream delayed items wait on. */
  readonly delayedSubject: string;
  /** The durable consumer of the delayed subject. */
  readonly delayedConsumer: string;
}

/** The longest stream or consumer name the server takes, in UTF-8 bytes (its JSMaxNameLen). @internal */
export const NAME_BYTES_MAX = 255;

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
 * Why a stream cannot keep what a resolved push or move promises across a crash of the server's
 * process, or undefined: memory storage (a restart empties it) or `persist_mode: async` (2.12:
 * acknowledged before it is written).
 */
function storageRefusal(info: StreamInfo): string | undefined {
  const c = info.config as StreamConfig & { persist_mode?: string };
  if (c.storage === StorageType.Memory)
    return 'has memory storage: a restart of the server would lose every item it acknowledged; the queue needs file storage';
  if (c.persist_mode === 'async')
    return 'has persist_mode async: the server acknowledges a message before it writes it, and a crash loses it; the queue needs the default persist mode';
  return undefined;
}

/**
 * Why a work-queue stream cannot hold the queue's items, or undefined. Retention is not enough:
 * a stream also deletes messages by age, and, when a limit is reached with discard `old`, its
 * oldest messages, acked or not; the queue would lose items nobody settled.
 */
function queueStreamRefusal(info: StreamInfo, subject: string): string | undefined {
  const c = info.config;
  if (c.retention !== RetentionPolicy.Workqueue)
    return `has ${c.retention} retention; a queue needs a work-queue stream, where an ack removes the item`;
  // A push to a subject the stream does not take would be stored nowhere.
  if (!takes(c.subjects, subject))
    return `does not take subject ${subject} (it takes ${(c.subjects ?? []).join(', ')}): give the queue its subject`;
  const storage = storageRefusal(info);
  if (storage !== undefined) return storage;
  if (isSet(c.max_age))
    return `has max_age ${Math.round(c.max_age / NS_PER_MS)} ms: the server would delete items older than that, acked or not`;
  if (c.discard !== DiscardPolicy.New) {
    for (const key of ['max_msgs', 'max_bytes', 'max_msgs_per_subject'] as const) {
      if (isSet(c[key]))
        return `has ${key} ${c[key]} with discard ${c.discard}: at the limit the server would delete the oldest items, acked or not (discard new refuses pushes instead)`;
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
export function consumerRefusal(info: ConsumerInfo, names: Names, subject = names.subject): string | undefined {
  const c = info.config;
  if (c.ack_policy !== AckPolicy.Explicit) return `has ack policy ${c.ack_policy}; a queue needs explicit acks`;
  const filter = c.filter_subject;
  if (filter !== undefined && filter !== '' && !subjectMatches(filter, subject))
    return `filters on ${filter}, which does not take the queue's subject ${subject}`;
  if (c.deliver_subject !== undefined && c.deliver_subject !== '') return 'is a push consumer; a queue needs a pull consumer';
  if (isSet(c.max_deliver))
    return `has max_deliver ${c.max_deliver}: an item delivered that often would stay in the stream, never delivered again; the queue's maxDeliveries moves it into the dead letters instead`;
  if (c.deliver_policy !== undefined && c.deliver_policy !== DeliverPolicy.All)
    return `has deliver_policy ${c.deliver_policy}: the items stored before its start would never be delivered; a queue needs deliver_policy all`;
  return undefined;
}

/**
 * The duplicate window a stream needs when a process may die between a publish into it and the
 * ack of the message it copies (a dead-letter move, a delayed item falling due): the message
 * comes back one ack wait later at the soonest and is published again under the same id, which
 * the server drops only within the window. Twice the ack wait leaves one more ack wait for a
 * consumer to pull the message again.
 */
function duplicateWindowMs(ackWaitMs: number): number {
  return Math.max(DEFAULT_DUPLICATE_WINDOW_MS, 2 * ackWaitMs);
}

const windowOf = (info: StreamInfo): number => Math.round((info.config.duplicate_window ?? 0) / NS_PER_MS);

function deadStreamRefusal(info: StreamInfo, names: Names, ackWaitMs: number): string | undefined {
  const c = info.config;
  if (!takes(c.subjects, names.deadLetterSubject))
    return `does not take subject ${names.deadLetterSubject}: give the queue its dead-letter subject`;
  const storage = storageRefusal(info);
  if (storage !== undefined) return storage;
  const windowMs = windowOf(info);
  if (windowMs < ackWaitMs) {
    return `has duplicate_window ${windowMs} ms, shorter than the consumer's ack wait (${ackWaitMs} ms): a move interrupted before its ack would be repeated after the window and store the dead letter twice; give it at least ${duplicateWindowMs(ackWaitMs)} ms`;
  }
  return undefined;
}

/** Why a key stream cannot remember the keys of acked items for `windowMs`, or undefined. */
function keyStreamRefusal(info: StreamInfo, names: Names, windowMs: number): string | undefined {
  const c = info.config;
  if (!takes(c.subjects, `${names.keySubject}.x`)) return `does not take subjects ${names.keySubject}.*: give the queue its key subjects`;
  if (c.retention === RetentionPolicy.Workqueue || c.retention === RetentionPolicy.Interest)
    return `has ${c.retention} retention; the key records are kept by age (limits retention)`;
  const storage = storageRefusal(info);
  if (storage !== undefined) return storage;
  if (isSet(c.max_age) && c.max_age / NS_PER_MS < windowMs)
    return `has max_age ${Math.round(c.max_age / NS_PER_MS)} ms, shorter than the queue stream's duplicate window (${windowMs} ms): keys would be forgotten early`;
  if (c.discard !== DiscardPolicy.New) {
    for (const key of ['max_msgs', 'max_bytes'] as const) {
      if (isSet(c[key])) return `has ${key} ${c[key]} with discard ${c.discard}: at the limit the server would forget keys early`;
    }
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
  /** The queue stream's duplicate window, in ms: how long a key is remembered. */
  readonly duplicateWindowMs: number;
  /** The queue stream's largest message, in bytes; -1: no limit of its own. */
  readonly maxMsgSize: number;
  /** Why a delayed push cannot be kept here (`ERR_UNSUPPORTED`), or undefined when it can. */
  readonly noDelays: string | undefined;
}

/**
 * What an open created or changed, in order, to undo (newest first) when a later step fails: a
 * stream or a consumer it created, or the subjects a stream had before it added one.
 */
type Made = { readonly stream: string; readonly consumer?: string; readonly subjects?: string[] };

async function undo(jsm: JetStreamManager, made: readonly Made[]): Promise<string[]> {
  const left: string[] = [];
  for (const m of [...made].reverse()) {
    try {
      if (m.consumer !== undefined) await jsm.consumers.delete(m.stream, m.consumer);
      else if (m.subjects !== undefined)
        await jsm.streams.update(m.stream, { ...(await jsm.streams.info(m.stream)).config, subjects: m.subjects });
      else await jsm.streams.delete(m.stream);
    } catch {
      left.push(
        m.consumer !== undefined
          ? `consumer ${m.consumer} of ${m.stream}`
          : m.subjects !== undefined
            ? `the subjects of stream ${m.stream}`
            : `stream ${m.stream}`,
      );
    }
  }
  return left;
}

/**
 * Find or create the queue stream, its dead-letter and key streams, and the durable consumer.
 * An existing one that cannot keep the queue's promises is refused with `ERR_UNSUPPORTED` naming
 * the setting (see `queueStreamRefusal`, `consumerRefusal`, `deadStreamRefusal`,
 * `keyStreamRefusal`): over it, an ack would not remove the item, a push would be stored nowhere
 * or lost by a restart, an item would be deleted unsettled or never delivered, a dead letter
 * stored twice, or a key forgotten early. Nothing is created unless every existing one passes,
 * and what was created is deleted again if a later step fails.
 * @internal
 */
export async function setUp(jsm: JetStreamManager, s: SetupSettings): Promise<SetUp> {
  const made: Made[] = [];
  try {
    return await findOrMake(jsm, s, made);
  } catch (error) {
    const left = made.length === 0 ? [] : await undo(jsm, made);
    if (left.length > 0 && error instanceof Error) error.message += ` (this open created, and could not delete again: ${left.join(', ')})`;
    throw error;
  }
}

async function findOrMake(jsm: JetStreamManager, s: SetupSettings, made: Made[]): Promise<SetUp> {
  const { names } = s;
  let queue = await streamInfo(jsm, names.stream);
  let dead = await streamInfo(jsm, names.deadLetterStream);
  let keys = await streamInfo(jsm, names.keyStream);
  let consumer = queue === undefined ? undefined : await consumerInfo(jsm, names.stream, names.consumer);
  const delayedConsumer = queue === undefined ? undefined : await consumerInfo(jsm, names.stream, names.delayedConsumer);
  if (s.bind) {
    if (queue === undefined) throw new OpenError('ERR_NOT_FOUND', `No stream ${names.stream} on the server, and bind was asked for`);
    if (dead === undefined)
      throw new OpenError('ERR_NOT_FOUND', `No stream ${names.deadLetterStream} on the server, and bind was asked for`);
    if (keys === undefined) throw new OpenError('ERR_NOT_FOUND', `No stream ${names.keyStream} on the server, and bind was asked for`);
    if (consumer === undefined)
      throw new OpenError('ERR_NOT_FOUND', `No consumer ${names.consumer} on stream ${names.stream}, and bind was asked for`);
  }
  const ackWaitOf = (info: ConsumerInfo): number => Math.round((info.config.ack_wait ?? 30e9) / NS_PER_MS);
  const ackWaitMs = consumer === undefined ? s.ackWaitMs : ackWaitOf(consumer);
  if (queue !== undefined) refuse(`Stream ${names.stream}`, queueStreamRefusal(queue, names.subject));
  if (consumer !== undefined) refuse(`Consumer ${names.consumer}`, consumerRefusal(consumer, names));
  if (dead !== undefined) refuse(`Stream ${names.deadLetterStream}`, deadStreamRefusal(dead, names, ackWaitMs));
  // The window of a queue stream still to be made is the server's default.
  const windowMs = queue === undefined ? DEFAULT_DUPLICATE_WINDOW_MS : windowOf(queue);
  if (keys !== undefined) refuse(`Stream ${names.keyStream}`, keyStreamRefusal(keys, names, windowMs));
  if (delayedConsumer !== undefined)
    refuse(`Consumer ${names.delayedConsumer}`, consumerRefusal(delayedConsumer, names, names.delayedSubject));

  const addStream = async (config: Partial<StreamConfig> & { name: string }): Promise<StreamInfo> => {
    const info = await jsm.streams.add(config);
    made.push({ stream: config.name });
    return info;
  };
  const addConsumer = async (stream: string, config: Partial<ConsumerConfig> & { durable_name: string }): Promise<ConsumerInfo> => {
    const info = await jsm.consumers.add(stream, config);
    made.push({ stream, consumer: config.durable_name });
    return info;
  };
  if (queue === undefined) {
    queue = await addStream({
      name: names.stream,
      subjects: [names.subject, names.delayedSubject],
      retention: RetentionPolicy.Workqueue,
      storage: StorageType.File,
      num_replicas: s.replicas,
      // A delayed item falling due is published here under an id of its own, again if its mover
      // died before the ack: the window must outlast an ack wait (duplicateWindowMs). It is also
      // how long keys are remembered.
      duplicate_window: duplicateWindowMs(ackWaitMs) * NS_PER_MS,
    });
    refuse(`Stream ${names.stream}`, queueStreamRefusal(queue, names.subject));
  }
  if (dead === undefined) {
    dead = await addStream({
      name: names.deadLetterStream,
      subjects: [names.deadLetterSubject],
      retention: RetentionPolicy.Limits,
      storage: StorageType.File,
      num_replicas: s.replicas,
      duplicate_window: duplicateWindowMs(ackWaitMs) * NS_PER_MS,
    });
    refuse(`Stream ${names.deadLetterStream}`, deadStreamRefusal(dead, names, ackWaitMs));
  }
  if (keys === undefined) {
    keys = await addStream({
      name: names.keyStream,
      subjects: [`${names.keySubject}.*`],
      retention: RetentionPolicy.Limits,
      storage: StorageType.File,
      num_replicas: s.replicas,
      // One record per key, the latest; kept for the window from the ack that wrote it.
      max_msgs_per_subject: 1,
      max_age: Math.max(1, windowOf(queue)) * NS_PER_MS,
    });
    refuse(`Stream ${names.keyStream}`, keyStreamRefusal(keys, names, windowOf(queue)));
  }
  const consumerConfig: ConsumerConfigOf = (name, subject, maxAckPending) => ({
    durable_name: name,
    ack_policy: AckPolicy.Explicit,
    ack_wait: ackWaitMs * NS_PER_MS,
    // Redeliveries are counted by the server and limited by the queue (maxDeliveries), which
    // moves an item into the dead letters itself: a server limit would strand it in the stream.
    max_deliver: -1,
    deliver_policy: DeliverPolicy.All,
    max_ack_pending: maxAckPending,
    filter_subject: subject,
  });
  if (consumer === undefined) {
    consumer = await addConsumer(names.stream, consumerConfig(names.consumer, names.subject, s.maxAckPending));
    refuse(`Consumer ${names.consumer}`, consumerRefusal(consumer, names));
  }
  const noDelays = await delayedSetUp(
    jsm,
    s,
    made,
    { queue, consumer, delayedConsumer, ackWaitMs: ackWaitOf(consumer) },
    (c) => addConsumer(names.stream, c),
    consumerConfig,
  );
  const c = queue.config as typeof queue.config & { persist_mode?: string };
  return {
    ackWaitMs: ackWaitOf(consumer),
    streamCreated: queue.created,
    storage: c.storage,
    replicas: c.num_replicas,
    persistMode: c.persist_mode,
    duplicateWindowMs: windowOf(queue),
    maxMsgSize: c.max_msg_size ?? -1,
    noDelays,
  };
}

type ConsumerConfigOf = (name: string, subject: string, maxAckPending: number) => Partial<ConsumerConfig> & { durable_name: string };

/**
 * The delayed subject and its consumer: the subject is added to a queue stream that lacks it and
 * the consumer made, unless bind. Delays are refused (the reason is returned), not the open, when
 * they cannot be kept: the queue works without them, and a queue made before them has neither.
 */
async function delayedSetUp(
  jsm: JetStreamManager,
  s: SetupSettings,
  made: Made[],
  found: { queue: StreamInfo; consumer: ConsumerInfo; delayedConsumer: ConsumerInfo | undefined; ackWaitMs: number },
  addConsumer: (config: Partial<ConsumerConfig> & { durable_name: string }) => Promise<ConsumerInfo>,
  consumerConfig: ConsumerConfigOf,
): Promise<string | undefined> {
  const { names } = s;
  const { queue, consumer, ackWaitMs } = found;
  const windowMs = windowOf(queue);
  if (windowMs < ackWaitMs) {
    return `stream ${names.stream} keeps message ids for ${windowMs} ms, less than the consumer's ack wait (${ackWaitMs} ms): a delayed item whose mover died before its ack would be stored twice; give it a duplicate_window of at least ${duplicateWindowMs(ackWaitMs)} ms`;
  }
  const filter = consumer.config.filter_subject ?? '';
  if (filter === '' || subjectMatches(filter, names.delayedSubject)) {
    return `consumer ${names.consumer} filters on ${filter === '' ? 'every subject' : filter}, which takes the delayed items' ${names.delayedSubject} too`;
  }
  const subjects = queue.config.subjects ?? [];
  if (!takes(subjects, names.delayedSubject)) {
    if (s.bind)
      return `stream ${names.stream} does not take subject ${names.delayedSubject}, where delayed items wait (bind was asked for): open the queue once without bind, or add the subject`;
    // A queue made before delays: its stream takes the delayed subject from now on (and gives it
    // back if this open fails).
    await jsm.streams.update(names.stream, { ...queue.config, subjects: [...subjects, names.delayedSubject] });
    made.push({ stream: names.stream, subjects });
  }
  if (found.delayedConsumer === undefined) {
    if (s.bind)
      return `no consumer ${names.delayedConsumer} on stream ${names.stream} (bind was asked for): open the queue once without bind to make it`;
    // Every item waiting for its time is delivered to this consumer and held back with a nak: a
    // limit on those would stop the items behind it from falling due.
    const delayed = await addConsumer(consumerConfig(names.delayedConsumer, names.delayedSubject, -1));
    refuse(`Consumer ${names.delayedConsumer}`, consumerRefusal(delayed, names, names.delayedSubject));
  }
  return undefined;
}
