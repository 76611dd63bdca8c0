// The README's consumer loop (`for await (const item of rx)` + `await item.ack()`) over the
// consumer's own iterator, against the same loop over an async generator wrapping `reserve()`
// (how the iterator was written before: a `yield` adds an await and a request queue per item).
// A MemStore backlog drained under `none`, 128 B, interleaved rounds; the ratio is per round.
// Usage: npm run build && node bench/experiments/for-await.mjs [rounds=12] [items=100000]
import { Builder, MemStore } from '../../dist/index.js';
import { median } from '../lib/stats.mjs';

const rounds = Number(process.argv[2] ?? 12);
const items = Number(process.argv[3] ?? 100_000);
const payload = new Uint8Array(128).fill(7);

async function* generatorOver(rx) {
  for (;;) {
    const item = await rx.reserve();
    if (!item) return;
    yield item;
  }
}

async function drain(kind) {
  const [tx, rx] = await new Builder(new MemStore()).durability('none').open();
  for (let i = 0; i < items; i += 1000) await tx.pushMany(Array.from({ length: Math.min(1000, items - i) }, () => payload));
  const source = kind === 'iterator' ? rx : generatorOver(rx);
  let n = 0;
  const t0 = performance.now();
  for await (const item of source) {
    try {
      n++;
      await item.ack();
    } finally {
      if (!item.settled) await item.nack();
    }
    if (n === items) break;
  }
  const rate = n / ((performance.now() - t0) / 1000);
  await rx.close();
  return rate;
}

const rates = { iterator: [], generator: [] };
const ratios = [];
for (let r = 0; r < rounds; r++) {
  const order = r % 2 === 0 ? ['iterator', 'generator'] : ['generator', 'iterator'];
  const got = {};
  for (const kind of order) got[kind] = await drain(kind);
  rates.iterator.push(got.iterator);
  rates.generator.push(got.generator);
  ratios.push(got.iterator / got.generator);
}
const k = (x) => `${Math.round(median(x) / 1000)} k/s`;
console.log(
  `for await + await ack, MemStore backlog of ${items}, ${rounds} rounds: consumer's iterator ${k(rates.iterator)}, async generator over reserve() ${k(rates.generator)}; ratio ${median(ratios).toFixed(2)}× (${Math.min(...ratios).toFixed(2)}×–${Math.max(...ratios).toFixed(2)}×)`,
);
