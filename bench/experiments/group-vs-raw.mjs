// LogStore 'group', 64 producers, push only, interleaved with the raw 64 frames + fdatasync loop on a preallocated file, 3 rounds.
// Usage: npm run build && node bench/experiments/group-vs-raw.mjs
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { rawSyncLoop } from '../lib/raw.mjs';
import { Builder, LogStore } from '../../dist/index.js';
import { mkdtempSync, rmSync } from 'node:fs';
const dir = mkdtempSync(join(tmpdir(), 'pq-ab-'));
const payload = new Uint8Array(128);
for (let r = 0; r < 3; r++) {
  const raw = await rawSyncLoop(dir, { frameBytes: 148, records: 128000, batch: 64, preallocate: true });
  const d = mkdtempSync(dir + '/g-');
  const [tx] = await new Builder(await LogStore.open(d)).durability('group').open();
  await tx.push(payload);
  const N = 128000,
    P = 64;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: P }, async () => {
      for (let i = 0; i < N / P; i++) await tx.push(payload);
    }),
  );
  const ours = N / ((performance.now() - t0) / 1000);
  await tx.close();
  console.log(`raw prealloc 64/sync ${raw.toFixed(0)}  logstore group p64 ${ours.toFixed(0)}  ratio ${((ours / raw) * 100).toFixed(0)}%`);
}
rmSync(dir, { recursive: true });
