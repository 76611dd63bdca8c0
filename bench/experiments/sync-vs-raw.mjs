// LogStore 'sync', 1 producer, push only, interleaved with the raw write + fdatasync loop (preallocated and appending) in the same process, 3 rounds.
// Usage: npm run build && node bench/experiments/sync-vs-raw.mjs
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { rawSyncLoop } from '../lib/raw.mjs';
import { Builder, LogStore } from '../../dist/index.js';
import { mkdtempSync, rmSync } from 'node:fs';
const dir = mkdtempSync(join(tmpdir(), 'pq-ab-'));
const payload = new Uint8Array(128);
for (let r = 0; r < 3; r++) {
  const raw = await rawSyncLoop(dir, { frameBytes: 148, records: 2000, batch: 1, preallocate: true });
  const rawApp = await rawSyncLoop(dir, { frameBytes: 148, records: 2000, batch: 1, preallocate: false });
  const d = mkdtempSync(dir + '/s-');
  const [tx] = await new Builder(await LogStore.open(d)).durability('sync').open();
  await tx.push(payload);
  const t0 = performance.now();
  for (let i = 0; i < 2000; i++) await tx.push(payload);
  const ours = 2000 / ((performance.now() - t0) / 1000);
  await tx.close();
  console.log(
    `raw prealloc ${raw.toFixed(0)}  raw append ${rawApp.toFixed(0)}  logstore sync ${ours.toFixed(0)}  ratio ${((ours / raw) * 100).toFixed(0)}%`,
  );
}
rmSync(dir, { recursive: true });
