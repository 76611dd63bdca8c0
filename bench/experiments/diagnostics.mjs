// What the diagnostics channels and the counters cost. Three contestants run the same workloads
// in one process, as interleaved A/B rounds (every contestant once per round, the order rotated
// each round; the figure is the median of the per-round ratios):
//   base        the package built from the commit before the channels and counters existed,
//   quiet       this build with no subscriber on any channel (the cost every user pays),
//   subscribed  this build with a counting subscriber on every channel.
// Workloads (128 B, durability 'none', capacity 1024): MemStore and LogStore end to end with 64
// producers each pushing one item at a time and the README's serial consumer
// (`for await` + `await item.ack()`), and a bulk variant of each: 4 producers pushing 64 items per
// `pushMany`, the consumer taking up to 64 ready items and acking them together.
// Two figures per run: messages per second of wall time, and messages per second of the process's
// CPU time (user + system, all threads). On a machine shared with other work the wall figure moves
// with what the others do; the CPU figure moves much less, and the cost of the channels is CPU.
// Usage: npm run build && node bench/experiments/diagnostics.mjs [base=/tmp/pq-base] [rounds=9] [ms=400] [contestants=base,quiet,subscribed]
// (leaving `subscribed` out keeps every channel unsubscribed for the whole process),
// where the base is built with: git worktree add /tmp/pq-base fddcd0f && cd /tmp/pq-base && npm ci && npm run build
import diagnosticsChannel from 'node:diagnostics_channel';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import * as current from '../../dist/index.js';
import { endToEndBatched } from '../lib/queue-work.mjs';
import { median, spread } from '../lib/stats.mjs';

const baseDir = resolve(process.argv[2] ?? '/tmp/pq-base');
const rounds = Number(process.argv[3] ?? 9);
const budgetMs = Number(process.argv[4] ?? 400);
const chosen = (process.argv[5] ?? 'base,quiet,subscribed').split(',');
const base = await import(pathToFileURL(join(baseDir, 'dist', 'index.js')).href);
if (base.channels !== undefined) throw new Error(`${baseDir} is not the pre-change build: it exports channels`);

const CAPACITY = 1024;
const payload = new Uint8Array(128).fill(7);
const scratch = mkdtempSync(join(tmpdir(), 'pq-diagnostics-'));

/** Messages seen per channel while subscribed: proof that the subscribed runs did publish. */
const seen = Object.fromEntries(Object.values(current.channels).map((name) => [name, 0]));
const subscribers = Object.values(current.channels).map((name) => [name, () => seen[name]++]);
const subscribe = () => {
  for (const [name, fn] of subscribers) diagnosticsChannel.subscribe(name, fn);
};
const unsubscribe = () => {
  for (const [name, fn] of subscribers) diagnosticsChannel.unsubscribe(name, fn);
};

async function openQueue(lib, kind) {
  const dir = kind === 'log' ? mkdtempSync(join(scratch, 'q-')) : null;
  const store = kind === 'log' ? await lib.LogStore.open(join(dir, 'q')) : new lib.MemStore();
  const [tx, rx] = await new lib.Builder(store).durability('none').capacity(CAPACITY).open();
  return { tx, rx, cleanup: () => dir && rmSync(dir, { recursive: true, force: true }) };
}

/** CPU seconds (user + system) of this process since `start` (a `process.cpuUsage()` value). */
const cpuSeconds = (start) => {
  const d = process.cpuUsage(start);
  return (d.user + d.system) / 1e6;
};

/**
 * 64 producers push one item at a time until the deadline; the consumer is the README's serial
 * loop. The rates count acks resolved until the producers stop; the run then drains the rest.
 */
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
  const producers = [];
  for (let p = 0; p < 64; p++) producers.push(produce());
  await Promise.all(producers);
  const msgs = acked;
  const seconds = (performance.now() - t0) / 1000;
  const cpu = cpuSeconds(cpu0);
  producing = false;
  // A consumer that has caught up waits in reserve(): closing ends its loop.
  if (acked === pushed) await tx.close();
  await consumer;
  return { wall: msgs / seconds, cpu: msgs / cpu };
}

/** The CPU time covers the drain after the deadline too, so the CPU rate counts every item acked. */
async function bulk(tx, rx) {
  const cpu0 = process.cpuUsage();
  const r = await endToEndBatched(tx, rx, { producers: 4, batch: 64, perPush: 64, payload, count: 1e9, budgetMs });
  return { wall: r.msgs / r.seconds, cpu: r.total / cpuSeconds(cpu0) };
}

const workloads = [
  ['MemStore, 64 producers, serial consumer', 'mem', serialConsumer],
  ['LogStore none, 64 producers, serial consumer', 'log', serialConsumer],
  ['MemStore, 4 producers pushMany(64), bulk acks', 'mem', bulk],
  ['LogStore none, 4 producers pushMany(64), bulk acks', 'log', bulk],
];

const contestants = {
  base: { lib: base, subscribed: false },
  quiet: { lib: current, subscribed: false },
  subscribed: { lib: current, subscribed: true },
};

async function run(name, kind, work) {
  const { lib, subscribed } = contestants[name];
  const q = await openQueue(lib, kind);
  if (subscribed) subscribe();
  try {
    return await work(q.tx, q.rx);
  } finally {
    if (subscribed) unsubscribe();
    await q.tx.close();
    q.cleanup();
  }
}

const names = Object.keys(contestants).filter((n) => chosen.includes(n));
const METRICS = ['wall', 'cpu'];
const RATIOS = Object.fromEntries(
  [
    ['quiet/base', ['quiet', 'base']],
    ['subscribed/quiet', ['subscribed', 'quiet']],
    ['subscribed/base', ['subscribed', 'base']],
  ].filter(([, pair]) => pair.every((n) => names.includes(n))),
);
// results[w][metric] = { rates: {contestant: [per round]}, ratios: {id: [per round]} }
const results = workloads.map(() =>
  Object.fromEntries(
    METRICS.map((m) => [
      m,
      { rates: Object.fromEntries(names.map((n) => [n, []])), ratios: Object.fromEntries(Object.keys(RATIOS).map((id) => [id, []])) },
    ]),
  ),
);
const t0 = performance.now();
for (let r = 0; r < rounds; r++) {
  for (let w = 0; w < workloads.length; w++) {
    const [, kind, work] = workloads[w];
    const got = {};
    for (let i = 0; i < names.length; i++) {
      const name = names[(i + r) % names.length];
      got[name] = await run(name, kind, work);
    }
    for (const m of METRICS) {
      const res = results[w][m];
      for (const n of names) res.rates[n].push(got[n][m]);
      for (const [id, [num, den]] of Object.entries(RATIOS)) res.ratios[id].push(got[num][m] / got[den][m]);
    }
  }
  process.stderr.write(`round ${r + 1}/${rounds}\n`);
}
rmSync(scratch, { recursive: true, force: true });

const k = (x) => `${(x / 1000).toFixed(0)} k/s`;
const pct = (x) => `${(x * 100).toFixed(1)} %`;
console.log(
  `node ${process.version}, ${rounds} rounds of ${budgetMs} ms per contestant, ${((performance.now() - t0) / 1000).toFixed(0)} s in all`,
);
for (const m of METRICS) {
  console.log(
    `\n${m === 'wall' ? 'messages per second of wall time' : 'messages per second of process CPU time'}; medians over rounds, spread = (max - min) / median\n`,
  );
  console.log(`| workload | ${names.join(' | ')} | ${Object.keys(RATIOS).join(' | ')} |`);
  console.log(`|---|${[...names, ...Object.keys(RATIOS)].map(() => '---:').join('|')}|`);
  for (let w = 0; w < workloads.length; w++) {
    const { rates, ratios } = results[w][m];
    const cell = (id) => `${pct(median(ratios[id]))} (spread ${pct(spread(ratios[id]))})`;
    console.log(
      `| ${workloads[w][0]} | ${names.map((n) => k(median(rates[n]))).join(' | ')} | ${Object.keys(RATIOS).map(cell).join(' | ')} |`,
    );
  }
}
console.log(
  `\nmessages seen by the subscribers: ${Object.entries(seen)
    .map(([n, c]) => `${n.replace('persistent-queue:', '')} ${c}`)
    .join(', ')}`,
);
