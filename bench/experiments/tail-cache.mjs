// What LogStore's tail cache costs a `group` push: 64 producers awaiting push in a loop, 128 B, with
// the default `tailCacheBytes` (8 MiB) and with 0 (no cache), in interleaved rounds, each cell on a
// fresh store; with a baseline checkout, its build runs the same two cells in the same rounds.
// Garbage-collection time is summed per cell (PerformanceObserver 'gc'). Items the cache keeps
// outlive the young-generation collections and are promoted; the cache keeps plain batches as
// their written frames (src/log/reader.ts), so that this costs about as much as no cache at all.
// Usage: npm run build && node bench/experiments/tail-cache.mjs [rounds=8] [ms=1000] [baseline checkout with dist/]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { PerformanceObserver } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { pushOnly } from '../lib/queue-work.mjs';
import { median } from '../lib/stats.mjs';

const rounds = Number(process.argv[2] ?? 8);
const ms = Number(process.argv[3] ?? 1000);
const baseline = process.argv[4];
const builds = { current: await import(new URL('../../dist/index.js', import.meta.url).href) };
if (baseline !== undefined) builds.baseline = await import(pathToFileURL(join(resolve(baseline), 'dist', 'index.js')).href);
const payload = new Uint8Array(128).fill(7);
const cells = [];
for (const build of Object.keys(builds)) for (const cache of ['8 MiB', 'none']) cells.push({ name: `${build}, cache ${cache}`, build, tailCacheBytes: cache === 'none' ? 0 : undefined });
const rates = Object.fromEntries(cells.map((c) => [c.name, []]));
const gcMs = Object.fromEntries(cells.map((c) => [c.name, 0]));
let current;
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) if (current !== undefined) gcMs[current] += e.duration;
}).observe({ entryTypes: ['gc'] });

const scratch = mkdtempSync(join(tmpdir(), 'pq-tail-cache-'));
try {
  for (let r = 0; r < rounds; r++) {
    for (let i = 0; i < cells.length; i++) {
      const c = cells[(i + r) % cells.length];
      const { Builder, LogStore } = builds[c.build];
      const dir = mkdtempSync(join(scratch, 'q-'));
      const opts = c.tailCacheBytes === undefined ? {} : { tailCacheBytes: c.tailCacheBytes };
      const [tx] = await new Builder(await LogStore.open(join(dir, 'q'), opts)).durability('group').open();
      current = c.name;
      const res = await pushOnly(tx, { producers: 64, payload, count: 2_000_000, budgetMs: ms });
      current = undefined;
      rates[c.name].push(res.msgs / res.seconds);
      await tx.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }
  const first = cells[0].name;
  console.log(`group, 64 producers, push only, 128 B: ${rounds} rounds of ${ms} ms (median of rounds; ratio to "${first}", median of per-round ratios)`);
  for (const c of cells) {
    const v = rates[c.name];
    const ratios = v.map((x, i) => x / rates[first][i]);
    console.log(`  ${c.name.padEnd(24)} ${(median(v) / 1000).toFixed(1).padStart(7)} k/s  ratio ${median(ratios).toFixed(2)} (${Math.min(...ratios).toFixed(2)}–${Math.max(...ratios).toFixed(2)})  GC ${(gcMs[c.name] / rounds).toFixed(0)} ms per cell`);
  }
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
