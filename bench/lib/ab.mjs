// Interleaved A/B rounds for the fsync-bound targets. fdatasync throughput on a shared virtual disk
// moves by 2× from one second to the next, so a ratio of two figures measured minutes apart says
// little. Here every contestant of a comparison runs once per round, back to back, in the same
// process; each round gives one ratio, and the report takes the median over the rounds.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Builder, LogStore, nodeFileSystem } from '../../dist/index.js';
import { levelPeer, sqlitePeer } from './peers.mjs';
import { rawSyncLoop } from './raw.mjs';
import { endToEndBatched, pushOnly } from './queue-work.mjs';
import { floorRate } from './floor.mjs';
import { median } from './stats.mjs';

const FRAME_BYTES = 20 + 128;

/** Counts fdatasync calls (on the threadpool or, with `blockingSync`, on the main thread), so the report can show how many records each one covered. */
function counting(fs, counter) {
  return {
    ...fs,
    fdatasync(fd) {
      counter.syncs++;
      return fs.fdatasync(fd);
    },
    fdatasyncSync(fd) {
      counter.syncs++;
      fs.fdatasyncSync(fd);
    },
  };
}

/**
 * End to end runs with capacity 1024. The SQL peer moves 64 rows per commit; the queue's batching
 * depends on how many producers are free to push while the consumer's acks sync, and measured
 * records per fdatasync were 33 at capacity 128, 45 at 256 and 63 at 1024, so 1024 is the
 * capacity at which both sides batch alike (the report prints records per fdatasync for every
 * run). The rate counts acks until the producers stop, not the drain of the backlog left then.
 */
const E2E_CAPACITY = 1024;

async function logStoreRun(scratch, { policy, producers, workload, budgetMs, blockingSync = false }, stats) {
  const dir = mkdtempSync(join(scratch, 'ab-log-'));
  try {
    const counter = { syncs: 0 };
    const store = await LogStore.open(join(dir, 'q'), { fs: counting(nodeFileSystem, counter), blockingSync });
    // Acks under the cell's policy, as the peers' commits are: the README cells measure the default.
    const [tx, rx] = await new Builder(store)
      .durability(policy)
      .ackDurability(policy === 'none' ? 'lazy' : policy)
      .capacity(workload === 'e2e' ? E2E_CAPACITY : Infinity)
      .open();
    const payload = new Uint8Array(128).fill(7);
    try {
      counter.syncs = 0;
      const r =
        workload === 'e2e'
          ? await endToEndBatched(tx, rx, { producers, batch: 64, payload, count: 2_000_000, budgetMs })
          : await pushOnly(tx, { producers, payload, count: 2_000_000, budgetMs });
      // Pushes (and, end to end, acks) per fdatasync, over the whole run (the end-to-end rate
      // counts acks up to the deadline only).
      stats?.push((workload === 'e2e' ? 2 * r.total : r.msgs) / Math.max(1, counter.syncs));
      return r.msgs / r.seconds;
    } finally {
      await tx.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Records per fdatasync for the LogStore contestants, by group and contestant, filled as rounds run. */
export const syncStats = {};
const track = (group, name) => (syncStats[`${group}/${name}`] ??= []);

const peerRate = async (fn) => {
  const r = await fn();
  return r.msgs / r.seconds;
};

/**
 * A comparison at one batch size: raw loops (appending, overwriting, and overwriting with a
 * main-thread fdatasync), LogStore behind the queue (every sync in the threadpool, `blockingSync:
 * false`: the engine that keeps the event loop free; and with the opt-in `blockingSync`), and the
 * two peers committing `batch` records at a time. The default, `'auto'`, is measured in
 * bench/lib/limits.mjs.
 */
function fsyncGroup({ id, title, batch, records, policy, producers }) {
  const raw = (extra) => (s, ms) => rawSyncLoop(s, { frameBytes: FRAME_BYTES, records, batch, budgetMs: ms, ...extra });
  const logstore = (blockingSync, name) => (s, ms) =>
    logStoreRun(s, { policy, producers, workload: 'push', budgetMs: ms, blockingSync }, track(id, name));
  const payload = Buffer.alloc(128, 7);
  const floor = (mainThread) => (s, ms) => floorRate(s, { producers, payload, records, budgetMs: ms, mainThread });
  return {
    id,
    title,
    contestants: {
      'raw-append': raw({}),
      'raw-overwrite': raw({ preallocate: true }),
      logstore: logstore(false, 'logstore'),
      sqlite: (s, ms) =>
        peerRate(() => sqlitePeer(s, { durable: true, mode: 'perCommit', batch, payload, count: 2_000_000, budgetMs: ms })),
      level: (s, ms) => peerRate(() => levelPeer(s, { sync: true, mode: 'perCommit', batch, payload, count: 2_000_000, budgetMs: ms })),
      'raw-overwrite-main-thread': raw({ preallocate: true, mainThread: true }),
      'logstore-blocking': logstore(true, 'logstore-blocking'),
      // The least work the contract asks for (bench/lib/floor.mjs): what any queue with these
      // promises could reach in this round, with the fdatasync off or on the main thread.
      floor: floor(false),
      'floor-main-thread': floor(true),
    },
    ratios: {
      // The limit: the fastest raw loop of the round, main-thread fdatasync included.
      'logstore/raw': ['logstore', ['raw-append', 'raw-overwrite', 'raw-overwrite-main-thread']],
      // The limit for an engine that keeps the event loop free (async fdatasync only).
      'logstore/raw-async': ['logstore', ['raw-append', 'raw-overwrite']],
      'logstore/sqlite': ['logstore', 'sqlite'],
      'logstore/level': ['logstore', 'level'],
      'sqlite/raw': ['sqlite', ['raw-append', 'raw-overwrite', 'raw-overwrite-main-thread']],
      'raw/raw-main-thread': ['raw-overwrite', 'raw-overwrite-main-thread'],
      'logstore-blocking/raw': ['logstore-blocking', ['raw-append', 'raw-overwrite', 'raw-overwrite-main-thread']],
      'logstore-blocking/raw-main-thread': ['logstore-blocking', 'raw-overwrite-main-thread'],
      'logstore-blocking/sqlite': ['logstore-blocking', 'sqlite'],
      'logstore-blocking/level': ['logstore-blocking', 'level'],
      'floor/raw': ['floor', ['raw-append', 'raw-overwrite', 'raw-overwrite-main-thread']],
      'floor-main-thread/raw': ['floor-main-thread', ['raw-append', 'raw-overwrite', 'raw-overwrite-main-thread']],
      'logstore/floor': ['logstore', 'floor'],
      'logstore-blocking/floor-main-thread': ['logstore-blocking', 'floor-main-thread'],
      'floor/sqlite': ['floor', 'sqlite'],
      'floor-main-thread/sqlite': ['floor-main-thread', 'sqlite'],
      'floor/level': ['floor', 'level'],
      'floor-main-thread/level': ['floor-main-thread', 'level'],
    },
  };
}

/**
 * The comparisons: each has contestants (name -> run(scratch, budgetMs) -> msgs/s) and ratios
 * (id -> [numerator, denominator or [denominators: best of]]).
 */
export const AB_GROUPS = [
  fsyncGroup({
    id: 'sync1',
    title: 'One record per fdatasync: LogStore `sync`, 1 producer, push only',
    batch: 1,
    records: 20_000,
    policy: 'sync',
    producers: 1,
  }),
  fsyncGroup({
    id: 'group64',
    title: '64 records per fdatasync: LogStore `group`, 64 producers, push only',
    batch: 64,
    records: 400_000,
    policy: 'group',
    producers: 64,
  }),
  {
    id: 'e2e64',
    title: 'End to end, 64 in + 64 out per commit: LogStore `group`, 64 producers, consumer acking 64 per batch',
    contestants: {
      logstore: (s, ms) => logStoreRun(s, { policy: 'group', producers: 64, workload: 'e2e', budgetMs: ms }, track('e2e64', 'logstore')),
      sqlite: (s, ms) =>
        peerRate(() =>
          sqlitePeer(s, { durable: true, mode: 'endToEnd', batch: 64, payload: Buffer.alloc(128, 7), count: 2_000_000, budgetMs: ms }),
        ),
      level: (s, ms) =>
        peerRate(() =>
          levelPeer(s, { sync: true, mode: 'endToEnd', batch: 64, payload: Buffer.alloc(128, 7), count: 2_000_000, budgetMs: ms }),
        ),
    },
    ratios: {
      'logstore/sqlite': ['logstore', 'sqlite'],
      'logstore/level': ['logstore', 'level'],
    },
  },
];

/**
 * Run `rounds` rounds of one group. The order of the contestants rotates by one each round, so no
 * contestant always follows the same neighbour (a raw loop's preallocation, for one, leaves
 * writeback behind it). Returns { rates: {name: [per round]}, ratios: {id: [per round]},
 * denominators: {id: [per round]} }.
 */
export async function runAbGroup(group, { scratch, rounds, budgetMs, onRound }) {
  const names = Object.keys(group.contestants);
  const rates = Object.fromEntries(names.map((k) => [k, []]));
  const ratios = Object.fromEntries(Object.keys(group.ratios).map((k) => [k, []]));
  const denominators = Object.fromEntries(Object.keys(group.ratios).map((k) => [k, []]));
  const dir = mkdtempSync(join(scratch, `ab-${group.id}-`));
  try {
    for (let r = 0; r < rounds; r++) {
      const got = {};
      for (let i = 0; i < names.length; i++) {
        const name = names[(i + r) % names.length];
        got[name] = await group.contestants[name](dir, budgetMs);
      }
      for (const name of names) rates[name].push(got[name]);
      for (const [id, [num, den]] of Object.entries(group.ratios)) {
        const d = Array.isArray(den) ? Math.max(...den.map((k) => got[k])) : got[den];
        denominators[id].push(d);
        ratios[id].push(got[num] / d);
      }
      onRound?.(r);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return { rates, ratios, denominators };
}

/**
 * Run `rounds` rounds of `group` in a scratch directory of its own and print each contestant's
 * median rate and each ratio's median with their ranges (bench/experiments/).
 */
export async function printAbGroup(group, rounds, budgetMs) {
  const scratch = mkdtempSync(join(tmpdir(), `pq-${group.id}-`));
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
}
