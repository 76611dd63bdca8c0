/** The shared queue semantics (test/support/queue-semantics.ts) over the embedded queue: MemStore and LogStore. */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, test } from 'vitest';
import { LogStore } from '../../src/stores/log/log-store.js';
import { MemStore } from '../../src/stores/mem/mem-store.js';
import { Builder } from '../../src/core/builder.js';
import type { Store } from '../../src/contract/store.js';
import type { RetryPolicyInput } from '../../src/core/retry.js';
import { ManualClock } from '../../src/testing/manual-clock.js';
import { type OpenOptions, type OpenQueue, type QueueCapabilities, runQueueSemantics } from '../support/queue-semantics.js';

const EMBEDDED: QueueCapabilities = {
  syncTryReserve: true,
  nackDelayOnQueueClock: true,
  orderAcrossConsumers: true,
  seq: 'queue',
  duplicateWindowMs: 0,
  delaysOnQueueClock: true,
  priorities: true,
};

async function openOn(store: Store, options: OpenOptions = {}): Promise<OpenQueue> {
  const clock = new ManualClock();
  let builder = new Builder(store).retry((options.retry ?? { kind: 'fixed', delayMs: 0 }) as RetryPolicyInput);
  if (options.manualClock !== false) builder = builder.clock(clock);
  if (options.maxDeliveries !== undefined) builder = builder.maxDeliveries(options.maxDeliveries);
  if (options.leaseMs !== undefined) builder = builder.leaseMs(options.leaseMs);
  const [tx, rx] = await (options.codec ? builder.codec(options.codec) : builder).open();
  return { tx: tx as never, rx: rx as never, clock };
}

runQueueSemantics(test, { name: 'MemStore', capabilities: EMBEDDED, open: (options) => openOn(new MemStore(), options) });

const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});
runQueueSemantics(test, {
  name: 'LogStore',
  capabilities: EMBEDDED,
  open: async (options) => {
    const dir = mkdtempSync(join(tmpdir(), 'pq-semantics-'));
    dirs.push(dir);
    return openOn(await LogStore.open(dir), options);
  },
});
