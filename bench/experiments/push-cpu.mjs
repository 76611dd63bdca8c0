// The main thread's own work per push in the `group` push-only cell (64 producers, 128 B), with
// the disk taken out: LogStore behind the queue over a FileSystem whose write(2) and fdatasync do
// nothing (`blockingSync: true`, no preallocation), beside the contract's floor (bench/lib/floor.mjs)
// over the same do-nothing calls. Between two fdatasyncs of the real cell, the main thread does
// this work for the 64 pushes of a batch and nothing else, so the difference per push, times 64,
// is what a cycle of LogStore takes beyond the floor's.
// Prints CPU time and wall time per push for each, in alternating rounds of `pushes` pushes.
// Usage: npm run build && node bench/experiments/push-cpu.mjs [rounds=5] [pushes=1000000]
import { closeSync, mkdtempSync, openSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Builder, LogStore, nodeFileSystem } from '../../dist/index.js';
import { FloorLog } from '../lib/floor.mjs';
import { pushOnly } from '../lib/queue-work.mjs';
import { median } from '../lib/stats.mjs';

const rounds = Number(process.argv[2] ?? 5);
const pushes = Number(process.argv[3] ?? 1_000_000);
const payload = new Uint8Array(128).fill(7);

async function timed(target) {
  const cpu = process.cpuUsage();
  const at = performance.now();
  const r = await pushOnly(target, { producers: 64, payload, count: pushes, budgetMs: Number.POSITIVE_INFINITY });
  const used = process.cpuUsage(cpu);
  return { cpuNs: ((used.user + used.system) * 1000) / r.msgs, wallNs: ((performance.now() - at) * 1e6) / r.msgs };
}

async function logstore() {
  const dir = mkdtempSync(join(tmpdir(), 'pq-push-cpu-'));
  try {
    const fs = { ...nodeFileSystem, write: (_fd, _buf, _off, length) => length, fdatasyncSync: () => {} };
    const [tx] = await new Builder(await LogStore.open(dir, { fs, blockingSync: true, preallocate: false })).durability('group').open();
    try {
      return await timed(tx);
    } finally {
      await tx.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function floor() {
  const dir = mkdtempSync(join(tmpdir(), 'pq-push-cpu-'));
  const fd = openSync(join(dir, 'floor.bin'), 'w+', 0o600);
  try {
    return await timed(new FloorLog(fd, true, false, { writeSync: (_fd, _buf, _off, length) => length, fdatasyncSync: () => {} }));
  } finally {
    closeSync(fd);
    rmSync(dir, { recursive: true, force: true });
  }
}

const runs = { logstore: [], floor: [] };
for (let r = 0; r < rounds; r++) {
  runs.logstore.push(await logstore());
  runs.floor.push(await floor());
}
for (const [name, v] of Object.entries(runs))
  console.log(
    `${name.padEnd(8)} CPU ${median(v.map((x) => x.cpuNs)).toFixed(0)} ns a push (${v.map((x) => x.cpuNs.toFixed(0)).join(', ')}); wall ${median(v.map((x) => x.wallNs)).toFixed(0)} ns`,
  );
