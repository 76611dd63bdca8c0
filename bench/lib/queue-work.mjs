// The harness for what benny cannot express: concurrent producers, a consumer with acks in
// flight, time-bounded runs and per-push latency. Every workload returns { msgs, seconds } and
// works on any object with the Producer / Consumer shape (the built package or BareQueue).
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { Builder, LogStore, MemStore } from '../../dist/index.js';

/** Open a fresh store of `kind` in a new temp dir under `base`. `reopen()` gives a new instance over the same data. */
export async function freshStore(kind, base) {
  const dir = kind === 'memstore' ? null : mkdtempSync(join(base, `pq-${kind}-`));
  const mem = kind === 'memstore' ? new MemStore() : null;
  const open = async () => {
    switch (kind) {
      case 'memstore':
        return mem;
      case 'logstore':
        return LogStore.open(join(dir, 'q'));
      case 'sqlitestore': {
        const { SqliteStore } = await import('../../dist/stores/sqlite/index.js');
        return SqliteStore.open(join(dir, 'q.db'));
      }
      case 'levelstore': {
        const { LevelStore } = await import('../../dist/stores/level/index.js');
        return LevelStore.open(join(dir, 'q'));
      }
      default:
        throw new Error(`unknown store ${kind}`);
    }
  };
  return {
    dir,
    open,
    cleanup: () => dir && rmSync(dir, { recursive: true, force: true }),
  };
}

/**
 * `capacity` bounds unacked items, so an end-to-end run measures the steady state, not a backlog.
 * Acks follow the cell's policy (a cell named `group` syncs its acks too, as the figures in
 * BENCHMARKS.md always did); the README cells (readme-consumer.mjs) measure the default ack policy.
 */
export async function openQueue(store, policy, capacity = Infinity, storeCallsPerTurn = undefined) {
  const builder = new Builder(store)
    .durability(policy)
    .ackDurability(policy === 'none' ? 'lazy' : policy)
    .capacity(capacity);
  if (storeCallsPerTurn !== undefined) builder.storeCallsPerTurn(storeCallsPerTurn);
  return builder.open();
}

/** `producers` concurrent producers push until `count` are pushed or `budgetMs` has passed. */
export async function pushOnly(tx, { producers, payload, count, budgetMs, latencies }) {
  const deadline = performance.now() + budgetMs;
  let pushed = 0;
  const produce = async () => {
    while (pushed < count && performance.now() < deadline) {
      pushed++;
      if (latencies) {
        const t = performance.now();
        await tx.push(payload);
        latencies.add(performance.now() - t);
      } else {
        await tx.push(payload);
      }
    }
  };
  const t0 = performance.now();
  const work = [];
  for (let p = 0; p < producers; p++) work.push(produce());
  await Promise.all(work);
  return { msgs: pushed, seconds: (performance.now() - t0) / 1000 };
}

/**
 * The `group` push-only cell over a new LogStore in a temp dir under `scratch`: 64 producers, 128 B
 * (`payload`), for `budgetMs`; pushes per second. `blockingSync` as LogStore takes it (undefined:
 * its default), `storeCallsPerTurn` as the Builder takes it (undefined: its default).
 */
export async function logStoreGroupPush(scratch, budgetMs, { payload, blockingSync, storeCallsPerTurn } = {}) {
  const dir = mkdtempSync(join(scratch, 'group-push-'));
  try {
    let builder = new Builder(await LogStore.open(join(dir, 'q'), { blockingSync })).durability('group');
    if (storeCallsPerTurn !== undefined) builder = builder.storeCallsPerTurn(storeCallsPerTurn);
    const [tx] = await builder.open();
    try {
      const r = await pushOnly(tx, { producers: 64, payload: payload ?? new Uint8Array(128).fill(7), count: 2_000_000, budgetMs });
      return r.msgs / r.seconds;
    } finally {
      await tx.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Fill a backlog fast: pushMany in batches (callers open the queue under `none`). */
export async function fill(tx, payload, count, batch = 4096) {
  const list = new Array(batch).fill(payload);
  for (let n = 0; n < count; n += batch) await tx.pushMany(n + batch <= count ? list : list.slice(0, count - n));
}

/**
 * Reserve and ack from a backlog with up to `window` acks in flight (1 = await every ack), until
 * `count` are acked or `budgetMs` has passed.
 */
export async function drain(rx, { window, count, budgetMs }) {
  const deadline = performance.now() + budgetMs;
  const ring = new Array(window).fill(null);
  let i = 0;
  let acked = 0;
  const t0 = performance.now();
  while (acked < count && performance.now() < deadline) {
    const item = rx.tryReserve() ?? (await rx.reserve());
    if (ring[i]) await ring[i];
    ring[i] = item.ack();
    i = (i + 1) % window;
    acked++;
  }
  await Promise.all(ring);
  return { msgs: acked, seconds: (performance.now() - t0) / 1000 };
}

/**
 * End to end: `producers` push (time- or count-bounded) while one consumer reserves and acks with
 * up to `window` acks in flight; done when every pushed item is acked.
 */
export async function endToEnd(tx, rx, { producers, window, payload, count, budgetMs }) {
  const deadline = performance.now() + budgetMs;
  let pushed = 0;
  let acked = 0;
  // Acks resolved (the rate counts these; `acked` counts acks issued, for the end condition).
  let resolved = 0;
  const onAcked = () => {
    resolved++;
  };
  let producersDone = false;
  const stop = new AbortController();
  const produce = async () => {
    while (pushed < count && performance.now() < deadline) {
      pushed++;
      await tx.push(payload);
    }
  };
  const consume = async () => {
    const ring = new Array(window).fill(null);
    let i = 0;
    for (;;) {
      if (producersDone && acked === pushed) break;
      let item = rx.tryReserve();
      if (!item) {
        // Once the producers are done, every remaining item is committed, so a plain wait ends.
        item = await rx.reserve(producersDone ? undefined : { signal: stop.signal }).catch(() => null);
        if (!item) continue;
      }
      if (ring[i]) await ring[i];
      ring[i] = item.ack().then(onAcked);
      i = (i + 1) % window;
      acked++;
    }
    await Promise.all(ring);
  };
  return runEndToEnd(
    produce,
    consume,
    producers,
    () => resolved,
    () => {
      producersDone = true;
      stop.abort();
    },
  );
}

/**
 * Run the producers and the consumer; the rate counts the acks issued from the start until the
 * producers stopped (time or count), so draining what is left afterwards is not measured. The
 * run still waits for the drain, so every item is acked before the queue closes.
 */
async function runEndToEnd(produce, consume, producers, ackedSoFar, stopProducing) {
  const t0 = performance.now();
  const consumer = consume();
  const work = [];
  for (let p = 0; p < producers; p++) work.push(produce());
  await Promise.all(work);
  const msgs = ackedSoFar();
  const seconds = (performance.now() - t0) / 1000;
  stopProducing();
  await consumer;
  return { msgs, seconds, total: ackedSoFar() };
}

/**
 * End to end with the consumer batching like the SQL peer (`SELECT … LIMIT 64` then one DELETE
 * per commit): take up to `batch` ready items, ack them all, wait for those acks, repeat.
 * `producers` push meanwhile (time- or count-bounded), each `push` one item at a time, or with
 * `perPush` > 1, `pushMany` of that many.
 */
export async function endToEndBatched(tx, rx, { producers, batch, payload, count, budgetMs, perPush = 1 }) {
  const deadline = performance.now() + budgetMs;
  const list = new Array(perPush).fill(payload);
  let pushed = 0;
  let acked = 0;
  let producersDone = false;
  const stop = new AbortController();
  const produce = async () => {
    while (pushed < count && performance.now() < deadline) {
      pushed += perPush;
      await (perPush === 1 ? tx.push(payload) : tx.pushMany(list));
    }
  };
  const consume = async () => {
    const acks = [];
    for (;;) {
      if (producersDone && acked === pushed) break;
      acks.length = 0;
      let item;
      while (acks.length < batch && (item = rx.tryReserve())) acks.push(item.ack());
      if (acks.length === 0) {
        item = await rx.reserve(producersDone ? undefined : { signal: stop.signal }).catch(() => null);
        if (!item) continue;
        acks.push(item.ack());
      }
      await Promise.all(acks);
      acked += acks.length;
    }
  };
  return runEndToEnd(
    produce,
    consume,
    producers,
    () => acked,
    () => {
      producersDone = true;
      stop.abort();
    },
  );
}
