// Do two fdatasyncs in flight on the same file overlap on this disk? Raw loops on a preallocated
// file, `lanes` concurrent write + fdatasync loops of `frames` 148 B frames each:
//   64x1: one lane of 64 (the group commit today)      32x2: the same 64 records split over two lanes
//   64x2: two lanes of 64 (twice the records in flight)  16x4: 64 records over four lanes
// If syncs overlapped, 32x2 would match 64x1; it is what pipelining batches in the core would do.
// Usage: node bench/experiments/concurrent-fsync.mjs [rounds=3]
import { closeSync, fdatasync, fdatasyncSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const fdatasyncAsync = promisify(fdatasync);
const dir = mkdtempSync(join(tmpdir(), 'pq-fsync-'));
const rounds = Number(process.argv[2] ?? 3);

async function run(frames, lanes, ms) {
  const path = join(dir, 'f.bin');
  const fd = openSync(path, 'w+');
  const zeros = Buffer.alloc(1 << 20);
  for (let o = 0; o < 128 << 20; o += zeros.length) writeSync(fd, zeros, 0, zeros.length, o);
  fdatasyncSync(fd);
  const buf = Buffer.alloc(148 * frames, 7);
  let pos = 0;
  let n = 0;
  const t0 = performance.now();
  const lane = async () => {
    while (performance.now() - t0 < ms) {
      writeSync(fd, buf, 0, buf.length, pos);
      pos += buf.length;
      await fdatasyncAsync(fd);
      n += frames;
    }
  };
  await Promise.all(Array.from({ length: lanes }, lane));
  const rate = n / ((performance.now() - t0) / 1000);
  closeSync(fd);
  rmSync(path);
  return `${(rate / 1000).toFixed(0)}k/s`;
}

for (let r = 0; r < rounds; r++) {
  console.log(
    `64x1 ${await run(64, 1, 1000)}  32x2 ${await run(32, 2, 1000)}  64x2 ${await run(64, 2, 1000)}  16x4 ${await run(16, 4, 1000)}`,
  );
}
rmSync(dir, { recursive: true, force: true });
