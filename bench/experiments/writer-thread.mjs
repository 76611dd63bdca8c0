// Would a writer thread help the log's small writes? The `none` end-to-end cell's main thread spends
// most of its time in write(2) (a profile: node --cpu-prof, `writeBuffer`), mostly the consumer's
// two small writes per item (the first delivery's record and the ack), each of which must be
// written before the call it belongs to resolves. A writer thread takes the syscall off the main
// thread but adds a hand-over per write that the caller must wait for. This measures both, serially,
// as the README's consumer meets them: a 32-byte positional write on the main thread, and the same
// write done by a worker thread the main thread hands it to through a SharedArrayBuffer
// (Atomics.notify) and waits for (Atomics.waitAsync, as an async caller would).
// Usage: node bench/experiments/writer-thread.mjs [writes=200000]
import { closeSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';

const writes = Number(process.argv[2] ?? 200_000);
const dir = mkdtempSync(join(tmpdir(), 'pq-writer-thread-'));
const buf = new Uint8Array(32).fill(5);

// Main thread: write(2) per record.
const fd = openSync(join(dir, 'main'), 'w');
let t = performance.now();
for (let i = 0; i < writes; i++) writeSync(fd, buf, 0, 32, i * 32);
const mainUs = ((performance.now() - t) * 1000) / writes;
closeSync(fd);

// Writer thread: the main thread hands each write over and waits for it.
const sab = new SharedArrayBuffer(8);
const flag = new Int32Array(sab);
const worker = new Worker(
  `const { workerData } = require('node:worker_threads');
   const { openSync, writeSync } = require('node:fs');
   const flag = new Int32Array(workerData.sab);
   const fd = openSync(workerData.path, 'w');
   const buf = new Uint8Array(32).fill(5);
   let i = 0;
   for (;;) {
     Atomics.wait(flag, 0, 0);
     if (Atomics.load(flag, 0) === 2) break;
     writeSync(fd, buf, 0, 32, (i++) * 32);
     Atomics.store(flag, 0, 0);
     Atomics.notify(flag, 1, 1);
     Atomics.store(flag, 1, 1);
     Atomics.notify(flag, 1);
   }`,
  { eval: true, workerData: { sab, path: join(dir, 'thread') } },
);
await new Promise((r) => setTimeout(r, 100));
t = performance.now();
for (let i = 0; i < writes; i++) {
  Atomics.store(flag, 1, 0);
  Atomics.store(flag, 0, 1);
  Atomics.notify(flag, 0);
  const w = Atomics.waitAsync(flag, 1, 0);
  if (w.async) await w.value;
}
const threadUs = ((performance.now() - t) * 1000) / writes;
Atomics.store(flag, 0, 2);
Atomics.notify(flag, 0);
await new Promise((r) => worker.once('exit', r));
rmSync(dir, { recursive: true, force: true });
console.log(`${writes} writes of 32 B, one at a time, waited for`);
console.log(`write(2) on the main thread          ${mainUs.toFixed(2)} µs each (main thread busy all of it)`);
console.log(
  `handed to a writer thread, waited    ${threadUs.toFixed(2)} µs each (round trip; the main thread waits, or runs other work meanwhile)`,
);
