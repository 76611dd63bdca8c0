// One poison item (its handler always throws) among 100 000 good ones, consumed by process() under
// default options (concurrency 1, the default retry policy): how fast the good items go with and
// without the poison item, and how often the poison item is delivered over the run. A third
// contestant retries at once (`retry({ kind: 'fixed', delayMs: 0 })`), what process() did before
// it had a retry policy: the poison item is then always the lowest ready seq and the good items
// behind it never run. The items are pushed before the clock starts; the clock stops when the last
// good item's handler has run, or after `budget` seconds (then good items/s counts those handled).
// Stores: MemStore and LogStore under `none`, 128 B.
// A fourth contestant holds the first item reserved, unsettled, for the whole run, and never fails.
// Contestants run as interleaved rounds, their order rotated; medians over the rounds.
// Usage: npm run build && node bench/experiments/poison.mjs [rounds=5] [good=100000] [budget=2]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runPoison } from '../lib/poison.mjs';
import { median, spread } from '../lib/stats.mjs';

const rounds = Number(process.argv[2] ?? 5);
const goodCount = Number(process.argv[3] ?? 100_000);
const budgetMs = Number(process.argv[4] ?? 2) * 1000;
const scratch = mkdtempSync(join(tmpdir(), 'pq-poison-'));
const contestants = [
  ['clean', { poison: false }],
  ['poison', { poison: true }],
  ['poison, retry at once', { poison: true, retry: { kind: 'fixed', delayMs: 0 } }],
  // A control: the same first item, reserved before the run and held unsettled throughout. It
  // never fails, so whatever it costs the good items is the cost of an old unacked item in the
  // store (out-of-order acks), not of retries.
  ['held, never failing', { poison: true, hold: true }],
  // The poison item is moved into the dead-letter queue at its third failure.
  ['poison, maxDeliveries(3)', { poison: true, maxDeliveries: 3 }],
];

const run = (kind, options) => runPoison(kind, options, { scratch, goodCount, budgetMs });

const results = new Map();
for (const kind of ['mem', 'log']) {
  for (let round = 0; round < rounds; round++) {
    for (let k = 0; k < contestants.length; k++) {
      const [name, options] = contestants[(k + round) % contestants.length];
      const res = await run(kind, options);
      const key = `${kind}|${name}`;
      if (!results.has(key)) results.set(key, []);
      results.get(key).push(res);
    }
  }
}

console.log(`node ${process.version}, ${rounds} rounds, ${goodCount} good items, medians\n`);
console.log(
  '| store | contestant | good items/s | spread | vs clean (medians) | vs clean (median of per-round ratios) | run (s) | poison deliveries over the run: median (min–max) |',
);
console.log('|---|---|---:|---:|---:|---:|---:|---:|');
for (const kind of ['mem', 'log']) {
  const cleanRuns = results.get(`${kind}|clean`);
  const clean = median(cleanRuns.map((r) => r.rate));
  for (const [name] of contestants) {
    const rs = results.get(`${kind}|${name}`);
    const rate = median(rs.map((r) => r.rate));
    const deliveries =
      name === 'clean' || name.startsWith('held')
        ? '—'
        : `${median(rs.map((r) => r.poisonDeliveries))} (${Math.min(...rs.map((r) => r.poisonDeliveries))}–${Math.max(...rs.map((r) => r.poisonDeliveries))})`;
    console.log(
      `| ${kind === 'mem' ? 'MemStore' : 'LogStore `none`'} | ${name} | ${(rate / 1000).toFixed(0)} k/s | ${rate === 0 ? '—' : `${(spread(rs.map((r) => r.rate)) * 100).toFixed(0)} %`} | ${((rate / clean) * 100).toFixed(1)} % | ${(median(rs.map((r, i) => r.rate / cleanRuns[i].rate)) * 100).toFixed(1)} % | ${median(rs.map((r) => r.seconds)).toFixed(3)} | ${deliveries} |`,
    );
  }
}
rmSync(scratch, { recursive: true, force: true });
