// Groups: push(value, { group }) and process(handler, { groupConcurrency }). At most that many
// items of one group in flight across every consumer of the queue, an item whose group is at its
// limit never holds back the other groups behind it, order within a group stays by priority then
// seq, leases and closed forks free their slots, and bad input is a typed error that stores nothing.
import { afterAll, describe, expect, it } from 'vitest';
import { Builder, type Consumer, LogStore, MemStore, QueueError, type Reserved, connect } from '../../src/index.js';
import type { StoreFeatures } from '../../src/contract/store.js';
import { ManualClock } from '../../src/testing/index.js';
import { cleanupDirs, freshDir } from '../stores/log/helpers.js';

afterAll(cleanupDirs);

const dec = (b: Uint8Array) => new TextDecoder().decode(b);

/**
 * A `process()` call whose handlers hold their items until the test lets them go: `order` lists
 * the items handed out, `held(text)` the reservation of one, `ack(text)` acks it and ends its
 * handler, `next(n)` waits until n were handed out, `stop()` ends every handler and the call.
 */
function holding(rx: Consumer, options: { concurrency: number; groupConcurrency?: number }) {
  const order: string[] = [];
  const held = new Map<string, Reserved>();
  const release = new Map<Reserved, () => void>();
  const stop = new AbortController();
  let wake = (): void => {};
  const running = rx.process(
    async (item) => {
      order.push(dec(item.bytes));
      held.set(dec(item.bytes), item);
      await new Promise<void>((resolve) => {
        release.set(item, resolve);
        wake();
      });
    },
    { ...options, signal: stop.signal },
  );
  const heldItem = (text: string): Reserved => {
    const item = held.get(text);
    if (item === undefined) throw new Error(`${text} was not handed out (handed out: ${order.join(', ')})`);
    return item;
  };
  return {
    order,
    held: heldItem,
    ack: async (text: string): Promise<void> => {
      const item = heldItem(text);
      await item.ack();
      release.get(item)!();
    },
    next: (n: number): Promise<void> =>
      new Promise<void>((resolve) => {
        wake = () => {
          if (order.length >= n) resolve();
        };
        wake();
      }),
    stop: async (): Promise<void> => {
      stop.abort();
      for (const done of release.values()) done();
      await running;
    },
  };
}

/** Let every handler, waiter and store call that can run now run: nothing here waits on a timer. */
async function settle(): Promise<void> {
  for (let i = 0; i < 10; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

describe('groupConcurrency', () => {
  it('anItemWhoseGroupIsAtItsLimitDoesNotHoldBackTheItemsOfOtherGroupsBehindIt', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    for (let i = 1; i <= 50; i++) await tx.push(`hot${i}`, { group: 'hot' });
    await tx.push('cold1', { group: 'cold' });
    await tx.push('plain');
    await tx.push('cold2', { group: 'cold' });
    const run = holding(rx, { concurrency: 4, groupConcurrency: 1 });
    await run.next(3);
    await settle();
    // One hot item, then the cold one and the plain one from behind 49 waiting hot items.
    expect(run.order).toEqual(['hot1', 'cold1', 'plain']);
    expect(rx.stats().groupLimited).toBe(50);
    expect(rx.stats().ready).toBe(50);
    await run.ack('cold1');
    await run.next(4);
    expect(run.order[3]).toBe('cold2');
    await run.stop();
    await tx.close();
  });

  it('withinAGroupItemsGoByPriorityThenSeq', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    await tx.push('a-first', { group: 'a' });
    await tx.push('a-low', { group: 'a', priority: -1 });
    await tx.push('a-second', { group: 'a' });
    await tx.push('a-urgent', { group: 'a', priority: 5 });
    await tx.push('b', { group: 'b' });
    const run = holding(rx, { concurrency: 3, groupConcurrency: 1 });
    await run.next(2);
    await settle();
    expect(run.order).toEqual(['a-urgent', 'b']);
    for (const [done, next] of [
      ['a-urgent', 'a-first'],
      ['a-first', 'a-second'],
      ['a-second', 'a-low'],
    ] as const) {
      const before = run.order.length;
      await run.ack(done);
      await run.next(before + 1);
      expect(run.order.at(-1)).toBe(next);
    }
    await run.stop();
    await tx.close();
  });

  it('theLimitCountsEveryConsumerOfTheQueueForksAndPlainReservesIncluded', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    for (let i = 1; i <= 6; i++) await tx.push(`a${i}`, { group: 'a' });
    await tx.push('b1', { group: 'b' });
    // A plain reserve holds a1: a group's items in flight count wherever they are held.
    const plain = rx.tryReserve()!;
    expect(dec(plain.bytes)).toBe('a1');
    const one = holding(rx.fork(), { concurrency: 3, groupConcurrency: 2 });
    const two = holding(rx.fork(), { concurrency: 3, groupConcurrency: 2 });
    await one.next(1);
    await settle();
    const out = [...one.order, ...two.order].sort();
    // a1 (plain) and one more of a: two in flight in all; b1 beside them.
    expect(out).toEqual(['a2', 'b1']);
    await plain.ack();
    await settle();
    expect([...one.order, ...two.order].sort()).toEqual(['a2', 'a3', 'b1']);
    await one.stop();
    await two.stop();
    await tx.close();
  });

  it('aLeaseThatRunsOutFreesItsGroupsSlotAndTheItemComesBackFirstInItsGroup', async () => {
    const clock = new ManualClock();
    const [tx, rx] = await new Builder(new MemStore()).clock(clock).leaseMs(100).open();
    await tx.pushMany(['a1', 'a2'], { group: 'a' });
    const run = holding(rx, { concurrency: 2, groupConcurrency: 1 });
    await run.next(1);
    await settle();
    expect(run.order).toEqual(['a1']);
    clock.advance(100);
    await run.next(2);
    await settle();
    // The expired a1 is handed out again before a2: lowest seq first within the group.
    expect(run.order).toEqual(['a1', 'a1']);
    expect(rx.stats().groupLimited).toBe(1);
    await run.stop();
    await tx.close();
  });

  it('closingAForkReturnsItsGroupsSlots', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    await tx.pushMany(['a1', 'a2'], { group: 'a' });
    const fork = rx.fork();
    const held = fork.tryReserve()!;
    expect(dec(held.bytes)).toBe('a1');
    const run = holding(rx, { concurrency: 2, groupConcurrency: 1 });
    await settle();
    expect(run.order).toEqual([]);
    await fork.close();
    await run.next(1);
    expect(run.order).toEqual(['a1']);
    await run.stop();
    await tx.close();
  });

  it('aConsumerWithoutALimitTakesWhatOneWithALimitSetAside', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    await tx.pushMany(['a1', 'a2', 'a3'], { group: 'a' });
    const run = holding(rx, { concurrency: 2, groupConcurrency: 1 });
    await run.next(1);
    await settle();
    expect(rx.stats().groupLimited).toBe(2);
    // Waits behind the limited workers, yet is served at once: nothing holds it back.
    const got = await rx.reserve();
    expect(dec(got!.bytes)).toBe('a2');
    expect(dec(rx.tryReserve()!.bytes)).toBe('a3');
    await run.stop();
    await tx.close();
  });

  it('batchesGatherUnderTheLimitToo', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    await tx.pushMany(['a1', 'a2', 'a3'], { group: 'a' });
    await tx.pushMany(['b1', 'b2'], { group: 'b' });
    const batches: string[][] = [];
    const stop = new AbortController();
    const running = rx.process(
      async (items) => {
        batches.push(items.map((i) => dec(i.bytes)));
        if (batches.length === 3) stop.abort();
      },
      { batch: { size: 10 }, groupConcurrency: 1, signal: stop.signal },
    );
    await running;
    expect(batches).toEqual([['a1', 'b1'], ['a2', 'b2'], ['a3']]);
    await tx.close();
  });

  it('overLogStoreACleanCloseAfterItemsWereSetAsideCountsExactlyTheDeliveriesThatHappened', async () => {
    const dir = freshDir();
    let [tx, rx] = await new Builder(await LogStore.open(dir)).maxDeliveries(5).open();
    await tx.pushMany(['a1', 'a2'], { group: 'a' });
    await tx.push('b1', { group: 'b' });
    const run = holding(rx, { concurrency: 2, groupConcurrency: 1 });
    await run.next(2);
    expect(run.order).toEqual(['a1', 'b1']);
    await run.ack('b1');
    // Closed with a1 in flight and a2 set aside: both go back to the store unacked.
    await tx.close();
    await run.stop();
    [tx, rx] = await new Builder(await LogStore.open(dir)).maxDeliveries(5).open();
    const counts: Record<string, number> = {};
    for (let item = rx.tryReserve(); item; item = rx.tryReserve()) counts[dec(item.bytes)] = item.deliveries;
    // a2 was set aside, never handed out: its first delivery now is its first.
    expect(counts).toEqual({ a1: 2, a2: 1 });
    await tx.close();
  });
});

describe('bad input', () => {
  const bad: [unknown, typeof TypeError | typeof RangeError][] = [
    ['', RangeError],
    ['g'.repeat(65), RangeError],
    ['é'.repeat(33), RangeError],
    ['\uD800', RangeError],
    [5, TypeError],
    [null, TypeError],
  ];

  it('aGroupThatIsNotAStringOf1To64Utf8BytesIsATypedErrorAndStoresNothing', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    for (const [group, type] of bad) {
      await expect(tx.push('x', { group } as never), String(group)).rejects.toThrow(type);
      await expect(tx.pushMany(['x', 'y'], { group } as never), String(group)).rejects.toThrow(type);
      await expect(tx.push('x', { group, key: 'k' } as never), String(group)).rejects.toThrow(type);
    }
    expect(tx.stats().pushed).toBe(0);
    expect(rx.tryReserve()).toBeNull();
    await tx.close();
  });

  it('aGroupConcurrencyThatIsNotAPositiveIntegerIsATypedErrorAndTakesNothing', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    await tx.push('x', { group: 'a' });
    for (const [value, type] of [
      [0, RangeError],
      [1.5, RangeError],
      [-1, RangeError],
      [Number.NaN, RangeError],
      ['2', TypeError],
    ] as const) {
      await expect(
        rx.process(() => {}, { groupConcurrency: value as never }),
        String(value),
      ).rejects.toThrow(type);
    }
    expect(rx.stats().ready).toBe(1);
    await tx.close();
  });

  it('aGroupOverAStoreWithoutGroupsIsRefusedWithErrUnsupportedAndStoresNothing', async () => {
    class NoGroups extends MemStore {
      override readonly features: StoreFeatures = { reopen: true, crashSafe: false, deliveries: true, scheduling: true, idempotency: true };
    }
    const [tx, rx] = await new Builder(new NoGroups()).open();
    const unsupported = (e: unknown) => e instanceof QueueError && e.code === 'ERR_UNSUPPORTED';
    await expect(tx.push('x', { group: 'a' })).rejects.toSatisfy(unsupported);
    await expect(tx.pushMany(['x'], { group: 'a' })).rejects.toSatisfy(unsupported);
    await expect(tx.pushMany([], { group: 'a' })).rejects.toSatisfy(unsupported);
    expect(rx.tryReserve()).toBeNull();
    await tx.close();
  });

  it('aPushWithAGroupFromAnotherProcessIsRefusedWithErrUnsupportedAndStoresNothing', async () => {
    const dir = freshDir();
    await (await LogStore.open(dir)).close();
    // No process has the queue open: the producer spools, and a spool record carries no group.
    const producer = await connect(dir);
    const unsupported = (e: unknown) => e instanceof QueueError && e.code === 'ERR_UNSUPPORTED';
    await expect(producer.push('x', { group: 'a' })).rejects.toSatisfy(unsupported);
    await expect(producer.pushMany(['x', 'y'], { group: 'a' })).rejects.toSatisfy(unsupported);
    await producer.close();
    const [tx, rx] = await new Builder(await LogStore.open(dir)).open();
    expect(rx.stats().ready).toBe(0);
    await tx.close();
  });
});
