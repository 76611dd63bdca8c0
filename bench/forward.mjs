// Store-and-forward throughput: a LogStore queue drained into a JetStream stream by forward(),
// 128-byte payloads, against the nats-server at $NATS_URL (default 127.0.0.1:4222), beside the
// same publishes made straight from memory (no local queue) with the same pipelining.
//   npm run build && node bench/forward.mjs [--items=100000] [--rounds=1]
// bench/run.mjs runs it (section jetstream) and reads its last line; it needs a server. A benchmark
// measures, it does not assert.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { Builder, LogStore } from '../dist/index.js';
import { forward } from '../dist/engines/jetstream/forward.js';

const args = process.argv.slice(2);
const arg = (name, fallback) => Number(args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? fallback);
const items = arg('items', 100_000);
const rounds = arg('rounds', 1);
const PAYLOAD_BYTES = 128;
const url = process.env.NATS_URL ?? '127.0.0.1:4222';
const cells = [
  { batch: 64, concurrency: 1 },
  { batch: 64, concurrency: 4 },
  { batch: 256, concurrency: 4 },
];

const nc = await connect({ servers: url, maxReconnectAttempts: -1 });
const jsm = await jetstreamManager(nc);
const js = jetstream(nc);
const payload = new Uint8Array(PAYLOAD_BYTES).fill(0x61);
let streamNo = 0;

async function withStream(fn) {
  const name = `PQ_BENCH_FWD_${process.pid}_${++streamNo}`;
  const subject = `pq.bench.fwd.${process.pid}.${streamNo}`;
  await jsm.streams.add({ name, subjects: [subject], storage: 'file', duplicate_window: 120e9 });
  try {
    return await fn(subject, name);
  } finally {
    await jsm.streams.delete(name);
  }
}

/** forward() from a LogStore holding `items` items, until the queue is idle: items/s. */
async function forwardCell({ batch, concurrency }) {
  const dir = mkdtempSync(join(tmpdir(), 'pq-bench-fwd-'));
  try {
    const store = await LogStore.open(join(dir, 'q'));
    const [tx, rx] = await new Builder(store).open();
    for (let at = 0; at < items; at += 4096) await tx.pushMany(Array.from({ length: Math.min(4096, items - at) }, () => payload));
    return await withStream(async (subject, name) => {
      const stop = new AbortController();
      const start = performance.now();
      const f = forward(rx, { connection: nc, subject }, { batch, concurrency, signal: stop.signal });
      await rx.onIdle();
      const ms = performance.now() - start;
      stop.abort();
      await f.done;
      const stored = (await jsm.streams.info(name)).state.messages;
      await tx.close();
      if (stored !== items) throw new Error(`the stream holds ${stored} messages, not ${items}`);
      return (items / ms) * 1000;
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The same publishes from memory, `batch` at a time, `concurrency` rounds in flight: items/s. */
async function publishCell({ batch, concurrency }) {
  return withStream(async (subject) => {
    let next = 1;
    const start = performance.now();
    const lane = async () => {
      while (next <= items) {
        const first = next;
        const n = Math.min(batch, items - first + 1);
        next += n;
        await Promise.all(Array.from({ length: n }, (_, i) => js.publish(subject, payload, { msgID: `bench:${first + i}` })));
      }
    };
    await Promise.all(Array.from({ length: concurrency }, lane));
    return (items / (performance.now() - start)) * 1000;
  });
}

const fmt = (n) => Math.round(n).toLocaleString('en-US');
console.log(
  `forward() throughput, ${items} items of ${PAYLOAD_BYTES} B, LogStore (durability group) -> JetStream (file storage) at ${url}, server ${nc.info?.version}`,
);
console.log('batch  lanes  forward() items/s  publish-only items/s  ratio');
const results = { items, payload: PAYLOAD_BYTES, server: nc.info?.version, cells: [] };
for (const cell of cells) {
  for (let r = 0; r < rounds; r++) {
    const fwd = await forwardCell(cell);
    const raw = await publishCell(cell);
    results.cells.push({ ...cell, forward: fwd, publishOnly: raw });
    console.log(
      `${String(cell.batch).padStart(5)}  ${String(cell.concurrency).padStart(5)}  ${fmt(fwd).padStart(17)}  ${fmt(raw).padStart(20)}  ${(fwd / raw).toFixed(2)}`,
    );
  }
}
await nc.close();
// The last line, for bench/run.mjs (section jetstream).
console.log(JSON.stringify(results));
