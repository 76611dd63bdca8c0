// The core's per-turn budget of store calls (`Builder.storeCallsPerTurn`, default 'auto') trades
// batching under many concurrent callers against the latency of a serial caller. Runs the same
// cells under each budget, `none`, 128 B, capacity 65 536 end to end.
// Usage: npm run build && node bench/experiments/turn-budget.mjs [budgets=auto,16,4,1] [ms=700] [reps=3]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Builder, LogStore, MemStore } from '../../dist/index.js';
import { endToEnd, pushOnly } from '../lib/queue-work.mjs';
import { median } from '../lib/stats.mjs';

const budgets = (process.argv[2] ?? 'auto,16,4,1').split(',').map((b) => (b === 'auto' ? b : Number(b)));
const ms = Number(process.argv[3] ?? 700);
const reps = Number(process.argv[4] ?? 3);
const scratch = mkdtempSync(join(tmpdir(), 'pq-turn-'));
const payload = new Uint8Array(128).fill(7);

const cells = [
  ['LogStore none e2e, 64 prod.', 'log', 64, 'e2e'],
  ['LogStore none e2e, 1 prod.', 'log', 1, 'e2e'],
  ['LogStore none push, 1 prod.', 'log', 1, 'push'],
  ['MemStore e2e, 1 prod.', 'mem', 1, 'e2e'],
  ['MemStore e2e, 64 prod.', 'mem', 64, 'e2e'],
];

const rows = [];
for (const budget of budgets) {
  const row = [`${budget}${budget === 'auto' ? ' (default)' : ''}`];
  for (const [, kind, producers, workload] of cells) {
    const rates = [];
    for (let r = 0; r < reps; r++) {
      const dir = mkdtempSync(join(scratch, 'q-'));
      const store = kind === 'mem' ? new MemStore() : await LogStore.open(join(dir, 'q'));
      const [tx, rx] = await new Builder(store)
        .durability('none')
        .capacity(workload === 'e2e' ? 65536 : Infinity)
        .storeCallsPerTurn(budget)
        .open();
      const res =
        workload === 'e2e'
          ? await endToEnd(tx, rx, { producers, window: producers, payload, count: 2_000_000, budgetMs: ms })
          : await pushOnly(tx, { producers, payload, count: 2_000_000, budgetMs: ms });
      await tx.close();
      rmSync(dir, { recursive: true, force: true });
      rates.push(res.msgs / res.seconds);
    }
    row.push(`${(median(rates) / 1000).toFixed(0)} k/s`);
  }
  rows.push(row);
  console.log(
    `store calls per turn ${row[0]}: ${row
      .slice(1)
      .map((x, i) => `${cells[i][0]} ${x}`)
      .join(' | ')}`,
  );
}
console.log(`\n| store calls per turn | ${cells.map((c) => c[0]).join(' | ')} |`);
console.log(`|---:|${cells.map(() => '---:').join('|')}|`);
for (const r of rows) console.log(`| ${r.join(' | ')} |`);
rmSync(scratch, { recursive: true, force: true });
