// The JetStream queue beside the NATS client alone doing the same work, and beside the embedded
// LogStore queue, in the same run. 128 B payloads. Three cells, each timed over N items:
//   push      64 producers, each awaiting its push before the next (ours: tx.push; the client:
//             js.publish, awaiting each ack);
//   consume   draining the N items the push cell left (ours: process() with concurrency 64; the
//             client: consume() pulling 256 at a time, each message acked with ackAck, at most 64
//             acks in flight);
//   end to end  push and consume together.
// Ours and the client's run in alternating order over several rounds, each on a stream of its
// own; a ratio (ours over the client's) is taken per round and the median reported, so that a
// slow moment of the machine or the server counts against both. The embedded queue runs the push
// and end-to-end cells once, for how far the server's round trip puts JetStream from it. It
// measures, it asserts nothing. bench/run.mjs runs it (section jetstream) and reads its last line.
// Usage: npm run build && node bench/jetstream.mjs [--quick] [--items N] [--rounds R]
//   NATS_URL (default 127.0.0.1:4222) names the server; the bench's streams are deleted at the end.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from '@nats-io/transport-node';
import { AckPolicy, RetentionPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Builder, LogStore } from '../dist/index.js';
import { JetStreamBuilder } from '../dist/engines/jetstream/index.js';

const quick = process.argv.includes('--quick');
const arg = (name, fallback) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};
const ITEMS = arg('--items', quick ? 2_000 : 20_000);
const ROUNDS = arg('--rounds', quick ? 1 : 3);
const PRODUCERS = 64;
const CONCURRENCY = 64;
const payload = new Uint8Array(128).fill(7);

/** Push `items` with PRODUCERS concurrent producers, each awaiting its push; resolves once every push resolved. */
async function pushAll(push, items) {
  const per = Math.ceil(items / PRODUCERS);
  await Promise.all(
    Array.from({ length: PRODUCERS }, async (_, p) => {
      for (let i = p * per; i < Math.min(items, (p + 1) * per); i++) await push(payload);
    }),
  );
}

/** Our consumer: process() with concurrency 64; resolves once `items` were handled and acked. */
async function ourConsume(rx, items) {
  let handled = 0;
  const stop = new AbortController();
  await rx.process(
    () => {
      if (++handled === items) stop.abort();
    },
    { concurrency: CONCURRENCY, signal: stop.signal },
  );
}

/** The client's pull-and-ack loop: consume() 256 at a time, ackAck each, at most 64 acks in flight. */
async function clientConsume(consumer, items) {
  const messages = await consumer.consume({ max_messages: 256 });
  const inFlight = new Set();
  let handled = 0;
  for await (const m of messages) {
    const ack = m.ackAck().finally(() => inFlight.delete(ack));
    inFlight.add(ack);
    if (inFlight.size >= CONCURRENCY) await Promise.race(inFlight);
    if (++handled === items) break;
  }
  await Promise.all(inFlight);
  await messages.close();
}

const rate = (items, startNs) => items / (Number(process.hrtime.bigint() - startNs) / 1e9);

/** The three cells over one fresh queue: push-only, consume (what the push left), end to end. */
async function cells(push, consume) {
  let start = process.hrtime.bigint();
  await pushAll(push, ITEMS);
  const pushRate = rate(ITEMS, start);
  start = process.hrtime.bigint();
  await consume(ITEMS);
  const consumeRate = rate(ITEMS, start);
  start = process.hrtime.bigint();
  await Promise.all([pushAll(push, ITEMS), consume(ITEMS)]);
  return { push: pushRate, consume: consumeRate, endToEnd: rate(ITEMS, start) };
}

const nc = await connect({ servers: process.env.NATS_URL ?? '127.0.0.1:4222' });
const jsm = await jetstreamManager(nc);
const js = jetstream(nc);
const made = [];
let streams = 0;

async function ours() {
  const stream = `PQ_BENCH_${process.pid}_${++streams}`;
  made.push(stream, `${stream}_DEAD`, `${stream}_KEYS`);
  const [tx, rx] = await new JetStreamBuilder(nc, { stream }).leaseMs(30_000).open();
  await pushAll((b) => tx.push(b), 500); // warm-up
  await ourConsume(rx, 500);
  try {
    return await cells(
      (b) => tx.push(b),
      (n) => ourConsume(rx, n),
    );
  } finally {
    await tx.close();
  }
}

async function client() {
  const stream = `PQ_BENCH_RAW_${process.pid}_${++streams}`;
  made.push(stream);
  await jsm.streams.add({ name: stream, subjects: [stream], retention: RetentionPolicy.Workqueue });
  await jsm.consumers.add(stream, { durable_name: 'pq', ack_policy: AckPolicy.Explicit, max_deliver: -1 });
  const consumer = await js.consumers.get(stream, 'pq');
  const push = (b) => js.publish(stream, b);
  await pushAll(push, 500); // warm-up
  await clientConsume(consumer, 500);
  return cells(push, (n) => clientConsume(consumer, n));
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const fmt = (x) => Math.round(x).toLocaleString().padStart(9);

const results = {
  node: process.version,
  items: ITEMS,
  rounds: ROUNDS,
  producers: PRODUCERS,
  concurrency: CONCURRENCY,
  server: nc.info?.version,
  jetStreamR1: [],
  clientAlone: [],
};
try {
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? ['jetStreamR1', 'clientAlone'] : ['clientAlone', 'jetStreamR1'];
    for (const who of order) {
      const r = who === 'jetStreamR1' ? await ours() : await client();
      results[who].push(r);
      console.log(
        `round ${round + 1} ${who.padEnd(12)} push ${fmt(r.push)}/s   consume ${fmt(r.consume)}/s   end to end ${fmt(r.endToEnd)}/s`,
      );
    }
  }
} finally {
  for (const name of made) await jsm.streams.delete(name).catch(() => {});
}
await nc.close();

const dir = mkdtempSync(join(tmpdir(), 'pq-bench-js-'));
try {
  const [tx, rx] = await new Builder(await LogStore.open(dir)).open();
  await pushAll((b) => tx.push(b), 500);
  await ourConsume(rx, 500);
  let start = process.hrtime.bigint();
  await pushAll((b) => tx.push(b), ITEMS);
  const push = rate(ITEMS, start);
  await ourConsume(rx, ITEMS);
  start = process.hrtime.bigint();
  await Promise.all([pushAll((b) => tx.push(b), ITEMS), ourConsume(rx, ITEMS)]);
  results.logStoreGroup = { push, endToEnd: rate(ITEMS, start) };
  await tx.close();
} finally {
  rmSync(dir, { recursive: true, force: true });
}

// Medians of the rates, and of the per-round ratios of ours over the client's.
const summary = {};
for (const who of ['jetStreamR1', 'clientAlone']) {
  summary[who] = Object.fromEntries(['push', 'consume', 'endToEnd'].map((k) => [k, median(results[who].map((r) => r[k]))]));
}
summary.ratio = Object.fromEntries(
  ['push', 'consume', 'endToEnd'].map((k) => [k, median(results.jetStreamR1.map((r, i) => r[k] / results.clientAlone[i][k]))]),
);
summary.logStoreGroup = results.logStoreGroup;
console.log(
  `median ours/client: push ${summary.ratio.push.toFixed(2)}x, consume ${summary.ratio.consume.toFixed(2)}x, end to end ${summary.ratio.endToEnd.toFixed(2)}x`,
);
console.log(
  `embedded LogStore (group): push ${fmt(results.logStoreGroup.push)}/s   end to end ${fmt(results.logStoreGroup.endToEnd)}/s; client alone / embedded push: ${(summary.clientAlone.push / results.logStoreGroup.push).toFixed(2)}x, ours / embedded push: ${(summary.jetStreamR1.push / results.logStoreGroup.push).toFixed(2)}x`,
);
console.log(
  JSON.stringify({
    ...results,
    ...summary,
    rounds: ROUNDS,
    perRound: { jetStreamR1: results.jetStreamR1, clientAlone: results.clientAlone },
  }),
);
