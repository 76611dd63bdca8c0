// The per-item baselines (section `baseline` of bench/run.mjs), in one process, in interleaved
// rounds, with no harness between the loop and the queue: one producer's serial `await push`
// and a consumer's `await reserve()` + ack, 128 B payloads, the code a README reader writes.
//
// - simple: the fastest simple async queue we know of (array-backed, `await push`, `await
//   reserve`, synchronous ack; about 15 lines, below). It keeps the caller's buffer instead of
//   copying it, which our queue does so that the caller may reuse its buffer: a copy with
//   `slice()` (one ArrayBuffer per item) takes it from about 8 M/s to about 1.1 M/s here, so a
//   copying baseline would flatter us. Ours copies into a slab (src/lib/bytes.ts), about 50 ns.
// - memstore: the queue over MemStore under `durability('none')`, `await item.ack()`.
// - logstore-none: the queue over LogStore under `durability('none')`, `await item.ack()`.
// - raw-write-per-push: `fs.writeSync` of one frame per call, the floor of a `none` push that
//   must reach the OS before it resolves, one write per push (no ack written).
// - raw-batched: `fs.writeSync` of 64 frames per call, no sync: what any log on this disk can
//   take when it batches.
// Each round runs every cell once, the order rotated; ratios are taken within a round.
import { closeSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { Builder, LogStore, MemStore } from '../../dist/index.js';

export const BASELINE_PAYLOAD_BYTES = 128;

/** The fastest simple async queue: the baseline the in-memory queue is measured against. */
export class SimpleQueue {
  #items = [];
  #head = 0;
  #waiters = [];
  async push(bytes) {
    const waiter = this.#waiters.shift();
    if (waiter) waiter({ bytes, ack() {} });
    else this.#items.push(bytes);
  }
  reserve() {
    if (this.#head === this.#items.length) return new Promise((resolve) => this.#waiters.push(resolve));
    const bytes = this.#items[this.#head++];
    if (this.#head === this.#items.length) {
      this.#items = [];
      this.#head = 0;
    }
    return Promise.resolve({ bytes, ack() {} });
  }
}

const payload = new Uint8Array(BASELINE_PAYLOAD_BYTES).fill(7);

/** The last push: a payload of another length, which tells the consumer the producer is done. */
const last = new Uint8Array(1);

// The loop is written out twice on purpose: one copy shared by every cell would see several
// queue classes at its call sites, go polymorphic after the first round and slow the simple queue
// down to about the others' speed (measured: 1.35 M/s in the first round, 0.39 M/s after).

/** One producer's serial push loop beside one consumer's reserve + synchronous ack, for `budgetMs`. */
async function simpleEndToEnd(q, budgetMs) {
  let consumed = 0;
  const t0 = performance.now();
  const deadline = t0 + budgetMs;
  const producer = (async () => {
    while (performance.now() < deadline) {
      // Check the clock once per 256 pushes: performance.now() costs about as much as a push.
      for (let k = 0; k < 256; k++) await q.push(payload);
    }
    await q.push(last);
  })();
  for (;;) {
    const item = await q.reserve();
    item.ack();
    if (item.bytes.length === last.length) break;
    consumed++;
  }
  await producer;
  return consumed / ((performance.now() - t0) / 1000);
}

/** The same loop over our queue, with `await item.ack()`. */
async function queueEndToEnd(tx, rx, budgetMs) {
  let consumed = 0;
  const t0 = performance.now();
  const deadline = t0 + budgetMs;
  const producer = (async () => {
    while (performance.now() < deadline) {
      for (let k = 0; k < 256; k++) await tx.push(payload);
    }
    await tx.push(last);
  })();
  for (;;) {
    const item = await rx.reserve();
    await item.ack();
    if (item.bytes.length === last.length) break;
    consumed++;
  }
  await producer;
  return consumed / ((performance.now() - t0) / 1000);
}

function rawWrites(dir, frameBytes, perWrite, budgetMs) {
  const path = join(dir, `raw-${perWrite}.bin`);
  const fd = openSync(path, 'w', 0o600);
  try {
    const buf = Buffer.alloc(frameBytes * perWrite, 7);
    const t0 = performance.now();
    const deadline = t0 + budgetMs;
    let pos = 0;
    let n = 0;
    while (performance.now() < deadline) {
      for (let k = 0; k < 64; k++) {
        writeSync(fd, buf, 0, buf.length, pos);
        pos += buf.length;
      }
      n += 64 * perWrite;
    }
    return n / ((performance.now() - t0) / 1000);
  } finally {
    closeSync(fd);
    rmSync(path, { force: true });
  }
}

export const BASELINE_CELLS = ['simple', 'memstore', 'logstore-none', 'raw-write-per-push', 'raw-batched'];

/** One cell of the per-item baselines on a fresh store or file; returns msgs/s. */
export async function runBaselineCell(cell, scratch, frameBytes, budgetMs) {
  if (cell === 'simple') {
    return simpleEndToEnd(new SimpleQueue(), budgetMs);
  }
  if (cell === 'raw-write-per-push' || cell === 'raw-batched') {
    const dir = mkdtempSync(join(scratch, 'baseline-raw-'));
    try {
      return rawWrites(dir, frameBytes, cell === 'raw-batched' ? 64 : 1, budgetMs);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
  const dir = mkdtempSync(join(scratch, 'baseline-'));
  try {
    const store = cell === 'memstore' ? new MemStore() : await LogStore.open(join(dir, 'q'));
    const [tx, rx] = await new Builder(store).durability('none').open();
    const rate = await queueEndToEnd(tx, rx, budgetMs);
    await rx.close();
    return rate;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function runBaselineRounds({ scratch, rounds, budgetMs, frameBytes }) {
  const rates = Object.fromEntries(BASELINE_CELLS.map((c) => [c, []]));
  const ratios = { 'memstore/simple': [], 'logstore-none/raw-batched': [], 'logstore-none/raw-write-per-push': [] };
  for (let round = 0; round < rounds; round++) {
    const r = {};
    for (let k = 0; k < BASELINE_CELLS.length; k++) {
      const cell = BASELINE_CELLS[(k + round) % BASELINE_CELLS.length];
      r[cell] = await runBaselineCell(cell, scratch, frameBytes, budgetMs);
      rates[cell].push(r[cell]);
    }
    for (const key of Object.keys(ratios)) {
      const [a, b] = key.split('/');
      ratios[key].push(r[a] / r[b]);
    }
  }
  return { rates, ratios };
}
