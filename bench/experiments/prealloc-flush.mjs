// What LogStore's in-band preallocation costs the `group` push-only cell (64 producers, 128 B,
// `blockingSync: true`): every fdatasync timed, with preallocation (the default: 4 MiB of zeros
// written ahead of the write position, which the next fdatasync flushes) and without it (every
// fdatasync then commits the file's new size too). The floor of bench/lib/floor.mjs zero-fills its
// file before its clock starts, so the slow syncs counted here are part of LogStore's distance to it.
// Prints, per cell: the rate, the syncs and their median, the syncs over 5 times the median and
// the time they took, the CPU per push, and the time per cycle spent outside the syncs.
// Usage: npm run build && node bench/experiments/prealloc-flush.mjs [rounds=3] [ms=2000]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Builder, LogStore, nodeFileSystem } from '../../dist/index.js';
import { median } from '../lib/stats.mjs';

const rounds = Number(process.argv[2] ?? 3);
const ms = Number(process.argv[3] ?? 2000);
const payload = new Uint8Array(128).fill(7);

async function cell(preallocate) {
  const times = [];
  const fs = {
    ...nodeFileSystem,
    fdatasyncSync: (fd) => {
      const at = performance.now();
      nodeFileSystem.fdatasyncSync(fd);
      times.push(performance.now() - at);
    },
  };
  const dir = mkdtempSync(join(tmpdir(), 'pq-prealloc-'));
  try {
    const store = await LogStore.open(dir, { fs, blockingSync: true, preallocate });
    const [tx, rx] = await new Builder(store).durability('group').open();
    let pushes = 0;
    let stop = false;
    setTimeout(() => (stop = true), ms);
    const started = performance.now();
    const cpu = process.cpuUsage();
    await Promise.all(
      Array.from({ length: 64 }, async () => {
        while (!stop) {
          await tx.push(payload);
          pushes++;
        }
      }),
    );
    const used = process.cpuUsage(cpu);
    const wallMs = performance.now() - started;
    await rx.close();
    const mid = median(times);
    const slow = times.filter((t) => t > 5 * mid);
    const synced = times.reduce((a, b) => a + b, 0);
    return {
      rate: (pushes / wallMs) * 1000,
      syncs: times.length,
      medianUs: mid * 1000,
      slow: slow.length,
      slowMs: slow.reduce((a, b) => a + b, 0),
      wallMs,
      cpuNs: ((used.user + used.system) * 1000) / pushes,
      offSyncUs: ((wallMs - synced) * 1000) / times.length,
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

for (let r = 0; r < rounds; r++) {
  for (const preallocate of [true, false]) {
    const c = await cell(preallocate);
    console.log(
      `preallocate ${String(preallocate).padEnd(5)} ${(c.rate / 1000).toFixed(0)} k/s; ${c.syncs} syncs, median ${c.medianUs.toFixed(0)} µs; ${c.slow} over 5× the median: ${c.slowMs.toFixed(0)} ms of ${c.wallMs.toFixed(0)} ms; CPU ${c.cpuNs.toFixed(0)} ns a push; ${c.offSyncUs.toFixed(0)} µs a cycle outside the syncs`,
    );
  }
}
