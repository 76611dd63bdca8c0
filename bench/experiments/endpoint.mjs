// Pushes through the owner's endpoint against the owner's own producers, in one run, 128 B payloads:
//   local group     LogStore 'group', 64 producers in the owner's process awaiting push in a loop
//   remote group    the same owner, 4 producer processes x 16 pushes in flight each, through connect()
//   serial none     one producer process, one push at a time, the owner under 'none': latency p50/p99,
//                   beside the owner's own serial push under 'none'
// Rounds alternate local and remote; the ratio is remote / local of the same round.
// Usage: npm run build && node bench/experiments/endpoint.mjs [rounds=3] [ms=2000] [serialPushes=5000] [inFlight=16]
// (inFlight: pushes in flight per producer process; 16 makes the same 64 in flight as the local producers)
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Builder, LogStore } from '../../dist/index.js';

const rounds = Number(process.argv[2] ?? 3);
const ms = Number(process.argv[3] ?? 2000);
const serialPushes = Number(process.argv[4] ?? 5000);
const inFlight = Number(process.argv[5] ?? 16);
const base = mkdtempSync(join(tmpdir(), 'pq-endpoint-'));
const payload = new Uint8Array(128).fill(7);
const dist = JSON.stringify(pathToFileURL(join(import.meta.dirname, '..', '..', 'dist', 'index.js')).href);

const producerFile = join(base, 'producer.mjs');
writeFileSync(
  producerFile,
  `import { connect } from ${dist};
const [dir, inFlight, ms] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4])];
const producer = await connect(dir);
const payload = new Uint8Array(128).fill(7);
await producer.push(payload);
console.log('ready');
await new Promise((resolve) => process.stdin.once('data', resolve));
process.stdin.destroy();
let n = 0;
const cpu0 = process.cpuUsage();
const t0 = performance.now();
await Promise.all(Array.from({ length: inFlight }, async () => {
  while (performance.now() - t0 < ms) {
    await producer.push(payload);
    n++;
  }
}));
const took = performance.now() - t0;
const cpu = process.cpuUsage(cpu0);
console.log(JSON.stringify({ n, ms: took, cpuMs: (cpu.user + cpu.system) / 1000 }));
await producer.close();
`,
);

const serialFile = join(base, 'serial.mjs');
writeFileSync(
  serialFile,
  `import { connect } from ${dist};
const [dir, count] = [process.argv[2], Number(process.argv[3])];
const producer = await connect(dir);
const payload = new Uint8Array(128).fill(7);
for (let i = 0; i < 500; i++) await producer.push(payload); // warm up
const latencies = new Float64Array(count);
for (let i = 0; i < count; i++) {
  const t = performance.now();
  await producer.push(payload);
  latencies[i] = performance.now() - t;
}
console.log(JSON.stringify([...latencies]));
await producer.close();
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

async function localGroup() {
  const [tx] = await new Builder(await LogStore.open(mkdtempSync(join(base, 'l-')))).durability('group').open();
  await tx.push(payload);
  let n = 0;
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: 64 }, async () => {
      while (performance.now() - t0 < ms) {
        await tx.push(payload);
        n++;
      }
    }),
  );
  const rate = n / ((performance.now() - t0) / 1000);
  const cpu = process.cpuUsage(cpu0);
  await tx.close();
  return { rate, cpuUsPerPush: (cpu.user + cpu.system) / n };
}

async function remoteGroup() {
  const dir = mkdtempSync(join(base, 'r-'));
  const [tx] = await new Builder(await LogStore.open(dir)).durability('group').open();
  const producers = Array.from({ length: 4 }, () => child(producerFile, [dir, String(inFlight), String(ms)]));
  for (const p of producers) await p.line((l) => l === 'ready');
  const cpu0 = process.cpuUsage();
  for (const p of producers) p.proc.stdin.write('go\n');
  let rate = 0;
  let pushes = 0;
  let producerCpuMs = 0;
  for (const p of producers) {
    const { n, ms: took, cpuMs } = JSON.parse(await p.line((l) => l.startsWith('{')));
    rate += n / (took / 1000);
    pushes += n;
    producerCpuMs += cpuMs;
  }
  const cpu = process.cpuUsage(cpu0);
  await tx.close();
  return { rate, ownerCpuUsPerPush: (cpu.user + cpu.system) / pushes, producerCpuUsPerPush: (producerCpuMs * 1000) / pushes };
}

function percentile(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

async function serialNone() {
  const dir = mkdtempSync(join(base, 's-'));
  const [tx] = await new Builder(await LogStore.open(dir)).durability('none').open();
  const s = child(serialFile, [dir, String(serialPushes)]);
  const remote = Float64Array.from(JSON.parse(await s.line((l) => l.startsWith('['))));
  remote.sort();
  for (let i = 0; i < 500; i++) await tx.push(payload);
  const local = new Float64Array(serialPushes);
  for (let i = 0; i < serialPushes; i++) {
    const t = performance.now();
    await tx.push(payload);
    local[i] = performance.now() - t;
  }
  local.sort();
  await tx.close();
  return { remote, local };
}

const fmt = (x) => Math.round(x).toLocaleString('en-US');
const us = (x) => `${(x * 1000).toFixed(1)} µs`;
console.log(`node ${process.version}, ${ms} ms per measurement, 128 B payloads`);
for (let r = 0; r < rounds; r++) {
  const local = await localGroup();
  const remote = await remoteGroup();
  console.log(
    `round ${r + 1}: local group 64 producers ${fmt(local.rate)} pushes/s | remote group 4 processes x ${inFlight} ${fmt(remote.rate)} pushes/s | ratio ${(remote.rate / local.rate).toFixed(2)}x | CPU per push: local ${local.cpuUsPerPush.toFixed(1)} µs, owner of remote pushes ${remote.ownerCpuUsPerPush.toFixed(1)} µs, their producers ${remote.producerCpuUsPerPush.toFixed(1)} µs`,
  );
}
const { remote, local } = await serialNone();
console.log(`serial push under none, ${serialPushes} pushes: remote p50 ${us(percentile(remote, 50))} p99 ${us(percentile(remote, 99))} | local p50 ${us(percentile(local, 50))} p99 ${us(percentile(local, 99))}`);
rmSync(base, { recursive: true, force: true });
