// `npm run bench` (full run, the default) and `npm run bench -- --quick` (about a minute).
// Runs every benchmark against the BUILT package (dist/), in one process except the
// open/memory measurements (fresh child processes), and writes one results file:
//   full:  bench/results/latest.json, then BENCHMARKS.md and bench/charts/*.svg (bench/report.mjs)
//   quick: bench/results/quick.json (BENCHMARKS.md is left alone unless --report is given)
//   --only without --merge: bench/results/partial.json (likewise)
// Options: --quick, --report, --merge (with --only), --only=raw,baseline,jetstream,benny,matrix,readme,poison,scheduling,typed,zerocopy,delayed,peers,jobpeers,ab,limits,remote,contract,open, --dir=<scratch dir>.
// A benchmark measures, it does not assert: targets are reported, never enforced here.
import b from 'benny';
import { fork } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Builder, MemStore } from '../dist/index.js';
import { FRAME_HEADER_BYTES } from '../dist/stores/log/engine/format.js';
import { BareQueue } from './lib/bare-queue.mjs';
import { describeMachine } from './lib/env.mjs';
import { levelPeer, sqlitePeer } from './lib/peers.mjs';
import { Progress } from './lib/progress.mjs';
import { rawBatchedAppend, rawSyncLoop } from './lib/raw.mjs';
import { Latencies, median, spread } from './lib/stats.mjs';
import { computeTargets, formatTargets } from './lib/targets.mjs';
import { runCell } from './lib/cell.mjs';
import { AB_GROUPS, runAbGroup, syncStats } from './lib/ab.mjs';
import { README_PAYLOAD_BYTES, README_PRODUCERS, pushCellOf, runReadmeRounds } from './lib/readme-consumer.mjs';
import { runPoison } from './lib/poison.mjs';
import { SCHEDULING_CELLS, SCHEDULING_PAYLOAD_BYTES, SCHEDULING_PRODUCERS, runSchedulingRounds } from './lib/scheduling.mjs';
import { TYPED_CELLS, TYPED_PRODUCERS, runTypedRounds } from './lib/typed.mjs';
import { ZERO_COPY_CELLS, runZeroCopyRounds } from './lib/zero-copy.mjs';
import { BASELINE_CELLS, BASELINE_PAYLOAD_BYTES, runBaselineRounds } from './lib/baseline.mjs';
import { JOB_PEER_CELLS, JOB_PEER_PAYLOAD_BYTES, JOB_PEER_PRODUCERS, runJobPeerRounds } from './lib/job-peers.mjs';
import { LIMITS_CELLS, LIMITS_PAYLOAD_BYTES, LIMITS_ROWS, runLimitsRounds } from './lib/limits.mjs';
import {
  REMOTE_IN_FLIGHT,
  REMOTE_PAYLOAD_BYTES,
  REMOTE_PROCESSES,
  REMOTE_RATIOS,
  REMOTE_SECTION_CELLS,
  runRemoteRounds,
} from './lib/remote.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const quick = args.includes('--quick');
const only = args
  .find((a) => a.startsWith('--only='))
  ?.slice(7)
  .split(',');
// `--only=… --merge`: run those sections and put their figures into the last full run's results
// (bench/results/latest.json) in place of that run's, keeping every other section's.
const merged = args.includes('--merge') && only && !quick ? { sections: only, at: new Date().toISOString() } : undefined;
const wants = (section) => !only || only.includes(section);
const scratchRoot = args.find((a) => a.startsWith('--dir='))?.slice(6) ?? process.env.PQ_BENCH_DIR ?? tmpdir();

/** Everything that differs between the quick and the full run. */
const config = quick
  ? {
      reps: 1,
      budgetMs: 250,
      payloads: [128],
      producers: [1, 4, 64],
      contractProducers: [1, 64],
      openSizes: [1_000_000],
      bennyMaxTime: 0.25,
      bennyMinSamples: 3,
      abRounds: 3,
      abBudgetMs: 250,
      jobPeerRounds: 1,
      poisonGood: 20_000,
      delayedItems: 100_000,
      remoteRounds: 1,
      remoteBudgetMs: 500,
      remoteSerialPushes: 1000,
    }
  : {
      reps: 3,
      budgetMs: 1000,
      payloads: [128, 4096],
      producers: [1, 4, 64],
      contractProducers: [1, 64],
      openSizes: [1_000_000, 10_000_000],
      bennyMaxTime: 1,
      bennyMinSamples: 8,
      abRounds: 7,
      abBudgetMs: 600,
      jobPeerRounds: 3,
      poisonGood: 100_000,
      delayedItems: 1_000_000,
      remoteRounds: 5,
      remoteBudgetMs: 1500,
      remoteSerialPushes: 5000,
    };

const DISK_CAP_BYTES = 512 * 2 ** 20;
const BENNY_MESSAGES = 4096;

const scratch = mkdtempSync(join(scratchRoot, 'pq-bench-'));
const cleanupScratch = () => rmSync(scratch, { recursive: true, force: true });
process.on('exit', cleanupScratch);
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => process.exit(130));

const env = describeMachine(scratch);
const startedAt = new Date().toISOString();
const t0 = performance.now();
const results = [];

console.log(`persistent-queue benchmarks (${quick ? 'quick' : 'full'} run)`);
console.log(`  node ${env.node}, ${env.cpu}, ${env.memoryGiB} GiB RAM, ${env.platform}`);
console.log(`  scratch ${scratch}: ${env.filesystem} on ${env.device}`);
console.log(`  ${config.reps} repetition(s) per figure, median reported; figures are from this one machine only`);

/** Record one figure: `samples` are the repetitions, `value` their median. */
function record(r) {
  const samples = r.samples ?? [r.value];
  const entry = { ...r, value: r.value ?? median(samples), samples, spread: spread(samples) };
  results.push(entry);
  return entry;
}

const rate = (r) => r.msgs / r.seconds;
const fmtRate = (v) => (v >= 1e6 ? `${(v / 1e6).toFixed(2)} M/s` : v >= 1e3 ? `${(v / 1e3).toFixed(1)} k/s` : `${v.toFixed(0)}/s`);

// ------------------------------------------------------------------ plan (for the progress display)

const policies = ['none', 'group', 'sync'];
const workloads = ['push', 'drain', 'e2e'];
const plan = [];
if (wants('raw')) for (const p of config.payloads) plan.push({ section: 'raw', payload: p, weight: config.reps * 5 * 1.2 });
if (wants('baseline'))
  plan.push({ section: 'baseline', weight: (config.abRounds * BASELINE_CELLS.length * config.abBudgetMs * 1.1) / config.budgetMs });
if (wants('benny'))
  for (const p of config.payloads)
    for (const n of config.producers)
      plan.push({ section: 'benny', payload: p, producers: n, weight: (4 * (config.bennyMaxTime * 1.6)) / (config.budgetMs / 1000) });
if (wants('matrix'))
  for (const store of ['bare', 'memstore', 'logstore'])
    for (const policy of store === 'logstore' ? policies : ['none'])
      for (const payload of config.payloads)
        for (const producers of config.producers)
          for (const workload of workloads)
            plan.push({
              section: 'matrix',
              store,
              policy,
              payload,
              producers,
              workload,
              weight: config.reps * (workload === 'drain' && store === 'logstore' ? 1.6 : 1.1),
            });
// The batch API (pushMany of 64 by 4 producers, a consumer acking up to 1024 per batch), `none`.
if (wants('matrix'))
  for (const store of ['memstore', 'logstore'])
    plan.push({ section: 'matrix', store, policy: 'none', payload: 128, producers: 4, workload: 'e2e-many', weight: config.reps * 1.1 });
// `none` end to end with one store call per pipeline per turn (Builder.storeCallsPerTurn(1)).
if (wants('matrix'))
  for (const producers of [1, 64])
    for (const store of ['memstore', 'logstore'])
      plan.push({
        section: 'matrix',
        store,
        policy: 'none',
        payload: 128,
        producers,
        workload: 'e2e',
        storeCallsPerTurn: 1,
        weight: config.reps * 1.1,
      });
// The README's consumer code as written, default options, against push only, in rounds.
if (wants('readme')) plan.push({ section: 'readme', weight: (config.abRounds * 6 * config.abBudgetMs * 1.2) / config.budgetMs });
// One poison item among good ones under process() and default options, with and without maxDeliveries.
if (wants('poison'))
  plan.push({ section: 'poison', weight: (config.abRounds * 3 * (config.poisonGood / 150_000)) / (config.budgetMs / 1000) });
// Priorities, delays and two competing consumers beside the plain cells; a million delayed items at open.
if (wants('scheduling'))
  plan.push({ section: 'scheduling', weight: (config.abRounds * SCHEDULING_CELLS.length * config.abBudgetMs * 1.2) / config.budgetMs });
if (wants('typed'))
  plan.push({ section: 'typed', weight: (config.abRounds * TYPED_CELLS.length * config.abBudgetMs * 1.2) / config.budgetMs });
if (wants('zerocopy'))
  plan.push({ section: 'zerocopy', weight: (config.abRounds * ZERO_COPY_CELLS.length * 1.5) / (config.budgetMs / 1000) });
if (wants('delayed'))
  plan.push({ section: 'delayed', weight: ((config.delayedItems / 1e6) * 12 * config.reps) / (config.budgetMs / 1000) + 3 });
if (wants('peers')) for (const _ of Array(11)) plan.push({ section: 'peers', weight: config.reps * 1.05 });
if (wants('jobpeers'))
  plan.push({ section: 'jobpeers', weight: (config.jobPeerRounds * JOB_PEER_CELLS.length * config.abBudgetMs * 1.6) / config.budgetMs });
if (wants('jetstream')) plan.push({ section: 'jetstream', weight: (quick ? 10 : 60) / (config.budgetMs / 1000) });
if (wants('ab'))
  for (const g of AB_GROUPS)
    plan.push({
      section: 'ab',
      group: g,
      weight: (config.abRounds * Object.keys(g.contestants).length * config.abBudgetMs * 1.2) / config.budgetMs,
    });
// Each per-item target beside its reference in the same rounds, and producers in other processes.
if (wants('limits'))
  plan.push({
    section: 'limits',
    weight: (config.abRounds * Object.keys(LIMITS_CELLS).length * config.abBudgetMs * 1.5) / config.budgetMs,
  });
if (wants('remote'))
  plan.push({
    section: 'remote',
    weight: (config.remoteRounds * REMOTE_SECTION_CELLS.length * (config.remoteBudgetMs + 600)) / config.budgetMs,
  });
if (wants('contract'))
  for (const store of ['sqlitestore', 'levelstore'])
    for (const policy of policies)
      for (const producers of config.contractProducers)
        for (const workload of ['push', 'e2e']) plan.push({ section: 'contract', store, policy, producers, workload, weight: 1.2 });
if (wants('open'))
  for (const size of config.openSizes) plan.push({ section: 'open', size, weight: ((size / 1e6) * 4) / (config.budgetMs / 1000) + 3 });
const progress = new Progress(plan.reduce((s, t) => s + t.weight, 0));
const step = (i) => plan[i];

// ------------------------------------------------------------------ raw baselines

async function runRaw(task) {
  const frameBytes = FRAME_HEADER_BYTES + task.payload;
  const dir = mkdtempSync(join(scratch, 'raw-'));
  try {
    const budgetMs = config.budgetMs;
    const reps = (fn) =>
      Promise.all([]).then(async () => {
        const out = [];
        for (let r = 0; r < config.reps; r++) out.push(await fn());
        return out;
      });
    const batched = await reps(() =>
      rawBatchedAppend(dir, { frameBytes, records: Math.min(2_000_000, Math.floor(DISK_CAP_BYTES / frameBytes)), batch: 64, budgetMs }),
    );
    record({
      id: `raw/batched-append/${task.payload}`,
      kind: 'raw',
      name: 'raw writeSync, 64 frames per write, no sync',
      payloadBytes: task.payload,
      frameBytes,
      unit: 'msgs/s',
      samples: batched,
    });
    const summary = [`batched ${fmtRate(median(batched))}`];
    for (const batch of [1, 64]) {
      for (const preallocate of [false, true]) {
        const lat = batch === 1 ? new Latencies() : undefined;
        const records = batch === 1 ? 20_000 : Math.min(256 * 1024, Math.floor((64 * 2 ** 20) / frameBytes));
        const samples = await reps(() => rawSyncLoop(dir, { frameBytes, records, batch, preallocate, budgetMs, latencies: lat }));
        record({
          id: `raw/sync${batch}/${preallocate ? 'overwrite' : 'append'}/${task.payload}`,
          kind: 'raw',
          name: `raw write + fdatasync, ${batch} frame(s) per sync, ${preallocate ? 'overwriting a zero-filled file' : 'appending'}`,
          payloadBytes: task.payload,
          frameBytes,
          batch,
          preallocate,
          unit: 'msgs/s',
          samples,
          latency: lat?.summary(),
        });
        summary.push(`sync${batch}${preallocate ? '/prealloc' : ''} ${fmtRate(median(samples))}`);
      }
    }
    return summary.join(', ');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// ------------------------------------------------------------------ benny: MemStore vs bare queue

async function consumeAll(rx, count) {
  for (let i = 0; i < count; i++) {
    const item = rx.tryReserve() ?? (await rx.reserve());
    await item.ack();
  }
}

async function runBenny(task) {
  const payload = new Uint8Array(task.payload).fill(7);
  const producers = task.producers;
  const per = BENNY_MESSAGES / producers;
  const produce = async (tx) => {
    for (let i = 0; i < per; i++) await tx.push(payload);
  };
  const options = { minSamples: config.bennyMinSamples, maxTime: config.bennyMaxTime };
  const out = [];
  for (const workload of ['e2e', 'push']) {
    // A fresh queue per op in both workloads: benny calls a case once, unawaited, before its
    // measured cycles, and a queue shared across ops would let that call overlap the next one.
    const cases = {
      e2e: {
        bare: () => {
          const q = new BareQueue();
          return Promise.all([consumeAll(q, BENNY_MESSAGES), ...Array.from({ length: producers }, () => produce(q))]);
        },
        memstore: async () => {
          const [tx, rx] = await new Builder(new MemStore()).durability('none').open();
          await Promise.all([consumeAll(rx, BENNY_MESSAGES), ...Array.from({ length: producers }, () => produce(tx))]);
          await tx.close();
        },
      },
      // Push only: the backlog does not grow across ops.
      push: {
        bare: async () => {
          const q = new BareQueue();
          await Promise.all(Array.from({ length: producers }, () => produce(q)));
        },
        memstore: async () => {
          const [tx] = await new Builder(new MemStore()).durability('none').open();
          await Promise.all(Array.from({ length: producers }, () => produce(tx)));
          await tx.close();
        },
      },
    }[workload];
    const log = console.log;
    console.log = () => {}; // benny's own "Running…" lines would break the progress line
    let summary;
    try {
      summary = await b.suite(
        `MemStore vs bare, ${workload}, ${task.payload} B, ${producers} producer(s)`,
        b.add('bare array queue', cases.bare, options),
        b.add('MemStore queue', cases.memstore, options),
      );
    } finally {
      console.log = log;
    }
    const byName = Object.fromEntries(summary.results.map((r) => [r.name, r]));
    for (const [store, name] of [
      ['bare', 'bare array queue'],
      ['memstore', 'MemStore queue'],
    ]) {
      const r = byName[name];
      record({
        id: `benny/${store}/${workload}/p${producers}/${task.payload}`,
        kind: 'benny',
        store,
        workload,
        producers,
        payloadBytes: task.payload,
        unit: 'msgs/s',
        value: r.ops * BENNY_MESSAGES,
        samples: [r.ops * BENNY_MESSAGES],
        marginPercent: r.margin,
        tool: 'benny',
      });
    }
    const ratio = byName['MemStore queue'].ops / byName['bare array queue'].ops;
    out.push(`${workload} ${(ratio * 100).toFixed(0)} % of bare`);
  }
  return out.join(', ');
}

// ------------------------------------------------------------------ the queue matrix (own harness)

async function runMatrixCell(task, section = 'matrix', reps = config.reps) {
  const lat = task.workload === 'push' && task.policy !== 'none' ? new Latencies() : undefined;
  const runs = [];
  for (let r = 0; r < reps; r++) runs.push(await runCell(task, { budgetMs: config.budgetMs, scratch, latencies: lat }));
  const samples = runs.map(rate);
  const e = record({
    id: `${section === 'matrix' ? 'queue' : 'contract'}/${task.store}/${task.policy}/p${task.producers}/${task.payload}/${task.workload}${task.storeCallsPerTurn ? `/turn${task.storeCallsPerTurn}` : ''}`,
    storeCallsPerTurn: task.storeCallsPerTurn,
    kind: section === 'matrix' ? 'queue' : 'contract',
    store: task.store,
    policy: task.policy,
    producers: task.producers,
    ackWindow: task.workload === 'push' ? undefined : task.producers,
    payloadBytes: task.payload,
    workload: task.workload,
    unit: 'msgs/s',
    samples,
    msgs: runs.map((r) => r.msgs),
    latency: lat?.summary(),
    tool: 'harness',
  });
  return `${fmtRate(e.value)}${e.spread > 0.15 ? ` (spread ${(e.spread * 100).toFixed(0)} %)` : ''}${e.latency ? `, p99 ${e.latency.p99Ms.toFixed(2)} ms` : ''}`;
}

// ------------------------------------------------------------------ peers, directly

const PEERS = [
  { peer: 'sqlite', durable: true, mode: 'perCommit', batch: 1, label: 'better-sqlite3 FULL, 1 insert per commit' },
  { peer: 'sqlite', durable: true, mode: 'perCommit', batch: 64, label: 'better-sqlite3 FULL, 64 inserts per commit' },
  { peer: 'sqlite', durable: true, mode: 'endToEnd', batch: 64, label: 'better-sqlite3 FULL, 64 in + 64 out per commit pair' },
  { peer: 'sqlite', durable: false, mode: 'perCommit', batch: 64, label: 'better-sqlite3 OFF, 64 inserts per commit' },
  { peer: 'sqlite', durable: false, mode: 'endToEnd', batch: 64, label: 'better-sqlite3 OFF, 64 in + 64 out per commit pair' },
  { peer: 'level', durable: true, mode: 'perCommit', batch: 1, label: 'classic-level sync, single puts' },
  { peer: 'level', durable: true, mode: 'perCommit', batch: 64, label: 'classic-level sync, batches of 64' },
  { peer: 'level', durable: true, mode: 'endToEnd', batch: 64, label: 'classic-level sync, 64 in + 64 out' },
  { peer: 'level', durable: false, mode: 'perCommit', batch: 1, label: 'classic-level no sync, single puts' },
  { peer: 'level', durable: false, mode: 'perCommit', batch: 64, label: 'classic-level no sync, batches of 64' },
  { peer: 'level', durable: false, mode: 'endToEnd', batch: 64, label: 'classic-level no sync, 64 in + 64 out' },
];

async function runPeer(p) {
  const payload = Buffer.alloc(128, 7);
  const count = 2_000_000;
  const samples = [];
  for (let r = 0; r < config.reps; r++) {
    const run =
      p.peer === 'sqlite'
        ? await sqlitePeer(scratch, { durable: p.durable, mode: p.mode, batch: p.batch, payload, count, budgetMs: config.budgetMs })
        : await levelPeer(scratch, { sync: p.durable, mode: p.mode, batch: p.batch, payload, count, budgetMs: config.budgetMs });
    samples.push(rate(run));
  }
  const e = record({
    id: `peer/${p.peer}/${p.durable ? 'durable' : 'nosync'}/${p.mode}${p.batch}/128`,
    kind: 'peer',
    name: p.label,
    peer: p.peer,
    durable: p.durable,
    mode: p.mode,
    batch: p.batch,
    payloadBytes: 128,
    unit: 'msgs/s',
    samples,
  });
  return fmtRate(e.value);
}

// ------------------------------------------------------------------ interleaved A/B rounds (fsync-bound targets)

async function runAb(group) {
  const { rates, ratios, denominators } = await runAbGroup(group, { scratch, rounds: config.abRounds, budgetMs: config.abBudgetMs });
  for (const [name, samples] of Object.entries(rates)) {
    const perSync = syncStats[`${group.id}/${name}`];
    record({
      id: `ab/${group.id}/${name}`,
      kind: 'ab-rate',
      group: group.id,
      name,
      unit: 'msgs/s',
      samples,
      recordsPerSync: perSync ? median(perSync) : undefined,
    });
  }
  const out = [];
  for (const [ratio, samples] of Object.entries(ratios)) {
    const [num, den] = group.ratios[ratio];
    const e = record({
      id: `ab/${group.id}/ratio/${ratio}`,
      kind: 'ab-ratio',
      group: group.id,
      ratio,
      numerator: num,
      denominator: den,
      unit: 'ratio',
      samples,
      min: Math.min(...samples),
      max: Math.max(...samples),
      // The denominator of each round (for a "faster of" ratio: the faster contestant of that round).
      denominatorSamples: denominators[ratio],
      denominatorMedian: median(denominators[ratio]),
    });
    out.push(`${ratio} ${e.value.toFixed(2)}`);
  }
  return out.join(', ');
}

// ------------------------------------------------------------------ the README's consumer code, default options

async function runReadme() {
  const { rates, ratios } = await runReadmeRounds({ scratch, rounds: config.abRounds, budgetMs: config.abBudgetMs, floor: true });
  const cell = `p${README_PRODUCERS}/${README_PAYLOAD_BYTES}`;
  const names = {
    push: 'push only',
    loop: 'for await + await item.ack()',
    process: 'process(handler, { concurrency: 64 })',
    'floor-push': "the contract's floor, push only",
    'floor-loop': "the contract's floor, a serial consumer (reserve, ack)",
    'floor-process': "the contract's floor, 64 workers (reserve, handler, ack)",
  };
  for (const [kind, samples] of Object.entries(rates)) {
    record({
      id: `readme/logstore/${cell}/${kind}`,
      kind: 'readme-rate',
      name: names[kind],
      store: 'logstore',
      producers: README_PRODUCERS,
      payloadBytes: README_PAYLOAD_BYTES,
      unit: 'msgs/s',
      samples,
    });
  }
  const out = [];
  for (const [kind, samples] of Object.entries(ratios)) {
    const push = pushCellOf(kind);
    const e = record({
      id: `readme/logstore/${cell}/ratio/${kind}`,
      kind: 'readme-ratio',
      name: `${names[kind]} / ${names[push]}`,
      unit: 'ratio',
      samples,
      min: Math.min(...samples),
      max: Math.max(...samples),
      denominatorMedian: median(rates[push]),
    });
    out.push(`${kind} ${(e.value * 100).toFixed(0)} % of push`);
  }
  return out.join(', ');
}

// ------------------------------------------------------------------ the log at the disk's limit

async function runLimitsSection() {
  const { rates, loopDelays, rows } = await runLimitsRounds({ scratch, rounds: config.abRounds, budgetMs: config.abBudgetMs });
  for (const [cell, samples] of Object.entries(rates)) {
    const delays = loopDelays[cell];
    const loopDelay = delays && {
      p50Ms: median(delays.map((d) => d.p50Ms)),
      p99Ms: median(delays.map((d) => d.p99Ms)),
      maxMs: median(delays.map((d) => d.maxMs)),
      worstMaxMs: Math.max(...delays.map((d) => d.maxMs)),
    };
    record({
      id: `limits/${cell}`,
      kind: 'limits-rate',
      name: cell,
      ours: Boolean(LIMITS_CELLS[cell].ours),
      payloadBytes: LIMITS_PAYLOAD_BYTES,
      budgetMs: config.abBudgetMs,
      unit: 'msgs/s',
      samples,
      loopDelay,
    });
  }
  const out = [];
  for (const row of LIMITS_ROWS) {
    const r = rows[row.key];
    if (!r) continue;
    const won = {};
    for (const c of r.referenceCells) won[c] = (won[c] ?? 0) + 1;
    const e = record({
      id: `limits/row/${row.key}`,
      kind: 'limits-row',
      key: row.key,
      what: row.what,
      against: row.against,
      ours: row.ours,
      reference: row.ref,
      sync: Boolean(row.sync),
      goal: row.goal,
      floor: Boolean(row.floor),
      unit: 'ratio',
      samples: r.ratios,
      min: Math.min(...r.ratios),
      max: Math.max(...r.ratios),
      denominatorSamples: r.references,
      denominatorMedian: median(r.references),
      referenceWon: won,
    });
    out.push(`${row.key} ${e.value.toFixed(2)}`);
  }
  return out.join(', ');
}

// ------------------------------------------------------------------ producers in other processes

async function runRemoteSection() {
  const { rates, cpu, ratios, serial } = await runRemoteRounds({
    scratch,
    rounds: config.remoteRounds,
    budgetMs: config.remoteBudgetMs,
    serial: config.remoteSerialPushes,
  });
  const settings = {
    processes: REMOTE_PROCESSES,
    inFlight: REMOTE_IN_FLIGHT,
    payloadBytes: REMOTE_PAYLOAD_BYTES,
    budgetMs: config.remoteBudgetMs,
  };
  for (const [cell, samples] of Object.entries(rates)) {
    const of = (k) => (cpu[cell].every((c) => c[k] !== undefined) ? median(cpu[cell].map((c) => c[k])) : undefined);
    record({
      id: `remote/${cell}`,
      kind: 'remote-rate',
      name: cell,
      ...settings,
      unit: 'msgs/s',
      samples,
      ownerCpuUsPerPush: of('owner'),
      producerCpuUsPerPush: of('producer'),
    });
  }
  const out = [];
  for (const [id, samples] of Object.entries(ratios)) {
    const { goal, what, against } = REMOTE_RATIOS[id];
    const e = record({
      id: `remote/ratio/${id}`,
      kind: 'remote-ratio',
      name: id,
      what,
      against,
      goal,
      unit: 'ratio',
      samples,
      min: Math.min(...samples),
      max: Math.max(...samples),
      denominatorMedian: median(rates[id.split('/')[1]]),
    });
    out.push(`${id} ${e.value.toFixed(2)}`);
  }
  if (serial) {
    for (const side of ['remote', 'local']) {
      const xs = serial[side];
      record({
        id: `remote/serial/${side}`,
        kind: 'remote-latency',
        name: side,
        pushes: config.remoteSerialPushes,
        unit: 'ms',
        samples: xs.map((x) => x.p50Ms),
        p50Ms: median(xs.map((x) => x.p50Ms)),
        p99Ms: median(xs.map((x) => x.p99Ms)),
      });
    }
  }
  return out.join(', ');
}

// ------------------------------------------------------------------ one poison item among good ones

const POISON_CONTESTANTS = [
  ['clean', { poison: false }],
  ['poison', { poison: true }],
  ['poison, maxDeliveries(3)', { poison: true, maxDeliveries: 3 }],
];

async function runPoisonSection() {
  const runs = new Map(POISON_CONTESTANTS.map(([name]) => [name, []]));
  for (let round = 0; round < config.abRounds; round++) {
    for (let k = 0; k < POISON_CONTESTANTS.length; k++) {
      // The order rotates each round, so no contestant always runs first.
      const [name, options] = POISON_CONTESTANTS[(k + round) % POISON_CONTESTANTS.length];
      runs
        .get(name)
        .push(await runPoison('log', { ...options, durability: 'group' }, { scratch, goodCount: config.poisonGood, budgetMs: 5000 }));
    }
  }
  const clean = runs.get('clean');
  const out = [];
  for (const [name] of POISON_CONTESTANTS) {
    const rs = runs.get(name);
    record({
      id: `poison/logstore/${name}`,
      kind: 'poison-rate',
      name,
      store: 'logstore',
      goodItems: config.poisonGood,
      unit: 'msgs/s',
      samples: rs.map((r) => r.rate),
      poisonDeliveries: rs.map((r) => r.poisonDeliveries),
      deadLettered: rs.map((r) => r.deadLettered),
    });
    if (name === 'clean') continue;
    const samples = rs.map((r, i) => r.rate / clean[i].rate);
    const e = record({
      id: `poison/logstore/ratio/${name}`,
      kind: 'poison-ratio',
      name: `${name} / clean`,
      unit: 'ratio',
      samples,
      min: Math.min(...samples),
      max: Math.max(...samples),
    });
    out.push(`${name} ${(e.value * 100).toFixed(0)} % of clean`);
  }
  return out.join(', ');
}

// ------------------------------------------------------------------ priorities, delays, competing consumers

async function runSchedulingSection() {
  const { rates, ratios } = await runSchedulingRounds({ scratch, rounds: config.abRounds, budgetMs: config.abBudgetMs });
  for (const [id, kind, options, consumers] of SCHEDULING_CELLS) {
    record({
      id: `scheduling/logstore/${id}`,
      kind: 'scheduling-rate',
      name: id,
      workload: kind,
      pushOptions: options,
      consumers,
      store: 'logstore',
      producers: SCHEDULING_PRODUCERS,
      payloadBytes: SCHEDULING_PAYLOAD_BYTES,
      unit: 'msgs/s',
      samples: rates[id],
    });
  }
  const out = [];
  for (const [id, samples] of Object.entries(ratios)) {
    const e = record({
      id: `scheduling/logstore/ratio/${id}`,
      kind: 'scheduling-ratio',
      name: `${id} / ${id.split('/')[0]}/plain`,
      unit: 'ratio',
      samples,
      min: Math.min(...samples),
      max: Math.max(...samples),
    });
    out.push(`${id} ${(e.value * 100).toFixed(0)} %`);
  }
  return out.join(', ');
}

// ------------------------------------------------------------------ typed queues and batches

async function runTypedSection() {
  const { rates, ratios } = await runTypedRounds({ scratch, rounds: config.abRounds, budgetMs: config.abBudgetMs });
  for (const [id, store, kind] of TYPED_CELLS) {
    record({
      id: `typed/${id}`,
      kind: 'typed-rate',
      name: id,
      store,
      cell: kind,
      producers: TYPED_PRODUCERS,
      unit: 'msgs/s',
      samples: rates[id],
    });
  }
  const out = [];
  for (const [id, samples] of Object.entries(ratios)) {
    const e = record({
      id: `typed/ratio/${id}`,
      kind: 'typed-ratio',
      name: `${id} / ${id.split('/')[0]}/bytes`,
      unit: 'ratio',
      samples,
      min: Math.min(...samples),
      max: Math.max(...samples),
    });
    out.push(`${id} ${(e.value * 100).toFixed(0)} %`);
  }
  return out.join(', ');
}

// ------------------------------------------------------------------ per-item baselines

async function runBaselineSection() {
  const frameBytes = FRAME_HEADER_BYTES + BASELINE_PAYLOAD_BYTES;
  const { rates, ratios } = await runBaselineRounds({ scratch, rounds: config.abRounds, budgetMs: config.abBudgetMs, frameBytes });
  for (const cell of BASELINE_CELLS)
    record({
      id: `baseline/${cell}`,
      kind: 'baseline-rate',
      name: cell,
      payload: BASELINE_PAYLOAD_BYTES,
      unit: 'msgs/s',
      samples: rates[cell],
    });
  const out = [];
  for (const [key, samples] of Object.entries(ratios)) {
    const e = record({
      id: `baseline/ratio/${key}`,
      kind: 'baseline-ratio',
      name: key,
      unit: 'ratio',
      samples,
      min: Math.min(...samples),
      max: Math.max(...samples),
    });
    out.push(`${key} ${e.value.toFixed(3)}`);
  }
  return out.join(', ');
}

// ------------------------------------------------------------------ zero-copy reads

async function runZeroCopySection() {
  const totalBytes = (quick ? 16 : 64) * 1024 * 1024;
  const { rates, ratios, copied } = await runZeroCopyRounds({ scratch, rounds: config.abRounds, totalBytes });
  for (const [id, payload, zeroCopyReads] of ZERO_COPY_CELLS) {
    record({
      id: `zerocopy/${id}`,
      kind: 'zerocopy-rate',
      name: id,
      payload,
      zeroCopyReads,
      backlogBytes: totalBytes,
      copiedBytesPerItem: copied[id],
      unit: 'msgs/s',
      samples: rates[id],
    });
  }
  const out = [];
  for (const [size, samples] of Object.entries(ratios)) {
    const e = record({
      id: `zerocopy/ratio/${size}`,
      kind: 'zerocopy-ratio',
      name: `${size}/zero-copy / ${size}/copy`,
      unit: 'ratio',
      samples,
      min: Math.min(...samples),
      max: Math.max(...samples),
    });
    out.push(`${size} B ${(e.value * 100).toFixed(0)} %`);
  }
  return out.join(', ');
}

// ------------------------------------------------------------------ the job queues users pick instead

async function runJobPeersSection() {
  const budgetMs = Math.max(config.abBudgetMs, 1000);
  const { rates, skipped } = await runJobPeerRounds({ scratch, rounds: config.jobPeerRounds, budgetMs });
  const out = [];
  for (const [id, label, survives] of JOB_PEER_CELLS) {
    if (skipped[id]) {
      record({ id: `jobpeers/${id}`, kind: 'jobpeer-skipped', name: id, label, survives, reason: skipped[id] });
      continue;
    }
    record({
      id: `jobpeers/${id}`,
      kind: 'jobpeer-rate',
      name: id,
      label,
      survives,
      producers: JOB_PEER_PRODUCERS,
      payload: JOB_PEER_PAYLOAD_BYTES,
      budgetMs,
      unit: 'msgs/s',
      samples: rates[id],
    });
  }
  for (const [id, reason] of Object.entries(skipped)) out.push(`${id} skipped: ${reason.split('\n')[0]}`);
  return out.join('; ') || `${Object.keys(rates).length} cells`;
}

// ------------------------------------------------------------------ JetStream: the queue and forward() (child processes)

/** Run one of the JetStream bench scripts; its last line is its results as JSON. */
function jetStreamScript(script, argv) {
  return new Promise((resolve) => {
    const child = fork(join(here, script), argv, { stdio: ['ignore', 'pipe', 'pipe', 'ipc'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 15 * 60_000);
    child.on('exit', (code) => {
      clearTimeout(timer);
      const last = out.trim().split('\n').pop() ?? '';
      if (code !== 0) return resolve({ skipped: `${script} exited ${code}: ${(err.trim().split('\n').pop() ?? '').slice(0, 200)}` });
      try {
        resolve(JSON.parse(last));
      } catch {
        resolve({ skipped: `${script} printed no results line` });
      }
    });
  });
}

async function runJetStreamSection() {
  const items = quick ? 2_000 : 20_000;
  const out = [];
  const queue = await jetStreamScript('jetstream.mjs', ['--items', String(items), '--rounds', quick ? '1' : '3']);
  if (queue.skipped) {
    record({ id: 'jetstream/queue/skipped', kind: 'jetstream-skipped', name: 'the JetStream queue', reason: queue.skipped });
    out.push(`queue skipped: ${queue.skipped}`);
  } else {
    for (const [key, name] of [
      ['logStoreGroup', 'embedded queue, LogStore (group, lazy acks)'],
      ['jetStreamR1', 'JetStream queue (R1, file storage)'],
      ['clientAlone', 'NATS client alone (R1, file storage)'],
    ]) {
      record({
        id: `jetstream/queue/${key}`,
        kind: 'jetstream-queue',
        name,
        items,
        rounds: queue.rounds,
        server: queue.server,
        producers: queue.producers,
        concurrency: queue.concurrency,
        push: queue[key].push,
        consume: queue[key].consume,
        endToEnd: queue[key].endToEnd,
        unit: 'msgs/s',
        value: queue[key].push,
      });
    }
    // Ours over the client alone, the median of the per-round ratios.
    for (const cell of ['push', 'consume', 'endToEnd']) {
      record({
        id: `jetstream/ratio/${cell}`,
        kind: 'jetstream-ratio',
        name: cell === 'endToEnd' ? 'end to end' : cell,
        rounds: queue.rounds,
        unit: 'x',
        value: queue.ratio[cell],
        samples: queue.perRound.jetStreamR1.map((r, i) => r[cell] / queue.perRound.clientAlone[i][cell]),
      });
    }
    out.push(
      `JetStream queue ${fmtRate(queue.jetStreamR1.push)} push, ${fmtRate(queue.jetStreamR1.endToEnd)} e2e (${queue.ratio.push.toFixed(2)}x / ${queue.ratio.endToEnd.toFixed(2)}x the client)`,
    );
  }
  const fwd = await jetStreamScript('forward.mjs', [`--items=${items}`, '--rounds=1']);
  if (fwd.skipped) {
    record({ id: 'jetstream/forward/skipped', kind: 'jetstream-skipped', name: 'forward()', reason: fwd.skipped });
    out.push(`forward skipped: ${fwd.skipped}`);
  } else {
    for (const c of fwd.cells) {
      record({
        id: `jetstream/forward/b${c.batch}/c${c.concurrency}`,
        kind: 'jetstream-forward',
        name: `batch ${c.batch}, ${c.concurrency} lane(s)`,
        items,
        server: fwd.server,
        batch: c.batch,
        concurrency: c.concurrency,
        publishOnly: c.publishOnly,
        unit: 'msgs/s',
        value: c.forward,
      });
    }
    out.push(`forward ${fwd.cells.map((c) => fmtRate(c.forward)).join(' / ')}`);
  }
  return out.join('; ');
}

// ------------------------------------------------------------------ a million delayed items at open (child processes)

async function runDelayed() {
  const n = config.delayedItems;
  const out = [];
  for (const kind of ['plain', 'delayed']) {
    const dir = join(mkdtempSync(join(scratch, `delayed-${kind}-`)), 'q');
    try {
      const built = await child(['build', dir, String(n), kind], { script: DELAYED_CHILD });
      const opens = [];
      for (let r = 0; r < Math.max(config.reps, 1); r++)
        opens.push(await child(['open', dir, String(built.earliest)], { script: DELAYED_CHILD }));
      const m = (k) => median(opens.map((o) => o[k]));
      record({
        id: `delayed/${n}/${kind}`,
        kind: 'delayed-open',
        items: n,
        itemKind: kind,
        unit: 'ms',
        samples: opens.map((o) => o.openMs),
        firstDueMs: m('firstDueMs'),
        rssGrowthBytes: Math.max(...opens.map((o) => o.rssGrowth)),
        heapGrowthBytes: Math.max(...opens.map((o) => o.heapGrowth)),
        delayedAtOpen: opens[0].delayed,
        readyAtOpen: opens[0].ready,
        buildMsgsPerS: n / built.seconds,
      });
      out.push(
        `${kind}: open ${m('openMs').toFixed(0)} ms, rss +${(Math.max(...opens.map((o) => o.rssGrowth)) / 2 ** 20).toFixed(0)} MiB, first due ${m('firstDueMs').toFixed(1)} ms`,
      );
    } finally {
      rmSync(dirname(dir), { recursive: true, force: true });
    }
  }
  return out.join('; ');
}

// ------------------------------------------------------------------ open time and memory (child processes)

const CHILD = join(here, 'lib', 'open-child.mjs');
const DELAYED_CHILD = join(here, 'lib', 'delayed-child.mjs');

function child(argv, { onMessage, script = CHILD } = {}) {
  return new Promise((resolve, reject) => {
    const cp = fork(script, argv, { execArgv: ['--expose-gc'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    let last;
    cp.on('message', (m) => {
      last = m;
      onMessage?.(m, cp);
    });
    cp.on('error', reject);
    cp.on('exit', (code, signal) =>
      code === 0 || signal === 'SIGKILL' ? resolve(last) : reject(new Error(`open child ${argv.join(' ')} exited ${code ?? signal}`)),
    );
  });
}

/** Run a child that reports once and is then SIGKILLed by us. */
const childKilledAfterReport = (argv) => child(argv, { onMessage: (_m, cp) => cp.kill('SIGKILL') });

async function runOpen(task) {
  const n = task.size;
  const out = [];
  for (const how of ['clean', 'kill']) {
    const dir = join(mkdtempSync(join(scratch, `open-${how}-`)), 'q');
    try {
      const built =
        how === 'clean' ? await child(['build', dir, String(n), 'clean']) : await childKilledAfterReport(['build', dir, String(n), 'hold']);
      record({
        id: `disk/${n}/${how}`,
        kind: 'disk',
        items: n,
        how,
        unit: 'bytes/item',
        value: built.allocated / n,
        samples: [built.allocated / n],
        apparentBytesPerItem: built.bytes / n,
        bytes: built.bytes,
        allocated: built.allocated,
        files: built.files,
        buildMsgsPerS: n / built.seconds,
      });
      // Every open is in a fresh process. After a kill, each measuring child is killed too, so the
      // next one also opens an uncleanly closed store; the last one acks the backlog (1 M only).
      const opens = [];
      const reps = Math.max(config.reps, 1);
      for (let r = 0; r < reps; r++) {
        const last = r === reps - 1;
        const then = last ? (n <= 1_000_000 && how === 'clean' ? 'drain' : 'close') : how === 'kill' ? 'kill' : 'close';
        opens.push(then === 'kill' ? await childKilledAfterReport(['open', dir, 'kill']) : await child(['open', dir, then]));
      }
      const m = (k) => median(opens.map((o) => o[k]));
      record({
        id: `open/${n}/${how}`,
        kind: 'open',
        items: n,
        how,
        unit: 'ms',
        samples: opens.map((o) => o.openMs),
        firstReadMs: m('firstReadMs'),
        rssGrowthBytes: Math.max(...opens.map((o) => o.rssGrowth)),
        heapGrowthBytes: Math.max(...opens.map((o) => o.heapGrowth)),
        rssAfterBytes: m('rssAfter'),
        ready: opens[0].ready,
        cleanShutdownSeen: opens.map((o) => o.cleanShutdown),
      });
      const drained = opens.find((o) => o.drained !== undefined);
      if (drained) {
        record({
          id: `disk/${n}/after-ack`,
          kind: 'disk',
          items: n,
          how: 'after-ack',
          unit: 'bytes',
          value: drained.afterClose.allocated,
          samples: [drained.afterClose.allocated],
          bytesOnDiskAfterAck: drained.bytesOnDiskAfterAck,
          apparentBytes: drained.afterClose.bytes,
          files: drained.afterClose.files,
          drainMsgsPerS: drained.drained / drained.drainSeconds,
        });
      }
      out.push(`${how}: open ${m('openMs').toFixed(1)} ms, rss +${(Math.max(...opens.map((o) => o.rssGrowth)) / 2 ** 20).toFixed(1)} MiB`);
    } finally {
      rmSync(dirname(dir), { recursive: true, force: true });
    }
  }
  return out.join('; ');
}

// ------------------------------------------------------------------ run everything

const peerIter = PEERS[Symbol.iterator]();
for (let i = 0; i < plan.length; i++) {
  const task = step(i);
  let label;
  let run;
  switch (task.section) {
    case 'raw':
      label = `raw baselines, ${task.payload} B payloads`;
      run = () => runRaw(task);
      break;
    case 'baseline':
      label = 'per-item baselines: the simplest async queue, MemStore and LogStore none, one serial producer and consumer, raw writes';
      run = () => runBaselineSection();
      break;
    case 'benny':
      label = `benny: MemStore vs bare queue, ${task.payload} B, ${task.producers} producer(s)`;
      run = () => runBenny(task);
      break;
    case 'matrix':
      label = `${task.store}${task.store === 'logstore' ? ` ${task.policy}` : ''}, ${task.workload}, ${task.producers} ${task.workload === 'drain' ? 'acks in flight' : 'producer(s)'}, ${task.payload} B${task.storeCallsPerTurn ? `, storeCallsPerTurn(${task.storeCallsPerTurn})` : ''}`;
      run = () => runMatrixCell(task);
      break;
    case 'readme':
      label = `README consumer code, LogStore, default options, ${README_PRODUCERS} producers: push only, for await loop, process()`;
      run = () => runReadme();
      break;
    case 'poison':
      label = `one poison item among ${config.poisonGood.toLocaleString('en-US')} good ones, process(), LogStore, default options`;
      run = () => runPoisonSection();
      break;
    case 'scheduling':
      label = `priorities, delays and two competing consumers beside plain, LogStore, default options, ${SCHEDULING_PRODUCERS} producers`;
      run = () => runSchedulingSection();
      break;
    case 'typed':
      label = `JSON codec and batches of 64 beside bytes and single items, LogStore and MemStore, ${TYPED_PRODUCERS} producers`;
      run = () => runTypedSection();
      break;
    case 'zerocopy':
      label = 'zero-copy reads beside copied reads: a LogStore backlog drained from disk, 128 B and 16 KiB';
      run = () => runZeroCopySection();
      break;
    case 'delayed':
      label = `open time and memory, ${config.delayedItems.toLocaleString('en-US')} delayed items beside as many plain ones`;
      run = () => runDelayed();
      break;
    case 'peers': {
      const p = peerIter.next().value;
      label = `peer: ${p.label}`;
      run = () => runPeer(p);
      break;
    }
    case 'jetstream':
      label = 'the JetStream queue and forward() beside the embedded queue (nats-server on 127.0.0.1:4222)';
      run = () => runJetStreamSection();
      break;
    case 'jobpeers':
      label = 'job queues users pick instead (BullMQ on Redis, pg-boss on PostgreSQL, plainjob on SQLite) beside ours, 64 producers';
      run = () => runJobPeersSection();
      break;
    case 'ab':
      label = `A/B rounds: ${task.group.title}`;
      run = () => runAb(task.group);
      break;
    case 'limits':
      label = `the log at the disk's limit: ${LIMITS_ROWS.length} rows, each beside its reference, ${Object.keys(LIMITS_CELLS).length} cells per round`;
      run = () => runLimitsSection();
      break;
    case 'remote':
      label = `producers in other processes: the endpoint (${REMOTE_PROCESSES} processes × ${REMOTE_IN_FLIGHT}), the spool and plainjob, beside in-process push`;
      run = () => runRemoteSection();
      break;
    case 'contract':
      task.payload = 128;
      label = `${task.store} (Store contract) ${task.policy}, ${task.workload}, ${task.producers} producer(s)`;
      run = () => runMatrixCell(task, 'contract', 1);
      break;
    case 'open':
      label = `open time and memory, ${task.size.toLocaleString('en-US')} items`;
      run = () => runOpen(task);
      break;
  }
  progress.start(label, task.weight);
  let summary;
  try {
    summary = await run();
  } catch (error) {
    summary = `FAILED: ${error?.stack ?? error}`;
    results.push({ id: `error/${i}`, kind: 'error', label, error: String(error?.stack ?? error) });
  }
  progress.done(summary);
}

const output = {
  schema: 1,
  ...(merged ? { merged } : {}),
  quick,
  startedAt,
  durationSeconds: Math.round((performance.now() - t0) / 1000),
  config,
  env,
  command: quick ? 'npm run bench -- --quick' : 'npm run bench',
  note: 'Figures are from one machine, measured in one run; compare ratios, not absolute numbers. Each figure is the median of the repetitions; `spread` is (max - min) / median.',
  results,
};
// A run of some sections only, not merged, is not the full run: it must not replace latest.json.
const partial = Boolean(only) && !merged && !quick;
const file = join(here, 'results', quick ? 'quick.json' : partial ? 'partial.json' : 'latest.json');
if (merged) {
  // Keep the earlier run's figures of every other section; these sections' figures replace theirs.
  const earlier = JSON.parse(readFileSync(file, 'utf8'));
  const mine = (r) => merged.sections.some((section) => r.id?.startsWith(`${section}/`));
  // Every merge since the full run is kept, the newest last, each naming the sections it replaced.
  const before = (earlier.merges ?? (earlier.merged ? [earlier.merged] : [])).filter(
    (m) => !m.sections.every((x) => merged.sections.includes(x)),
  );
  const merges = [...before, { ...merged, into: earlier.startedAt }];
  Object.assign(output, {
    ...earlier,
    config: { ...earlier.config, ...config },
    merged: merges[merges.length - 1],
    merges,
    results: [...earlier.results.filter((r) => !mine(r)), ...results],
  });
}
output.targets = computeTargets(output);
mkdirSync(dirname(file), { recursive: true });
writeFileSync(file, `${JSON.stringify(output, null, 1)}\n`);
console.log(`\nresults: ${file} (${output.durationSeconds} s)`);
console.log(formatTargets(output.targets));
if ((!quick && !partial) || args.includes('--report')) {
  const { writeReport } = await import('./report.mjs');
  const written = await writeReport(output);
  console.log(`report: ${written.join(', ')}`);
}
