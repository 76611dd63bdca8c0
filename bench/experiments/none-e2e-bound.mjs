// What bounds LogStore `none` end to end with 64 producers (the `limits` row `none64-raw`): the
// matrix cell (bench/lib/cell.mjs: 64 producers, one consumer with 64 acks in flight, capacity 1024,
// 128 B) in interleaved rounds beside
//   no-counts   the same queue over a LogStore that hides `features.deliveries`, so the queue keeps
//               no delivery counts and writes no first-delivery bound before each hand-out
//   memstore    the same harness over MemStore: the queue's own work with no file at all
//   raw-write1  writeSync of one 148-byte frame per call: the rate of one write(2) per item
//   raw-write64 writeSync of 64 frames per call: the `limits` reference
// It also counts write(2) calls per item delivered in each LogStore cell.
// Usage: npm run build && node bench/experiments/none-e2e-bound.mjs [rounds=5] [ms=1000]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Builder, LogStore, MemStore, nodeFileSystem } from '../../dist/index.js';
import { endToEnd } from '../lib/queue-work.mjs';
import { rawBatchedAppend } from '../lib/raw.mjs';
import { median } from '../lib/stats.mjs';

const rounds = Number(process.argv[2] ?? 5);
const ms = Number(process.argv[3] ?? 1000);
const payload = new Uint8Array(128).fill(7);

/** The store as the queue sees it, without delivery counts (every other method is the store's). */
function withoutCounts(store) {
  const features = { ...store.features, deliveries: false };
  return new Proxy(store, {
    get(target, key) {
      if (key === 'features') return features;
      const value = Reflect.get(target, key, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

async function queueCell(kind) {
  const dir = mkdtempSync(join(tmpdir(), 'pq-none-bound-'));
  const counter = { writes: 0 };
  const fs = { ...nodeFileSystem, write: (...a) => (counter.writes++, nodeFileSystem.write(...a)) };
  try {
    const store = kind === 'memstore' ? new MemStore() : await LogStore.open(join(dir, 'q'), { fs });
    const [tx, rx] = await new Builder(kind === 'no-counts' ? withoutCounts(store) : store).durability('none').capacity(1024).open();
    const w0 = counter.writes;
    const r = await endToEnd(tx, rx, { producers: 64, window: 64, payload, count: 5e7, budgetMs: ms });
    const writes = counter.writes - w0;
    await tx.close();
    return { rate: r.msgs / r.seconds, writesPerItem: kind === 'memstore' ? undefined : writes / r.total };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const raw = (batch) => {
  const dir = mkdtempSync(join(tmpdir(), 'pq-none-bound-raw-'));
  try {
    return { rate: rawBatchedAppend(dir, { frameBytes: 148, records: 3_000_000, batch, budgetMs: ms }) };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
};

const cells = {
  logstore: () => queueCell('logstore'),
  'no-counts': () => queueCell('no-counts'),
  memstore: () => queueCell('memstore'),
  'raw-write1': () => raw(1),
  'raw-write64': () => raw(64),
};
const names = Object.keys(cells);
const out = Object.fromEntries(names.map((k) => [k, []]));
for (let r = 0; r < rounds; r++) {
  for (let i = 0; i < names.length; i++) {
    const name = names[(i + r) % names.length];
    out[name].push(await cells[name]());
  }
}
const m = (name, f) => median(out[name].map(f));
const ratio = (a, b) => out[a].map((x, i) => x.rate / out[b][i].rate);
const range = (xs) => `${median(xs).toFixed(3)} (${Math.min(...xs).toFixed(3)}–${Math.max(...xs).toFixed(3)})`;
console.log(
  `${rounds} rounds of ${ms} ms, 64 producers, 128 B, none; items/s, median of rounds; ratios: median (min–max) of per-round ratios`,
);
for (const name of names) {
  const w = out[name][0].writesPerItem === undefined ? '' : `  write(2) per item ${m(name, (x) => x.writesPerItem).toFixed(2)}`;
  console.log(
    `${name.padEnd(12)} ${m(name, (x) => x.rate)
      .toFixed(0)
      .padStart(10)}${w}`,
  );
}
for (const [a, b] of [
  ['logstore', 'raw-write64'],
  ['no-counts', 'raw-write64'],
  ['memstore', 'raw-write64'],
  ['no-counts', 'logstore'],
  ['logstore', 'raw-write1'],
])
  console.log(`${a} / ${b}: ${range(ratio(a, b))}`);
