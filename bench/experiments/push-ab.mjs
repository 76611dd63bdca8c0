// Two builds of the package on the README's push-only cell (bench/lib/readme-consumer.mjs: 64
// producers, LogStore, default options), many short alternating rounds in one process: the median
// of the per-round ratios current / baseline, with its quartiles. For changes whose effect on the
// push path is a few per cent, which readme-ab.mjs's fewer and longer rounds cannot tell from
// the disk's moods. Run it with the same build on both sides to see the method's own spread.
// Usage: npm run build && node bench/experiments/push-ab.mjs <baseline checkout with dist/> [rounds=30] [budgetMs=500]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { runOne } from '../lib/readme-consumer.mjs';

const [baseline, roundsArg, budgetArg] = process.argv.slice(2);
if (baseline === undefined) {
  console.error('usage: node bench/experiments/push-ab.mjs <baseline checkout with dist/> [rounds=30] [budgetMs=500]');
  process.exit(2);
}
const builds = {
  baseline: await import(pathToFileURL(join(resolve(baseline), 'dist', 'index.js')).href),
  current: await import(new URL('../../dist/index.js', import.meta.url).href),
};
const rounds = Number(roundsArg ?? 30);
const budgetMs = Number(budgetArg ?? 500);

const ratios = [];
for (let r = 0; r < rounds; r++) {
  const rate = {};
  for (const k of r % 2 === 0 ? ['baseline', 'current'] : ['current', 'baseline']) {
    const dir = mkdtempSync(join(tmpdir(), 'pq-push-ab-'));
    try {
      const { msgs, seconds } = await runOne('push', dir, { budgetMs, lib: builds[k] });
      rate[k] = msgs / seconds;
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
  ratios.push(rate.current / rate.baseline);
}
const sorted = [...ratios].sort((a, b) => a - b);
const at = (q) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
console.log(
  `push only, current / baseline, ${rounds} rounds of ${budgetMs} ms: median ${at(0.5).toFixed(3)}, quartiles ${at(0.25).toFixed(2)}–${at(0.75).toFixed(2)}`,
);
