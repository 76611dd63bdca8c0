// The log at the disk's limit (section `limits` of bench/run.mjs): each of the project's
// per-item targets beside its reference, every cell once per round, in one process, so that each
// ratio is taken within a round on a machine shared with other work. 128 B payloads; our cells run
// the built package with default options unless the row names one. The cells are the ones the
// other sections measure, taken from their modules:
//   sync-push       LogStore `sync`, 1 producer, push only (bench/lib/queue-work.mjs)
//   group-push      LogStore, Builder defaults (`group`), 64 producers, push only: the README's push
//                   only cell (bench/lib/readme-consumer.mjs), the denominator of its consumers too
//   raw-sync1, raw-sync64          write + fdatasync on the threadpool, overwriting a zero-filled
//                   synced file, 1 or 64 frames per sync (bench/lib/raw.mjs)
//   raw-sync1-main, raw-sync64-main  the same with fdatasyncSync on the main thread, as
//                   better-sqlite3 and our `blockingSync: 'auto'` for a lone sync do; a row's raw
//                   reference is the faster of the two in its round
//   sqlite-1, sqlite-64             better-sqlite3, WAL, synchronous=FULL, 1 or 64 inserts per commit
//   none64-e2e      LogStore `none`, 64 producers, one consumer acking, 64 acks in flight, capacity
//                   1024 (the matrix cell, bench/lib/cell.mjs)
//   raw-write64     writeSync of 64 frames per call, appending, no sync
//   none1-e2e, raw-write1, mem1-e2e, simple1-e2e   the per-item baselines (bench/lib/baseline.mjs):
//                   one serial producer and a consumer awaiting each ack; one frame per writeSync;
//                   MemStore; the simplest async array queue
//   readme-loop, readme-process     the README's consumer code beside group-push
//   floor-push-main, floor-push, floor-loop, floor-process   the contract's floor (bench/lib/floor.mjs):
//                   the least work a queue with this contract does, 64 producers: push only with
//                   fdatasyncSync (the `group` row's floor), and the README's consumers over it
//                   (its push only with the threadpool's fdatasync too, the faster of the two being
//                   its push only). Its rows are references, not targets: what any queue keeping
//                   these promises reaches on this machine in the same rounds.
//   floor-push-rules  the same push only as LogStore's default runs it: a new file that gets its
//                   zeros as it grows (4 MiB ahead), and a turn of the event loop between two
//                   flushes on the calling thread (no stall longer than one flush)
//   floor-readme-process-main  the floor's 64 workers with its batch syncs on the calling thread
// Beside each of our cells: the event loop's delay during the run (perf_hooks.monitorEventLoopDelay
// at 1 ms resolution, less that 1 ms: how late a timer due every millisecond fired).
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Builder, LogStore } from '../../dist/index.js';
import { FRAME_HEADER_BYTES } from '../../dist/stores/log/engine/format.js';
import { runBaselineCell } from './baseline.mjs';
import { runCell } from './cell.mjs';
import { floorRate, floorReadmeRates } from './floor.mjs';
import { sqlitePeer } from './peers.mjs';
import { pushOnly } from './queue-work.mjs';
import { rawBatchedAppend, rawSyncLoop } from './raw.mjs';
import { runOne } from './readme-consumer.mjs';

export const LIMITS_PAYLOAD_BYTES = 128;
const FRAME_BYTES = FRAME_HEADER_BYTES + LIMITS_PAYLOAD_BYTES;
const LOOP_DELAY_RESOLUTION_MS = 1;

const withDir = async (scratch, prefix, body) => {
  const dir = mkdtempSync(join(scratch, prefix));
  try {
    return await body(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
};
const rate = (r) => r.msgs / r.seconds;

async function syncPush(scratch, budgetMs) {
  return withDir(scratch, 'limits-sync-', async (dir) => {
    const [tx] = await new Builder(await LogStore.open(join(dir, 'q'))).durability('sync').open();
    try {
      return rate(await pushOnly(tx, { producers: 1, payload: new Uint8Array(LIMITS_PAYLOAD_BYTES).fill(7), count: 2_000_000, budgetMs }));
    } finally {
      await tx.close();
    }
  });
}

const readme = (kind) => (scratch, budgetMs) =>
  withDir(scratch, `limits-readme-${kind}-`, async (dir) => rate(await runOne(kind, dir, { budgetMs })));
const baseline = (cell) => (scratch, budgetMs) => runBaselineCell(cell, scratch, FRAME_BYTES, budgetMs);
const rawSync = (batch, records, mainThread) => (scratch, budgetMs) =>
  withDir(scratch, 'limits-raw-', (dir) =>
    rawSyncLoop(dir, { frameBytes: FRAME_BYTES, records, batch, preallocate: true, budgetMs, mainThread }),
  );
/** The floor's push only, 64 producers, with FloorLog's `options` (bench/lib/floor.mjs, `floorRate`). */
const floorPush = (options) => (scratch, budgetMs) =>
  withDir(scratch, 'limits-floor-', (dir) =>
    floorRate(dir, { producers: 64, payload: new Uint8Array(LIMITS_PAYLOAD_BYTES).fill(7), records: 400_000, budgetMs, ...options }),
  );
const floorReadme = (consumer, mainThread) => (scratch, budgetMs) =>
  withDir(scratch, 'limits-floor-', async (dir) => {
    const r = await floorReadmeRates(dir, {
      producers: 64,
      payload: new Uint8Array(LIMITS_PAYLOAD_BYTES).fill(7),
      budgetMs,
      consumer,
      mainThread,
    });
    return consumer === undefined ? r.pushed : r.handled;
  });
const sqlite = (batch) => async (scratch, budgetMs) =>
  rate(
    await sqlitePeer(scratch, {
      durable: true,
      mode: 'perCommit',
      batch,
      payload: Buffer.alloc(LIMITS_PAYLOAD_BYTES, 7),
      count: 2_000_000,
      budgetMs,
    }),
  );

/** Every cell: name -> { run(scratch, budgetMs) -> msgs/s, ours: whether it is ours (its loop delay is kept) }. */
export const LIMITS_CELLS = {
  'sync-push': { ours: true, run: syncPush },
  'raw-sync1': { run: rawSync(1, 20_000, false) },
  'raw-sync1-main': { run: rawSync(1, 20_000, true) },
  'sqlite-1': { run: sqlite(1) },
  'group-push': { ours: true, run: readme('push') },
  'raw-sync64': { run: rawSync(64, 400_000, false) },
  'raw-sync64-main': { run: rawSync(64, 400_000, true) },
  'sqlite-64': { run: sqlite(64) },
  'none64-e2e': {
    ours: true,
    run: async (scratch, budgetMs) =>
      rate(
        await runCell(
          { store: 'logstore', policy: 'none', payload: LIMITS_PAYLOAD_BYTES, producers: 64, workload: 'e2e' },
          { budgetMs, scratch },
        ),
      ),
  },
  'raw-write64': {
    run: (scratch, budgetMs) =>
      withDir(scratch, 'limits-raw-', (dir) =>
        rawBatchedAppend(dir, { frameBytes: FRAME_BYTES, records: Math.floor((512 * 2 ** 20) / FRAME_BYTES), batch: 64, budgetMs }),
      ),
  },
  'none1-e2e': { ours: true, run: baseline('logstore-none') },
  'raw-write1': { run: baseline('raw-write-per-push') },
  'mem1-e2e': { ours: true, run: baseline('memstore') },
  'simple1-e2e': { run: baseline('simple') },
  'readme-loop': { ours: true, run: readme('loop') },
  'readme-process': { ours: true, run: readme('process') },
  'floor-push-main': { run: floorPush({ mainThread: true }) },
  'floor-push-rules': { run: floorPush({ mainThread: true, inband: true, turnPerFlush: true }) },
  'floor-readme-push': { run: floorReadme(undefined, false) },
  'floor-readme-push-main': { run: floorReadme(undefined, true) },
  'floor-readme-loop': { run: floorReadme('loop', false) },
  'floor-readme-process': { run: floorReadme('process', false) },
  'floor-readme-process-main': { run: floorReadme('process', true) },
};

/**
 * The rows of the table: ours against its reference (one cell, or the faster of several in each
 * round), with the project's goal for the ratio. `sync` says the row waits on fdatasync. A row
 * with `floor` is the contract's floor against the reference of the row it follows, with that
 * row's goal: not a target, but whether the goal is within any such queue's reach in these rounds.
 */
export const LIMITS_ROWS = [
  {
    key: 'sync-raw',
    ours: 'sync-push',
    ref: ['raw-sync1', 'raw-sync1-main'],
    goal: 0.8,
    sync: true,
    what: '`sync`, 1 producer, push only',
    against: 'raw overwrite of a preallocated file + fdatasync per record (the faster of threadpool and main thread)',
  },
  {
    key: 'sync-sqlite',
    ours: 'sync-push',
    ref: 'sqlite-1',
    goal: 1,
    sync: true,
    what: '`sync`, 1 producer, push only',
    against: 'better-sqlite3 WAL synchronous=FULL, one insert per commit',
  },
  {
    key: 'group-raw',
    ours: 'group-push',
    ref: ['raw-sync64', 'raw-sync64-main'],
    goal: 0.75,
    sync: true,
    what: '`group`, 64 producers, push only',
    against: 'raw overwrite of a preallocated file, 64 records + one fdatasync (the faster of threadpool and main thread)',
  },
  {
    key: 'group-raw-floor',
    ours: 'floor-push-main',
    ref: ['raw-sync64', 'raw-sync64-main'],
    goal: 0.75,
    sync: true,
    floor: true,
    what: "(reference, not a target) the contract's floor, 64 producers, push only, fdatasyncSync",
    against: 'the same raw loops',
  },
  {
    key: 'group-raw-floor-rules',
    ours: 'floor-push-rules',
    ref: ['raw-sync64', 'raw-sync64-main'],
    goal: 0.75,
    sync: true,
    floor: true,
    what: "(reference, not a target) the same floor as LogStore's default runs it: a new file's zeros written as it grows, a turn of the event loop between two flushes",
    against: 'the same raw loops',
  },
  {
    key: 'group-sqlite',
    ours: 'group-push',
    ref: 'sqlite-64',
    goal: 1.3,
    sync: true,
    what: '`group`, 64 producers, push only',
    against: 'better-sqlite3 WAL synchronous=FULL, 64 inserts per commit',
  },
  {
    key: 'group-sqlite-floor',
    ours: 'floor-push-main',
    ref: 'sqlite-64',
    goal: 1.3,
    sync: true,
    floor: true,
    what: "(reference, not a target) the contract's floor, 64 producers, push only, fdatasyncSync",
    against: 'the same better-sqlite3 commits',
  },
  {
    key: 'none64-raw',
    ours: 'none64-e2e',
    ref: 'raw-write64',
    goal: 0.4,
    what: '`none`, 64 producers, end to end',
    against: 'raw framed append, 64 records per write(2)',
  },
  {
    key: 'none1-raw',
    ours: 'none1-e2e',
    ref: 'raw-write1',
    goal: 0.4,
    what: '`none`, 1 serial producer, end to end',
    against: 'raw framed append, 1 record per write(2)',
  },
  {
    key: 'mem-simple',
    ours: 'mem1-e2e',
    ref: 'simple1-e2e',
    goal: 0.5,
    what: 'MemStore, 1 serial producer + awaited ack',
    against: 'the simplest async array queue, the same loop',
  },
  {
    key: 'readme-loop',
    ours: 'readme-loop',
    ref: 'group-push',
    goal: 0.8,
    sync: true,
    what: "README's `for await` + `await item.ack()`, 64 producers",
    against: 'push only, the same queue',
  },
  {
    key: 'readme-process',
    ours: 'readme-process',
    ref: 'group-push',
    goal: 0.9,
    sync: true,
    what: "README's `process({ concurrency: 64 })`, 64 producers",
    against: 'push only, the same queue',
  },
  {
    key: 'readme-loop-floor',
    ours: 'floor-readme-loop',
    ref: ['floor-readme-push', 'floor-readme-push-main'],
    goal: 0.8,
    sync: true,
    floor: true,
    what: "(reference, not a target) the contract's floor: a serial reserve + ack loop, 64 producers",
    against: "the floor's push only (the faster of threadpool and main thread)",
  },
  {
    key: 'readme-process-floor',
    ours: 'floor-readme-process',
    ref: ['floor-readme-push', 'floor-readme-push-main'],
    goal: 0.9,
    sync: true,
    floor: true,
    what: "(reference, not a target) the contract's floor: 64 workers, 64 producers",
    against: "the floor's push only (the faster of threadpool and main thread)",
  },
  {
    key: 'readme-process-floor-main',
    ours: 'floor-readme-process-main',
    ref: ['floor-readme-push', 'floor-readme-push-main'],
    goal: 0.9,
    sync: true,
    floor: true,
    what: "(reference, not a target) the contract's floor: 64 workers, 64 producers, its batch syncs on the calling thread",
    against: "the floor's push only (the faster of threadpool and main thread)",
  },
];

/** Run `cell` with the event loop's delay recorded: { rate, loopDelay: { p50Ms, p99Ms, maxMs } }. */
async function measured(cell, scratch, budgetMs) {
  const h = monitorEventLoopDelay({ resolution: LOOP_DELAY_RESOLUTION_MS });
  h.enable();
  let r;
  try {
    r = await cell.run(scratch, budgetMs);
  } finally {
    h.disable();
  }
  const late = (ns) => Math.max(0, ns / 1e6 - LOOP_DELAY_RESOLUTION_MS);
  return { rate: r, loopDelay: { p50Ms: late(h.percentile(50)), p99Ms: late(h.percentile(99)), maxMs: late(h.max) } };
}

/**
 * `rounds` rounds of every cell of `cells` (default: all), the order rotated by one each round.
 * Returns { rates: {cell: [per round]}, loopDelays: {cell: [per round]}, rows: {key: { ratios,
 * references, referenceCells }} } for the rows whose cells ran.
 */
export async function runLimitsRounds({ scratch, rounds, budgetMs, cells = Object.keys(LIMITS_CELLS), onRound }) {
  const rates = Object.fromEntries(cells.map((c) => [c, []]));
  const loopDelays = Object.fromEntries(cells.filter((c) => LIMITS_CELLS[c].ours).map((c) => [c, []]));
  const rows = LIMITS_ROWS.filter((row) => [row.ours, row.ref].flat().every((c) => cells.includes(c)));
  const byRow = Object.fromEntries(rows.map((row) => [row.key, { ratios: [], references: [], referenceCells: [] }]));
  await withDir(scratch, 'limits-', async (dir) => {
    for (let r = 0; r < rounds; r++) {
      const got = {};
      for (let i = 0; i < cells.length; i++) {
        const name = cells[(i + r) % cells.length];
        const m = await measured(LIMITS_CELLS[name], dir, budgetMs);
        got[name] = m.rate;
        rates[name].push(m.rate);
        if (loopDelays[name]) loopDelays[name].push(m.loopDelay);
      }
      for (const row of rows) {
        const refs = [row.ref].flat();
        const best = refs.reduce((a, b) => (got[b] > got[a] ? b : a));
        byRow[row.key].ratios.push(got[row.ours] / got[best]);
        byRow[row.key].references.push(got[best]);
        byRow[row.key].referenceCells.push(best);
      }
      onRound?.(r);
    }
  });
  return { rates, loopDelays, rows: byRow };
}
