/**
 * The conformance tests of `features.groups`: each item's group kept with it, through the Store
 * methods and through a queue. Registered by `runStoreConformance` (./suite.ts); a store that
 * does not declare the feature has them reported as skipped.
 */
import assert from 'node:assert/strict';
import { Builder, type Reserved } from '../core/builder.js';
import { MAX_GROUP_BYTES, type Store, type StoredItem } from '../contract/store.js';
import { bytesOf, readAll, skipped, textOf } from './support.js';

/** What the group tests need of the suite (./suite.ts). */
export interface GroupsSuite<S extends Store> {
  name: string;
  test(name: string, fn: (context: unknown) => Promise<void>): void;
  make(): Promise<S>;
  again(previous: S, how: 'reopen' | 'crash'): Promise<S>;
}

function needsGroups(suite: GroupsSuite<Store>, store: Store, context: unknown): boolean {
  if (store.features.groups !== true) return skipped(context, `${suite.name} does not declare features.groups`);
  return false;
}

/** An item as the tests compare it: seq, text, group ('' for none), priority (0 for none). */
const shape = (i: StoredItem) => [i.seq, textOf(i.bytes), i.group ?? '', i.priority ?? 0];

/** Grouped and plain items, a group of the longest length and one beyond ASCII, one also scheduled. */
function grouped(first: number): StoredItem[] {
  return [
    { seq: first, bytes: bytesOf('plain') },
    { seq: first + 1, bytes: bytesOf('a1'), group: 'tenant-a' },
    { seq: first + 2, bytes: bytesOf('long'), group: 'g'.repeat(MAX_GROUP_BYTES) },
    { seq: first + 3, bytes: bytesOf('a2 urgent'), group: 'tenant-a', priority: 4 },
    { seq: first + 4, bytes: bytesOf('unicode'), group: 'клиент-€' },
  ];
}

export function groupTests<S extends Store>(suite: GroupsSuite<S>, hooks: { reopen: boolean; crash: boolean }): void {
  suite.test('groups are read back exactly with their items, acked ones are gone', async (context) => {
    const store = await suite.make();
    if (needsGroups(suite, store, context)) return;
    const { nextSeq: s } = await store.open();
    const batch = grouped(s);
    // Priorities need features.scheduling too: without it, the scheduled item is left out.
    const items = store.features.scheduling === true ? batch : batch.filter((i) => i.priority === undefined);
    await store.append(items.slice(0, 2), false);
    await store.append(items.slice(2), true);
    assert.deepEqual((await readAll(store)).map(shape), items.map(shape));
    await store.ack([s + 1], true);
    assert.deepEqual((await readAll(store)).map(shape), items.filter((i) => i.seq !== s + 1).map(shape));
    await store.close();
  });

  suite.test('a group outside the contract is refused with ERR_STORE and nothing of the batch is stored', async (context) => {
    const store = await suite.make();
    if (needsGroups(suite, store, context)) return;
    const { nextSeq: s } = await store.open();
    for (const bad of ['', 'g'.repeat(MAX_GROUP_BYTES + 1), 'é'.repeat(MAX_GROUP_BYTES / 2 + 1), 5, null, '\uDC00']) {
      const batch = [
        { seq: s, bytes: bytesOf('fine'), group: 'fine' },
        { seq: s + 1, bytes: bytesOf('bad'), group: bad },
      ] as unknown as StoredItem[];
      await assert.rejects(
        store.append(batch, true),
        (e: unknown) => (e as { code?: string }).code === 'ERR_STORE',
        `refused: ${JSON.stringify(bad)}`,
      );
      assert.deepEqual(await readAll(store), [], `nothing stored of ${JSON.stringify(bad)}`);
    }
    await store.close();
  });

  for (const how of ['reopen', 'crash'] as const) {
    if (!hooks[how]) continue;
    const after = how === 'reopen' ? 'close and reopen' : 'a crash';
    suite.test(`groups survive ${after}`, async (context) => {
      let store = await suite.make();
      if (needsGroups(suite, store, context)) return;
      if (how === 'reopen' && !store.features.reopen && skipped(context, `${suite.name} does not declare features.reopen`)) return;
      const { nextSeq: s } = await store.open();
      const items = grouped(s).filter((i) => store.features.scheduling === true || i.priority === undefined);
      await store.append(items, true);
      await store.ack([s + 2], true);
      if (how === 'reopen') await store.close();
      store = await suite.again(store, how);
      await store.open();
      assert.deepEqual((await readAll(store)).map(shape), items.filter((i) => i.seq !== s + 2).map(shape));
      await store.close();
    });
  }

  suite.test(
    'through a queue: groupConcurrency 1 hands out one item per group at a time, the other groups meanwhile, in order within each',
    async (context) => {
      let store = await suite.make();
      if (needsGroups(suite, store, context)) return;
      let [tx, rx] = await new Builder(store).open();
      for (const [text, group] of [
        ['a1', 'a'],
        ['a2', 'a'],
        ['b1', 'b'],
        ['a3', 'a'],
        ['plain', undefined],
        ['b2', 'b'],
      ] as const) {
        await tx.push(text, group === undefined ? undefined : { group });
      }
      if (hooks.reopen && store.features.reopen) {
        await tx.close();
        store = await suite.again(store, 'reopen');
        [tx, rx] = await new Builder(store).open();
      }
      const held: Reserved[] = [];
      const order: string[] = [];
      const stop = new AbortController();
      let wake: () => void = () => {};
      const running = rx.process(
        async (item) => {
          order.push(textOf(item.bytes));
          held.push(item);
          wake();
          // Held until the test acks it.
          await new Promise<void>((resolve) => stop.signal.addEventListener('abort', () => resolve(), { once: true }));
        },
        { concurrency: 8, groupConcurrency: 1, signal: stop.signal },
      );
      const handedOut = (n: number): Promise<void> =>
        new Promise<void>((resolve) => {
          wake = () => order.length >= n && resolve();
          wake();
        });
      // a1, b1 and the plain item: one of each group, and the item without a group.
      await handedOut(3);
      assert.deepEqual(order, ['a1', 'b1', 'plain']);
      assert.equal(rx.stats().groupLimited, 3);
      await held.find((i) => textOf(i.bytes) === 'a1')!.ack();
      await handedOut(4);
      assert.deepEqual(order.slice(3), ['a2']);
      await held.find((i) => textOf(i.bytes) === 'b1')!.ack();
      await handedOut(5);
      assert.deepEqual(order.slice(4), ['b2']);
      assert.equal(rx.stats().groupLimited, 1);
      stop.abort();
      await running;
      await tx.close();
    },
  );
}
