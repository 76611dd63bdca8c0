// Priorities, delays and competing consumers beside the plain cells of the same run (section
// `scheduling` of bench/run.mjs). LogStore, default options (`new Builder(store).open()`), 64
// producers each running the README's serial `await push` loop, 128 B payloads, as the `readme`
// section does. Push only: how fast pushes with a priority or a delay are stored. End to end:
// `process(handler, { concurrency: 64 })` on the queue's consumer, or on two forks of 32 each,
// while the producers run; the rate counts the items handled meanwhile. A delayed push asks for
// 1–5 ms, so its items fall due while the run goes on: the cell pays the schedule's heap, timer
// and lanes, not a wait. Each round runs every cell on a fresh store, the order rotated; each
// ratio is taken against the plain cell of the same kind in the same round.
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { Builder, LogStore } from '../../dist/index.js';
import { median } from './stats.mjs';

export const SCHEDULING_PRODUCERS = 64;
export const SCHEDULING_PAYLOAD_BYTES = 128;

/** What each producer passes to push(), by cell: undefined for a plain push. */
const PUSH_OPTIONS = {
  plain: () => undefined,
  // Four priorities, evenly spread.
  priorities: (n) => ({ priority: n % 4 }),
  delays: (n) => ({ delayMs: 1 + (n % 5) }),
};

/** The cells: [id, kind, push options, consumers]. */
export const SCHEDULING_CELLS = [
  ['push/plain', 'push', 'plain', 0],
  ['push/priorities', 'push', 'priorities', 0],
  ['push/delays', 'push', 'delays', 0],
  ['e2e/plain', 'e2e', 'plain', 1],
  ['e2e/priorities', 'e2e', 'priorities', 1],
  ['e2e/delays', 'e2e', 'delays', 1],
  ['e2e/two consumers', 'e2e', 'plain', 2],
];

async function runCell(scratch, [, kind, options, consumers], budgetMs) {
  const dir = mkdtempSync(join(scratch, 'sched-'));
  try {
    const [tx, rx] = await new Builder(await LogStore.open(join(dir, 'q'))).open();
    const payload = new Uint8Array(SCHEDULING_PAYLOAD_BYTES).fill(7);
    const pushOptions = PUSH_OPTIONS[options];
    let handled = 0;
    let pushed = 0;
    const stop = new AbortController();
    const handler = async () => {
      handled++;
    };
    const loops =
      kind === 'push'
        ? []
        : consumers === 1
          ? [rx.process(handler, { concurrency: 64, signal: stop.signal })]
          : [rx.fork(), rx.fork()].map((c) => c.process(handler, { concurrency: 32, signal: stop.signal }));
    const deadline = performance.now() + budgetMs;
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: SCHEDULING_PRODUCERS }, async () => {
        while (performance.now() < deadline) {
          await tx.push(payload, pushOptions(pushed));
          pushed++;
        }
      }),
    );
    const seconds = (performance.now() - t0) / 1000;
    const msgs = kind === 'push' ? pushed : handled;
    stop.abort();
    await Promise.all(loops);
    await tx.close();
    return msgs / seconds;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** `rounds` rounds of every cell; the rates per cell and the per-round ratios to plain. */
export async function runSchedulingRounds({ scratch, rounds, budgetMs }) {
  const rates = Object.fromEntries(SCHEDULING_CELLS.map(([id]) => [id, []]));
  for (let round = 0; round < rounds; round++) {
    for (let k = 0; k < SCHEDULING_CELLS.length; k++) {
      const cell = SCHEDULING_CELLS[(k + round) % SCHEDULING_CELLS.length];
      rates[cell[0]].push(await runCell(scratch, cell, budgetMs));
    }
  }
  const ratios = {};
  for (const [id, kind] of SCHEDULING_CELLS) {
    if (id === `${kind}/plain`) continue;
    ratios[id] = rates[id].map((r, i) => r / rates[`${kind}/plain`][i]);
  }
  return { rates, ratios, medians: Object.fromEntries(Object.entries(rates).map(([id, s]) => [id, median(s)])) };
}
