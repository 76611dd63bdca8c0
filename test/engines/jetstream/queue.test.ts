/**
 * The JetStream queue: the shared queue semantics (test/support/queue-semantics.ts) over a
 * JetStream server, and what is its own (options, binding, the dead-letter headers). Uses the
 * server on 127.0.0.1:4222 when one answers there, else starts one from the nats-server binary;
 * skipped, with the reason printed, only when the machine has no nats-server at all.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { connect, headers, type NatsConnection } from '@nats-io/transport-node';
import {
  AckPolicy,
  type ConsumerInfo,
  DeliverPolicy,
  DiscardPolicy,
  RetentionPolicy,
  jetstream,
  jetstreamManager,
} from '@nats-io/jetstream';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { json } from '../../../src/lib/codec.js';
import { isQueueError } from '../../../src/contract/errors.js';
import { deadLetterId } from '../../../src/engines/jetstream/core.js';
import { JetStreamBuilder, type JetStreamProducer } from '../../../src/engines/jetstream/index.js';
import { consumerRefusal } from '../../../src/engines/jetstream/setup.js';
import type { RetryPolicyInput } from '../../../src/core/retry.js';
import { ManualClock } from '../../../src/testing/manual-clock.js';
import { type Lines, distUrl, runModule } from '../../support/child-process.js';
import { type NatsNode, natsServerBinary, startNatsServer } from '../../support/nats-server.js';
import { type OpenOptions, type OpenQueue, runQueueSemantics } from '../../support/queue-semantics.js';

const binary = natsServerBinary();
if (binary === undefined) console.warn('jetstream.test.ts skipped: no nats-server binary on this machine (looked in /usr/sbin and PATH)');
const maybe = binary === undefined ? test.skip : test;

let nc: NatsConnection;
let own: NatsNode | undefined;
const streams: string[] = [];
let next = 0;
const pauseMs = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
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
  // A queue's key stream (<stream>_KEYS) goes with it.
  for (const name of streams) for (const n of [name, `${name}_KEYS`]) await jsm?.streams.delete(n).catch(() => {});
  await nc.close();
  await own?.stop();
});

async function openQueue(options: OpenOptions = {}, stream = uniqueStream()): Promise<OpenQueue> {
  streams.push(stream, `${stream}_DEAD`);
  const clock = new ManualClock();
  let builder = new JetStreamBuilder(nc, { stream, pullExpiresMs: 2000 }).retry(
    (options.retry ?? { kind: 'fixed', delayMs: 0 }) as RetryPolicyInput,
  );
  if (options.manualClock !== false) builder = builder.clock(clock);
  if (options.maxDeliveries !== undefined) builder = builder.maxDeliveries(options.maxDeliveries);
  // The lease is kept on the test's clock; the server's ack wait stays long, so that only the
  // clock the test moves ends a lease.
  builder = builder.leaseMs(options.leaseMs ?? Infinity);
  const [tx, rx] = await (options.codec ? builder.codec(options.codec) : builder).open();
  // The first step of a move, as a process that died before acking would leave it: the dead
  // letter published with the move's message id.
  const interruptedMove = async (item: { seq: number; bytes: Uint8Array }): Promise<void> => {
    const hdrs = headers();
    hdrs.set('Pq-Seq', String(item.seq));
    hdrs.set('Pq-Reason', 'first%20try');
    const created = (await (await jetstreamManager(nc)).streams.info(stream)).created;
    await jetstream(nc).publish(`pq.${stream}.dead`, item.bytes, { headers: hdrs, msgID: deadLetterId(stream, created, item.seq) });
  };
  return { tx: tx as never, rx: rx as never, clock, interruptedMove };
}

runQueueSemantics(maybe as never, {
  name: 'JetStream',
  capabilities: {
    syncTryReserve: false,
    nackDelayOnQueueClock: false,
    orderAcrossConsumers: false,
    seq: 'stream',
    duplicateWindowMs: 120_000,
    delaysOnQueueClock: false,
    priorities: false,
  },
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

maybe("JetStream: an existing stream that does not take the queue's subject is refused with ERR_UNSUPPORTED", async () => {
  const stream = uniqueStream();
  streams.push(stream, `${stream}_DEAD`);
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: stream, subjects: [`elsewhere.${stream}`], retention: RetentionPolicy.Workqueue });
  const error = await new JetStreamBuilder(nc, { stream }).open().catch((e: unknown) => e);
  expect(isQueueError(error, 'ERR_UNSUPPORTED')).toBe(true);
  expect((error as Error).message).toContain(`pq.${stream}`);
  // With the stream's own subject, the same stream opens.
  const [tx] = await new JetStreamBuilder(nc, { stream, subject: `elsewhere.${stream}` }).open();
  await tx.close();
});

maybe('JetStream: a delayed push over a queue that cannot keep it is ERR_UNSUPPORTED, naming why, and stores nothing', async () => {
  const jsm = await jetstreamManager(nc);
  // Bound to streams made as a queue made before delays had them: the queue works, delays are refused.
  const stream = uniqueStream();
  streams.push(stream, `${stream}_DEAD`);
  await jsm.streams.add({ name: stream, subjects: [`pq.${stream}`], retention: RetentionPolicy.Workqueue });
  await jsm.streams.add({ name: `${stream}_DEAD`, subjects: [`pq.${stream}.dead`] });
  await jsm.streams.add({ name: `${stream}_KEYS`, subjects: [`pq.${stream}.keys.*`], max_msgs_per_subject: 1, max_age: 120 * 1e9 });
  await jsm.consumers.add(stream, { durable_name: 'pq', ack_policy: AckPolicy.Explicit, max_deliver: -1, filter_subject: `pq.${stream}` });
  const [tx, rx] = await new JetStreamBuilder(nc, { stream, bind: true }).open();
  try {
    for (const options of [{ delayMs: 10 }, { notBefore: Date.now() + 60_000 }]) {
      const error = await tx.push('x', options).catch((e: unknown) => e);
      expect(isQueueError(error, 'ERR_UNSUPPORTED'), JSON.stringify(options)).toBe(true);
      expect((error as Error).message).toContain(`pq.${stream}.delayed`);
    }
    expect((await jsm.streams.info(stream)).config.subjects).toEqual([`pq.${stream}`]);
    // A time already come is no delay, and a plain push goes on.
    const seq = await tx.push('y', { notBefore: 0 });
    const item = (await rx.reserve())!;
    expect([item.seq, new TextDecoder().decode(item.bytes)]).toEqual([seq, 'y']);
    await item.ack();
    expect(await rx.tryReserve()).toBeNull();
  } finally {
    await tx.close();
  }
  // Opened without bind, the same queue gets the delayed subject and its consumer.
  const [tx2, rx2] = await new JetStreamBuilder(nc, { stream }).open();
  try {
    expect((await jsm.streams.info(stream)).config.subjects).toEqual([`pq.${stream}`, `pq.${stream}.delayed`]);
    const seq = await tx2.push('later', { delayMs: 10 });
    const item = (await rx2.reserve())!;
    expect([item.seq, new TextDecoder().decode(item.bytes)]).toEqual([seq, 'later']);
    await item.ack();
  } finally {
    await tx2.close();
  }
  // A queue stream that forgets message ids before the ack wait ends would store an item twice
  // when its mover died between the copy and the ack.
  const short = uniqueStream();
  streams.push(short, `${short}_DEAD`);
  await jsm.streams.add({ name: short, subjects: [`pq.${short}`], retention: RetentionPolicy.Workqueue, duplicate_window: 10 * 1e9 });
  const [tx3] = await new JetStreamBuilder(nc, { stream: short }).leaseMs(60_000).open();
  try {
    const error = await tx3.push('x', { delayMs: 10 }).catch((e: unknown) => e);
    expect(isQueueError(error, 'ERR_UNSUPPORTED')).toBe(true);
    expect((error as Error).message).toMatch(/10000 ms, less than the consumer's ack wait \(60000 ms\)/);
    expect((await jsm.streams.info(short)).config.subjects).toEqual([`pq.${short}`]);
  } finally {
    await tx3.close();
  }
});

maybe("JetStream: a push under a remembered idempotency key stores nothing and resolves with the first push's seq", async () => {
  const { tx, rx } = await openQueue();
  try {
    const first = await tx.push('order 17', { key: 'order-17' });
    expect(await tx.push('order 17 again', { key: 'order-17' })).toBe(first);
    // One batch: a key already seen, a new one twice (the first of them is stored), and a plain item.
    const seqs = await tx.pushMany(['a', 'b', 'b again', 'c'], { keys: ['order-17', 'order-18', 'order-18', 'order-19'] });
    expect(seqs[0]).toBe(first);
    expect(seqs[2]).toBe(seqs[1]);
    expect(new Set(seqs).size).toBe(3);
    const plain = await tx.push('no key');
    // Still remembered once the item is acked (within the stream's duplicate window).
    const got: string[] = [];
    for (let item = await rx.tryReserve(); item; item = await rx.tryReserve()) {
      got.push(new TextDecoder().decode(item.bytes));
      await item.ack();
    }
    expect(got).toEqual(['order 17', 'b', 'c', 'no key']);
    expect(await tx.push('order 17, after its ack', { key: 'order-17' })).toBe(first);
    expect(await rx.tryReserve()).toBeNull();
    expect((await (tx as unknown as JetStreamProducer).stats()).pushed).toBe(4);
    expect(plain).toBeGreaterThan(seqs[3]!);
    // Keys that differ only in trailing white space or hold a line break are keys of their own
    // (a header value alone would be trimmed, and could not hold the break).
    const spaced = await tx.push('a', { key: 'k' });
    expect(await tx.push('b', { key: 'k ' })).not.toBe(spaced);
    expect(await tx.push('c', { key: 'k\u00a0' })).not.toBe(spaced);
    const broken = await tx.push('d', { key: 'line\nbreak' });
    expect(await tx.push('d again', { key: 'line\nbreak' })).toBe(broken);
    // A key whose text looks like an id forward() publishes (<origin>:<seq>) is a key like any other.
    const lookalike = await tx.push('e', { key: 'origin:5' });
    expect(await tx.push('e again', { key: 'origin:5' })).toBe(lookalike);
  } finally {
    await tx.close();
  }
});

maybe('JetStream: a bad idempotency key, or key and keys mixed up, is a typed error that stores nothing', async () => {
  const { tx, rx } = await openQueue();
  try {
    await expect(tx.push('x', { key: '' })).rejects.toThrow(RangeError);
    await expect(tx.push('x', { key: 'k'.repeat(256) })).rejects.toThrow(RangeError);
    await expect(tx.push('x', { key: 7 as never })).rejects.toThrow(TypeError);
    await expect(tx.push('x', { keys: ['k'] })).rejects.toThrow(TypeError);
    await expect(tx.pushMany(['x'], { key: 'k' })).rejects.toThrow(TypeError);
    await expect(tx.pushMany(['x', 'y'], { keys: ['k'] })).rejects.toThrow(RangeError);
    expect(await rx.tryReserve()).toBeNull();
  } finally {
    await tx.close();
  }
});

maybe('JetStream: a typed queue moves a payload it cannot decode into the dead letters, and hands out the next item', async () => {
  const stream = uniqueStream();
  const raw = await openQueue({}, stream);
  const [tx, rx] = await new JetStreamBuilder(nc, { stream, bind: true }).codec(json<{ id: number }>()).open();
  try {
    const bad = await raw.tx.push('{not json');
    const good = await tx.push({ id: 1 });
    const item = (await rx.reserve())!;
    expect([item.seq, item.value]).toEqual([good, { id: 1 }]);
    await item.ack();
    const letters = await rx.deadLetters.list();
    expect(letters.map((l) => [l.seq, l.deliveries])).toEqual([[bad, 1]]);
    expect(letters[0]!.reason).toMatch(/^json could not decode the payload: /);
  } finally {
    await tx.close();
    await raw.tx.close();
  }
});

maybe('JetStream: dead letters are redriven as new items with fresh counts, and purged for good', async () => {
  const stream = uniqueStream();
  streams.push(stream, `${stream}_DEAD`);
  const [tx, rx] = await new JetStreamBuilder(nc, { stream }).open();
  try {
    await tx.pushMany(['a', 'b', 'c']);
    for (let i = 0; i < 3; i++) await (await rx.reserve())!.deadLetter(`reason ${i}`);
    expect(await rx.deadLetters.count()).toBe(3);
    const [first] = await rx.deadLetters.list({ limit: 1 });
    const seqs = await rx.deadLetters.redrive({ seqs: [first!.seq] });
    expect(seqs).toHaveLength(1);
    const back = (await rx.reserve())!;
    expect([back.seq, new TextDecoder().decode(back.bytes), back.deliveries]).toEqual([seqs[0], 'a', 1]);
    await back.ack();
    expect(await rx.deadLetters.purge()).toBe(2);
    expect(await rx.deadLetters.count()).toBe(0);
    await expect(rx.deadLetters.purge({ limit: 0 })).rejects.toThrow(RangeError);
  } finally {
    await tx.close();
  }
});

maybe('JetStream: an aborted reserve rejects with the reason, and the item it might have had goes to the next reserve', async () => {
  const { tx, rx } = await openQueue();
  try {
    const controller = new AbortController();
    const waiting = rx.reserve({ signal: controller.signal });
    controller.abort(new Error('stop waiting'));
    await expect(waiting).rejects.toThrow('stop waiting');
    const seq = await tx.push('x');
    const item = (await rx.reserve())!;
    expect(item.seq).toBe(seq);
    await item.ack();
  } finally {
    await tx.close();
  }
});

maybe(
  'JetStream: a stopped process() leaves no pull open, and an item pushed after it is not handed out and dead-lettered unseen',
  async () => {
    const stream = uniqueStream();
    const { tx, rx } = await openQueue({ maxDeliveries: 5 }, stream);
    const jsm = await jetstreamManager(nc);
    try {
      const stop = new AbortController();
      const seen: number[] = [];
      const running = rx.process(async (item: { deliveries: number }) => void seen.push(item.deliveries), {
        concurrency: 64,
        signal: stop.signal,
      });
      // Every worker waits with a pull of its own on the server before the stop.
      for (let i = 0; i < 200 && (await jsm.consumers.info(stream, 'pq')).num_waiting < 64; i++) await pauseMs(10);
      expect((await jsm.consumers.info(stream, 'pq')).num_waiting).toBe(64);
      stop.abort();
      await running;
      await tx.push('after');
      // The item stays in the stream for the next reserve: no open pull takes it, bounces it and
      // counts its deliveries up to the dead letters.
      let state = await jsm.consumers.info(stream, 'pq');
      for (let i = 0; i < 200 && (await rx.deadLetters.list()).length === 0 && !(state.num_waiting === 0 && state.num_pending === 1); i++) {
        await pauseMs(10);
        state = await jsm.consumers.info(stream, 'pq');
      }
      expect((await rx.deadLetters.list()).length).toBe(0);
      expect([state.num_waiting, state.num_pending, state.num_ack_pending]).toEqual([0, 1, 0]);
      const item = (await rx.reserve())!;
      expect([new TextDecoder().decode(item.bytes), item.deliveries]).toEqual(['after', 1]);
      await item.ack();
      expect(seen).toEqual([]);
    } finally {
      await tx.close();
    }
  },
);

maybe('JetStream: a message a cancelled pull still brings is held for the next reserve, its delivery counted once', async () => {
  const stream = uniqueStream();
  const { tx, rx } = await openQueue({ maxDeliveries: 1 }, stream);
  const jsm = await jetstreamManager(nc);
  try {
    // Pushed first, so that the pull brings it at once; the abort comes before it arrives.
    const seq = await tx.push('x');
    const controller = new AbortController();
    const waiting = rx.reserve({ signal: controller.signal });
    controller.abort(new Error('stop waiting'));
    await expect(waiting).rejects.toThrow('stop waiting');
    // Wait until no pull is open and the message is either held here (delivered, unacked) or
    // still in the stream, undelivered.
    let state = await jsm.consumers.info(stream, 'pq');
    for (let i = 0; i < 200 && !(state.num_waiting === 0 && state.num_ack_pending + state.num_pending === 1); i++) {
      await pauseMs(10);
      state = await jsm.consumers.info(stream, 'pq');
    }
    const item = await rx.tryReserve();
    expect((await rx.deadLetters.list()).length).toBe(0);
    expect([item?.seq, item?.deliveries]).toEqual([seq, 1]);
    await item!.ack();
  } finally {
    await tx.close();
  }
});

maybe('JetStream: a queue stream deleted and made again keeps the dead letters of items whose seqs repeat', async () => {
  const stream = uniqueStream();
  const jsm = await jetstreamManager(nc);
  const first = await openQueue({}, stream);
  const seq = await first.tx.push('old');
  await (await first.rx.reserve())!.deadLetter('first stream');
  await first.tx.close();
  // The dead-letter stream stays; the new queue stream counts its seqs from 1 again.
  await jsm.streams.delete(stream);
  const again = await openQueue({}, stream);
  try {
    expect(await again.tx.push('new')).toBe(seq);
    await (await again.rx.reserve())!.deadLetter('second stream');
    const letters = await again.rx.deadLetters.list();
    expect(letters.map((l) => [l.seq, new TextDecoder().decode(l.bytes), l.reason])).toEqual([
      [seq, 'old', 'first stream'],
      [seq, 'new', 'second stream'],
    ]);
    expect((await jsm.streams.info(stream)).state.messages).toBe(0);
  } finally {
    await again.tx.close();
  }
});

maybe('JetStream: a move the server drops as a duplicate of a letter it no longer holds leaves the item in the queue', async () => {
  const stream = uniqueStream();
  const jsm = await jetstreamManager(nc);
  const { tx, rx, interruptedMove } = await openQueue({}, stream);
  try {
    await tx.push('poison');
    const item = (await rx.reserve())!;
    // A first move published the letter, which was then purged before the item was acked.
    await interruptedMove!(item);
    await jsm.streams.purge(`${stream}_DEAD`);
    await expect(item.deadLetter('second try')).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_STORE'));
    expect((await jsm.streams.info(`${stream}_DEAD`)).state.messages).toBe(0);
    expect((await jsm.streams.info(stream)).state.messages).toBe(1);
  } finally {
    await tx.close();
  }
});

maybe(
  'JetStream: the dead-letter stream created keeps message ids for twice the ack wait, and one that keeps them shorter than the ack wait is refused',
  async () => {
    const jsm = await jetstreamManager(nc);
    const created = uniqueStream();
    streams.push(created, `${created}_DEAD`);
    const [tx] = await new JetStreamBuilder(nc, { stream: created }).leaseMs(300_000).open();
    await tx.close();
    expect((await jsm.streams.info(`${created}_DEAD`)).config.duplicate_window).toBe(600_000 * 1e6);
    const stream = uniqueStream();
    streams.push(stream, `${stream}_DEAD`);
    await jsm.streams.add({ name: `${stream}_DEAD`, subjects: [`pq.${stream}.dead`] });
    const error = await new JetStreamBuilder(nc, { stream })
      .leaseMs(300_000)
      .open()
      .catch((e: unknown) => e);
    expect(isQueueError(error, 'ERR_UNSUPPORTED')).toBe(true);
    expect((error as Error).message).toMatch(/duplicate_window 120000 ms/);
    // Refused before anything was made.
    await expect(jsm.streams.info(stream)).rejects.toThrow();
  },
);

maybe('JetStream: open refuses a work-queue stream that would delete unsettled items, naming the setting, and makes nothing', async () => {
  const jsm = await jetstreamManager(nc);
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ max_age: 60_000 * 1e6 }, /max_age 60000 ms/],
    [{ max_msgs: 10 }, /max_msgs 10 with discard old/],
    [{ max_bytes: 1 << 20 }, /max_bytes 1048576 with discard old/],
    [{ max_msgs_per_subject: 10 }, /max_msgs_per_subject 10 with discard old/],
  ];
  for (const [limits, named] of cases) {
    const stream = uniqueStream();
    streams.push(stream, `${stream}_DEAD`);
    await jsm.streams.add({ name: stream, subjects: [`pq.${stream}`], retention: RetentionPolicy.Workqueue, ...limits });
    const error = await new JetStreamBuilder(nc, { stream }).open().catch((e: unknown) => e);
    expect(isQueueError(error, 'ERR_UNSUPPORTED'), JSON.stringify(limits)).toBe(true);
    expect((error as Error).message).toMatch(named);
    await expect(jsm.streams.info(`${stream}_DEAD`)).rejects.toThrow();
    expect((await jsm.consumers.list(stream).next()).length).toBe(0);
  }
  // The same limits with discard new refuse pushes at the limit instead: that stream will do.
  const stream = uniqueStream();
  streams.push(stream, `${stream}_DEAD`);
  await jsm.streams.add({
    name: stream,
    subjects: [`pq.${stream}`],
    retention: RetentionPolicy.Workqueue,
    discard: DiscardPolicy.New,
    max_msgs: 10,
    max_bytes: 1 << 20,
  });
  const [tx, rx] = await new JetStreamBuilder(nc, { stream }).open();
  await tx.push('x');
  await (await rx.reserve())!.ack();
  await tx.close();
});

maybe('JetStream: open refuses a consumer with a delivery limit or a start other than the first item, naming the setting', async () => {
  const jsm = await jetstreamManager(nc);
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ max_deliver: 5 }, /max_deliver 5/],
    [{ max_deliver: 1 }, /max_deliver 1/],
  ];
  for (const [config, named] of cases) {
    const stream = uniqueStream();
    streams.push(stream, `${stream}_DEAD`);
    await jsm.streams.add({ name: stream, subjects: [`pq.${stream}`], retention: RetentionPolicy.Workqueue });
    await jsm.consumers.add(stream, { durable_name: 'pq', ack_policy: AckPolicy.Explicit, filter_subject: `pq.${stream}`, ...config });
    const error = await new JetStreamBuilder(nc, { stream }).open().catch((e: unknown) => e);
    expect(isQueueError(error, 'ERR_UNSUPPORTED'), JSON.stringify(config)).toBe(true);
    expect((error as Error).message).toMatch(named);
    // Nothing was made: no dead-letter stream, the consumer as it was.
    await expect(jsm.streams.info(`${stream}_DEAD`)).rejects.toThrow();
    const info = await jsm.consumers.info(stream, 'pq');
    expect(info.config.max_deliver).toBe(config.max_deliver);
  }
  // The server refuses any start but the first item on a work-queue stream today; the queue
  // checks it all the same, for a server that would not.
  const names = {
    stream: 'S',
    subject: 'pq.S',
    consumer: 'pq',
    deadLetterStream: 'S_DEAD',
    deadLetterSubject: 'pq.S.dead',
    keyStream: 'S_KEYS',
    keySubject: 'pq.S.keys',
    delayedSubject: 'pq.S.delayed',
    delayedConsumer: 'pq_delayed',
  };
  const consumer = (deliver_policy: DeliverPolicy) =>
    ({ config: { ack_policy: AckPolicy.Explicit, filter_subject: 'pq.S', deliver_policy } }) as unknown as ConsumerInfo;
  expect(consumerRefusal(consumer(DeliverPolicy.All), names)).toBeUndefined();
  expect(consumerRefusal(consumer(DeliverPolicy.New), names)).toMatch(/deliver_policy new/);
  expect(consumerRefusal(consumer(DeliverPolicy.Last), names)).toMatch(/deliver_policy last/);
  expect(consumerRefusal(consumer(DeliverPolicy.StartSequence), names)).toMatch(/deliver_policy by_start_sequence/);
});

maybe('JetStream: a connection closed under the queue fails it with ERR_STORE_FAILED', async () => {
  const own = await connect({ servers: nc.getServer() });
  const stream = uniqueStream();
  streams.push(stream, `${stream}_DEAD`);
  // The consumer's ack wait: how soon the item held when the connection closed comes back.
  const [tx, rx] = await new JetStreamBuilder(own, { stream }).leaseMs(1000).open();
  await tx.push('x');
  const held = (await rx.reserve())!;
  await own.close();
  await expect(tx.push('y')).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_STORE_FAILED'));
  await expect(held.ack()).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_STORE_FAILED'));
  await expect(rx.reserve()).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_STORE_FAILED'));
  await tx.close();
  // Nothing acked: the item is still in the stream, for the next consumer.
  const [, again] = await new JetStreamBuilder(nc, { stream, bind: true }).leaseMs(60_000).open();
  const item = (await again.reserve())!;
  expect(new TextDecoder().decode(item.bytes)).toBe('x');
  await item.ack();
  await again.close();
});

maybe('JetStream: a connection closed under the queue rejects waiting reserves and process() with ERR_STORE_FAILED', async () => {
  const own = await connect({ servers: nc.getServer() });
  const stream = uniqueStream();
  streams.push(stream, `${stream}_DEAD`);
  const [tx, rx] = await new JetStreamBuilder(own, { stream }).leaseMs(1000).open();
  const failed = (e: unknown) => isQueueError(e, 'ERR_STORE_FAILED');
  try {
    await tx.push('x');
    let started!: () => void;
    const running = new Promise<void>((resolve) => (started = resolve));
    let finish!: () => void;
    const gate = new Promise<void>((resolve) => (finish = resolve));
    // One worker runs a handler across the close, the other waits for an item.
    const processing = rx.process(
      async () => {
        started();
        await gate;
      },
      { concurrency: 2 },
    );
    await running;
    const fork = rx.fork();
    const waiting = [fork.reserve(), fork.reserveMany(2), fork[Symbol.asyncIterator]().next()];
    await own.close();
    for (const wait of waiting) await expect(wait).rejects.toSatisfy(failed);
    finish();
    await expect(processing).rejects.toSatisfy(failed);
  } finally {
    await tx.close();
    if (!own.isClosed()) await own.close();
  }
});

/** A consumer process: opens the queue bound to `stream`, prints `ready`, then a line per item its handler gets. */
function consumerSource(): string {
  const require = createRequire(import.meta.url);
  return `import { connect } from '${pathToFileURL(require.resolve('@nats-io/transport-node')).href}';
import { JetStreamBuilder } from '${distUrl('engines/jetstream/index.js')}';
const [url, stream, mode] = process.argv.slice(2);
const nc = await connect({ servers: url });
const [, rx] = await new JetStreamBuilder(nc, { stream, bind: true }).open();
console.log('ready');
await rx.process(async (item) => {
  console.log(mode, new TextDecoder().decode(item.bytes), item.deliveries);
  // A holder never settles: it keeps its items until its process dies.
  if (mode === 'held') await new Promise(() => {});
}, { concurrency: 4 });
`;
}

maybe('JetStream: consumers in two processes share a queue, and the items of one killed while holding them go to the other', async () => {
  const stream = uniqueStream();
  // The consumer's ack wait (1 s): how soon the killed holder's items come back.
  const a = await new JetStreamBuilder(nc, { stream }).leaseMs(1000).open();
  streams.push(stream, `${stream}_DEAD`);
  const dir = mkdtempSync(join(tmpdir(), 'pq-js-consumers-'));
  const url = nc.getServer();
  const holder = runModule(dir, 'holder.mjs', consumerSource(), [url, stream, 'held']);
  let worker: Lines | undefined;
  try {
    await holder.until((lines) => lines.includes('ready'));
    const held = ['h0', 'h1', 'h2', 'h3'];
    await a[0].pushMany(held);
    await holder.until((lines) => lines.filter((l) => l.startsWith('held ')).length === 4);
    worker = runModule(dir, 'worker.mjs', consumerSource(), [url, stream, 'done']);
    await worker.until((lines) => lines.includes('ready'));
    const more = Array.from({ length: 20 }, (_, i) => `m${i}`);
    await a[0].pushMany(more);
    await holder.kill();
    const done = (lines: string[]) =>
      new Map(lines.filter((l) => l.startsWith('done ')).map((l) => [l.split(' ')[1]!, Number(l.split(' ')[2])]));
    await worker.until((lines) => [...held, ...more].every((text) => done(lines).has(text)));
    const got = done(worker.lines);
    // The held items were delivered once to the holder, then again to the worker.
    expect(held.map((text) => got.get(text))).toEqual([2, 2, 2, 2]);
    expect(more.every((text) => got.get(text) === 1)).toBe(true);
    expect(holder.lines.filter((l) => l.startsWith('held ')).sort()).toEqual(held.map((text) => `held ${text} 1`));
  } finally {
    await holder.kill();
    await worker?.kill();
    await a[0].close();
    rmSync(dir, { recursive: true, force: true });
  }
});

maybe('JetStream: pulls the consumer refuses (409, too many waiting) are asked again, and every item is delivered', async () => {
  const stream = uniqueStream();
  streams.push(stream, `${stream}_DEAD`);
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: stream, subjects: [`pq.${stream}`], retention: RetentionPolicy.Workqueue });
  await jsm.streams.add({ name: `${stream}_DEAD`, subjects: [`pq.${stream}.dead`] });
  await jsm.streams.add({ name: `${stream}_KEYS`, subjects: [`pq.${stream}.keys.*`], max_msgs_per_subject: 1, max_age: 120 * 1e9 });
  // One waiting pull at a time: the second consumer's pulls are refused while the first waits.
  await jsm.consumers.add(stream, {
    durable_name: 'pq',
    ack_policy: AckPolicy.Explicit,
    max_deliver: -1,
    max_waiting: 1,
    filter_subject: `pq.${stream}`,
  });
  const [tx, rx] = await new JetStreamBuilder(nc, { stream, bind: true, pullExpiresMs: 1000 }).open();
  try {
    const other = rx.fork();
    const waits = [rx.reserve(), other.reserve(), rx.reserve(), other.reserve()];
    const seqs = await tx.pushMany(['a', 'b', 'c', 'd']);
    const items = await Promise.all(waits);
    expect(items.map((item) => item!.seq).sort((p, q) => p - q)).toEqual(seqs);
    for (const item of items) await item!.ack();
  } finally {
    await tx.close();
  }
});
