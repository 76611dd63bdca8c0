// The README's own consumer code, run as written, against push-only throughput in the same run:
// 64 producers, LogStore, default options (`new Builder(store).open()`: `group` pushes, the default
// ack policy, no capacity bound). Used by bench/run.mjs (section `readme`) and
// bench/experiments/lazy-acks.mjs (the same rounds under other ack policies).
//
// Each round runs push only, the `for await` loop and `process({ concurrency: 64 })` back to
// back on fresh stores, so each ratio is taken within one round; the figure is the median of the
// rounds' ratios. The rate of a consumer cell counts items handled while the producers ran.
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import * as dist from '../../dist/index.js';
import { floorReadmeRates } from './floor.mjs';
import { median } from './stats.mjs';

export const README_PRODUCERS = 64;
export const README_PAYLOAD_BYTES = 128;

/** The consumers under test, each given `handle` (counts and returns) and, for process, a signal. */
const CONSUMERS = {
  // README, "Usage": "By hand, with try/finally".
  loop: async (rx, handle) => {
    for await (const item of rx) {
      try {
        await handle(item.bytes);
        await item.ack();
      } finally {
        if (!item.settled) await item.nack(); // the handler threw, or the loop was left early
      }
    }
  },
  // README, "Usage": "Consuming in a loop", with the concurrency of the target.
  process: async (rx, handle, signal) => {
    await rx.process(async (item) => handle(item.bytes), { concurrency: 64, signal });
  },
};

/**
 * `configure(builder)` applies the options under test; the default leaves the Builder's defaults.
 * `wrap(store)` stands in a wrapper for the store, `storeOptions` are LogStore's (experiments only).
 * `lib` is the build of the package to run (this checkout's `dist/` unless given: builds-ab).
 */
export async function runOne(kind, dir, { budgetMs, configure, wrap, storeOptions, lib = dist }) {
  const { Builder, LogStore } = lib;
  const opened = await LogStore.open(join(dir, 'q'), storeOptions);
  const store = wrap ? wrap(opened) : opened;
  const builder = new Builder(store);
  configure?.(builder);
  const [tx, rx] = await builder.open();
  const payload = new Uint8Array(README_PAYLOAD_BYTES).fill(7);
  let handled = 0;
  let pushed = 0;
  const handle = async () => {
    handled++;
  };
  const stop = new AbortController();
  const consumer =
    kind === 'push'
      ? Promise.resolve()
      : CONSUMERS[kind](rx, handle, stop.signal).catch((e) => {
          // The loop meets ERR_CLOSED when the queue closes under an item in hand (below).
          if (e?.code !== 'ERR_CLOSED') throw e;
        });
  const deadline = performance.now() + budgetMs;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: README_PRODUCERS }, async () => {
      while (performance.now() < deadline) {
        await tx.push(payload);
        pushed++;
      }
    }),
  );
  const seconds = (performance.now() - t0) / 1000;
  const msgs = kind === 'push' ? pushed : handled;
  stop.abort();
  await tx.close();
  await consumer;
  return { msgs, seconds, pushed };
}

/** The push-only cell a consumer cell is taken against: the floor's for the floor's cells. */
export const pushCellOf = (kind) =>
  kind.startsWith('floor-main-') ? 'floor-main-push' : kind.startsWith('floor-') ? 'floor-push' : 'push';

/**
 * `rounds` rounds of push / loop / process; returns the rates per cell and the per-round ratios
 * of each consumer to the push-only cell of the same round. With `floor`, each round also runs
 * the contract's floor (bench/lib/floor.mjs) push only, with the loop and with 64 workers, and
 * reports their ratios the same way (`floor-loop`, `floor-process`); and again with the floor's
 * syncs on the calling thread (`floor-main-push`, `floor-main-process`), as the queue's batch syncs
 * run under 'auto' on a quiet loop.
 */
export async function runReadmeRounds({ scratch, rounds, budgetMs, configure, wrap, floor = false }) {
  const kinds = floor
    ? ['push', 'loop', 'process', 'floor-push', 'floor-loop', 'floor-process', 'floor-main-push', 'floor-main-process']
    : ['push', 'loop', 'process'];
  const rates = Object.fromEntries(kinds.map((k) => [k, []]));
  const ratios = Object.fromEntries(kinds.filter((k) => !k.endsWith('push')).map((k) => [k, []]));
  const payload = new Uint8Array(README_PAYLOAD_BYTES).fill(7);
  for (let r = 0; r < rounds; r++) {
    const round = {};
    for (const kind of kinds) {
      const dir = mkdtempSync(join(scratch, `readme-${kind}-`));
      try {
        if (kind.startsWith('floor-')) {
          const mainThread = kind.startsWith('floor-main-');
          const what = kind.slice(mainThread ? 'floor-main-'.length : 'floor-'.length);
          const consumer = what === 'push' ? undefined : what;
          const res = await floorReadmeRates(dir, { producers: README_PRODUCERS, payload, budgetMs, consumer, mainThread });
          round[kind] = consumer === undefined ? res.pushed : res.handled;
        } else {
          const res = await runOne(kind, dir, { budgetMs, configure, wrap });
          round[kind] = res.msgs / res.seconds;
        }
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
      rates[kind].push(round[kind]);
    }
    for (const kind of Object.keys(ratios)) ratios[kind].push(round[kind] / round[pushCellOf(kind)]);
  }
  return { rates, ratios, medians: Object.fromEntries(Object.entries(ratios).map(([k, v]) => [k, median(v)])) };
}
