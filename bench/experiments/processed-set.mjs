// What a processed set costs per item. A backlog of N items of 128 B in a LogStore (default
// options: `group` pushes, `lazy` acks) is consumed by `process()` at concurrency 1 and 64, with
// a handler that does nothing, bare and wrapped by effectivelyOnce over LogProcessedSet (`group`,
// the default, and `none`); and a handler that inserts one row into a better-sqlite3 database
// (WAL, synchronous=FULL), bare (its own transaction) and under SqliteProcessedSet (the row and
// the record in one transaction). Rounds interleave the variants; medians are printed.
// Usage: npm run build && node bench/experiments/processed-set.mjs [items=20000] [rounds=3]
import { createRequire } from 'node:module';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Builder, LogProcessedSet, LogStore, effectivelyOnce } from '../../dist/index.js';
import { SqliteProcessedSet } from '../../dist/stores/sqlite/index.js';

const Database = createRequire(import.meta.url)('better-sqlite3');
const items = Number(process.argv[2] ?? 20000);
const rounds = Number(process.argv[3] ?? 3);
const payload = new Uint8Array(128).fill(97);

function openDb(dir) {
  const db = new Database(join(dir, 'app.db'));
  db.exec('PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; CREATE TABLE rows (seq INTEGER)');
  return db;
}

const VARIANTS = {
  'no-op handler': async () => ({ handler: () => () => {} }),
  'no-op, LogProcessedSet group': async (dir) => {
    const set = await LogProcessedSet.open(join(dir, 'set'));
    return { handler: (rx) => effectivelyOnce(rx, set, () => {}), close: () => set.close() };
  },
  'no-op, LogProcessedSet none': async (dir) => {
    const set = await LogProcessedSet.open(join(dir, 'set'), { durability: 'none' });
    return { handler: (rx) => effectivelyOnce(rx, set, () => {}), close: () => set.close() };
  },
  'sqlite insert': async (dir) => {
    const db = openDb(dir);
    const insert = db.prepare('INSERT INTO rows (seq) VALUES (?)');
    return { handler: () => (item) => void insert.run(item.seq), close: () => db.close() };
  },
  'sqlite insert, SqliteProcessedSet': async (dir) => {
    const db = openDb(dir);
    const set = new SqliteProcessedSet(db);
    const insert = db.prepare('INSERT INTO rows (seq) VALUES (?)');
    return { handler: (rx) => effectivelyOnce(rx, set, (item) => void insert.run(item.seq)), close: () => db.close() };
  },
};

async function run(name, concurrency) {
  const dir = mkdtempSync(join(tmpdir(), 'pq-bench-processed-'));
  try {
    const [tx, rx] = await new Builder(await LogStore.open(join(dir, 'q'))).open();
    for (let i = 0; i < items; i += 1000) await tx.pushMany(Array.from({ length: Math.min(1000, items - i) }, () => payload));
    const variant = await VARIANTS[name](dir);
    const handler = variant.handler(rx);
    const stop = new AbortController();
    void rx.onIdle().then(() => stop.abort());
    const start = performance.now();
    await rx.process(handler, { concurrency, signal: stop.signal });
    const ms = performance.now() - start;
    if (handler.flush) await handler.flush();
    await rx.close();
    await variant.close?.();
    return (items / ms) * 1000;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
for (const concurrency of [1, 64]) {
  const rates = Object.fromEntries(Object.keys(VARIANTS).map((k) => [k, []]));
  for (let r = 0; r < rounds; r++) for (const name of Object.keys(VARIANTS)) rates[name].push(await run(name, concurrency));
  console.log(`concurrency ${concurrency}, ${items} items, medians of ${rounds} rounds:`);
  for (const [name, xs] of Object.entries(rates)) {
    const rate = median(xs);
    console.log(`  ${name.padEnd(36)} ${(rate / 1000).toFixed(1).padStart(7)} k items/s  ${(1e6 / rate).toFixed(1).padStart(8)} µs/item`);
  }
}
