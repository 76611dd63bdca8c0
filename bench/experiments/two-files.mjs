// Does an fdatasync on a second file run alongside one on the first? This is the group end-to-end
// cycle in raw form: 64 item frames (148 B) to the segment and 64 acks (one 36 B ACK record) to the
// cursor, each followed by fdatasync, both files preallocated:
//   one file    items + ack record in one write, one fdatasync per cycle (acks in the segment)
//   two files   the same writes to two files, both fdatasyncs in flight at once (the layout today)
//   two serial  two files, the second fdatasync after the first
//   one, twice  one file, items then fdatasync, then the ack record then fdatasync (the shape of
//               SQLite's commit pair in WAL mode: two commits to one file, one after the other)
// Usage: node bench/experiments/two-files.mjs [rounds=3]
import { closeSync, fdatasync, fdatasyncSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const fdatasyncAsync = promisify(fdatasync);
const dir = mkdtempSync(join(tmpdir(), 'pq-two-'));
const rounds = Number(process.argv[2] ?? 3);
const items = Buffer.alloc(148 * 64, 7);
const ack = Buffer.alloc(36, 9);

function prealloc(name) {
  const fd = openSync(join(dir, name), 'w+');
  const zeros = Buffer.alloc(1 << 20);
  for (let o = 0; o < 64 << 20; o += zeros.length) writeSync(fd, zeros, 0, zeros.length, o);
  fdatasyncSync(fd);
  return fd;
}

async function run(mode, ms) {
  const a = prealloc('a.bin');
  const b = prealloc('b.bin');
  let pa = 0;
  let pb = 0;
  let n = 0;
  const t0 = performance.now();
  while (performance.now() - t0 < ms) {
    if (mode === 'one-twice') {
      writeSync(a, items, 0, items.length, pa);
      pa += items.length;
      await fdatasyncAsync(a);
      writeSync(a, ack, 0, ack.length, pa);
      pa += ack.length;
      await fdatasyncAsync(a);
    } else if (mode === 'one') {
      writeSync(a, Buffer.concat([items, ack]), 0, items.length + ack.length, pa);
      pa += items.length + ack.length;
      await fdatasyncAsync(a);
    } else {
      writeSync(a, items, 0, items.length, pa);
      pa += items.length;
      writeSync(b, ack, 0, ack.length, pb);
      pb += ack.length;
      if (mode === 'two') await Promise.all([fdatasyncAsync(a), fdatasyncAsync(b)]);
      else {
        await fdatasyncAsync(a);
        await fdatasyncAsync(b);
      }
    }
    n += 64;
  }
  const rate = n / ((performance.now() - t0) / 1000);
  closeSync(a);
  closeSync(b);
  return `${(rate / 1000).toFixed(0)}k msgs/s`;
}

for (let r = 0; r < rounds; r++) {
  console.log(
    `one file ${await run('one', 1000)}  two files ${await run('two', 1000)}  two serial ${await run('serial', 1000)}  one, twice ${await run('one-twice', 1000)}`,
  );
}
rmSync(dir, { recursive: true, force: true });
