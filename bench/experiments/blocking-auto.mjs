// LogStore's `blockingSync` modes side by side: throughput and the event loop's delay
// (perf_hooks.monitorEventLoopDelay, 1 ms resolution: how long a timer waits behind the work)
// for push-only cells of 128 B under `sync` and `group`, 1 and 64 producers, in interleaved rounds.
// 'auto' (the default) syncs on the calling thread when a sync covers one operation, and for a
// batch while the event loop has had nothing else to do (bench/experiments/auto-batch-sync.mjs);
// false always in the threadpool; true always on the calling thread.
// Usage: npm run build && node bench/experiments/blocking-auto.mjs [rounds=5] [ms=700]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Builder, LogStore } from '../../dist/index.js';
import { median } from '../lib/stats.mjs';

const rounds = Number(process.argv[2] ?? 5);
const ms = Number(process.argv[3] ?? 700);
const payload = new Uint8Array(128).fill(7);
const modes = [false, 'auto', true];
const cells = [
  ['sync', 1],
  ['group', 1],
  ['group', 64],
];

async function cell(durability, producers, blockingSync) {
  const dir = mkdtempSync(join(tmpdir(), 'pq-blocking-auto-'));
  const [tx] = await new Builder(await LogStore.open(join(dir, 'q'), { blockingSync })).durability(durability).open();
  const h = monitorEventLoopDelay({ resolution: 1 });
  h.enable();
  let n = 0;
  const t0 = performance.now();
  const deadline = t0 + ms;
  await Promise.all(
    Array.from({ length: producers }, async () => {
      while (performance.now() < deadline) {
        await tx.push(payload);
        n++;
      }
    }),
  );
  const rate = n / ((performance.now() - t0) / 1000);
  h.disable();
  await tx.close();
  rmSync(dir, { recursive: true, force: true });
  return { rate, p50: h.percentile(50) / 1e6, p99: h.percentile(99) / 1e6, max: h.max / 1e6 };
}

const out = {};
for (let r = 0; r < rounds; r++) {
  for (const [durability, producers] of cells) {
    const order = r % 2 === 0 ? modes : [...modes].reverse();
    for (const mode of order) {
      const key = `${durability}/p${producers}/${String(mode)}`;
      (out[key] ??= []).push(await cell(durability, producers, mode));
    }
  }
}
console.log(`${rounds} rounds of ${ms} ms; median of rounds; event-loop delay in ms`);
console.log('cell                 pushes/s   loop delay p50    p99    max');
for (const [key, rs] of Object.entries(out)) {
  const m = (f) => median(rs.map(f));
  console.log(
    `${key.padEnd(18)} ${m((x) => x.rate)
      .toFixed(0)
      .padStart(10)}   ${m((x) => x.p50)
      .toFixed(2)
      .padStart(13)} ${m((x) => x.p99)
      .toFixed(2)
      .padStart(6)} ${m((x) => x.max)
      .toFixed(2)
      .padStart(6)}`,
  );
}
