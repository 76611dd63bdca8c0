// MemStore end to end (push + reserve + ack, 128 B payloads) beside a bare array-backed async
// queue doing the same work, in the same run. Prints msgs/s and the ratio.
// Usage: npm run build && node bench/memstore.mjs [--quick]  (npm run bench runs the same comparison, and more)
import b from 'benny';
import { Builder, MemStore } from '../dist/index.js';
import { BareQueue } from './lib/bare-queue.mjs';

const quick = process.argv.includes('--quick');
const MESSAGES = 4096;
const payload = new Uint8Array(128).fill(7);
const options = quick ? { minSamples: 5, maxTime: 1 } : { minSamples: 20, maxTime: 4 };

/** Move MESSAGES items through `tx`/`rx` with `producers` concurrent producers and one consumer. */
async function endToEnd(tx, rx, producers) {
  const per = MESSAGES / producers;
  const produce = async () => {
    for (let i = 0; i < per; i++) await tx.push(payload);
  };
  const consume = async () => {
    for (let i = 0; i < MESSAGES; i++) {
      const item = rx.tryReserve() ?? (await rx.reserve());
      await item.ack();
    }
  };
  const work = [consume()];
  for (let p = 0; p < producers; p++) work.push(produce());
  await Promise.all(work);
}

const results = {};
for (const producers of [1, 16]) {
  const [tx, rx] = await new Builder(new MemStore()).durability('none').open();
  const bare = new BareQueue();
  await b.suite(
    `end to end, 128 B, ${producers} producer(s), ${MESSAGES} msgs per op`,
    b.add('bare array queue', async () => endToEnd(bare, bare, producers), options),
    b.add('MemStore queue', async () => endToEnd(tx, rx, producers), options),
    b.cycle(),
    b.complete((summary) => {
      const rate = Object.fromEntries(summary.results.map((r) => [r.name, r.ops * MESSAGES]));
      const ratio = rate['MemStore queue'] / rate['bare array queue'];
      results[producers] = { bare: rate['bare array queue'], memstore: rate['MemStore queue'], ratio };
      console.log(
        `  bare ${Math.round(rate['bare array queue']).toLocaleString()} msgs/s, MemStore ${Math.round(rate['MemStore queue']).toLocaleString()} msgs/s, ratio ${(ratio * 100).toFixed(1)} % (target >= 50 %)`,
      );
    }),
  );
  await tx.close();
}
console.log(JSON.stringify({ node: process.version, memstoreVsBare: results }));
