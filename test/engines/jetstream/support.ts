/**
 * What the store-and-forward tests share: a stream of their own per test, reading a stream back
 * whole, and a clock that tells the test when a backoff starts (so that no test waits on time).
 */
import { type JetStreamManager, jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { ManualClock } from '../../../src/testing/index.js';

let streams = 0;

/** A new stream capturing a subject of its own. */
export async function freshStream(jsm: JetStreamManager): Promise<{ stream: string; subject: string }> {
  const n = ++streams;
  const stream = `PQ_FWD_${process.pid}_${n}`;
  const subject = `pq.fwd.${process.pid}.${n}`;
  await jsm.streams.add({ name: stream, subjects: [subject], duplicate_window: 120 * 1e9 });
  return { stream, subject };
}

/** One message of a stream: its message id and payload as text. */
export interface StreamMessage {
  readonly id: string;
  readonly text: string;
}

/** Every message the stream holds, in stream order, read through an ordered consumer. */
export async function readStream(jsm: JetStreamManager, stream: string): Promise<StreamMessage[]> {
  const info = await jsm.streams.info(stream);
  const out: StreamMessage[] = [];
  if (info.state.messages === 0) return out;
  const consumer = await jsm.jetstream().consumers.get(stream);
  const messages = await consumer.consume();
  for await (const m of messages) {
    out.push({ id: m.headers?.get('Nats-Msg-Id') ?? '', text: new TextDecoder().decode(m.data) });
    if (out.length === info.state.messages) break;
  }
  await messages.close();
  return out;
}

/**
 * Check that the stream holds `origin:1 .. origin:count`, each exactly once, with the payload
 * `payload(seq)`; returns a description of every difference (empty when none).
 */
export function differences(messages: readonly StreamMessage[], origin: string, count: number, payload: (seq: number) => string): string[] {
  const seen = new Map<string, number>();
  const problems: string[] = [];
  for (const m of messages) {
    seen.set(m.id, (seen.get(m.id) ?? 0) + 1);
    const seq = Number(m.id.slice(origin.length + 1));
    if (!m.id.startsWith(`${origin}:`) || !Number.isSafeInteger(seq) || seq < 1 || seq > count)
      problems.push(`unexpected message id ${m.id}`);
    else if (m.text !== payload(seq)) problems.push(`${m.id} holds ${JSON.stringify(m.text)}`);
  }
  for (let seq = 1; seq <= count; seq++) {
    const n = seen.get(`${origin}:${seq}`) ?? 0;
    if (n !== 1) problems.push(`${origin}:${seq} is in the stream ${n} times`);
  }
  return problems;
}

/** A connection that never gives up reconnecting, quickly, as a forwarder's should. */
export function connectTo(url: string): Promise<NatsConnection> {
  return connect({ servers: url, maxReconnectAttempts: -1, reconnectTimeWait: 50, reconnectJitter: 0 });
}

export async function managerOf(nc: NatsConnection): Promise<JetStreamManager> {
  return jetstreamManager(nc);
}

/** A ManualClock that records each timer's length and lets a test await the next one. */
export class WatchedClock extends ManualClock {
  readonly lengths: number[] = [];
  #waiters: (() => void)[] = [];

  override setTimeout(fn: () => void, ms: number): unknown {
    this.lengths.push(ms);
    for (const w of this.#waiters.splice(0)) w();
    return super.setTimeout(fn, ms);
  }

  /** Resolves once `count` timers have been set in all. */
  async timers(count: number): Promise<void> {
    while (this.lengths.length < count) await new Promise<void>((r) => this.#waiters.push(r));
  }
}

/** Resolves on the connection's next status report of `type` ('disconnect', 'reconnect'). */
export async function nextStatus(nc: NatsConnection, type: string): Promise<void> {
  for await (const s of nc.status()) if (s.type === type) return;
}
