// MemStore end to end (push + reserve + ack, 128 B payloads) beside a bare array-backed async
// queue doing the same work, in the same run. Prints msgs/s and the ratio.
// Usage: npm run build && node bench/memstore.mjs [--quick]
import b from 'benny';
import { Builder, MemStore } from '../dist/index.js';

const quick = process.argv.includes('--quick');
const MESSAGES = 4096;
const payload = new Uint8Array(128).fill(7);
const options = quick ? { minSamples: 5, maxTime: 1 } : { minSamples: 20, maxTime: 4 };

/** The baseline: the least an async queue with the same API shape can do. */
class BareQueue {
  items = [];
  head = 0;
  waiters = [];
  push(bytes) {
    const copy = bytes.slice();
    const w = this.waiters.shift();
    if (w) w({ bytes: copy, ack: () => Promise.resolve() });
    else this.items.push(copy);
    return Promise.resolve(this.head + this.items.length);
  }
  tryReserve() {
    if (this.head === this.items.length) return null;
    const bytes = this.items[this.head++];
    if (this.head === this.items.length) {
      this.items = [];
      this.head = 0;
    }
    return { bytes, ack: () => Promise.resolve() };
  }
  reserve() {
    const item = this.tryReserve();
    return item ? Promise.resolve(item) : new Promise((resolve) => this.waiters.push(resolve));
  }
}

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
