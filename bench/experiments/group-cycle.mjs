// Where a `group` commit cycle goes, 64 producers, 128 B, push only. Per round, back to back:
//   raw       the raw loop: write 64 pre-built frames + async fdatasync, preallocated file
//   engine    LogStore.append(64 items, sync) awaited in a loop: the engine without the queue core
//   queue     the full queue (Builder, 64 producers awaiting push), with the FileSystem and the
//             Store wrapped to time each step of a cycle
// Usage: npm run build && node bench/experiments/group-cycle.mjs [rounds=3] [ms=1500]
import { closeSync, fdatasync, fdatasyncSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { PerformanceObserver } from 'node:perf_hooks';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Builder, LogStore, nodeFileSystem } from '../../dist/index.js';
import { rawSyncLoop } from '../lib/raw.mjs';

const rounds = Number(process.argv[2] ?? 3);
const ms = Number(process.argv[3] ?? 1500);
const base = mkdtempSync(join(tmpdir(), 'pq-cycle-'));
const payload = new Uint8Array(128).fill(7);

async function engineOnly() {
  const store = await LogStore.open(mkdtempSync(join(base, 'e-')));
  let seq = (await store.open()).nextSeq;
  let n = 0;
  const t0 = performance.now();
  while (performance.now() - t0 < ms) {
    const items = new Array(64);
    for (let i = 0; i < 64; i++) items[i] = { seq: seq++, bytes: payload };
    await store.append(items, true);
    n += 64;
  }
  const rate = n / ((performance.now() - t0) / 1000);
  await store.close();
  return rate;
}

async function queue() {
  // Timestamps of one cycle: fdatasync resolved -> store.append resolved -> first producer pushes
  // again -> core calls store.append -> store calls fdatasync.
  let T = {};
  const sum = { resolve: 0, wake: 0, pushes: 0, encode: 0, n: 0 };
  const syncs = [];
  const preallocSyncs = [];
  let zerosWritten = false;
  let gcMs = 0;
  const gc = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) gcMs += e.duration;
  });
  gc.observe({ entryTypes: ['gc'] });
  const fs = {
    ...nodeFileSystem,
    write(fd, buffer, offset, length, position) {
      // The engine writes preallocation zeros in 1 MiB writes; batches here are 9.5 KB.
      if (length >= 1 << 20) zerosWritten = true;
      return nodeFileSystem.write(fd, buffer, offset, length, position);
    },
    fdatasync(fd) {
      const t = performance.now();
      if (T.syncDone && T.resolved && T.firstPush && T.append) {
        sum.resolve += T.resolved - T.syncDone;
        sum.wake += T.firstPush - T.resolved;
        sum.pushes += T.append - T.firstPush;
        sum.encode += t - T.append;
        sum.n++;
      }
      const carriesZeros = zerosWritten;
      zerosWritten = false;
      return nodeFileSystem.fdatasync(fd).then(() => {
        const done = performance.now();
        (carriesZeros ? preallocSyncs : syncs).push(done - t);
        T = { syncDone: done };
      });
    },
  };
  const inner = await LogStore.open(mkdtempSync(join(base, 'q-')), { fs });
  const store = new Proxy(inner, {
    get(target, prop) {
      if (prop === 'append') {
        return (items, sync) => {
          T.append = performance.now();
          return target.append(items, sync).then(() => {
            T.resolved = performance.now();
          });
        };
      }
      const value = target[prop];
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  const [tx] = await new Builder(store).durability('group').open();
  const deadline = performance.now() + ms;
  let pushed = 0;
  const produce = async () => {
    while (performance.now() < deadline) {
      pushed++;
      T.firstPush ??= performance.now();
      await tx.push(payload);
    }
  };
  const t0 = performance.now();
  await Promise.all(Array.from({ length: 64 }, produce));
  const wall = performance.now() - t0;
  const rate = pushed / (wall / 1000);
  gc.disconnect();
  await tx.close();
  syncs.sort((a, b) => a - b);
  const all = syncs.concat(preallocSyncs);
  const allMean = all.reduce((a, b) => a + b, 0) / all.length;
  const pre = preallocSyncs.reduce((a, b) => a + b, 0);
  const us = (x) => `${Math.round((x / sum.n) * 1000)} µs`;
  const mean = syncs.reduce((a, b) => a + b, 0) / syncs.length;
  return {
    rate,
    detail:
      `fdatasync (call to callback): all ${all.length}: mean ${Math.round(allMean * 1000)} µs; without preallocation: p50 ${Math.round(syncs[syncs.length >> 1] * 1000)} µs, mean ${Math.round(mean * 1000)} µs; ` +
      `the ${preallocSyncs.length} carrying 4 MiB of preallocated zeros: mean ${(pre / Math.max(1, preallocSyncs.length)).toFixed(1)} ms, ${((pre / wall) * 100).toFixed(0)} % of the wall time\n` +
      `  then store resolves ${us(sum.resolve)}, first producer runs ${us(sum.wake)}, 64 pushes until store.append ${us(sum.pushes)}, append until fdatasync is called ${us(sum.encode)}; GC pauses ${((gcMs / wall) * 100).toFixed(0)} % of the wall time`,
  };
}

/** Main-thread time of calling the async fdatasync (handing it to the libuv threadpool). */
async function submitCost() {
  const path = join(base, 'submit.bin');
  const fd = openSync(path, 'w+');
  const zeros = Buffer.alloc(1 << 20);
  for (let o = 0; o < 16 << 20; o += zeros.length) writeSync(fd, zeros, 0, zeros.length, o);
  fdatasyncSync(fd);
  const buf = Buffer.alloc(148 * 64, 7);
  let total = 0;
  const n = 500;
  for (let i = 0; i < n; i++) {
    writeSync(fd, buf, 0, buf.length, i * buf.length);
    let done;
    const p = new Promise((r) => (done = r));
    const t = performance.now();
    fdatasync(fd, done);
    total += performance.now() - t;
    await p;
  }
  closeSync(fd);
  rmSync(path);
  return (total / n) * 1000;
}

const k = (x) => `${(x / 1000).toFixed(0)}k/s`;
console.log(`calling the async fdatasync costs ${(await submitCost()).toFixed(0)} µs of main-thread time (mean of 500, raw)`);
for (let r = 0; r < rounds; r++) {
  const raw = await rawSyncLoop(base, { frameBytes: 148, records: 1_000_000, batch: 64, preallocate: true, budgetMs: ms });
  const engine = await engineOnly();
  const q = await queue();
  console.log(
    `round ${r + 1}: raw ${k(raw)}, engine ${k(engine)} (${((engine / raw) * 100).toFixed(0)} % of raw), queue ${k(q.rate)} (${((q.rate / raw) * 100).toFixed(0)} % of raw)`,
  );
  console.log(`  queue cycle: ${q.detail}`);
}
rmSync(base, { recursive: true, force: true });
