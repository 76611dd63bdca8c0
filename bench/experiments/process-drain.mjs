// `process({ concurrency })` draining a backlog of a LogStore: the drain rate and the delivery
// records written per item (calls of the store's `markDelivered`), for this checkout's build and,
// given one, a baseline build, in alternating rounds. Workers that come back for their next item
// together share one record (docs/internals/core.md, "Delivery counts and dead letters"); a lone
// worker writes one per item.
// Usage: npm run build && node bench/experiments/process-drain.mjs [baseline checkout with dist/ | -] [items=200000] [rounds=3] [concurrency=64]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { median } from '../lib/stats.mjs';

const [baseline = '-', itemsArg, roundsArg, concurrencyArg] = process.argv.slice(2);
const items = Number(itemsArg ?? 200_000);
const rounds = Number(roundsArg ?? 3);
const concurrency = Number(concurrencyArg ?? 64);
const builds = { current: await import(new URL('../../dist/index.js', import.meta.url).href) };
if (baseline !== '-') builds.baseline = await import(pathToFileURL(join(resolve(baseline), 'dist', 'index.js')).href);

async function drain({ Builder, LogStore }) {
  const dir = mkdtempSync(join(tmpdir(), 'pq-drain-'));
  try {
    const store = await LogStore.open(join(dir, 'q'));
    let records = 0;
    const markDelivered = store.markDelivered.bind(store);
    store.markDelivered = (...args) => {
      records++;
      return markDelivered(...args);
    };
    const [tx, rx] = await new Builder(store).open();
    const payload = new Uint8Array(128).fill(7);
    for (let i = 0; i < items; i += 1000) await tx.pushMany(Array.from({ length: Math.min(1000, items - i) }, () => payload));
    records = 0;
    let handled = 0;
    const stop = new AbortController();
    const t0 = performance.now();
    await rx.process(
      async () => {
        if (++handled === items) stop.abort();
      },
      { concurrency, signal: stop.signal },
    );
    const seconds = (performance.now() - t0) / 1000;
    await tx.close();
    return { rate: items / seconds, perItem: records / items };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const res = Object.fromEntries(Object.keys(builds).map((k) => [k, []]));
for (let r = 0; r < rounds; r++) {
  const order = r % 2 === 0 ? Object.keys(builds) : Object.keys(builds).reverse();
  for (const k of order) res[k].push(await drain(builds[k]));
}
console.log(`process({ concurrency: ${concurrency} }) draining ${items} items of a LogStore, ${rounds} rounds (medians)`);
for (const [k, v] of Object.entries(res)) {
  const rate = median(v.map((x) => x.rate));
  const perItem = median(v.map((x) => x.perItem));
  console.log(`  ${k.padEnd(9)} ${(rate / 1000).toFixed(1).padStart(7)} k/s   delivery records per item ${perItem.toFixed(3)}`);
}
