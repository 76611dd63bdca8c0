// How close can any queue with this contract come to the raw loop, under `group`, 64 producers,
// 128 B, push only? The floor (bench/lib/floor.mjs) is the least work the contract asks for: a
// promise per push resolved once durable, a CRC-framed copy of the payload, one write(2) and one
// fdatasync per batch, a preallocated file, and nothing else.
//
// This runs the bench's own `group64` A/B group (bench/lib/ab.mjs) alone: the raw loops, LogStore
// (every sync in the threadpool, and with blockingSync), better-sqlite3, classic-level and the floor (async fdatasync and
// fdatasyncSync), every one once per round in a rotating order. The rates are medians over the
// rounds; each ratio is the median of the per-round ratios, with its range.
// Usage: npm run build && node bench/experiments/group-floor.mjs [rounds=7] [ms=600]
import { AB_GROUPS, printAbGroup } from '../lib/ab.mjs';

const rounds = Number(process.argv[2] ?? 7);
const budgetMs = Number(process.argv[3] ?? 600);
const group = AB_GROUPS.find((g) => g.id === 'group64');

await printAbGroup(group, rounds, budgetMs);
