// Where a LogStore's batch syncs run under `blockingSync: 'auto'`, against `false` and `true`, on a
// quiet event loop and on a busy one, in interleaved rounds. Each cell and contestant has its own
// store, open for the whole run (16 MiB segments); a round pushes for `ms` into each of them back
// to back, the contestants' order rotating by one each round, so that the disk's mood (fdatasync
// throughput here moves by 2× and more from one second to the next) is shared within a round. A
// ratio is computed per round; the median, quartiles and range over rounds are printed.
// Cells, 128 B payloads, push only:
//   quiet  group, 64 producers (the limits row "group, 64 producers"); sync, 1 producer
//   spin   group, 64 producers while the same event loop runs a chain of setImmediate callbacks,
//          each ~50 µs of CPU work (a saturated loop: a server busy with other requests)
//   tick   group, 64 producers while a 1 ms setInterval does ~200 µs of CPU work (a loop a fifth busy)
// For every cell: pushes/s; the loop's delay (perf_hooks.monitorEventLoopDelay, 1 ms resolution:
// how late a timer fires, so 1.0 ms is an on-time loop) p50/p99/max; the background work done per
// second (spin: callbacks; tick: interval runs); the share of fdatasyncs run on the calling thread
// (fdatasyncSync) of all fdatasyncs; and pushes per fdatasync.
// With a baseline checkout (a build of the package before the change, with dist/), its 'auto' runs
// as 'auto-old' beside this build's 'auto'; ratios are to 'auto-old', else to `false`.
// Usage: npm run build && node bench/experiments/auto-batch-sync.mjs [rounds=40] [ms=150] [baseline checkout or ''] [cells, e.g. quiet,spin or sync/p1]
// e.g. mkdir /tmp/pq-base && git archive HEAD~1 | tar -x -C /tmp/pq-base && ln -s "$PWD/node_modules" /tmp/pq-base/ && (cd /tmp/pq-base && npm run build)
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { median } from '../lib/stats.mjs';

const rounds = Number(process.argv[2] ?? 40);
const ms = Number(process.argv[3] ?? 150);
const baselineDir = process.argv[4] || undefined;
const only = process.argv[5]?.split(',');
const current = await import(new URL('../../dist/index.js', import.meta.url).href);
const baseline = baselineDir === undefined ? null : await import(pathToFileURL(join(resolve(baselineDir), 'dist', 'index.js')).href);
const payload = new Uint8Array(128).fill(7);

const contestants = [
  ['false', current, false],
  ...(baseline === null ? [] : [['auto-old', baseline, 'auto']]),
  ['auto', current, 'auto'],
  ['true', current, true],
];
const reference = baseline === null ? 'false' : 'auto-old';
const cells = [
  ['quiet group/p64', 'group', 64, null],
  ['quiet sync/p1', 'sync', 1, null],
  ['spin group/p64', 'group', 64, 'spin'],
  ['tick group/p64', 'group', 64, 'tick'],
].filter(([name]) => only === undefined || only.some((o) => name === o || name.split(' ').includes(o)));

function spinFor(msOfWork) {
  const t = performance.now();
  while (performance.now() - t < msOfWork);
}

/** Background work on the same event loop until `stop()`; returns how many units it ran. */
function background(kind) {
  let units = 0;
  let stopped = false;
  if (kind === 'spin') {
    const step = () => {
      if (stopped) return;
      spinFor(0.05);
      units++;
      setImmediate(step);
    };
    setImmediate(step);
    return () => ((stopped = true), units);
  }
  const iv = setInterval(() => {
    spinFor(0.2);
    units++;
  }, 1);
  return () => (clearInterval(iv), units);
}

/** One store per cell and contestant, open for the whole run, so that a round is a few windows of pushes back to back. */
async function openStore(m, blockingSync, durability) {
  const counts = { async: 0, sync: 0 };
  const fs = {
    ...m.nodeFileSystem,
    fdatasync(fd) {
      counts.async++;
      return m.nodeFileSystem.fdatasync(fd);
    },
    fdatasyncSync(fd) {
      counts.sync++;
      m.nodeFileSystem.fdatasyncSync(fd);
    },
  };
  const dir = mkdtempSync(join(tmpdir(), 'pq-auto-batch-'));
  const [tx] = await new m.Builder(await m.LogStore.open(join(dir, 'q'), { fs, blockingSync, segmentBytes: 16 * 1024 * 1024 }))
    .durability(durability)
    .open();
  return { tx, counts, dir };
}

async function window({ tx, counts }, producers, load) {
  counts.async = counts.sync = 0;
  const h = monitorEventLoopDelay({ resolution: 1 });
  h.enable();
  const stop = load === null ? () => 0 : background(load);
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
  const seconds = (performance.now() - t0) / 1000;
  const units = stop();
  h.disable();
  const syncs = counts.async + counts.sync;
  return {
    rate: n / seconds,
    work: units / seconds,
    p50: h.percentile(50) / 1e6,
    p99: h.percentile(99) / 1e6,
    max: h.max / 1e6,
    onThread: syncs === 0 ? 0 : counts.sync / syncs,
    perSync: syncs === 0 ? NaN : n / syncs,
  };
}

const stores = {};
for (const [name, durability] of cells) {
  for (const [label, m, mode] of contestants) (stores[name] ??= {})[label] = await openStore(m, mode, durability);
}
const results = {};
for (let r = 0; r < rounds; r++) {
  for (const [name, , producers, load] of cells) {
    const order = contestants.map((_, i) => contestants[(i + r) % contestants.length]);
    const got = {};
    for (const [label] of order) got[label] = await window(stores[name][label], producers, load);
    for (const [label] of contestants) {
      const row = ((results[name] ??= {})[label] ??= []);
      row.push({
        ...got[label],
        ratio: got[label].rate / got[reference].rate,
        workRatio: load === null ? NaN : got[label].work / got[reference].work,
      });
    }
  }
}
for (const byLabel of Object.values(stores)) {
  for (const { tx, dir } of Object.values(byLabel)) {
    await tx.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

const f = (x, d = 0) => (Number.isNaN(x) ? '-' : x.toFixed(d));
const quartile = (xs, q) => [...xs].sort((a, b) => a - b)[Math.round(q * (xs.length - 1))];
const spanOf = (xs, d) =>
  xs.some(Number.isNaN)
    ? '-'
    : `${f(median(xs), d)} [${f(quartile(xs, 0.25), d)}–${f(quartile(xs, 0.75), d)}] (${f(Math.min(...xs), d)}–${f(Math.max(...xs), d)})`;
console.log(
  `${rounds} rounds of ${ms} ms per contestant; per round ratios to '${reference}': median [quartiles] (range); the other columns medians of rounds; loop delay in ms`,
);
console.log(
  'cell              mode       pushes/s  ratio                           work/s  work ratio                      delay p50   p99    max  on-thread  pushes/sync',
);
for (const [name, byLabel] of Object.entries(results)) {
  for (const [label, rs] of Object.entries(byLabel)) {
    const m = (k) => median(rs.map((x) => x[k]));
    console.log(
      `${name.padEnd(17)} ${label.padEnd(9)} ${f(m('rate')).padStart(9)}  ${spanOf(
        rs.map((x) => x.ratio),
        2,
      ).padEnd(30)} ${f(m('work')).padStart(7)}  ${spanOf(
        rs.map((x) => x.workRatio),
        2,
      ).padEnd(
        30,
      )} ${f(m('p50'), 2).padStart(9)} ${f(m('p99'), 2).padStart(5)} ${f(m('max'), 1).padStart(6)} ${f(m('onThread') * 100).padStart(8)} % ${f(m('perSync'), 1).padStart(11)}`,
    );
  }
}
