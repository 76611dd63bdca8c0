/**
 * A full disk does not stop the consumer: draining the queue is how space comes back. Over the
 * simulated disk with its space budget set to what is in use (`setDiskBytesMax`), a queue opens,
 * hands out every item (first deliveries and redeliveries, whose records the store refuses), and
 * counts them in memory (`stats().uncountedDeliveries`); an ack may fail with `ERR_STORE_FULL`,
 * and the item stays in the queue. Once space is back the records and acks are stored, and a power
 * loss afterwards (every crash point) loses no item that was not acked.
 */
import { describe, expect, it } from 'vitest';
import { Builder, type Consumer, type Reserved } from '../../src/core/builder.js';
import { LogStore } from '../../src/stores/log/log-store.js';
import { isQueueError } from '../../src/contract/errors.js';
import { CrashFileSystem, formatCrashPoint } from '../../src/testing/index.js';
import { readAll } from '../../harness/crash-model.js';
import { FRAME_HEADER_BYTES } from '../../src/stores/log/engine/format.js';

const DIR = '/q';
const OPTIONS = { segmentBytes: 4096, preallocate: false, autoCompact: false } as const;
const dec = (b: Uint8Array) => new TextDecoder().decode(b);

/**
 * The next ready item, or null when none is ready. On a full disk a delivery record is refused
 * only once the store has cut back the bytes that landed (an asynchronous step), so the item is
 * handed out a moment later: `tryReserve()` may answer null meanwhile, and `reserve()` waits.
 */
async function next(rx: Consumer): Promise<Reserved | null> {
  return rx.tryReserve() ?? (rx.stats().ready > 0 ? await rx.reserve() : null);
}

/**
 * A store holding `texts`, closed cleanly, on a disk then full but for the few bytes of the record
 * an open writes to say the store is in use (on a real file system the cursor file's last block
 * has that room; the simulated disk counts bytes, not blocks).
 */
async function fullDiskWith(texts: string[]): Promise<CrashFileSystem> {
  const fs = new CrashFileSystem({ seed: 3 });
  const [tx] = await new Builder(await LogStore.open(DIR, { ...OPTIONS, fs })).open();
  await tx.pushMany(texts);
  await tx.close();
  fs.setDiskBytesMax(fs.usedBytes() + FRAME_HEADER_BYTES + 3);
  return fs;
}

describe('a consumer on a full disk', () => {
  it('aQueueOpensOnAFullDiskAndHandsOutEveryItem', async () => {
    const fs = await fullDiskWith(['a', 'b', 'c']);
    const [tx, rx] = await new Builder(await LogStore.open(DIR, { ...OPTIONS, fs })).maxDeliveries(5).open();
    const got: [string, number][] = [];
    for (let item = await next(rx); item !== null; item = await next(rx)) got.push([dec(item.bytes), item.deliveries]);
    expect(got).toEqual([
      ['a', 1],
      ['b', 1],
      ['c', 1],
    ]);
    expect(rx.stats().uncountedDeliveries, 'the records of those deliveries did not fit').toBeGreaterThan(0);
    await tx.close();
  });

  it('aRedeliveryOnAFullDiskDoesNotFailTheQueueAndAFailedAckKeepsTheItem', async () => {
    const fs = await fullDiskWith(['a', 'b']);
    const [tx, rx] = await new Builder(await LogStore.open(DIR, { ...OPTIONS, fs })).open();
    const a = (await next(rx))!;
    await a.nack();
    // The redelivery's mark does not fit: the item is handed out all the same, counted in memory.
    const again = (await next(rx))!;
    expect([dec(again.bytes), again.deliveries]).toEqual(['a', 2]);
    const ack = await again.ack().catch((e: unknown) => e);
    expect(isQueueError(ack, 'ERR_STORE_FULL'), `ack rejected with ${String(ack)}`).toBe(true);
    // The queue did not fail: the item is ready again, and 'b' is handed out.
    expect(rx.stats().closed).toBe(false);
    const then = [(await next(rx))!, (await next(rx))!].map((i) => [dec(i.bytes), i.deliveries]);
    expect(then).toEqual([
      ['a', 3],
      ['b', 1],
    ]);
    await tx.close();
  });

  it('onceSpaceIsBackTheCountsAndAcksAreStoredAndAPowerLossLosesNothingUnacked', async () => {
    const fs = await fullDiskWith(['a', 'b', 'c', 'd']);
    const [tx, rx] = await new Builder(await LogStore.open(DIR, { ...OPTIONS, fs })).ackDurability('group').open();
    const a = (await next(rx))!;
    expect(isQueueError(await a.ack().catch((e: unknown) => e), 'ERR_STORE_FULL')).toBe(true);
    fs.setDiskBytesMax(Infinity);
    const from = fs.traceLength;
    // Space is back: 'a' comes again with its count, and this ack is stored.
    const a2 = (await next(rx))!;
    expect([dec(a2.bytes), a2.deliveries]).toEqual(['a', 2]);
    await a2.ack();
    const ackedAt = fs.traceLength;
    const b = (await next(rx))!;
    expect(dec(b.bytes)).toBe('b');
    let states = 0;
    for (const point of fs.crashPoints({ from, zeroTail: true })) {
      const store = await LogStore.open(DIR, { ...OPTIONS, fs: fs.crashAt(point) });
      await store.open();
      const left = readAll(store).map((i) => dec(i.bytes));
      const where = `crash point ${formatCrashPoint(point)} (${fs.reproLine()})`;
      expect(left.slice(-3), where).toEqual(['b', 'c', 'd']);
      if (point.at >= ackedAt) expect(left, `${where}: 'a' was acked under group`).toEqual(['b', 'c', 'd']);
      await store.close();
      states++;
    }
    expect(states).toBeGreaterThan(0);
    await tx.close();
  });
});
