// Durable schedules at scale, over LogStore (default options, `group`): the open of a store holding
// 10,000 schedules (after a clean close, in a fresh process: time and heap growth), for `{ everyMs }`
// and for `{ cron, tz }` schedules; and what a fire costs against a push: 10,000 schedules whose
// slots all fall due at once (a manual clock moved past them) against 10,000 concurrent pushes of
// the same payload, as interleaved rounds (median of the per-round ratios). Measures, asserts nothing.
// Usage: npm run build && node --expose-gc bench/experiments/schedules.mjs [rounds=5] [schedules=10000]
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Builder, LogStore } from '../../dist/index.js';
import { ManualClock } from '../../dist/testing/index.js';
import { median } from '../lib/stats.mjs';

const rounds = Number(process.argv[2] ?? 5);
const count = Number(process.argv[3] ?? 10_000);
const T0 = Date.parse('2026-01-01T00:00:00Z');
const payload = new Uint8Array(128).fill(7);
const index = pathToFileURL(fileURLToPath(new URL('../../dist/index.js', import.meta.url))).href;

/**
 * A store holding `count` schedules of `kind`, closed cleanly. `due`: defined on a clock a year back,
 * so that the opens measured (on the system's clock) find every one due, and catch each up.
 */
async function storeWith(kind, due = false) {
  const dir = join(mkdtempSync(join(tmpdir(), 'pq-sched-bench-')), 'q');
  // Defined unsynced: setting up 10,000 definitions one fsync each would measure the disk, not the
  // open. On the system's clock, with slots hours away: the opens measured find none due.
  const builder = new Builder(await LogStore.open(dir)).durability('none');
  if (due) builder.clock(new ManualClock(Date.now() - 365 * 86_400_000));
  const [tx] = await builder.open();
  const spec = (i) =>
    kind === 'every' ? { everyMs: 3_600_000 * (1 + (i % 24)) } : { cron: `${i % 60} ${i % 24} * * *`, tz: 'Europe/Berlin' };
  await Promise.all(Array.from({ length: count }, (_, i) => tx.schedule(`s${i}`, spec(i), payload)));
  await tx.close();
  return dir;
}

/** Open the store in a fresh process and report the open's time and heap growth. */
function openInChild(dir) {
  const source = `
const { Builder, LogStore } = await import(${JSON.stringify(index)});
globalThis.gc?.(); const before = process.memoryUsage().heapUsed;
const t0 = performance.now();
const [tx] = await new Builder(await LogStore.open(${JSON.stringify(dir)})).open();
const ms = performance.now() - t0;
globalThis.gc?.(); const heap = process.memoryUsage().heapUsed - before;
const n = tx.schedules().length;
await tx.close();
console.log(JSON.stringify({ ms, heapMiB: heap / 2 ** 20, schedules: n }));
`;
  const run = spawnSync(process.execPath, ['--expose-gc', '--input-type=module', '-e', source], { encoding: 'utf8' });
  if (run.status !== 0) throw new Error(run.stderr);
  return JSON.parse(run.stdout.trim().split('\n').pop());
}

/**
 * A store holding `count` schedules of one minute, and a function that moves its clock to the next
 * minute (every schedule due at once) and resolves with the time until their fires are stored.
 */
async function fireRounds() {
  const dir = join(mkdtempSync(join(tmpdir(), 'pq-sched-fire-')), 'q');
  const clock = new ManualClock(T0 + 1);
  const [setup] = await new Builder(await LogStore.open(dir)).clock(clock).durability('none').open();
  await Promise.all(Array.from({ length: count }, (_, i) => setup.schedule(`s${i}`, { everyMs: 60_000 }, payload)));
  await setup.close();
  const [tx] = await new Builder(await LogStore.open(dir)).clock(clock).open();
  let minute = 0;
  return {
    async round() {
      minute++;
      const t0 = performance.now();
      clock.set(T0 + 60_000 * minute);
      while (tx.stats().pendingPushes > 0 || tx.stats().pushed < count * minute) await new Promise((r) => setImmediate(r));
      return performance.now() - t0;
    },
    async close() {
      await tx.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A store, and a function that resolves with the time to store `count` concurrent pushes into it. */
async function pushRounds() {
  const dir = join(mkdtempSync(join(tmpdir(), 'pq-sched-push-')), 'q');
  const [tx] = await new Builder(await LogStore.open(dir)).open();
  return {
    async round() {
      const t0 = performance.now();
      await Promise.all(Array.from({ length: count }, () => tx.push(payload)));
      return performance.now() - t0;
    },
    async close() {
      await tx.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

for (const kind of ['every', 'cron']) {
  const dir = await storeWith(kind);
  const opens = Array.from({ length: rounds }, () => openInChild(dir));
  console.log(
    `open with ${count} ${kind} schedules: ${median(opens.map((o) => o.ms)).toFixed(1)} ms (${opens.map((o) => o.ms.toFixed(0)).join(' ')}), heap +${median(opens.map((o) => o.heapMiB)).toFixed(1)} MiB`,
  );
  rmSync(dir, { recursive: true, force: true });
  // Every one due: the first open catches each up (its latest slot), a new store each time.
  const caught = Array.from({ length: Math.min(rounds, 3) }, () => 0);
  for (let i = 0; i < caught.length; i++) {
    const due = await storeWith(kind, true);
    caught[i] = openInChild(due).ms;
    rmSync(due, { recursive: true, force: true });
  }
  console.log(
    `first open with ${count} ${kind} schedules all due (catch-up 'last' of each): ${median(caught).toFixed(0)} ms (${caught.map((x) => x.toFixed(0)).join(' ')})`,
  );
}
const firing = await fireRounds();
const pushing = await pushRounds();
// One round of each first, unmeasured: the code paths warm up.
await firing.round();
await pushing.round();
const ratios = [];
const fireMs = [];
const pushMs = [];
for (let r = 0; r < rounds; r++) {
  const order = r % 2 === 0 ? [firing, pushing] : [pushing, firing];
  const [a, b] = [await order[0].round(), await order[1].round()];
  const [f, p] = r % 2 === 0 ? [a, b] : [b, a];
  fireMs.push(f);
  pushMs.push(p);
  ratios.push(f / p);
}
await firing.close();
await pushing.close();
console.log(
  `${count} fires at once: ${median(fireMs).toFixed(0)} ms; ${count} concurrent pushes: ${median(pushMs).toFixed(0)} ms; fire/push time ${median(ratios).toFixed(2)} (${ratios.map((x) => x.toFixed(2)).join(' ')})`,
);
