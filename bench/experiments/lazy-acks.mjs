// Which ack policy should be the default? The README's consumer code (the `for await` loop with
// `await item.ack()`, and `process()` with concurrency 64) against push only, 64 producers,
// LogStore, 128 B, in rounds (bench/lib/readme-consumer.mjs), under each ack policy below.
// Usage: npm run build && node bench/experiments/lazy-acks.mjs [rounds=3] [budgetMs=1000] [variants=all]
//   variants: comma-separated names from VARIANTS (default: every one)
// 'default without delivery counts' is the default over the same store with `features.deliveries`
// turned off: the queue then stores no first-delivery bound and no marks, so the two rows differ
// by what delivery counts cost. The last two variants are not policies the queue offers: the first's store resolves a lazy ack
// before writing it and writes the acks of a whole turn at once (one write per turn instead of one
// per ack), which is what a serial consumer would need for its acks to cost no system call each;
// the second's acks write nothing at all (the upper bound of the consumer over this store).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runReadmeRounds } from '../lib/readme-consumer.mjs';
import { median } from '../lib/stats.mjs';

const rounds = Number(process.argv[2] ?? 3);
const budgetMs = Number(process.argv[3] ?? 1000);
const wanted = process.argv[4]?.split(',');

/** `store` with acks resolved at once and written once per turn; `sync()` writes what is pending first. */
function ackPerTurn(store) {
  let pending = [];
  // biome-ignore lint/correctness/noUnusedVariables: read by `flushing ??=` below, which schedules one flush per turn.
  let flushing;
  const flush = () => {
    flushing = undefined;
    const seqs = pending;
    pending = [];
    return seqs.length === 0 ? Promise.resolve() : store.ack(seqs, false);
  };
  const wrapped = Object.create(store);
  wrapped.maxItemBytes = store.maxItemBytes;
  wrapped.features = store.features;
  wrapped.open = () => store.open();
  wrapped.append = (items, sync) => store.append(items, sync);
  wrapped.read = (r) => store.read(r);
  wrapped.close = () => flush().then(() => store.close());
  wrapped.ack = (seqs, sync) => {
    if (sync) return store.ack(seqs, sync);
    for (const s of seqs) pending.push(s);
    flushing ??= new Promise((resolve, reject) => setImmediate(() => flush().then(resolve, reject)));
    return Promise.resolve();
  };
  wrapped.sync = () => flush().then(() => store.sync());
  return wrapped;
}

/** `store` whose acks resolve at once and write nothing (the items stay stored; runs are discarded). */
function noStoreAck(store) {
  const wrapped = ackPerTurn(store);
  wrapped.ack = () => Promise.resolve();
  wrapped.sync = () => Promise.resolve();
  wrapped.close = () => store.close();
  return wrapped;
}

/** `store` as a store without delivery counts: the queue keeps no marks and no bound over it. */
function noDeliveryCounts(store) {
  const wrapped = Object.create(store);
  wrapped.maxItemBytes = store.maxItemBytes;
  wrapped.features = { ...store.features, deliveries: false };
  wrapped.open = () => store.open();
  wrapped.append = (items, sync) => store.append(items, sync);
  wrapped.ack = (seqs, sync) => store.ack(seqs, sync);
  wrapped.read = (r) => store.read(r);
  wrapped.close = () => store.close();
  wrapped.sync = () => store.sync();
  wrapped.usage = () => store.usage();
  return wrapped;
}

const VARIANTS = {
  default: undefined,
  group: (b) => b.ackDurability('group'),
  'lazy 100 ms / 4096': (b) => b.ackDurability('lazy', { maxDelayMs: 100, maxPending: 4096 }),
  'lazy 10 ms / 1024': (b) => b.ackDurability('lazy', { maxDelayMs: 10, maxPending: 1024 }),
  'lazy 1000 ms / 65536': (b) => b.ackDurability('lazy', { maxDelayMs: 1000, maxPending: 65536 }),
  'lazy 100 ms / 4096 written per turn': { wrap: ackPerTurn },
  // What the delivery counts cost: the default, over the same store declaring it keeps none.
  'default without delivery counts (reference)': { wrap: noDeliveryCounts },
  // A reference, not a policy: what the consumer costs when its acks cost the store nothing.
  'no store ack (reference)': { wrap: noStoreAck },
};

const scratch = mkdtempSync(join(process.env.PQ_BENCH_DIR ?? tmpdir(), 'pq-lazy-'));
const k = (x) => `${(x / 1000).toFixed(1)} k/s`;
const pct = (x) => `${(x * 100).toFixed(0)} %`;
try {
  console.log(
    `| ack policy | push only | for await + await ack | process, concurrency 64 | loop / push (rounds) | process / push (rounds) |`,
  );
  console.log(`|---|---:|---:|---:|---:|---:|`);
  for (const [name, configure] of Object.entries(VARIANTS)) {
    if (wanted && !wanted.includes(name)) continue;
    const options = typeof configure === 'object' ? configure : { configure };
    const { rates, ratios, medians } = await runReadmeRounds({ scratch, rounds, budgetMs, ...options });
    console.log(
      `| ${name} | ${k(median(rates.push))} | ${k(median(rates.loop))} | ${k(median(rates.process))} | ` +
        `${pct(medians.loop)} (${ratios.loop.map(pct).join(', ')}) | ${pct(medians.process)} (${ratios.process.map(pct).join(', ')}) |`,
    );
  }
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
