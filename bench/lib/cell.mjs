// One cell of the queue matrix on a fresh store (bench/run.mjs repeats it; bench/profile.mjs runs
// it under --cpu-prof). Returns { msgs, seconds }.
import { FRAME_HEADER_BYTES } from '../../dist/stores/log/engine/format.js';
import { BareQueue } from './bare-queue.mjs';
import { drain, endToEnd, endToEndBatched, fill, freshStore, openQueue, pushOnly } from './queue-work.mjs';

/** Rough msgs/s per policy, only to size backlogs and caps so a cell fills its time budget. */
const EXPECTED_RATE = { bare: 4e6, memstore: 3e6, none: 1.5e6, group: 2e5, sync: 4e3 };
const DISK_CAP_BYTES = 512 * 2 ** 20;
const MEM_CAP_BYTES = 256 * 2 ** 20;
/**
 * End to end runs with this capacity, so producers cannot run ahead of the consumer by more and
 * the run reaches its steady state well within the time budget (with 65 536 and 4 KiB payloads
 * the producers never filled it in a second, and starved the consumer meanwhile).
 */
const E2E_CAPACITY = 1024;

function capsFor(storeKind, policy, payloadBytes, budgetMs) {
  const inMemory = storeKind === 'bare' || storeKind === 'memstore';
  const expected = inMemory ? EXPECTED_RATE[storeKind] : EXPECTED_RATE[policy];
  const byteCap = Math.floor((inMemory ? MEM_CAP_BYTES : DISK_CAP_BYTES) / (payloadBytes + FRAME_HEADER_BYTES));
  const count = Math.min(inMemory ? 1_000_000 : 2_000_000, byteCap);
  // End to end the capacity bounds what is held, so the run is bounded by time only (a count
  // below the capacity would stop the producers before the capacity ever applied).
  const e2eCount = 50_000_000;
  const backlog = Math.max(1000, Math.min(count, Math.ceil(expected * (budgetMs / 1000) * 1.3)));
  return { count, backlog, e2eCount };
}

/** One repetition of one matrix cell on a fresh store; returns { msgs, seconds }. */
export async function runCell(
  { store: kind, policy, payload: payloadBytes, producers, workload, storeCallsPerTurn },
  { budgetMs, scratch, latencies },
) {
  const payload = new Uint8Array(payloadBytes).fill(7);
  const { count, backlog, e2eCount } = capsFor(kind, policy, payloadBytes, budgetMs);
  if (kind === 'bare') {
    const q = new BareQueue(workload.startsWith('e2e') ? E2E_CAPACITY : Infinity);
    if (workload === 'push') return pushOnly(q, { producers, payload, count, budgetMs });
    if (workload === 'drain') {
      await fill(q, payload, backlog);
      return drain(q, { window: producers, count: backlog, budgetMs });
    }
    if (workload === 'e2e-many') throw new Error('the bare queue has no batch API');
    return endToEnd(q, q, { producers, window: producers, payload, count: e2eCount, budgetMs });
  }
  const s = await freshStore(kind, scratch);
  try {
    if (workload === 'drain') {
      // Build the backlog fast under `none`, close, and reopen under the measured policy.
      const [ftx] = await openQueue(await s.open(), 'none');
      await fill(ftx, payload, backlog);
      await ftx.close();
    }
    const [tx, rx] = await openQueue(await s.open(), policy, workload.startsWith('e2e') ? E2E_CAPACITY : Infinity, storeCallsPerTurn);
    try {
      if (workload === 'push') return await pushOnly(tx, { producers, payload, count, budgetMs, latencies });
      if (workload === 'drain') return await drain(rx, { window: producers, count: backlog, budgetMs });
      // The batch API: `pushMany` of 64 per producer call, a consumer acking up to 1 024 at a time.
      if (workload === 'e2e-many')
        return await endToEndBatched(tx, rx, { producers, perPush: 64, batch: 1024, payload, count: e2eCount, budgetMs });
      return await endToEnd(tx, rx, { producers, window: producers, payload, count: e2eCount, budgetMs });
    } finally {
      await tx.close();
    }
  } finally {
    s.cleanup();
  }
}
