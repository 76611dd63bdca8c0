// What LogStore's tail cache buys, and costs: the README's cells (64 producers, 128 B, push only,
// the `for await` loop, `process({ concurrency: 64 })`; bench/lib/readme-consumer.mjs) under the
// Builder's defaults (`group`) and under `none`, each with `tailCacheBytes` 8 MiB and with 0 (the
// default), in interleaved rounds, each cell on a fresh store. Garbage-collection time is summed
// per cell (PerformanceObserver 'gc'). A consumer that is caught up is handed new items without a
// read either way; the cache serves one a little behind, which otherwise reads the page cache.
// Usage: npm run build && node bench/experiments/tail-cache.mjs [rounds=8] [ms=800]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PerformanceObserver } from 'node:perf_hooks';
import { runOne } from '../lib/readme-consumer.mjs';
import { median } from '../lib/stats.mjs';

const rounds = Number(process.argv[2] ?? 8);
const ms = Number(process.argv[3] ?? 800);
const CACHES = { '8 MiB': { tailCacheBytes: 8 * 1024 * 1024 }, none: { tailCacheBytes: 0 } };
const POLICIES = { group: undefined, none: (b) => b.durability('none') };
const KINDS = ['push', 'loop', 'process'];
const rates = {};
const gcMs = {};
let current;
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) if (current !== undefined) gcMs[current] = (gcMs[current] ?? 0) + e.duration;
}).observe({ entryTypes: ['gc'] });

const scratch = mkdtempSync(join(tmpdir(), 'pq-tail-cache-'));
try {
  for (let r = 0; r < rounds; r++) {
    // Each round runs every cell; the order of the two caches alternates between rounds.
    const caches = Object.keys(CACHES);
    if (r % 2 === 1) caches.reverse();
    for (const [policy, configure] of Object.entries(POLICIES)) {
      for (const kind of KINDS) {
        for (const cache of caches) {
          const name = `${policy} ${kind}, cache ${cache}`;
          const dir = mkdtempSync(join(scratch, 'q-'));
          current = name;
          const res = await runOne(kind, dir, { budgetMs: ms, configure, storeOptions: CACHES[cache] });
          current = undefined;
          (rates[name] ??= []).push(res.msgs / res.seconds);
          rmSync(dir, { recursive: true, force: true });
        }
      }
    }
    process.stderr.write(`round ${r + 1}/${rounds}\n`);
  }
  console.log(
    `tail cache, 64 producers, 128 B: ${rounds} rounds of ${ms} ms (median of rounds; ratio of no cache to 8 MiB, median of per-round ratios)`,
  );
  for (const policy of Object.keys(POLICIES)) {
    for (const kind of KINDS) {
      const on = rates[`${policy} ${kind}, cache 8 MiB`];
      const off = rates[`${policy} ${kind}, cache none`];
      const ratios = off.map((x, i) => x / on[i]);
      const gc = (c) => (gcMs[`${policy} ${kind}, cache ${c}`] ?? 0) / rounds;
      console.log(
        `  ${`${policy} ${kind}`.padEnd(14)} 8 MiB ${(median(on) / 1000).toFixed(1).padStart(7)} k/s  none ${(median(off) / 1000).toFixed(1).padStart(7)} k/s  ` +
          `none / 8 MiB ${median(ratios).toFixed(2)} (${Math.min(...ratios).toFixed(2)}–${Math.max(...ratios).toFixed(2)})  GC per cell ${gc('8 MiB').toFixed(0)} / ${gc('none').toFixed(0)} ms`,
      );
    }
  }
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
