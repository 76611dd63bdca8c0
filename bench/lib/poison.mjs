// One poison item (its handler always throws) among good ones, consumed by process(): how fast the
// good items go with and without it, and how often it is delivered. Shared by `npm run bench`
// (section `poison`) and bench/experiments/poison.mjs. The items are pushed before the clock
// starts; the clock stops when the last good item's handler has run, or after `budgetMs` (then
// good items/s counts those handled).
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { Builder, LogStore, MemStore } from '../../dist/index.js';

const GOOD = new Uint8Array(128).fill(7);
const POISON = new Uint8Array(128).fill(0xff);

/**
 * One run. `kind`: 'mem' or 'log'; options: `poison` (put the poison item first), `retry` (a
 * retry policy), `hold` (hold the first item reserved throughout, never failing), `maxDeliveries`,
 * `durability` (default 'none').
 */
export async function runPoison(
  kind,
  { poison: withPoison, retry, hold, maxDeliveries, durability = 'none' },
  { scratch, goodCount, budgetMs },
) {
  const dir = mkdtempSync(join(scratch, 'q-'));
  const store = kind === 'mem' ? new MemStore() : await LogStore.open(join(dir, 'q'));
  const builder = new Builder(store).durability(durability);
  if (retry) builder.retry(retry);
  if (maxDeliveries) builder.maxDeliveries(maxDeliveries);
  const [tx, rx] = await builder.open();
  // The poison item first: it is the first one the consumer meets.
  if (withPoison) await tx.push(POISON);
  for (let i = 0; i < goodCount; i += 1000) await tx.pushMany(Array.from({ length: Math.min(1000, goodCount - i) }, () => GOOD));
  const held = hold ? rx.tryReserve() : null;
  let handled = 0;
  let poisonDeliveries = 0;
  let end = 0;
  const start = performance.now();
  const stop = setTimeout(() => {
    end = performance.now();
    void rx.close();
  }, budgetMs);
  await rx.process((item) => {
    if (item.bytes[0] === 0xff) {
      poisonDeliveries = item.deliveries;
      throw new Error('poison');
    }
    if (++handled === goodCount) {
      end = performance.now();
      clearTimeout(stop);
      void rx.close();
    }
  });
  if (held && !held.settled) throw new Error('the held item was settled');
  const deadLettered = rx.stats().deadLettered;
  rmSync(dir, { recursive: true, force: true });
  const seconds = (end - start) / 1000;
  return { rate: handled / seconds, seconds, poisonDeliveries, deadLettered };
}
