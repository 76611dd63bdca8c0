// What the owner's latency measurement (src/remote/timings.ts) costs the queue while a dashboard
// watches, and that it costs nothing while none does. Two contestants run the same workloads in one
// process, as interleaved A/B rounds (the order alternating; the figure is the median of the
// per-round ratios):
//   quiet    an owner whose TimingCollector nobody asked (no subscriber on any channel),
//   watched  the same after one `read()`: subscribed to push, deliver, ack, nack and dead-letter.
// Workloads (128 B, durability 'none', capacity 1024): 64 producers pushing one item at a time and
// the README's serial consumer (`for await` + `await item.ack()`), on MemStore and LogStore.
// Figures: messages per second of wall time and of the process's CPU time (user + system).
// Usage: npm run build && node bench/experiments/dashboard-timings.mjs [rounds=9] [ms=400]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Builder, LogStore, MemStore } from '../../dist/index.js';
import { TimingCollector } from '../../dist/remote/timings.js';
import { median, spread } from '../lib/stats.mjs';

const rounds = Number(process.argv[2] ?? 9);
const budgetMs = Number(process.argv[3] ?? 400);
const payload = new Uint8Array(128).fill(7);
const scratch = mkdtempSync(join(tmpdir(), 'pq-dashboard-timings-'));

const cpuSeconds = (start) => {
  const d = process.cpuUsage(start);
  return (d.user + d.system) / 1e6;
};

async function serialConsumer(tx, rx) {
  const deadline = performance.now() + budgetMs;
  let pushed = 0;
  let acked = 0;
  let producing = true;
  const produce = async () => {
    while (performance.now() < deadline) {
      pushed++;
      await tx.push(payload);
    }
  };
  const consume = async () => {
    for await (const item of rx) {
      await item.ack();
      if (++acked === pushed && !producing) break;
    }
  };
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const consumer = consume();
  await Promise.all(Array.from({ length: 64 }, produce));
  const msgs = acked;
  const seconds = (performance.now() - t0) / 1000;
  const cpu = cpuSeconds(cpu0);
  producing = false;
  if (acked === pushed) await tx.close();
  await consumer;
  return { wall: msgs / seconds, cpu: msgs / cpu };
}

async function run(kind, watched) {
  const dir = kind === 'log' ? mkdtempSync(join(scratch, 'q-')) : null;
  const store = kind === 'log' ? await LogStore.open(join(dir, 'q'), { endpoint: false }) : new MemStore();
  const [tx, rx] = await new Builder(store).durability('none').capacity(1024).open();
  const collector = new TimingCollector(() => rx.stats().queueId);
  if (watched) collector.read();
  try {
    const result = await serialConsumer(tx, rx);
    if (watched) {
      const samples = collector.read().buckets.reduce((n, b) => n + (b.ack?.count ?? 0), 0);
      if (samples === 0) throw new Error('the watched run timed nothing');
    }
    return result;
  } finally {
    collector.stop();
    await tx.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  }
}

for (const [label, kind] of [
  ['MemStore, 64 producers, serial consumer', 'mem'],
  ['LogStore none, 64 producers, serial consumer', 'log'],
]) {
  const ratios = { wall: [], cpu: [] };
  const rates = { quiet: [], watched: [] };
  await run(kind, false); // warm-up
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 === 0 ? [false, true] : [true, false];
    const got = {};
    for (const watched of order) got[watched ? 'watched' : 'quiet'] = await run(kind, watched);
    for (const m of ['wall', 'cpu']) ratios[m].push(got.watched[m] / got.quiet[m]);
    rates.quiet.push(got.quiet.cpu);
    rates.watched.push(got.watched.cpu);
  }
  const pct = (v) => `${(v * 100).toFixed(1)} %`;
  console.log(
    `${label}: watched / quiet, CPU ${pct(median(ratios.cpu))} (spread ${pct(spread(ratios.cpu))}), wall ${pct(median(ratios.wall))} (spread ${pct(spread(ratios.wall))}); median CPU rates quiet ${Math.round(median(rates.quiet) / 1000)} k/s, watched ${Math.round(median(rates.watched) / 1000)} k/s`,
  );
}
rmSync(scratch, { recursive: true, force: true });
