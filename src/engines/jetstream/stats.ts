// What stats() tells of a JetStream queue: the server's counts, asked for at each call, and the
// counters this process keeps.
import type { JetStreamCore } from './core.js';
import type { JetStreamDurability } from './durability.js';
import type { JetStreamConsumer } from './handles.js';

/**
 * What {@link JetStreamConsumer.stats} tells: the server's counts, and this process's counters.
 * Once the queue is closed (or failed) the server is not asked: its counts are 0. While the
 * server cannot be reached, `stats()` rejects with `ERR_STORE` after the timeout.
 */
export interface JetStreamQueueStats {
  /** Messages the consumer has not delivered yet (the server's `num_pending`). */
  ready: number;
  /** Delivered and not yet acked, by any process (the server's `num_ack_pending`). */
  inFlight: number;
  /** Redelivered and not yet acked, by any process (the server's `num_redelivered`). */
  redeliveries: number;
  /** Messages the queue stream holds: ready, in flight, waiting for a nack delay, and delayed. */
  streamMessages: number;
  /** Delayed pushes waiting for their time (nacks with a delay are in `inFlight`). */
  delayed: number;
  /** Dead letters the dead-letter stream holds. */
  deadLetters: number;
  /** Reservations this process holds. */
  held: number;
  /** Of those, reservations with a lease running. */
  leased: number;
  /** Pushes this process issued and the server has not confirmed yet. */
  pendingPushes: number;
  /** Acks this process issued and the server has not confirmed yet. */
  pendingAcks: number;
  closed: boolean;
  /** Counters of this process since `open()`, as the embedded queue's: */
  pushed: number;
  acked: number;
  nacked: number;
  redelivered: number;
  retried: number;
  deadLettered: number;
  leaseExpired: number;
  /**
   * What a push the server acknowledged survives: the server's fsync setting (as far as it can be
   * known), the queue stream's storage, replicas and persist mode. Found at `open()`.
   */
  durability: JetStreamDurability;
}

/** The server's counts and this process's counters. @internal */
export async function queueStats(core: JetStreamCore, consumer: JetStreamConsumer<unknown> | undefined): Promise<JetStreamQueueStats> {
  const c = core.counters;
  let held = 0;
  let leased = 0;
  for (const x of consumer === undefined ? [] : [consumer]) {
    held += x.held.size;
    for (const item of x.held) if (item.leaseMs !== Infinity) leased++;
  }
  const local = {
    held,
    leased,
    pendingPushes: c.pendingPushes,
    pendingAcks: c.pendingAcks,
    closed: core.closed,
    pushed: c.pushed,
    acked: c.acked,
    nacked: c.nacked,
    redelivered: c.redelivered,
    retried: c.retried,
    deadLettered: c.deadLettered,
    leaseExpired: c.leaseExpired,
    durability: core.s.durability,
  };
  const error = core.operationalError();
  if (error) return { ready: 0, inFlight: 0, redeliveries: 0, streamMessages: 0, delayed: 0, deadLetters: 0, ...local };
  const { jsm, names, noDelays } = core.s;
  const [info, stream, dead, delayed] = await core.api('stats()', () =>
    Promise.all([
      jsm.consumers.info(names.stream, names.consumer),
      jsm.streams.info(names.stream),
      jsm.streams.info(names.deadLetterStream),
      noDelays === undefined ? jsm.consumers.info(names.stream, names.delayedConsumer) : undefined,
    ]),
  );
  return {
    ready: info.num_pending,
    inFlight: info.num_ack_pending,
    redeliveries: info.num_redelivered,
    streamMessages: stream.state.messages,
    // Not yet delivered to a mover, or held back by one with a delayed nak.
    delayed: delayed === undefined ? 0 : delayed.num_pending + delayed.num_ack_pending,
    deadLetters: dead.state.messages,
    ...local,
  };
}
