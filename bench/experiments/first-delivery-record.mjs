// What the record of a first delivery costs the README's consumers: the default against the same
// store with a first delivery's record made a no-op (a `markDelivered` of a bound alone returns at
// once without writing). The second is not a queue anyone should run: a handler that kills its
// process would then never have its delivery counted. It isolates the one write(2) per hand-out
// that exact counts need (docs/internals/core.md, "Delivery counts and dead letters"). 64
// producers, LogStore, default options, interleaved rounds, medians of the per-round ratios to push
// only. Usage: npm run build && node bench/experiments/first-delivery-record.mjs [rounds=8]
// [budgetMs=700]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runOne } from '../lib/readme-consumer.mjs';
import { median } from '../lib/stats.mjs';

const rounds = Number(process.argv[2] ?? 8);
const budgetMs = Number(process.argv[3] ?? 700);

/** The store with a bound-only delivery record not written (the reference). */
function noFirstDeliveryRecord(store) {
  const mark = store.markDelivered.bind(store);
  store.markDelivered = (below, marks, sync) => (marks.length === 0 && !sync ? undefined : mark(below, marks, sync));
  return store;
}

async function rate(kind, wrap) {
  const dir = mkdtempSync(join(tmpdir(), 'pq-first-record-'));
  try {
    const { msgs, seconds } = await runOne(kind, dir, { budgetMs, wrap });
    return msgs / seconds;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const rows = {};
for (let r = 0; r < rounds; r++) {
  const push = await rate('push');
  for (const kind of ['loop', 'process']) {
    const order = r % 2 === 0 ? ['default', 'reference'] : ['reference', 'default'];
    const v = {};
    for (const o of order) v[o] = await rate(kind, o === 'reference' ? noFirstDeliveryRecord : undefined);
    const row = (rows[kind] ??= { default: [], reference: [], ratio: [] });
    row.default.push(v.default / push);
    row.reference.push(v.reference / push);
    row.ratio.push(v.default / v.reference);
  }
}
console.log(`${rounds} rounds of ${budgetMs} ms; share of push only in the same round, medians`);
for (const [kind, row] of Object.entries(rows)) {
  console.log(
    `${kind.padEnd(8)} default ${(100 * median(row.default)).toFixed(0)} %   without the record ${(100 * median(row.reference)).toFixed(0)} %   default / without ${median(row.ratio).toFixed(2)}`,
  );
}
