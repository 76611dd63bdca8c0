// Producers in other processes (section `remote` of bench/run.mjs; bench/experiments/endpoint.mjs,
// spool.mjs and endpoint-plainjob.mjs run the same cells on their own): each way in beside its
// reference, every cell once per round, the order rotated, 128 B payloads.
//   local-group      the owner's own 64 producers, `await push` in a loop, LogStore `group`
//   endpoint-group   the same owner, 4 producer processes (bench/lib/remote-producer.mjs) × 16
//                    pushes in flight each through connect(): 64 in flight, as local-group
//   local-none, endpoint-none      the same two under `none`
//   spool-group      no owner: 64 concurrent pushes into a spool file under `group` (what connect()
//                    appends to when nobody holds the queue: src/stores/log/engine/spool-producer.ts), in this
//                    process, beside local-group
//   plainjob         4 processes (bench/lib/plainjob-producer.mjs) × 16 concurrent adds into one
//                    SQLite file (WAL, synchronous=NORMAL: survives a process crash, not a power
//                    loss), beside endpoint-group and endpoint-none
// With `serial`, each round also times one remote producer's serial pushes under `none` against
// the owner's own serial pushes (latency p50 / p99).
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { Builder, LogStore } from '../../dist/index.js';
import { nodeFileSystem } from '../../dist/fs/node-fs.js';
import { openSpool } from '../../dist/stores/log/engine/spool-producer.js';
import { percentile } from './stats.mjs';

export const REMOTE_PAYLOAD_BYTES = 128;
export const REMOTE_PROCESSES = 4;
export const REMOTE_IN_FLIGHT = 16;
const LOCAL_PRODUCERS = 64;
const PRODUCER = join(import.meta.dirname, 'remote-producer.mjs');
const PLAINJOB = join(import.meta.dirname, 'plainjob-producer.mjs');
const payload = new Uint8Array(REMOTE_PAYLOAD_BYTES).fill(7);

/** bench/profile.mjs sets this to profile the producer processes too (`--cpu-prof` into that directory). */
const profileDir = process.env.PQ_BENCH_PROFILE_PRODUCERS;
const execArgv = profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : [];

/** A child node process whose stdout lines can be awaited. */
function child(file, args) {
  const proc = spawn(process.execPath, [...execArgv, file, ...args], { stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = [];
  let partial = '';
  const waiters = [];
  let exited = false;
  proc.stdout.setEncoding('utf8');
  proc.stdout.on('data', (chunk) => {
    const parts = (partial + chunk).split('\n');
    partial = parts.pop();
    lines.push(...parts);
    for (const w of waiters.splice(0)) w();
  });
  proc.on('exit', (code) => {
    exited = code;
    for (const w of waiters.splice(0)) w();
  });
  const line = async (test) => {
    for (;;) {
      const found = lines.find(test);
      if (found !== undefined) return found;
      if (exited !== false) throw new Error(`${file} exited ${exited} before printing the line awaited`);
      await new Promise((r) => waiters.push(r));
    }
  };
  const done = () => new Promise((r) => (proc.exitCode !== null ? r() : proc.once('exit', r)));
  return { proc, line, done };
}

/** Start `processes` children of `file`, wait for each to be ready, start them together; sums their rates. */
async function together(file, argsOf, processes) {
  const procs = Array.from({ length: processes }, (_, i) => child(file, argsOf(i)));
  try {
    for (const p of procs) await p.line((l) => l === 'ready');
    const cpu0 = process.cpuUsage();
    for (const p of procs) p.proc.stdin.write('go\n');
    const results = await Promise.all(procs.map((p) => p.line((l) => l.startsWith('{')).then(JSON.parse)));
    const cpu = process.cpuUsage(cpu0);
    await Promise.all(procs.map((p) => p.done()));
    const n = results.reduce((s, r) => s + r.n, 0);
    return {
      rate: results.reduce((s, r) => s + r.n / (r.ms / 1000), 0),
      ownerCpuUsPerPush: (cpu.user + cpu.system) / n,
      producerCpuUsPerPush: results.every((r) => r.cpuMs !== undefined) ? (results.reduce((s, r) => s + r.cpuMs, 0) * 1000) / n : undefined,
    };
  } finally {
    for (const p of procs) if (p.proc.exitCode === null) p.proc.kill('SIGKILL');
  }
}

/** `producers` concurrent loops of `push()` for `ms`: pushes per second, and the CPU per push of this process. */
async function loops(push, producers, ms) {
  let n = 0;
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: producers }, async () => {
      while (performance.now() - t0 < ms) {
        await push();
        n++;
      }
    }),
  );
  const rate = n / ((performance.now() - t0) / 1000);
  const cpu = process.cpuUsage(cpu0);
  return { rate, cpuUsPerPush: (cpu.user + cpu.system) / n };
}

async function owned(dir, durability, body) {
  const [tx] = await new Builder(await LogStore.open(join(dir, 'q'))).durability(durability).open();
  try {
    return await body(tx, join(dir, 'q'));
  } finally {
    await tx.close();
  }
}

const local = (durability) => (dir, ms) =>
  owned(dir, durability, async (tx) => {
    await tx.push(payload);
    return loops(() => tx.push(payload), LOCAL_PRODUCERS, ms);
  });

const endpoint = (durability, processes, inFlight) => (dir, ms) =>
  owned(dir, durability, (_tx, q) => together(PRODUCER, () => ['rate', q, String(inFlight), String(ms)], processes));

const spool = (durability) => async (dir, ms) => {
  const s = await openSpool(join(dir, 'q'), { durability, fs: nodeFileSystem });
  try {
    return await loops(() => s.pushMany([payload], {}, undefined), LOCAL_PRODUCERS, ms);
  } finally {
    await s.close();
  }
};

async function plainjob(dir, ms, processes = REMOTE_PROCESSES, inFlight = REMOTE_IN_FLIGHT) {
  const require = createRequire(import.meta.url);
  const pj = await import('plainjob');
  const Database = require('better-sqlite3');
  const file = join(dir, 'q.db');
  // The schema is made once, before the processes race to add.
  pj.defineQueue({ connection: pj.better(new Database(file)), logger: { error() {}, warn() {}, info() {}, debug() {} } }).close();
  return together(PLAINJOB, () => [file, String(inFlight), String(ms)], processes);
}

/** Serial pushes under `none`: one remote producer's, then the owner's own; latencies sorted, in ms. */
export async function serialNone(dir, count) {
  return owned(dir, 'none', async (tx, q) => {
    const s = child(PRODUCER, ['serial', q, String(count)]);
    const remote = Float64Array.from(JSON.parse(await s.line((l) => l.startsWith('['))));
    await s.done();
    for (let i = 0; i < 500; i++) await tx.push(payload);
    const mine = new Float64Array(count);
    for (let i = 0; i < count; i++) {
      const t = performance.now();
      await tx.push(payload);
      mine[i] = performance.now() - t;
    }
    return { remote: remote.sort(), local: mine.sort() };
  });
}

/**
 * Every cell: name -> run(dir, ms) -> { rate, ... }. `inFlight` is per producer process. The spool
 * under `sync` and `none` are for scale (bench/experiments/spool.mjs), not in the section.
 */
export function remoteCells({ processes = REMOTE_PROCESSES, inFlight = REMOTE_IN_FLIGHT } = {}) {
  return {
    'local-group': local('group'),
    'endpoint-group': endpoint('group', processes, inFlight),
    'local-none': local('none'),
    'endpoint-none': endpoint('none', processes, inFlight),
    'spool-group': spool('group'),
    plainjob: (dir, ms) => plainjob(dir, ms, processes, inFlight),
    'spool-sync': spool('sync'),
    'spool-none': spool('none'),
  };
}

/** The cells of the section `remote`. */
export const REMOTE_SECTION_CELLS = ['local-group', 'endpoint-group', 'local-none', 'endpoint-none', 'spool-group', 'plainjob'];

/**
 * The ratios: ours over the reference of the same round, each with the project's goal (none: no
 * goal set, shown for scale). plainjob keeps a job through a process crash, not a power loss, so
 * both of ours face it at equal or stronger durability, where the brief asks for 5×.
 */
export const REMOTE_RATIOS = {
  'endpoint-group/local-group': {
    goal: 0.5,
    what: 'through the endpoint, `group`, 4 processes × 16 in flight',
    against: "the owner's own 64 producers, `group`",
  },
  'endpoint-none/local-none': {
    what: 'through the endpoint, `none`, 4 processes × 16 in flight',
    against: "the owner's own 64 producers, `none`",
  },
  'spool-group/local-group': {
    what: 'the spool with no owner, `group`, 64 concurrent pushes',
    against: 'in-process push, `group`, 64 producers',
  },
  'endpoint-group/plainjob': {
    goal: 5,
    what: 'through the endpoint, `group` (survives power loss), 4 processes × 16',
    against: 'plainjob, SQLite WAL NORMAL (survives a process crash), 4 processes × 16 adds',
  },
  'endpoint-none/plainjob': {
    goal: 5,
    what: 'through the endpoint, `none` (survives a process crash), 4 processes × 16',
    against: 'the same plainjob cell',
  },
};

/**
 * `rounds` rounds of every cell of `cells` (default: all), the order rotated by one each round, in
 * a fresh directory each. Returns { rates: {cell: [per round]}, cpu: {cell: [per round]}, ratios:
 * {id: [per round]}, serial?: { remote: {p50Ms, p99Ms}[], local: [...] } }.
 */
export async function runRemoteRounds({ scratch, rounds, budgetMs, serial = 0, processes, inFlight, cells, onRound }) {
  const all = remoteCells({ processes, inFlight });
  const names = cells ?? REMOTE_SECTION_CELLS;
  const rates = Object.fromEntries(names.map((c) => [c, []]));
  const cpu = Object.fromEntries(names.map((c) => [c, []]));
  const ids = Object.keys(REMOTE_RATIOS).filter((id) => id.split('/').every((c) => names.includes(c)));
  const ratios = Object.fromEntries(ids.map((id) => [id, []]));
  const latencies = serial > 0 ? { remote: [], local: [] } : undefined;
  for (let r = 0; r < rounds; r++) {
    const got = {};
    for (let i = 0; i < names.length; i++) {
      const name = names[(i + r) % names.length];
      const dir = mkdtempSync(join(scratch, `remote-${name}-`));
      try {
        const m = await all[name](dir, budgetMs);
        got[name] = m.rate;
        rates[name].push(m.rate);
        cpu[name].push({ owner: m.ownerCpuUsPerPush ?? m.cpuUsPerPush, producer: m.producerCpuUsPerPush });
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }
    for (const id of ids) {
      const [a, b] = id.split('/');
      ratios[id].push(got[a] / got[b]);
    }
    if (latencies) {
      const dir = mkdtempSync(join(scratch, 'remote-serial-'));
      try {
        const s = await serialNone(dir, serial);
        for (const side of ['remote', 'local']) latencies[side].push({ p50Ms: percentile(s[side], 50), p99Ms: percentile(s[side], 99) });
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }
    onRound?.(r);
  }
  return { rates, cpu, ratios, serial: latencies };
}
