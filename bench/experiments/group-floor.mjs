// How close can any queue with this contract come to the raw loop, under `group`, 64 producers,
// 128 B, push only? The floor (bench/lib/floor.mjs) is the least work the contract asks for: a
// promise per push resolved once durable, a CRC-framed copy of the payload, one write(2) and one
// fdatasync per batch, a preallocated file, and nothing else.
//
// This runs the bench's own `group64` A/B group (bench/lib/ab.mjs) alone: the raw loops, LogStore
// (default and blockingSync), better-sqlite3, classic-level and the floor (async fdatasync and
// fdatasyncSync), every one once per round in a rotating order. The rates are medians over the
// rounds; each ratio is the median of the per-round ratios, with its range.
// Usage: npm run build && node bench/experiments/group-floor.mjs [rounds=7] [ms=600]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AB_GROUPS, runAbGroup } from '../lib/ab.mjs';
import { median } from '../lib/stats.mjs';

const rounds = Number(process.argv[2] ?? 7);
const budgetMs = Number(process.argv[3] ?? 600);
const group = AB_GROUPS.find((g) => g.id === 'group64');

const scratch = mkdtempSync(join(tmpdir(), 'pq-floor-'));
try {
  const res = await runAbGroup(group, { scratch, rounds, budgetMs, onRound: (r) => process.stderr.write(`round ${r + 1}/${rounds}\n`) });
  const k = (x) => `${(x / 1000).toFixed(1)} k/s`;
  console.log(`${group.title}: ${rounds} rounds of ${budgetMs} ms (median, min–max)`);
  for (const [name, v] of Object.entries(res.rates))
    console.log(`  ${name.padEnd(36)} ${k(median(v)).padStart(11)}  (${k(Math.min(...v))} – ${k(Math.max(...v))})`);
  for (const [id, v] of Object.entries(res.ratios))
    console.log(`  ${id.padEnd(36)} ${median(v).toFixed(2)}  (${Math.min(...v).toFixed(2)} – ${Math.max(...v).toFixed(2)})`);
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
