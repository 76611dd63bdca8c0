// What an fdatasync costs on this machine's disk as a function of the CPU work between one sync's
// return and the next write: the raw group loop (64 pre-built 160 B frames per write(2), then one
// fdatasync, a preallocated file) with a busy wait of `gap` µs on the calling thread after each
// sync, for the sync on the calling thread (`fdatasyncSync`) and in the threadpool (`fdatasync`).
//
// A queue spends its own CPU there: resolving the 64 pushes, the producers' next pushes, framing
// and CRC, and, with a consumer, handing items out and storing acks. A loop that does nothing
// between syncs is what the raw references of the `limits` section measure; this shows what the
// same loop gets once it does the work of a queue, and so which gaps the device punishes.
// Rounds alternate the gaps' order; per gap it prints the median over the rounds of the mean sync
// time and of the cycle (write + sync + gap), and the records per second that cycle gives.
// Usage: node bench/experiments/device-gap.mjs [rounds=5] [cycles=1500] [gaps=0,10,20,30,40,50,75,100,150,250]
import { closeSync, fdatasync, fdatasyncSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { median } from '../lib/stats.mjs';

const rounds = Number(process.argv[2] ?? 5);
const cycles = Number(process.argv[3] ?? 1500);
const gaps = (process.argv[4] ?? '0,10,20,30,40,50,75,100,150,250').split(',').map(Number);
const BATCH = 64;
const FRAME_BYTES = 160;

const syncAsync = (fd) => new Promise((resolve, reject) => fdatasync(fd, (e) => (e ? reject(e) : resolve())));

/** Mean sync time and mean cycle (µs) over `cycles` cycles with a busy gap of `gapUs` after each sync. */
async function loop(dir, gapUs, mainThread) {
  const path = join(dir, `gap-${gapUs}-${mainThread}.bin`);
  const fd = openSync(path, 'w+', 0o600);
  try {
    const buf = Buffer.alloc(BATCH * FRAME_BYTES, 7);
    const bytes = buf.length * cycles;
    const zeros = Buffer.alloc(1 << 20);
    for (let off = 0; off < bytes; off += zeros.length) writeSync(fd, zeros, 0, Math.min(zeros.length, bytes - off), off);
    fdatasyncSync(fd);
    let syncMs = 0;
    let pos = 0;
    const t0 = performance.now();
    for (let i = 0; i < cycles; i++) {
      writeSync(fd, buf, 0, buf.length, pos);
      pos += buf.length;
      const s = performance.now();
      if (mainThread) fdatasyncSync(fd);
      else await syncAsync(fd);
      syncMs += performance.now() - s;
      const until = performance.now() + gapUs / 1000;
      while (performance.now() < until);
    }
    return { sync: (syncMs / cycles) * 1000, cycle: ((performance.now() - t0) / cycles) * 1000 };
  } finally {
    closeSync(fd);
    rmSync(path, { force: true });
  }
}

const scratch = mkdtempSync(join(tmpdir(), 'pq-device-gap-'));
try {
  const runs = new Map(gaps.flatMap((g) => [true, false].map((m) => [`${g}/${m}`, { sync: [], cycle: [] }])));
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 === 0 ? gaps : [...gaps].reverse();
    for (const gap of order)
      for (const mainThread of [true, false]) {
        const res = await loop(scratch, gap, mainThread);
        const run = runs.get(`${gap}/${mainThread}`);
        run.sync.push(res.sync);
        run.cycle.push(res.cycle);
      }
    process.stderr.write(`round ${r + 1}/${rounds}\n`);
  }
  console.log(`raw group loop, ${BATCH} × ${FRAME_BYTES} B per write + one fdatasync; ${rounds} rounds of ${cycles} cycles (medians)`);
  console.log('  gap µs | fdatasyncSync: sync µs  cycle µs  k rec/s | threadpool: sync µs  cycle µs  k rec/s');
  const f = (x, w) => x.toFixed(0).padStart(w);
  for (const gap of gaps) {
    const a = runs.get(`${gap}/true`);
    const b = runs.get(`${gap}/false`);
    const [sa, ca, sb, cb] = [a.sync, a.cycle, b.sync, b.cycle].map(median);
    console.log(
      `  ${f(gap, 6)} | ${f(sa, 22)} ${f(ca, 9)} ${f((BATCH / ca) * 1000, 8)} | ${f(sb, 19)} ${f(cb, 9)} ${f((BATCH / cb) * 1000, 8)}`,
    );
  }
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
