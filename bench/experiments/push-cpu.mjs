// The main thread's own work per push in the `group` push-only cell (64 producers, 128 B), with
// the disk taken out: LogStore behind the queue over a FileSystem whose write(2) and fdatasync do
// nothing (`blockingSync: true`, no preallocation), beside the contract's floor (bench/lib/floor.mjs)
// over the same do-nothing calls, with and without the turn of the event loop per flush that
// LogStore takes (`turnPerFlush`). Between two fdatasyncs of the real cell, the main thread does
// this work for the 64 pushes of a batch and nothing else, so the difference per push, times 64,
// is what a cycle of LogStore takes beyond the floor's.
// Prints CPU time and wall time per push for each, in alternating rounds of `pushes` pushes. Given
// a baseline checkout (with its dist/ built), its LogStore runs in the same rounds too, and the
// median of the per-round ratios of wall time a push, this build / the baseline, is printed with
// its quartiles: a change of a few per cent to the push path shows there where the disk hides it.
// The first two rounds warm up and are left out of that ratio.
// Usage: npm run build && node bench/experiments/push-cpu.mjs [rounds=5] [pushes=1000000] [baseline checkout]
import { closeSync, mkdtempSync, openSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import * as current from '../../dist/index.js';
import { FloorLog } from '../lib/floor.mjs';
import { pushOnly } from '../lib/queue-work.mjs';
import { median } from '../lib/stats.mjs';

const rounds = Number(process.argv[2] ?? 5);
const pushes = Number(process.argv[3] ?? 1_000_000);
const baselineDir = process.argv[4];
const baseline = baselineDir === undefined ? undefined : await import(pathToFileURL(join(resolve(baselineDir), 'dist', 'index.js')).href);
const payload = new Uint8Array(128).fill(7);

async function timed(target) {
  const cpu = process.cpuUsage();
  const at = performance.now();
  const r = await pushOnly(target, { producers: 64, payload, count: pushes, budgetMs: Number.POSITIVE_INFINITY });
  const used = process.cpuUsage(cpu);
  return { cpuNs: ((used.user + used.system) * 1000) / r.msgs, wallNs: ((performance.now() - at) * 1e6) / r.msgs };
}

/** LogStore of the build `lib` (this checkout's unless given) over the do-nothing calls. */
async function logstore(lib = current) {
  const dir = mkdtempSync(join(tmpdir(), 'pq-push-cpu-'));
  try {
    const fs = { ...lib.nodeFileSystem, write: (_fd, _buf, _off, length) => length, fdatasyncSync: () => {} };
    const [tx] = await new lib.Builder(await lib.LogStore.open(dir, { fs, blockingSync: true, preallocate: false }))
      .durability('group')
      .open();
    try {
      return await timed(tx);
    } finally {
      await tx.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function floor(turnPerFlush) {
  const dir = mkdtempSync(join(tmpdir(), 'pq-push-cpu-'));
  const fd = openSync(join(dir, 'floor.bin'), 'w+', 0o600);
  try {
    const log = new FloorLog(fd, true, false, { writeSync: (_fd, _buf, _off, length) => length, fdatasyncSync: () => {} });
    log.turnPerFlush = turnPerFlush;
    return await timed(log);
  } finally {
    closeSync(fd);
    rmSync(dir, { recursive: true, force: true });
  }
}

const contestants = {
  logstore: () => logstore(),
  floor: () => floor(false),
  'floor-turn': () => floor(true),
};
if (baseline !== undefined) contestants.baseline = () => logstore(baseline);
const names = Object.keys(contestants);
const runs = Object.fromEntries(names.map((name) => [name, []]));
for (let r = 0; r < rounds; r++) {
  // The order rotates by one each round, so that no contestant always runs first.
  for (let i = 0; i < names.length; i++) {
    const name = names[(r + i) % names.length];
    runs[name].push(await contestants[name]());
  }
}
for (const [name, v] of Object.entries(runs))
  console.log(
    `${name.padEnd(10)} CPU ${median(v.map((x) => x.cpuNs)).toFixed(0)} ns a push (${v.map((x) => x.cpuNs.toFixed(0)).join(', ')}); wall ${median(v.map((x) => x.wallNs)).toFixed(0)} ns`,
  );
if (baseline !== undefined) {
  const ratios = runs.logstore.map((x, r) => x.wallNs / runs.baseline[r].wallNs).slice(2);
  const sorted = [...ratios].sort((a, b) => a - b);
  const at = (q) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
  console.log(
    `wall time a push, this build / baseline, ${ratios.length} rounds after 2 of warm-up: median ${median(ratios).toFixed(3)}, quartiles ${at(0.25).toFixed(2)}–${at(0.75).toFixed(2)}`,
  );
}
