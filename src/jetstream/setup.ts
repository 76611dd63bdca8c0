// The streams and the consumer a JetStream queue runs on: found, checked, or created. The queue
// stream keeps items until they are acked (work-queue retention); the dead-letter stream keeps
// what is moved into it until it is purged or redriven (limits retention, no limits set).
import { AckPolicy, JetStreamApiCodes, JetStreamApiError, type JetStreamManager, RetentionPolicy, StorageType, type ConsumerInfo, type StreamInfo } from '@nats-io/jetstream';
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

/**
 * Find or create the queue stream, its dead-letter stream and the durable consumer. An existing
 * stream that is not a work queue, or does not take the queue's subject, or a consumer that does
 * not ack explicitly, filters other subjects or pushes, is refused with `ERR_UNSUPPORTED`: over
 * it, an ack would not remove the item, a push would be stored nowhere, or a delivery would
 * count as done. Returns the consumer's ack wait in ms.
 * @internal
 */
export async function setUp(jsm: JetStreamManager, s: SetupSettings): Promise<{ ackWaitMs: number }> {
  const { names } = s;
  let queue = await streamInfo(jsm, names.stream);
  if (queue === undefined) {
    if (s.bind) throw new OpenError('ERR_NOT_FOUND', `No stream ${names.stream} on the server, and bind was asked for`);
    queue = await jsm.streams.add({
      name: names.stream,
      subjects: [names.subject],
      retention: RetentionPolicy.Workqueue,
      storage: StorageType.File,
      num_replicas: s.replicas,
    });
  }
  if (queue.config.retention !== RetentionPolicy.Workqueue) {
    throw new QueueError('ERR_UNSUPPORTED', `Stream ${names.stream} has ${queue.config.retention} retention; a queue needs a work-queue stream, where an ack removes the item`);
  }
  // A push to a subject the stream does not take would be stored nowhere.
  if (!takes(queue.config.subjects, names.subject)) {
    throw new QueueError('ERR_UNSUPPORTED', `Stream ${names.stream} does not take subject ${names.subject} (it takes ${(queue.config.subjects ?? []).join(', ')}): give the queue its subject`);
  }
  let dead = await streamInfo(jsm, names.deadLetterStream);
  if (dead === undefined) {
    if (s.bind) throw new OpenError('ERR_NOT_FOUND', `No stream ${names.deadLetterStream} on the server, and bind was asked for`);
    dead = await jsm.streams.add({
      name: names.deadLetterStream,
      subjects: [names.deadLetterSubject],
      retention: RetentionPolicy.Limits,
      storage: StorageType.File,
      num_replicas: s.replicas,
    });
  }
  if (!takes(dead.config.subjects, names.deadLetterSubject)) {
    throw new QueueError('ERR_UNSUPPORTED', `Stream ${names.deadLetterStream} does not take subject ${names.deadLetterSubject}: give the queue its dead-letter subject`);
  }
  let consumer = await consumerInfo(jsm, names.stream, names.consumer);
  if (consumer === undefined) {
    if (s.bind) throw new OpenError('ERR_NOT_FOUND', `No consumer ${names.consumer} on stream ${names.stream}, and bind was asked for`);
    consumer = await jsm.consumers.add(names.stream, {
      durable_name: names.consumer,
      ack_policy: AckPolicy.Explicit,
      ack_wait: s.ackWaitMs * 1e6,
      // Redeliveries are counted by the server and limited by the queue (maxDeliveries), which
      // moves an item into the dead letters itself: a server limit would strand it in the stream.
      max_deliver: -1,
      max_ack_pending: s.maxAckPending,
      filter_subject: names.subject,
    });
  }
  if (consumer.config.ack_policy !== AckPolicy.Explicit) {
    throw new QueueError('ERR_UNSUPPORTED', `Consumer ${names.consumer} has ack policy ${consumer.config.ack_policy}; a queue needs explicit acks`);
  }
  const filter = consumer.config.filter_subject;
  if (filter !== undefined && filter !== '' && !subjectMatches(filter, names.subject)) {
    throw new QueueError('ERR_UNSUPPORTED', `Consumer ${names.consumer} filters on ${filter}, which does not take the queue's subject ${names.subject}`);
  }
  if (consumer.config.deliver_subject !== undefined && consumer.config.deliver_subject !== '') {
    throw new QueueError('ERR_UNSUPPORTED', `Consumer ${names.consumer} is a push consumer; a queue needs a pull consumer`);
  }
  return { ackWaitMs: Math.round((consumer.config.ack_wait ?? 30e9) / 1e6) };
}
