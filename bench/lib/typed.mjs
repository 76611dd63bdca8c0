// Typed queues and batches beside raw bytes and single items (section `typed` of bench/run.mjs).
// 64 producers run the README's serial `await push` loop; the consumer is `process()` with
// concurrency 64 (single items) or `process(handler, { batch: { size: 64 }, concurrency: 4 })`
// (four batch handlers: one alone gets one turn of the event loop for each of the 64 producers'
// and fell behind them on MemStore, measured at 0.2× of single items). *bytes* pushes the JSON text of a small order as bytes and the handler reads
// `item.bytes`; *json* pushes the order object through `json()` and the handler reads
// `item.value`. On LogStore (default options: fsync-bound) and on MemStore under `none` (CPU-bound,
// where a codec's cost shows). Each round runs every cell on a fresh store, the order rotated;
// ratios are taken within a round against the bytes cell of the same store.
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { Builder, LogStore, MemStore, json } from '../../dist/index.js';

export const TYPED_PRODUCERS = 64;
const ORDER = { id: 123456, sku: 'tea-earl-grey-250g', qty: 3, note: 'leave at the door' };
const ORDER_BYTES = new TextEncoder().encode(JSON.stringify(ORDER));

/** [id, store, kind]: kind is bytes, json, or batch (bytes consumed in batches of 64). */
export const TYPED_CELLS = [
  ['logstore/bytes', 'logstore', 'bytes'],
  ['logstore/json', 'logstore', 'json'],
  ['logstore/batch64', 'logstore', 'batch'],
  ['memstore/bytes', 'memstore', 'bytes'],
  ['memstore/json', 'memstore', 'json'],
  ['memstore/batch64', 'memstore', 'batch'],
];

async function runCell(scratch, [, storeKind, kind], budgetMs) {
  const dir = mkdtempSync(join(scratch, 'typed-'));
  try {
    const store = storeKind === 'logstore' ? await LogStore.open(join(dir, 'q')) : new MemStore();
    let builder = new Builder(store);
    if (storeKind === 'memstore') builder = builder.durability('none');
    if (kind === 'json') builder = builder.codec(json());
    const [tx, rx] = await builder.open();
    let handled = 0;
    let sink = 0;
    const stop = new AbortController();
    const loop =
      kind === 'batch'
        ? rx.process(
            async (items) => {
              for (const item of items) sink += item.bytes.length;
              handled += items.length;
            },
            { batch: { size: 64 }, concurrency: 4, signal: stop.signal },
          )
        : rx.process(
            async (item) => {
              sink += kind === 'json' ? item.value.qty : item.bytes.length;
              handled++;
            },
            { concurrency: 64, signal: stop.signal },
          );
    const payload = kind === 'json' ? ORDER : ORDER_BYTES;
    const deadline = performance.now() + budgetMs;
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: TYPED_PRODUCERS }, async () => {
        while (performance.now() < deadline) await tx.push(payload);
      }),
    );
    const seconds = (performance.now() - t0) / 1000;
    stop.abort();
    await loop;
    await tx.close();
    if (sink < 0) throw new Error('unreachable');
    return handled / seconds;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function runTypedRounds({ scratch, rounds, budgetMs }) {
  const rates = Object.fromEntries(TYPED_CELLS.map(([id]) => [id, []]));
  for (let round = 0; round < rounds; round++) {
    for (let k = 0; k < TYPED_CELLS.length; k++) {
      const cell = TYPED_CELLS[(k + round) % TYPED_CELLS.length];
      rates[cell[0]].push(await runCell(scratch, cell, budgetMs));
    }
  }
  const ratios = {};
  for (const [id, store, kind] of TYPED_CELLS) {
    if (kind === 'bytes') continue;
    ratios[id] = rates[id].map((r, i) => r / rates[`${store}/bytes`][i]);
  }
  return { rates, ratios };
}
