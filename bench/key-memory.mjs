// What a remembered idempotency key costs in memory, queue and store together: 100,000 keyed
// pushes (keys of 38 ASCII characters), each acked, against the same run without keys.
// Run: npm run build && node --expose-gc bench/key-memory.mjs   (STORE=mem for MemStore)
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const { Builder, LogStore, MemStore } = await import(new URL('../dist/index.js', import.meta.url).href);
const N = 100_000;

async function run(keyed) {
  const dir = mkdtempSync(join(tmpdir(), 'pq-keymem-'));
  // No tail cache: it would hold recent records and hide the keys' share.
  const store = process.env.STORE === 'mem' ? new MemStore() : await LogStore.open(dir, { tailCacheBytes: 0 });
  const [tx, rx] = await new Builder(store).durability('none').idempotency({ maxKeys: N }).open();
  global.gc();
  const before = process.memoryUsage().heapUsed;
  for (let i = 0; i < N; i += 1000) {
    const pushes = [];
    for (let j = i; j < i + 1000; j++)
      pushes.push(keyed ? tx.push('x', { key: `order-${String(j).padStart(10, '0')}-abcdefghijklmnopqrstu` }) : tx.push('x'));
    await Promise.all(pushes);
    for (let j = 0; j < 1000; j++) await (rx.tryReserve() ?? (await rx.reserve())).ack();
  }
  global.gc();
  global.gc();
  const after = process.memoryUsage().heapUsed;
  await tx.close();
  rmSync(dir, { recursive: true, force: true });
  return after - before;
}

const plain = await run(false);
const keyed = await run(true);
console.log(
  JSON.stringify({
    store: process.env.STORE === 'mem' ? 'MemStore' : 'LogStore',
    keys: N,
    keyChars: 38,
    plainHeapDelta: plain,
    keyedHeapDelta: keyed,
    bytesPerKey: Math.round((keyed - plain) / N),
  }),
);
