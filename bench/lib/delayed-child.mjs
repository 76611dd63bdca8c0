// Child process for the measurement of a million delayed items (bench/run.mjs, section `delayed`).
//   build <dir> <count> delayed|plain   fill a LogStore under `none`: each item pushed with a random
//                                        delay from 1 s to 1 h (seeded), or plain; reports the
//                                        earliest not-before time, then closes the store.
//   open <dir> <earliest>                open in this fresh process on a clock stopped before the
//                                        earliest item is due: open time and memory growth (with
//                                        --expose-gc); then the clock is moved to the earliest
//                                        not-before time and the wait for that first due item is
//                                        timed; then close.
// The queue's clock is a ManualClock in both, so every item is still delayed when the store opens.
import { Builder, LogStore } from '../../dist/index.js';
import { ManualClock, Prng } from '../../dist/testing/index.js';

const [mode, dir, arg, kind] = process.argv.slice(2);
const send = (msg) => new Promise((resolve) => process.send(msg, resolve));
const mem = () => {
  globalThis.gc?.();
  const m = process.memoryUsage();
  return { rss: m.rss, heapUsed: m.heapUsed };
};
/** The time both children start their clock at (any fixed epoch time will do). */
const T0 = 1_800_000_000_000;
const DELAY_MIN_MS = 1000;
const DELAY_MAX_MS = 3_600_000;
const IN_FLIGHT_PUSHES = 4096;

if (mode === 'build') {
  const count = Number(arg);
  const payload = new Uint8Array(128).fill(7);
  const rng = new Prng(0xde1a7);
  const clock = new ManualClock(T0);
  const [tx] = await new Builder(await LogStore.open(dir)).durability('none').clock(clock).open();
  let earliest = Infinity;
  const t0 = performance.now();
  for (let n = 0; n < count; n += IN_FLIGHT_PUSHES) {
    const pushes = [];
    for (let i = n; i < Math.min(count, n + IN_FLIGHT_PUSHES); i++) {
      if (kind === 'plain') {
        pushes.push(tx.push(payload));
        continue;
      }
      const delayMs = rng.intBetween(DELAY_MIN_MS, DELAY_MAX_MS);
      earliest = Math.min(earliest, T0 + delayMs);
      pushes.push(tx.push(payload, { delayMs }));
    }
    await Promise.all(pushes);
  }
  const seconds = (performance.now() - t0) / 1000;
  await tx.close();
  await send({ seconds, earliest: kind === 'plain' ? null : earliest });
  process.exit(0);
} else if (mode === 'open') {
  await new Promise((r) => setTimeout(r, 50)); // let the loader settle before the baseline
  const earliest = arg === 'null' ? null : Number(arg);
  const clock = new ManualClock(T0);
  const before = mem();
  const t0 = performance.now();
  const [tx, rx] = await new Builder(await LogStore.open(dir)).durability('none').clock(clock).open();
  const openMs = performance.now() - t0;
  const after = mem();
  const stats = rx.stats();
  let firstDueMs = null;
  let firstSeq = null;
  if (earliest !== null) {
    const waiting = rx.reserve();
    const t1 = performance.now();
    clock.set(earliest);
    const item = await waiting;
    firstDueMs = performance.now() - t1;
    firstSeq = item?.seq ?? null;
  } else {
    const t1 = performance.now();
    const item = rx.tryReserve() ?? (await rx.reserve());
    firstDueMs = performance.now() - t1;
    firstSeq = item?.seq ?? null;
  }
  await tx.close();
  await send({
    openMs,
    firstDueMs,
    firstSeq,
    ready: stats.ready,
    delayed: stats.delayed,
    rssGrowth: after.rss - before.rss,
    heapGrowth: after.heapUsed - before.heapUsed,
    rssAfter: after.rss,
  });
  process.exit(0);
}
