// The job queues users pick instead, doing the same work as ours in the same run (section
// `jobpeers` of bench/run.mjs): 64 producers each running a serial `await add` loop of a 128-byte
// payload for the cell's budget; in end-to-end cells a consumer written the way each project's
// README writes it handles the jobs while the producers run, and the rate counts jobs handled.
//
// - ours: LogStore with the Builder's defaults (`group` pushes, `lazy` acks), the same with the
//   opt-in `blockingSync`, or `sync`/`none`;
//   consumers `process(handler, { concurrency: 64 })` and the README's serial `for await` loop.
// - BullMQ 6 on the machine's Redis, switched to an append-only file with `appendfsync always`
//   (Redis fsyncs once per event-loop pass across all clients: group commit) or `everysec` (up to
//   a second lost on power loss: weaker than `group`) for the cell and back to `appendonly no`
//   after; jobs are removed on completion; a Worker with concurrency 64.
// - pg-boss 10 on the machine's PostgreSQL (synchronous_commit on: every send is durable); a
//   `work()` handler fetching up to 64 jobs a time (its default of one job a fetch handled about
//   one job a second here) with the shortest polling interval (0.5 s).
// - plainjob on better-sqlite3 (its own pragmas: WAL with synchronous=NORMAL, which survives a
//   process crash but not a power loss: weaker than `group`); a worker polling every 10 ms.
//   Its `add` is synchronous; with a worker running, each producer yields a turn after each add.
//
// A peer whose server is not reachable (or whose package is missing) is skipped with the reason,
// never counted. Each returns { msgs, seconds } or { skipped }.
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { Builder, LogStore } from '../../dist/index.js';

const require = createRequire(import.meta.url);
export const JOB_PEER_PRODUCERS = 64;
export const JOB_PEER_PAYLOAD_BYTES = 128;
/** The payload as the job queues take it (JSON data): a 128-character string. */
const PAYLOAD_TEXT = 'x'.repeat(JOB_PEER_PAYLOAD_BYTES);
const PAYLOAD_BYTES = new Uint8Array(JOB_PEER_PAYLOAD_BYTES).fill(120);

/** Run `producers` serial `await add()` loops until `budgetMs` is over; returns { pushed, seconds }. */
async function produce(add, budgetMs) {
  let pushed = 0;
  const t0 = performance.now();
  const deadline = t0 + budgetMs;
  await Promise.all(
    Array.from({ length: JOB_PEER_PRODUCERS }, async () => {
      while (performance.now() < deadline) {
        await add();
        pushed++;
      }
    }),
  );
  return { pushed, seconds: (performance.now() - t0) / 1000 };
}

// ------------------------------------------------------------------ ours

export async function oursCell(scratch, { durability = 'group', consumer, budgetMs, blockingSync = false }) {
  const dir = mkdtempSync(join(scratch, 'jobpeers-ours-'));
  try {
    let builder = new Builder(await LogStore.open(join(dir, 'q'), { blockingSync }));
    if (durability !== 'group') builder = builder.durability(durability);
    const [tx, rx] = await builder.open();
    let handled = 0;
    const stop = new AbortController();
    let loop = Promise.resolve();
    if (consumer === 'process') {
      loop = rx.process(
        async () => {
          handled++;
        },
        { concurrency: 64, signal: stop.signal },
      );
    } else if (consumer === 'loop') {
      loop = (async () => {
        for await (const item of rx) {
          try {
            handled++;
            await item.ack();
          } finally {
            if (!item.settled) await item.nack();
          }
        }
      })().catch((e) => {
        if (e?.code !== 'ERR_CLOSED') throw e;
      });
    }
    const { pushed, seconds } = await produce(() => tx.push(PAYLOAD_BYTES), budgetMs);
    const msgs = consumer === undefined ? pushed : handled;
    stop.abort();
    await tx.close();
    await loop;
    return { msgs, seconds };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// ------------------------------------------------------------------ BullMQ on Redis

const REDIS = { host: '127.0.0.1', port: 6379, maxRetriesPerRequest: null };

export async function bullmqCell(_scratch, { appendfsync, consumer, budgetMs }) {
  let bullmq;
  let IORedis;
  try {
    bullmq = await import('bullmq');
    IORedis = require('ioredis');
  } catch (e) {
    return { skipped: `bullmq is not installed (${e.message})` };
  }
  const admin = new IORedis({ ...REDIS, lazyConnect: true, retryStrategy: () => null });
  try {
    await admin.connect();
    await admin.ping();
  } catch (e) {
    admin.disconnect();
    return { skipped: `no Redis on 127.0.0.1:6379 (${e.message})` };
  }
  const before = await admin.config('GET', 'appendonly');
  const name = `pq-bench-${process.pid}-${Date.now()}`;
  let queue;
  let worker;
  try {
    await admin.config('SET', 'appendonly', 'yes');
    await admin.config('SET', 'appendfsync', appendfsync);
    // Redis rewrites the append-only file in the background when it is switched on: wait for it.
    for (let i = 0; i < 200; i++) {
      const info = await admin.info('persistence');
      if (/aof_rewrite_in_progress:0/.test(info) && /aof_enabled:1/.test(info)) break;
      await new Promise((r) => setTimeout(r, 25));
    }
    queue = new bullmq.Queue(name, { connection: REDIS });
    let handled = 0;
    if (consumer) {
      worker = new bullmq.Worker(
        name,
        async () => {
          handled++;
        },
        { connection: REDIS, concurrency: 64 },
      );
      await worker.waitUntilReady();
    }
    const options = { removeOnComplete: true, removeOnFail: true };
    const { pushed, seconds } = await produce(() => queue.add('job', { p: PAYLOAD_TEXT }, options), budgetMs);
    return { msgs: consumer ? handled : pushed, seconds };
  } finally {
    await worker?.close(true).catch(() => {});
    await queue?.obliterate({ force: true }).catch(() => {});
    await queue?.close().catch(() => {});
    await admin.config('SET', 'appendonly', before[1] ?? 'no').catch(() => {});
    admin.disconnect();
  }
}

// ------------------------------------------------------------------ pg-boss on PostgreSQL

const PG = process.env.PQ_BENCH_PG ?? 'postgres://postgres@127.0.0.1:5432/test';

export async function pgBossCell(_scratch, { consumer, budgetMs }) {
  let PgBoss;
  try {
    PgBoss = require('pg-boss');
  } catch (e) {
    return { skipped: `pg-boss is not installed (${e.message})` };
  }
  const boss = new PgBoss({ connectionString: PG, max: 16, supervise: false, schedule: false, migrate: true });
  boss.on('error', () => {});
  try {
    await boss.start();
  } catch (e) {
    return { skipped: `no PostgreSQL at ${PG} (${e.message})` };
  }
  const name = `pq_bench_${process.pid}_${Date.now()}`;
  try {
    await boss.createQueue(name);
    let handled = 0;
    if (consumer) {
      await boss.work(name, { pollingIntervalSeconds: 0.5, batchSize: 64 }, async (jobs) => {
        handled += jobs.length;
      });
    }
    const { pushed, seconds } = await produce(() => boss.send(name, { p: PAYLOAD_TEXT }), budgetMs);
    return { msgs: consumer ? handled : pushed, seconds };
  } finally {
    await boss.offWork(name).catch(() => {});
    await boss.deleteQueue(name).catch(() => {});
    await boss.stop({ graceful: false, wait: true, timeout: 2000 }).catch(() => {});
  }
}

// ------------------------------------------------------------------ plainjob on better-sqlite3

export async function plainjobCell(scratch, { consumer, budgetMs }) {
  let plainjob;
  let Database;
  try {
    plainjob = await import('plainjob');
    Database = require('better-sqlite3');
  } catch (e) {
    return { skipped: `plainjob or better-sqlite3 is not installed (${e.message})` };
  }
  const dir = mkdtempSync(join(scratch, 'jobpeers-plainjob-'));
  const quiet = { error() {}, warn() {}, info() {}, debug() {} };
  const queue = plainjob.defineQueue({ connection: plainjob.better(new Database(join(dir, 'q.db'))), logger: quiet });
  let worker;
  let running;
  try {
    let handled = 0;
    if (consumer) {
      worker = plainjob.defineWorker(
        'job',
        async () => {
          handled++;
        },
        { queue, pollIntervall: 10, logger: quiet },
      );
      running = worker.start();
    }
    // `add` is a synchronous insert: with a worker, each producer yields a turn after it, as an
    // awaited write of a real server would, or the worker's polling timer never runs.
    const add = consumer
      ? () =>
          new Promise((resolve) => {
            queue.add('job', { p: PAYLOAD_TEXT });
            setImmediate(resolve);
          })
      : async () => queue.add('job', { p: PAYLOAD_TEXT });
    const { pushed, seconds } = await produce(add, budgetMs);
    return { msgs: consumer ? handled : pushed, seconds };
  } finally {
    await worker?.stop();
    await running;
    queue.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Every cell: [id, label, durability class, run(scratch, budgetMs)]. */
export const JOB_PEER_CELLS = [
  ['ours/group/push', 'ours `group`', 'power loss', (s, budgetMs) => oursCell(s, { budgetMs })],
  ['ours/group/process', 'ours `group`', 'power loss', (s, budgetMs) => oursCell(s, { consumer: 'process', budgetMs })],
  ['ours/group/loop', 'ours `group`', 'power loss', (s, budgetMs) => oursCell(s, { consumer: 'loop', budgetMs })],
  [
    'ours/group-blocking/push',
    'ours `group`, `blockingSync` (opt-in)',
    'power loss',
    (s, budgetMs) => oursCell(s, { blockingSync: true, budgetMs }),
  ],
  [
    'ours/group-blocking/process',
    'ours `group`, `blockingSync` (opt-in)',
    'power loss',
    (s, budgetMs) => oursCell(s, { blockingSync: true, consumer: 'process', budgetMs }),
  ],
  ['ours/sync/push', 'ours `sync`', 'power loss', (s, budgetMs) => oursCell(s, { durability: 'sync', budgetMs })],
  ['ours/sync/process', 'ours `sync`', 'power loss', (s, budgetMs) => oursCell(s, { durability: 'sync', consumer: 'process', budgetMs })],
  ['ours/none/push', 'ours `none`', 'process crash', (s, budgetMs) => oursCell(s, { durability: 'none', budgetMs })],
  [
    'ours/none/process',
    'ours `none`',
    'process crash',
    (s, budgetMs) => oursCell(s, { durability: 'none', consumer: 'process', budgetMs }),
  ],
  [
    'bullmq-always/push',
    'BullMQ, Redis `appendfsync always`',
    'power loss',
    (s, budgetMs) => bullmqCell(s, { appendfsync: 'always', budgetMs }),
  ],
  [
    'bullmq-always/process',
    'BullMQ, Redis `appendfsync always`',
    'power loss',
    (s, budgetMs) => bullmqCell(s, { appendfsync: 'always', consumer: true, budgetMs }),
  ],
  [
    'bullmq-everysec/push',
    'BullMQ, Redis `appendfsync everysec`',
    'about 1 s on power loss',
    (s, budgetMs) => bullmqCell(s, { appendfsync: 'everysec', budgetMs }),
  ],
  [
    'bullmq-everysec/process',
    'BullMQ, Redis `appendfsync everysec`',
    'about 1 s on power loss',
    (s, budgetMs) => bullmqCell(s, { appendfsync: 'everysec', consumer: true, budgetMs }),
  ],
  ['pgboss/push', 'pg-boss 10, PostgreSQL', 'power loss', (s, budgetMs) => pgBossCell(s, { budgetMs })],
  ['pgboss/process', 'pg-boss 10, PostgreSQL', 'power loss', (s, budgetMs) => pgBossCell(s, { consumer: true, budgetMs })],
  ['plainjob/push', 'plainjob, SQLite WAL NORMAL', 'process crash', (s, budgetMs) => plainjobCell(s, { budgetMs })],
  ['plainjob/process', 'plainjob, SQLite WAL NORMAL', 'process crash', (s, budgetMs) => plainjobCell(s, { consumer: true, budgetMs })],
];

/** `rounds` rounds over every cell, the order rotated each round; rates per cell, or why a cell was skipped. */
export async function runJobPeerRounds({ scratch, rounds, budgetMs, only }) {
  const cells = only ? JOB_PEER_CELLS.filter(([id]) => only.some((o) => id.startsWith(o))) : JOB_PEER_CELLS;
  const rates = Object.fromEntries(cells.map(([id]) => [id, []]));
  const skipped = {};
  for (let round = 0; round < rounds; round++) {
    for (let k = 0; k < cells.length; k++) {
      const [id, , , run] = cells[(k + round) % cells.length];
      if (skipped[id]) continue;
      const res = await run(scratch, budgetMs);
      if (res.skipped) skipped[id] = res.skipped;
      else rates[id].push(res.msgs / res.seconds);
    }
  }
  return { rates, skipped };
}
