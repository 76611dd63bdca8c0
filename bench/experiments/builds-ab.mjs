// Two builds of the package on the same LogStore workloads, as interleaved A/B rounds in one
// process (the order alternates each round; the figure is the median of the per-round ratios), so
// that a refactor of the engine can be compared with the build before it on one machine, at one
// moment, with the disk's mood shared by both. Cells (128 B payloads, 300 ms each):
//   group/p64/push  64 producers, `await push` in a loop, under 'group'
//   sync/p1/push    1 producer under 'sync'
//   none/p64/e2e    64 producers and the README's serial consumer (`reserve` + `await ack()`), 'none', capacity 1024
//   group/p64/e2e   the same under 'group'
// Usage: npm run build && node bench/experiments/builds-ab.mjs <baseline checkout with dist/> [rounds=10]
// e.g. git worktree add /tmp/pq-base <commit> && cd /tmp/pq-base && npm ci && npm run build
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const [baseline, roundsArg] = process.argv.slice(2);
if (baseline === undefined) {
  console.error('usage: node bench/experiments/builds-ab.mjs <baseline checkout with dist/> [rounds=10]');
  process.exit(2);
}
const builds = {
  baseline: await import(pathToFileURL(join(resolve(baseline), 'dist', 'index.js')).href),
  current: await import(new URL('../../dist/index.js', import.meta.url).href),
};
const rounds = Number(roundsArg ?? 10);
const payload = new Uint8Array(128).fill(1);

/** Items per second: pushed (push cells) or acked (e2e cells) during `ms`. */
async function cell(m, durability, producers, ms, consume) {
  const dir = mkdtempSync(join(tmpdir(), 'pq-builds-ab-'));
  const store = await m.LogStore.open(dir);
  const builder = new m.Builder(store).durability(durability).capacity(consume ? 1024 : Infinity);
  // Acks under the cell's policy in both builds (a build older than ackDurability has no other).
  builder.ackDurability?.(durability === 'none' ? 'lazy' : durability);
  const [tx, rx] = await builder.open();
  let pushed = 0;
  let acked = 0;
  const t0 = performance.now();
  const deadline = t0 + ms;
  const producing = Array.from({ length: producers }, async () => {
    while (performance.now() < deadline) {
      await tx.push(payload);
      pushed++;
    }
  });
  const consuming = consume
    ? (async () => {
        for (;;) {
          const item = rx.tryReserve() ?? (await rx.reserve());
          if (!item) return;
          await item.ack().catch(() => undefined); // an ack that close() overtook
          acked++;
        }
      })()
    : null;
  await Promise.all(producing);
  const seconds = (performance.now() - t0) / 1000;
  const count = consume ? acked : pushed;
  await tx.close();
  await consuming;
  rmSync(dir, { recursive: true, force: true });
  return count / seconds;
}

const cells = [
  ['group', 64, false],
  ['sync', 1, false],
  ['none', 64, true],
  ['group', 64, true],
];
const results = {};
for (let r = 0; r < rounds; r++) {
  for (const [durability, producers, consume] of cells) {
    const name = `${durability}/p${producers}/${consume ? 'e2e' : 'push'}`;
    const row = (results[name] ??= { baseline: [], current: [], ratio: [] });
    const order = r % 2 === 0 ? ['baseline', 'current'] : ['current', 'baseline'];
    const v = {};
    for (const b of order) v[b] = await cell(builds[b], durability, producers, 300, consume);
    row.baseline.push(v.baseline);
    row.current.push(v.current);
    row.ratio.push(v.current / v.baseline);
  }
}
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
console.log(`${rounds} rounds; items/s, median of rounds; ratio = current / baseline, median of per-round ratios`);
for (const [name, row] of Object.entries(results)) {
  console.log(
    `${name.padEnd(15)} baseline ${median(row.baseline).toFixed(0).padStart(8)}  current ${median(row.current).toFixed(0).padStart(8)}  ratio ${median(row.ratio).toFixed(3)}  (${row.ratio.map((x) => x.toFixed(2)).join(' ')})`,
  );
}
