// Flow control on the README's `process()` cell (64 producers of 128 B, LogStore, default options:
// `group` pushes, `process({ concurrency: 64 })`), as interleaved rounds in one process: every
// contestant once per round, the order rotated; each figure is the median of the per-round ratios
// to the plain cell of the same round.
// - `plain`: the cell as the README runs it;
// - `groups`: each producer's pushes spread over 1,000 groups, `groupConcurrency: 1`;
// - `groups, no limit`: the same groups, no limit (what storing and counting groups costs);
// - `rate, far above`: `rateLimit({ max: 1_000_000, perMs: 1000 })`, far above the rate reached;
// - `rate by group, far above`: the same by group over the 1,000 groups.
// The rate of a cell counts the items handled while the producers ran. Measures, asserts nothing.
// Usage: npm run build && node bench/experiments/flow.mjs [rounds=8] [budgetMs=700]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Builder, LogStore } from '../../dist/index.js';
import { median } from '../lib/stats.mjs';

const rounds = Number(process.argv[2] ?? 8);
const budgetMs = Number(process.argv[3] ?? 700);
const PRODUCERS = 64;
const GROUPS = 1000;
const payload = new Uint8Array(128).fill(7);

const CELLS = {
  plain: { grouped: false },
  groups: { grouped: true, process: { groupConcurrency: 1 } },
  'groups, no limit': { grouped: true },
  'rate, far above': { grouped: false, rate: { max: 1_000_000, perMs: 1000 } },
  'rate by group, far above': { grouped: true, rate: { max: 1_000_000, perMs: 1000, by: 'group' } },
};

async function run(cell) {
  const dir = mkdtempSync(join(tmpdir(), 'pq-flow-bench-'));
  try {
    const builder = new Builder(await LogStore.open(join(dir, 'q')));
    if (cell.rate) builder.rateLimit(cell.rate);
    const [tx, rx] = await builder.open();
    let handled = 0;
    const stop = new AbortController();
    const consumer = rx.process(
      async () => {
        handled++;
      },
      { concurrency: 64, signal: stop.signal, ...cell.process },
    );
    const deadline = performance.now() + budgetMs;
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: PRODUCERS }, async (_, p) => {
        for (let i = 0; performance.now() < deadline; i++) {
          await (cell.grouped ? tx.push(payload, { group: `tenant-${(p * 7919 + i) % GROUPS}` }) : tx.push(payload));
        }
      }),
    );
    const seconds = (performance.now() - t0) / 1000;
    const rate = handled / seconds;
    stop.abort();
    await tx.close();
    await consumer;
    return rate;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const names = Object.keys(CELLS);
const rates = Object.fromEntries(names.map((n) => [n, []]));
const ratios = Object.fromEntries(names.map((n) => [n, []]));
for (let r = 0; r < rounds; r++) {
  const order = names.map((_, i) => names[(i + r) % names.length]);
  const round = {};
  for (const name of order) round[name] = await run(CELLS[name]);
  for (const name of names) {
    rates[name].push(round[name]);
    ratios[name].push(round[name] / round.plain);
  }
}
console.log(
  `${rounds} rounds of ${budgetMs} ms, ${PRODUCERS} producers, process({ concurrency: 64 }); items/s handled, median of rounds; ratio to plain, median of per-round ratios (range)`,
);
for (const name of names) {
  const rs = ratios[name];
  console.log(
    `${name.padEnd(26)} ${median(rates[name]).toFixed(0).padStart(8)}/s  ratio ${median(rs).toFixed(3)}  (${Math.min(...rs).toFixed(2)}–${Math.max(...rs).toFixed(2)})`,
  );
}
