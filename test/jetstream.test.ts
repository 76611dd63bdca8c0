/**
 * The JetStream queue: the shared queue semantics (test/support/queue-semantics.ts) over a
 * JetStream server, and what is its own (options, binding, the dead-letter headers). Uses the
 * server on 127.0.0.1:4222 when one answers there, else starts one from the nats-server binary;
 * skipped, with the reason printed, only when the machine has no nats-server at all.
 */
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { isQueueError } from '../src/errors.js';
import { JetStreamBuilder } from '../src/jetstream/index.js';
import type { RetryPolicyInput } from '../src/queue/retry.js';
import { ManualClock } from '../src/testing/manual-clock.js';
import { type NatsNode, natsServerBinary, startNatsServer } from './support/nats-server.js';
import { type OpenOptions, type OpenQueue, runQueueSemantics } from './support/queue-semantics.js';

const binary = natsServerBinary();
if (binary === undefined) console.warn('jetstream.test.ts skipped: no nats-server binary on this machine (looked in /usr/sbin and PATH)');
const maybe = binary === undefined ? test.skip : test;

let nc: NatsConnection;
let own: NatsNode | undefined;
const streams: string[] = [];
let next = 0;
const uniqueStream = (): string => `PQT_${process.pid}_${++next}`;

beforeAll(async () => {
  if (binary === undefined) return;
  try {
    nc = await connect({ servers: '127.0.0.1:4222', reconnect: false, timeout: 1000 });
    // A server without JetStream will not do: start our own.
    await jetstreamManager(nc);
  } catch {
    await nc?.close().catch(() => {});
    own = await startNatsServer(binary);
    nc = await connect({ servers: own.url });
  }
}, 30_000);

afterAll(async () => {
  if (nc === undefined) return;
  const jsm = await jetstreamManager(nc).catch(() => undefined);
  for (const name of streams) await jsm?.streams.delete(name).catch(() => {});
  await nc.close();
  await own?.stop();
});

async function openQueue(options: OpenOptions = {}, stream = uniqueStream()): Promise<OpenQueue> {
  streams.push(stream, `${stream}_DEAD`);
  const clock = new ManualClock();
  let builder = new JetStreamBuilder(nc, { stream, pullExpiresMs: 2000 }).retry((options.retry ?? { kind: 'fixed', delayMs: 0 }) as RetryPolicyInput);
  if (options.manualClock !== false) builder = builder.clock(clock);
  if (options.maxDeliveries !== undefined) builder = builder.maxDeliveries(options.maxDeliveries);
  // The lease is kept on the test's clock; the server's ack wait stays long, so that only the
  // clock the test moves ends a lease.
  builder = builder.leaseMs(options.leaseMs ?? Infinity);
  const [tx, rx] = await (options.codec ? builder.codec(options.codec) : builder).open();
  return { tx: tx as never, rx: rx as never, clock };
}

runQueueSemantics(maybe as never, {
  name: 'JetStream',
  capabilities: { syncTryReserve: false, nackDelayOnQueueClock: false, orderAcrossConsumers: false, seq: 'stream', duplicateWindowMs: 120_000 },
  open: openQueue,
});

maybe('JetStream: the builder refuses bad options with typed errors before it touches the server', async () => {
  expect(() => new JetStreamBuilder({} as never, { stream: 'X' })).toThrow(TypeError);
  expect(() => new JetStreamBuilder(nc, undefined as never)).toThrow(TypeError);
  expect(() => new JetStreamBuilder(nc, { stream: 'a.b' })).toThrow(RangeError);
  expect(() => new JetStreamBuilder(nc, { stream: 5 } as never)).toThrow(TypeError);
  expect(() => new JetStreamBuilder(nc, { stream: 'X', subject: 'pq.*' })).toThrow(RangeError);
  expect(() => new JetStreamBuilder(nc, { stream: 'X', replicas: 0 })).toThrow(RangeError);
  expect(() => new JetStreamBuilder(nc, { stream: 'X', deadLetterStream: 'X' })).toThrow(RangeError);
  expect(() => new JetStreamBuilder(nc, { stream: 'X', bogus: 1 } as never)).toThrow(/Unknown option/);
  const builder = new JetStreamBuilder(nc, { stream: 'X' });
  expect(() => builder.leaseMs(0)).toThrow(RangeError);
  expect(() => builder.maxDeliveries(1.5)).toThrow(RangeError);
  expect(() => builder.retry({ kind: 'nope' } as never)).toThrow(RangeError);
  const jsm = await jetstreamManager(nc);
  await expect(jsm.streams.info('X')).rejects.toThrow();
});

maybe('JetStream: bind refuses a queue whose stream does not exist, and creates nothing', async () => {
  const stream = uniqueStream();
  streams.push(stream, `${stream}_DEAD`);
  const error = await new JetStreamBuilder(nc, { stream, bind: true }).open().catch((e: unknown) => e);
  expect(isQueueError(error, 'ERR_NOT_FOUND')).toBe(true);
  const jsm = await jetstreamManager(nc);
  await expect(jsm.streams.info(stream)).rejects.toThrow();
});

maybe('JetStream: a queue binds to the streams and consumer another opened, and the two compete for its items', async () => {
  const stream = uniqueStream();
  const a = await openQueue({}, stream);
  const [tx2, rx2] = await new JetStreamBuilder(nc, { stream, bind: true }).open();
  try {
    const seqs = await a.tx.pushMany(['1', '2']);
    const x = (await a.rx.reserve())!;
    const y = (await rx2.reserve())!;
    expect([x.seq, y.seq].sort((p, q) => p - q)).toEqual(seqs);
    await x.ack();
    await y.ack();
    expect(await rx2.tryReserve()).toBeNull();
  } finally {
    await tx2.close();
    await a.tx.close();
  }
});

maybe('JetStream: an existing stream that is not a work queue is refused with ERR_UNSUPPORTED', async () => {
  const stream = uniqueStream();
  streams.push(stream);
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: stream, subjects: [`pq.${stream}`] });
  const error = await new JetStreamBuilder(nc, { stream }).open().catch((e: unknown) => e);
  expect(isQueueError(error, 'ERR_UNSUPPORTED')).toBe(true);
});

maybe('JetStream: push options the stream cannot keep are refused with ERR_UNSUPPORTED and store nothing', async () => {
  const { tx, rx } = await openQueue();
  try {
    for (const options of [{ priority: 1 }, { delayMs: 10 }, { notBefore: 0 }]) {
      const error = await tx.push('x', options).catch((e: unknown) => e);
      expect(isQueueError(error, 'ERR_UNSUPPORTED'), JSON.stringify(options)).toBe(true);
    }
    expect(await rx.tryReserve()).toBeNull();
  } finally {
    await tx.close();
  }
});
