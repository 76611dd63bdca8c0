import { tmpdir } from 'node:os';
import { join } from 'node:path';
// Open time and heap of a LogStore holding N items after a clean close, in 3 fresh processes.
// Usage: npm run build && node bench/experiments/open-backlog.mjs N
import { Builder, LogStore } from '../../dist/index.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
const n = Number(process.argv[2]);
if (process.argv[3] === 'measure') {
  const dir = process.argv[4];
  global.gc?.();
  const heap0 = process.memoryUsage().heapUsed;
  const t0 = performance.now();
  const store = await LogStore.open(dir);
  const [tx, rx] = await new Builder(store).open();
  const ms = performance.now() - t0;
  global.gc?.();
  console.log(
    JSON.stringify({
      items: rx.stats().ready,
      openMs: +ms.toFixed(2),
      heapGrowthMiB: +((process.memoryUsage().heapUsed - heap0) / 1048576).toFixed(2),
    }),
  );
  await tx.close();
} else {
  const dir = mkdtempSync(join(tmpdir(), 'pq-open-'));
  const [tx] = await new Builder(await LogStore.open(dir)).durability('none').open();
  const payload = new Uint8Array(128);
  const batch = Array.from({ length: Math.min(n, 4096) }, () => payload);
  for (let i = 0; i < n; i += batch.length) await tx.pushMany(batch.slice(0, Math.min(batch.length, n - i)));
  await tx.close();
  for (let r = 0; r < 3; r++)
    process.stdout.write(
      spawnSync(process.execPath, ['--expose-gc', process.argv[1], String(n), 'measure', dir], { encoding: 'utf8' }).stdout,
    );
  rmSync(dir, { recursive: true });
}
