// How far the in-memory queue is from the least any queue with its contract can do, one serial
// producer and the README's consumer, 128 B, interleaved rounds (ratios per round, median):
//
// - simple: the baseline of the per-item section (bench/lib/baseline.mjs): keeps the caller's
//   buffer, acks synchronously, no store.
// - floor: the least work our contract asks for, written out with nothing else: the payload
//   copied into a slab (the caller may reuse its buffer at once), a seq, a store call per push and
//   per ack into arrays (MemStore's own work, inlined), a reservation object that settles once, and
//   the promise `push()`, `reserve()` and `ack()` each return. No capacity, leases, delivery counts,
//   drop guard, statistics, per-turn budget or failure handling.
// - floor-no-copy, floor-no-ack-await: the floor without the copy (it keeps the caller's buffer,
//   as the simplest queue does), and with the consumer not awaiting `ack()` (as the simplest
//   queue's synchronous ack): what those two obligations cost.
// - memstore: the queue over MemStore under `none`, as the per-item section runs it.
//
// Usage: npm run build && node bench/experiments/contract-floor.mjs [rounds=10] [ms=500]
import { Builder, MemStore } from '../../dist/index.js';
import { SimpleQueue } from '../lib/baseline.mjs';
import { median } from '../lib/stats.mjs';

const rounds = Number(process.argv[2] ?? 10);
const budgetMs = Number(process.argv[3] ?? 500);
const payload = new Uint8Array(128).fill(7);
const last = new Uint8Array(1);

const SLAB_BYTES = 256 * 1024;
const DONE = Promise.resolve();

class FloorReserved {
  #queue;
  #entry;
  #settled = false;
  constructor(queue, entry) {
    this.#queue = queue;
    this.#entry = entry;
  }
  get bytes() {
    return this.#entry.bytes;
  }
  ack() {
    if (this.#settled) return Promise.reject(new Error('already settled'));
    this.#settled = true;
    return this.#queue.ack(this.#entry);
  }
}

/** The contract's least work (see the head of this file). */
class FloorQueue {
  #copy;
  #slab = new Uint8Array(SLAB_BYTES);
  #offset = 0;
  #nextSeq = 1;
  // The store: items in seq order, acked ones counted off the head.
  #stored = [];
  #storedHead = 0;
  // The ready items and the waiting consumers.
  #ready = [];
  #readyHead = 0;
  #waiters = [];
  constructor(copy) {
    this.#copy = copy;
  }
  #own(bytes) {
    if (!this.#copy) return bytes;
    const length = bytes.byteLength;
    if (this.#offset + length > this.#slab.length) {
      this.#slab = new Uint8Array(SLAB_BYTES);
      this.#offset = 0;
    }
    this.#slab.set(bytes, this.#offset);
    const own = new Uint8Array(this.#slab.buffer, this.#offset, length);
    this.#offset += length;
    return own;
  }
  push(bytes) {
    const entry = { seq: this.#nextSeq++, bytes: this.#own(bytes) };
    this.#stored.push(entry);
    const waiter = this.#waiters.shift();
    if (waiter) waiter(new FloorReserved(this, entry));
    else this.#ready.push(entry);
    return Promise.resolve(entry.seq);
  }
  reserve() {
    if (this.#readyHead === this.#ready.length) return new Promise((resolve) => this.#waiters.push(resolve));
    const entry = this.#ready[this.#readyHead++];
    if (this.#readyHead === this.#ready.length) {
      this.#ready = [];
      this.#readyHead = 0;
    }
    return Promise.resolve(new FloorReserved(this, entry));
  }
  ack(entry) {
    // In-order acks only move the head, as MemStore's do.
    if (this.#stored[this.#storedHead] === entry) this.#storedHead++;
    if (this.#storedHead > 1024 && this.#storedHead * 2 > this.#stored.length) {
      this.#stored = this.#stored.slice(this.#storedHead);
      this.#storedHead = 0;
    }
    return DONE;
  }
}

// The loop is written out once per queue class on purpose: one copy shared by every cell would
// go polymorphic and slow the fastest one down (as bench/lib/baseline.mjs notes).
async function simpleLoop(q) {
  let consumed = 0;
  const t0 = performance.now();
  const deadline = t0 + budgetMs;
  const producer = (async () => {
    while (performance.now() < deadline) for (let k = 0; k < 256; k++) await q.push(payload);
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

async function floorLoop(q, awaitAck) {
  let consumed = 0;
  const t0 = performance.now();
  const deadline = t0 + budgetMs;
  const producer = (async () => {
    while (performance.now() < deadline) for (let k = 0; k < 256; k++) await q.push(payload);
    await q.push(last);
  })();
  for (;;) {
    const item = await q.reserve();
    if (awaitAck) await item.ack();
    else item.ack();
    if (item.bytes.length === last.length) break;
    consumed++;
  }
  await producer;
  return consumed / ((performance.now() - t0) / 1000);
}

async function queueLoop(tx, rx) {
  let consumed = 0;
  const t0 = performance.now();
  const deadline = t0 + budgetMs;
  const producer = (async () => {
    while (performance.now() < deadline) for (let k = 0; k < 256; k++) await tx.push(payload);
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

const cells = {
  simple: () => simpleLoop(new SimpleQueue()),
  floor: () => floorLoop(new FloorQueue(true), true),
  'floor-no-copy': () => floorLoop(new FloorQueue(false), true),
  'floor-no-ack-await': () => floorLoop(new FloorQueue(true), false),
  memstore: async () => {
    const [tx, rx] = await new Builder(new MemStore()).durability('none').open();
    const rate = await queueLoop(tx, rx);
    await rx.close();
    return rate;
  },
};
const names = Object.keys(cells);
const rates = Object.fromEntries(names.map((n) => [n, []]));
const ratios = {
  'floor/simple': [],
  'floor-no-copy/simple': [],
  'floor-no-ack-await/simple': [],
  'memstore/simple': [],
  'memstore/floor': [],
};
for (let round = 0; round < rounds; round++) {
  const r = {};
  for (let k = 0; k < names.length; k++) {
    const name = names[(k + round) % names.length];
    r[name] = await cells[name]();
    rates[name].push(r[name]);
  }
  for (const key of Object.keys(ratios)) {
    const [a, b] = key.split('/');
    if (r[a] === undefined || r[b] === undefined) throw new Error(`no cell for ${key}`);
    ratios[key].push(r[a] / r[b]);
  }
}
const k = (x) => `${(x / 1000).toFixed(0)} k/s`;
for (const n of names)
  console.log(`${n.padEnd(18)} ${k(median(rates[n])).padStart(10)}  (${k(Math.min(...rates[n]))} – ${k(Math.max(...rates[n]))})`);
for (const [key, xs] of Object.entries(ratios))
  console.log(`${key.padEnd(25)} ${median(xs).toFixed(3)}  (${Math.min(...xs).toFixed(3)} – ${Math.max(...xs).toFixed(3)})`);
