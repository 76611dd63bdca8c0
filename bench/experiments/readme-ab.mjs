// Two builds of the package on the README's consumer cells (bench/lib/readme-consumer.mjs: 64
// producers, LogStore, default options, the `for await` loop with `await item.ack()` and
// `process({ concurrency: 64 })`), as interleaved A/B rounds in one process: the order alternates
// each round, and each figure is the median of the per-round ratios current / baseline, so that a
// change on the consumer's path is compared with the build before it at one moment on one disk.
// Usage: npm run build && node bench/experiments/readme-ab.mjs <baseline checkout with dist/> [rounds=8] [budgetMs=700]
// e.g. git worktree add /tmp/pq-base <commit> && cd /tmp/pq-base && npm ci && npm run build
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { runOne } from '../lib/readme-consumer.mjs';
import { median } from '../lib/stats.mjs';

const [baseline, roundsArg, budgetArg] = process.argv.slice(2);
if (baseline === undefined) {
  console.error('usage: node bench/experiments/readme-ab.mjs <baseline checkout with dist/> [rounds=8] [budgetMs=700]');
  process.exit(2);
}
const builds = {
  baseline: await import(pathToFileURL(join(resolve(baseline), 'dist', 'index.js')).href),
  current: await import(new URL('../../dist/index.js', import.meta.url).href),
};
const rounds = Number(roundsArg ?? 8);
const budgetMs = Number(budgetArg ?? 700);

async function rate(kind, lib) {
  const dir = mkdtempSync(join(tmpdir(), 'pq-readme-ab-'));
  try {
    const { msgs, seconds } = await runOne(kind, dir, { budgetMs, lib });
    return msgs / seconds;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const results = {};
for (let r = 0; r < rounds; r++) {
  for (const kind of ['push', 'loop', 'process']) {
    const row = (results[kind] ??= { baseline: [], current: [], ratio: [] });
    const order = r % 2 === 0 ? ['baseline', 'current'] : ['current', 'baseline'];
    const v = {};
    for (const b of order) v[b] = await rate(kind, builds[b]);
    row.baseline.push(v.baseline);
    row.current.push(v.current);
    row.ratio.push(v.current / v.baseline);
  }
}
console.log(`${rounds} rounds of ${budgetMs} ms; items/s, median of rounds; ratio = current / baseline, median of per-round ratios`);
for (const [kind, row] of Object.entries(results)) {
  console.log(
    `${kind.padEnd(8)} baseline ${median(row.baseline).toFixed(0).padStart(8)}  current ${median(row.current).toFixed(0).padStart(8)}  ratio ${median(row.ratio).toFixed(3)}  (${row.ratio.map((x) => x.toFixed(2)).join(' ')})`,
  );
}
