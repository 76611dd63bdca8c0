// The spool with no owner against the queue's own push, as interleaved rounds in one process:
// 64 concurrent pushes of 128 B under `group`, into a spool file (`connect()` while no process has
// the queue open: src/log/spool-producer.ts) and into an open queue over LogStore (the in-process
// push of the README). Each figure is the median of the rounds; the ratio the median of the
// per-round ratios. Also the spool under `sync` (one push at a time) and `none`, for scale.
// Usage: npm run build && node bench/experiments/spool.mjs [rounds=8] [ms=700]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Builder, LogStore } from '../../dist/index.js';
import { openSpool } from '../../dist/log/spool-producer.js';
import { nodeFileSystem } from '../../dist/fs/node-fs.js';
import { median } from '../lib/stats.mjs';

const rounds = Number(process.argv[2] ?? 8);
const ms = Number(process.argv[3] ?? 700);
const payload = new Uint8Array(128).fill(7);
const PRODUCERS = 64;

async function run(push, close) {
  let n = 0;
  const t0 = performance.now();
  const deadline = t0 + ms;
  await Promise.all(
    Array.from({ length: PRODUCERS }, async () => {
      while (performance.now() < deadline) {
        await push();
        n++;
      }
    }),
  );
  const rate = n / ((performance.now() - t0) / 1000);
  await close();
  return rate;
}

async function queueCell() {
  const dir = mkdtempSync(join(tmpdir(), 'pq-spool-bench-'));
  const [tx] = await new Builder(await LogStore.open(join(dir, 'q'))).open();
  const rate = await run(() => tx.push(payload), () => tx.close());
  rmSync(dir, { recursive: true, force: true });
  return rate;
}

async function spoolCell(durability) {
  const dir = mkdtempSync(join(tmpdir(), 'pq-spool-bench-'));
  const spool = await openSpool(join(dir, 'q'), { durability, fs: nodeFileSystem });
  const rate = await run(() => spool.pushMany([payload], {}, undefined), () => spool.close());
  rmSync(dir, { recursive: true, force: true });
  return rate;
}

const cells = { queue: () => queueCell(), spool: () => spoolCell('group'), 'spool sync': () => spoolCell('sync'), 'spool none': () => spoolCell('none') };
const results = Object.fromEntries(Object.keys(cells).map((k) => [k, []]));
const ratio = [];
for (let r = 0; r < rounds; r++) {
  const order = r % 2 === 0 ? Object.keys(cells) : Object.keys(cells).reverse();
  const v = {};
  for (const k of order) v[k] = await cells[k]();
  for (const k of Object.keys(cells)) results[k].push(v[k]);
  ratio.push(v.spool / v.queue);
}
console.log(`${rounds} rounds of ${ms} ms, ${PRODUCERS} concurrent pushes of 128 B; items/s, median of rounds`);
for (const [k, xs] of Object.entries(results)) console.log(`${k.padEnd(11)} ${median(xs).toFixed(0).padStart(9)}`);
console.log(`spool group / queue group: ${median(ratio).toFixed(2)} (${ratio.map((x) => x.toFixed(2)).join(' ')})`);
