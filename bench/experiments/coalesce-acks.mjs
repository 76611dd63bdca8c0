// Experiment behind a suggestion in BENCHMARKS.md ("Where the time goes"), not part of `npm run bench`:
// how much faster LogStore `none` end to end gets if acks (and appends) are handed to the store at
// most once per event-loop turn instead of once per microtask. It wraps the store, so src/ is not
// touched: while the wrapper's setImmediate is pending, the core keeps gathering the next batch.
// Usage: npm run build && node bench/experiments/coalesce-acks.mjs [producers=64] [budgetMs=2000]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Builder, LogStore } from '../../dist/index.js';
import { endToEnd } from '../lib/queue-work.mjs';
import { median } from '../lib/stats.mjs';

const producers = Number(process.argv[2] ?? 64);
const budgetMs = Number(process.argv[3] ?? 2000);
const payload = new Uint8Array(128).fill(7);

/** Defers `ack` (and optionally `append`) by one macrotask; counts calls to show the batch size. */
function deferring(store, { acks, appends }) {
  const calls = { ack: 0, acked: 0, append: 0, appended: 0 };
  const later = (fn) => new Promise((resolve, reject) => setImmediate(() => fn().then(resolve, reject)));
  const wrapped = Object.create(store);
  wrapped.maxItemBytes = store.maxItemBytes;
  wrapped.features = store.features;
  wrapped.open = () => store.open();
  wrapped.read = (r) => store.read(r);
  wrapped.close = () => store.close();
  wrapped.ack = (seqs, sync) => {
    calls.ack++;
    calls.acked += seqs.length;
    return acks && !sync ? later(() => store.ack(seqs, sync)) : store.ack(seqs, sync);
  };
  wrapped.append = (items, sync) => {
    calls.append++;
    calls.appended += items.length;
    return appends && !sync ? later(() => store.append(items, sync)) : store.append(items, sync);
  };
  return { wrapped, calls };
}

const base = mkdtempSync(join(process.env.PQ_BENCH_DIR ?? tmpdir(), 'pq-coalesce-'));
try {
  for (const variant of ['as is', 'acks per turn', 'acks + appends per turn']) {
    const rates = [];
    let last;
    for (let rep = 0; rep < 3; rep++) {
      const store = await LogStore.open(join(base, `${variant.replace(/\W+/g, '-')}-${rep}`));
      const { wrapped, calls } = deferring(store, { acks: variant !== 'as is', appends: variant.includes('appends') });
      const [tx, rx] = await new Builder(wrapped).durability('none').capacity(65536).open();
      const r = await endToEnd(tx, rx, { producers, window: producers, payload, count: 3_000_000, budgetMs });
      await tx.close();
      rates.push(r.msgs / r.seconds);
      last = calls;
    }
    console.log(
      `${variant.padEnd(24)} ${Math.round(median(rates)).toLocaleString('en-US').padStart(10)} msgs/s (reps ${rates.map((x) => Math.round(x / 1000) + 'k').join(', ')}); ` +
        `items per ack call ${(last.acked / last.ack).toFixed(1)}, per append call ${(last.appended / last.append).toFixed(1)}`,
    );
  }
} finally {
  rmSync(base, { recursive: true, force: true });
}
