// Child process for the open-time and memory measurements (bench/run.mjs forks it).
//   build <dir> <count> clean|hold   fill a LogStore under `none` with pushMany; `clean` closes it,
//                                    `hold` reports and waits to be SIGKILLed by the parent.
//   open <dir> close|kill|drain      measure open in this fresh process (memory before/after, with
//                                    --expose-gc), then close, wait to be SIGKILLed, or ack the whole
//                                    backlog and report the disk use once compaction settled.
import { Builder, LogStore } from '../../dist/index.js';
import { diskUsage } from './disk.mjs';

const [mode, dir, arg, then] = process.argv.slice(2);
const send = (msg) => new Promise((resolve) => process.send(msg, resolve));
const mem = () => {
  globalThis.gc?.();
  const m = process.memoryUsage();
  return { rss: m.rss, heapUsed: m.heapUsed };
};

if (mode === 'build') {
  const count = Number(arg);
  const payload = new Uint8Array(Number(process.env.PQ_PAYLOAD_BYTES ?? 128)).fill(7);
  const store = await LogStore.open(dir);
  const [tx] = await new Builder(store).durability('none').open();
  const t0 = performance.now();
  const batch = new Array(4096).fill(payload);
  for (let n = 0; n < count; n += batch.length) await tx.pushMany(n + batch.length <= count ? batch : batch.slice(0, count - n));
  const seconds = (performance.now() - t0) / 1000;
  if (then === 'clean') {
    await tx.close();
    await send({ seconds, ...diskUsage(dir) });
    process.exit(0);
  }
  await send({ seconds, held: true, ...diskUsage(dir) });
  setInterval(() => {}, 1 << 30); // hold the store open until the parent's SIGKILL
} else if (mode === 'open') {
  await new Promise((r) => setTimeout(r, 50)); // let the loader settle before the baseline
  const before = mem();
  const t0 = performance.now();
  const store = await LogStore.open(dir);
  const [tx, rx] = await new Builder(store).durability('none').open();
  const openMs = performance.now() - t0;
  const t1 = performance.now();
  const first = rx.tryReserve();
  const firstReadMs = performance.now() - t1;
  const after = mem();
  const stats = rx.stats();
  const result = {
    openMs,
    firstReadMs,
    ready: stats.ready + (first ? 1 : 0),
    rssBefore: before.rss,
    rssAfter: after.rss,
    rssGrowth: after.rss - before.rss,
    heapGrowth: after.heapUsed - before.heapUsed,
    cleanShutdown: store.recovery.cleanShutdown,
  };
  if (arg === 'kill') {
    await send(result);
    setInterval(() => {}, 1 << 30);
  } else {
    if (arg === 'drain') {
      if (first) await first.ack();
      const t2 = performance.now();
      let acked = first ? 1 : 0;
      const ring = new Array(64).fill(null);
      let i = 0;
      for (let item = rx.tryReserve(); item !== null || rx.stats().ready > 0; item = rx.tryReserve()) {
        item ??= await rx.reserve();
        if (ring[i]) await ring[i];
        ring[i] = item.ack();
        i = (i + 1) % ring.length;
        acked++;
      }
      await Promise.all(ring);
      result.drainSeconds = (performance.now() - t2) / 1000;
      result.drained = acked;
      await store.settled();
      result.bytesOnDiskAfterAck = store.inspect().bytesOnDisk;
      result.drainRssAfter = mem().rss;
    } else if (first) {
      await first.nack();
    }
    await tx.close();
    Object.assign(result, { afterClose: diskUsage(dir) });
    await send(result);
    process.exit(0);
  }
}
