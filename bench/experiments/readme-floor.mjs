// How close can any queue with this contract come to push only with the README's consumers as
// written (64 producers, `group` pushes, `lazy` acks, 128 B)? The floor (bench/lib/floor.mjs,
// FloorQueue) does the least the contract asks for on both sides: pushes as in group-floor.mjs,
// items reservable once durable, a reservation promise per item, an ACK record written before an
// ack resolves (one write per ack for the serial loop; one per turn for 64 workers, as the
// queue's ack pipeline gathers them), an fdatasync of the ack file every 4096 acks.
// Each round runs push only, the `for await` loop and `process({ concurrency: 64 })` over the
// queue (bench/lib/readme-consumer.mjs, as the bench's `readme` section), then the floor's
// cells. A consumer cell counts the items handled while the producers ran; each ratio is taken
// within a round, and the median over the rounds is reported with its range. The floor runs
// twice, its batch syncs in the threadpool and on the calling thread (`floor-main-*`), and the
// faster of each pair is its best.
// Usage: npm run build && node bench/experiments/readme-floor.mjs [rounds=5] [ms=1000]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { README_PAYLOAD_BYTES, README_PRODUCERS, pushCellOf, runReadmeRounds } from '../lib/readme-consumer.mjs';
import { median } from '../lib/stats.mjs';

const rounds = Number(process.argv[2] ?? 5);
const budgetMs = Number(process.argv[3] ?? 1000);
const scratch = mkdtempSync(join(tmpdir(), 'pq-readme-floor-'));
try {
  const { rates, ratios } = await runReadmeRounds({ scratch, rounds, budgetMs, floor: true });
  // The queue's consumer cells against the floor's, round by round.
  for (const kind of ['loop', 'process']) ratios[`${kind} / floor-${kind}`] = rates[kind].map((v, i) => v / rates[`floor-${kind}`][i]);
  // The floor at its best on each side: the faster of its push-only cells (threadpool or calling
  // thread) against the faster of its process() cells, round by round. What the goal asks of the
  // queue's process() (90 % of its own push only, whose batch syncs block on a quiet loop) asks
  // of this.
  const best = (a, b) => rates[a].map((v, i) => Math.max(v, rates[b][i]));
  const bestPush = best('floor-push', 'floor-main-push');
  const bestProcess = best('floor-process', 'floor-main-process');
  ratios['floor best process / best push'] = bestProcess.map((v, i) => v / bestPush[i]);
  ratios['floor-loop / best push'] = rates['floor-loop'].map((v, i) => v / bestPush[i]);
  ratios['floor best push / push'] = bestPush.map((v, i) => v / rates.push[i]);
  const k = (x) => `${(x / 1000).toFixed(1)} k/s`;
  const range = (v, f) => `${f(median(v)).padStart(10)}  (${f(Math.min(...v))} – ${f(Math.max(...v))})`;
  console.log(
    `README consumers, ${README_PRODUCERS} producers, ${README_PAYLOAD_BYTES} B: ${rounds} rounds of ${budgetMs} ms (median, min–max)`,
  );
  for (const [name, v] of Object.entries(rates)) console.log(`  ${name.padEnd(24)} ${range(v, k)}`);
  for (const [name, v] of Object.entries(ratios)) {
    const of = name.includes('/') ? '' : ` / ${pushCellOf(name)}`;
    console.log(`  ${(name + of).padEnd(24)} ${range(v, (x) => x.toFixed(2))}`);
  }
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
