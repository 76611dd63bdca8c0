// The JetStream queue beside the embedded LogStore queue, in the same run: push-only and end to
// end (push, process() with concurrency 64, ack), 128 B payloads, 64 concurrent producers. A third
// row does the same work with the NATS client alone (publish, consume(), ackAck), for what the
// server and the machine allow. Each
// figure is one timed pass over N items, after a short warm-up pass; it measures, it asserts
// nothing. bench/run.mjs runs it (section jetstream) and reads its last line; it needs a JetStream
// server.
// Usage: npm run build && node bench/jetstream.mjs [--quick] [--items N]
//   NATS_URL (default 127.0.0.1:4222) names the server; the bench's streams are deleted at the end.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from '@nats-io/transport-node';
import { AckPolicy, RetentionPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Builder, LogStore } from '../dist/index.js';
import { JetStreamBuilder } from '../dist/jetstream/index.js';

const quick = process.argv.includes('--quick');
const itemsArg = process.argv.indexOf('--items');
const ITEMS = itemsArg > 0 ? Number(process.argv[itemsArg + 1]) : quick ? 2_000 : 20_000;
const PRODUCERS = 64;
const CONCURRENCY = 64;
const payload = new Uint8Array(128).fill(7);

/** Push `items` with PRODUCERS concurrent producers; resolves once every push resolved. */
async function pushAll(tx, items) {
  const per = Math.ceil(items / PRODUCERS);
  await Promise.all(
    Array.from({ length: PRODUCERS }, async (_, p) => {
      for (let i = p * per; i < Math.min(items, (p + 1) * per); i++) await tx.push(payload);
    }),
  );
}

/** Consume `items` with process(); resolves once the last is acked. */
async function consumeAll(rx, items) {
  let handled = 0;
  const stop = new AbortController();
  await rx.process(
    () => {
      if (++handled === items) stop.abort();
    },
    { concurrency: CONCURRENCY, signal: stop.signal },
  );
}

const rate = (items, startNs) => items / (Number(process.hrtime.bigint() - startNs) / 1e9);

/** Push-only, then end to end, on one open queue (drained between passes). */
async function measure(name, tx, rx) {
  await pushAll(tx, Math.min(500, ITEMS)); // warm-up
  await consumeAll(rx, Math.min(500, ITEMS));
  let start = process.hrtime.bigint();
  await pushAll(tx, ITEMS);
  const push = rate(ITEMS, start);
  await consumeAll(rx, ITEMS);
  start = process.hrtime.bigint();
  await Promise.all([pushAll(tx, ITEMS), consumeAll(rx, ITEMS)]);
  const e2e = rate(ITEMS, start);
  console.log(`${name.padEnd(34)} push-only ${Math.round(push).toLocaleString().padStart(9)} msgs/s   end to end ${Math.round(e2e).toLocaleString().padStart(9)} msgs/s`);
  return { push, endToEnd: e2e };
}

/** The client alone, shaped as a producer and a consumer with process(): publish; consume() with ackAck, 64 acks in flight. */
async function rawClient(nc, name) {
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name, subjects: [name], retention: RetentionPolicy.Workqueue });
  await jsm.consumers.add(name, { durable_name: 'pq', ack_policy: AckPolicy.Explicit, max_deliver: -1 });
  const js = jetstream(nc);
  const consumer = await js.consumers.get(name, 'pq');
  const tx = { push: (bytes) => js.publish(name, bytes) };
  const rx = {
    async process(handler, { signal }) {
      const messages = await consumer.consume({ max_messages: 256 });
      const inFlight = new Set();
      signal.addEventListener('abort', () => messages.stop(), { once: true });
      for await (const m of messages) {
        handler(m);
        const ack = m.ackAck().finally(() => inFlight.delete(ack));
        inFlight.add(ack);
        if (inFlight.size >= CONCURRENCY) await Promise.race(inFlight);
      }
      await Promise.all(inFlight);
    },
  };
  return [tx, rx];
}

const results = { node: process.version, items: ITEMS, producers: PRODUCERS, concurrency: CONCURRENCY };

const dir = mkdtempSync(join(tmpdir(), 'pq-bench-js-'));
try {
  const [tx, rx] = await new Builder(await LogStore.open(dir)).open();
  results.logStoreGroup = await measure('LogStore queue (group, lazy acks)', tx, rx);
  await tx.close();
} finally {
  rmSync(dir, { recursive: true, force: true });
}

const nc = await connect({ servers: process.env.NATS_URL ?? '127.0.0.1:4222' });
const stream = `PQ_BENCH_${process.pid}`;
try {
  const [tx, rx] = await new JetStreamBuilder(nc, { stream }).leaseMs(30_000).open();
  results.jetStreamR1 = await measure('JetStream queue (R1, file storage)', tx, rx);
  results.server = nc.info?.version;
  await tx.close();
  results.clientAlone = await measure('NATS client alone (R1, file)', ...(await rawClient(nc, `${stream}_RAW`)));
} finally {
  const jsm = await jetstreamManager(nc);
  for (const name of [stream, `${stream}_DEAD`, `${stream}_RAW`]) await jsm.streams.delete(name).catch(() => {});
  await nc.close();
}
console.log(JSON.stringify(results));
