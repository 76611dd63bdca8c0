// Four producer processes into one queue, ours against plainjob (SQLite through better-sqlite3,
// each process opening the same database file, as its users do), in one run, 128 B payloads:
//   ours      an owner process holds the queue (LogStore, 'group': survives power loss; and 'none':
//             survives a process crash) and four producer processes push through connect(), 16
//             pushes in flight each
//   plainjob  four processes add jobs to one SQLite file (WAL, synchronous=NORMAL: survives a
//             process crash, not a power loss), 16 concurrent adds each
// Rounds alternate the two; the figure is jobs stored per second over the window, median of rounds.
// Usage: npm run build && node bench/experiments/endpoint-plainjob.mjs [rounds=3] [ms=2000]
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Builder, LogStore } from '../../dist/index.js';
import { median } from '../lib/stats.mjs';

const rounds = Number(process.argv[2] ?? 3);
const ms = Number(process.argv[3] ?? 2000);
const base = mkdtempSync(join(tmpdir(), 'pq-endpoint-plainjob-'));
const require = createRequire(import.meta.url);
const dist = JSON.stringify(pathToFileURL(join(import.meta.dirname, '..', '..', 'dist', 'index.js')).href);
const plainjobUrl = JSON.stringify(pathToFileURL(require.resolve('plainjob')).href);
const sqlitePath = JSON.stringify(require.resolve('better-sqlite3'));

const oursFile = join(base, 'ours.mjs');
writeFileSync(
  oursFile,
  `import { connect } from ${dist};
const [dir, ms] = [process.argv[2], Number(process.argv[3])];
const producer = await connect(dir);
const payload = new Uint8Array(128).fill(7);
console.log('ready');
await new Promise((resolve) => process.stdin.once('data', resolve));
process.stdin.destroy();
let n = 0;
const t0 = performance.now();
await Promise.all(Array.from({ length: 16 }, async () => {
  while (performance.now() - t0 < ms) { await producer.push(payload); n++; }
}));
console.log(JSON.stringify({ n, ms: performance.now() - t0 }));
await producer.close();
`,
);
const plainjobFile = join(base, 'plainjob.mjs');
writeFileSync(
  plainjobFile,
  `import { createRequire } from 'node:module';
const plainjob = await import(${plainjobUrl});
const Database = createRequire(import.meta.url)(${sqlitePath});
const [file, ms] = [process.argv[2], Number(process.argv[3])];
const quiet = { error() {}, warn() {}, info() {}, debug() {} };
const queue = plainjob.defineQueue({ connection: plainjob.better(new Database(file)), logger: quiet });
const text = 'x'.repeat(128);
console.log('ready');
await new Promise((resolve) => process.stdin.once('data', resolve));
process.stdin.destroy();
let n = 0;
const t0 = performance.now();
// add is a synchronous insert: each of the 16 adders yields a turn after it, as an awaited write would.
await Promise.all(Array.from({ length: 16 }, async () => {
  while (performance.now() - t0 < ms) {
    for (let tries = 0; ; tries++) {
      try { queue.add('job', { p: text }); break; } catch (e) { if (!/SQLITE_BUSY/.test(String(e?.code ?? e?.message)) || tries > 1000) throw e; }
    }
    n++;
    await new Promise((r) => setImmediate(r));
  }
}));
console.log(JSON.stringify({ n, ms: performance.now() - t0 }));
queue.close();
`,
);

function child(file, args) {
  const proc = spawn(process.execPath, [file, ...args], { stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = [];
  let partial = '';
  const waiters = [];
  proc.stdout.setEncoding('utf8');
  proc.stdout.on('data', (chunk) => {
    const parts = (partial + chunk).split('\n');
    partial = parts.pop();
    lines.push(...parts);
    for (const w of waiters.splice(0)) w();
  });
  const line = async (test) => {
    for (;;) {
      const found = lines.find(test);
      if (found !== undefined) return found;
      await new Promise((r) => waiters.push(r));
    }
  };
  return { proc, line };
}

async function four(file, target) {
  const procs = Array.from({ length: 4 }, () => child(file, [target, String(ms)]));
  for (const p of procs) await p.line((l) => l === 'ready');
  for (const p of procs) p.proc.stdin.write('go\n');
  const results = await Promise.all(procs.map((p) => p.line((l) => l.startsWith('{')).then(JSON.parse)));
  await Promise.all(procs.map((p) => new Promise((r) => (p.proc.exitCode !== null ? r() : p.proc.once('exit', r)))));
  return results.reduce((sum, r) => sum + r.n / (r.ms / 1000), 0);
}

async function ours(durability = 'group') {
  const dir = mkdtempSync(join(base, 'q-'));
  const [tx] = await new Builder(await LogStore.open(dir)).durability(durability).open();
  const rate = await four(oursFile, dir);
  await tx.close();
  return rate;
}

async function plain() {
  const dir = mkdtempSync(join(base, 'p-'));
  // The schema is made once, before the four processes race to add.
  const plainjob = await import('plainjob');
  const Database = require('better-sqlite3');
  plainjob.defineQueue({ connection: plainjob.better(new Database(join(dir, 'q.db'))), logger: { error() {}, warn() {}, info() {}, debug() {} } }).close();
  return four(plainjobFile, join(dir, 'q.db'));
}

const rows = { ours: [], none: [], plainjob: [], ratio: [], ratioNone: [] };
try {
  for (let r = 0; r < rounds; r++) {
    const a = r % 2 === 0 ? await ours() : null;
    const b = await plain();
    const c = a ?? (await ours());
    const d = await ours('none');
    rows.ours.push(c);
    rows.none.push(d);
    rows.plainjob.push(b);
    rows.ratio.push(c / b);
    rows.ratioNone.push(d / b);
  }
} finally {
  rmSync(base, { recursive: true, force: true });
}
console.log(`${rounds} rounds of ${ms} ms, 4 producer processes x 16 in flight, 128 B`);
console.log(`ours (LogStore group, through the owner's endpoint)  ${median(rows.ours).toFixed(0)} pushes/s`);
console.log(`plainjob (SQLite WAL NORMAL, each process opens the file)  ${median(rows.plainjob).toFixed(0)} adds/s`);
console.log(`ours 'none' (survives a process crash, as plainjob's NORMAL does)  ${median(rows.none).toFixed(0)} pushes/s`);
console.log(`ours group / plainjob: ${median(rows.ratio).toFixed(2)} (${rows.ratio.map((x) => x.toFixed(2)).join(' ')})`);
console.log(`ours none / plainjob: ${median(rows.ratioNone).toFixed(2)} (${rows.ratioNone.map((x) => x.toFixed(2)).join(' ')})`);
