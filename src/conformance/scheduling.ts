/**
 * The conformance tests of `features.scheduling`: priorities and not-before times kept with each
 * item, and `scheduledFrom`, through the Store methods and through a queue. Registered by
 * `runStoreConformance` (./suite.ts); a store that does not declare the feature has them
 * reported as skipped.
 */
import assert from 'node:assert/strict';
import { Builder } from '../core/builder.js';
import { PRIORITY_MAX, PRIORITY_MIN, type Store, type StoredItem } from '../contract/store.js';
import { ManualClock } from '../testing/manual-clock.js';
import { bytesOf, drain, readAll, skipped, textOf } from './support.js';

/** What the scheduling tests need of the suite (./suite.ts). */
export interface SchedulingSuite<S extends Store> {
  name: string;
  test(name: string, fn: (context: unknown) => Promise<void>): void;
  make(): Promise<S>;
  again(previous: S, how: 'reopen' | 'crash'): Promise<S>;
}

/** An item as the tests compare it: text, and priority and not-before time with 0 for absent. */
const shape = (i: StoredItem) => [i.seq, textOf(i.bytes), i.priority ?? 0, i.notBefore ?? 0];

function needsScheduling(suite: SchedulingSuite<Store>, store: Store, context: unknown): boolean {
  if (store.features.scheduling !== true) return skipped(context, `${suite.name} does not declare features.scheduling`);
  return false;
}

/** Items of every kind: plain, a priority, a time, both, the ends of the priority range. */
function mixed(first: number, at: number): StoredItem[] {
  return [
    { seq: first, bytes: bytesOf('plain') },
    { seq: first + 1, bytes: bytesOf('high'), priority: 5, notBefore: 0 },
    { seq: first + 2, bytes: bytesOf('later'), notBefore: at },
    { seq: first + 3, bytes: bytesOf('lowest, later'), priority: PRIORITY_MIN, notBefore: at + 1 },
    { seq: first + 4, bytes: bytesOf('highest'), priority: PRIORITY_MAX },
    { seq: first + 5, bytes: bytesOf('plain again'), priority: 0, notBefore: 0 },
  ];
}

export function schedulingTests<S extends Store>(suite: SchedulingSuite<S>, hooks: { reopen: boolean; crash: boolean }): void {
  const at = 1_900_000_000_123;

  suite.test('a store that never held a scheduled item reports scheduledFrom = nextSeq', async (context) => {
    let store = await suite.make();
    if (needsScheduling(suite, store, context)) return;
    let r = await store.open();
    assert.equal(r.scheduledFrom, r.nextSeq);
    await store.append(
      [
        { seq: r.nextSeq, bytes: bytesOf('a') },
        { seq: r.nextSeq + 1, bytes: bytesOf('b') },
      ],
      true,
    );
    // Without a way to reopen, the first half is the test.
    if (!hooks.reopen || !store.features.reopen) return void (await store.close());
    await store.close();
    store = await suite.again(store, 'reopen');
    r = await store.open();
    assert.equal(r.scheduledFrom, r.nextSeq);
    await store.close();
  });

  suite.test('priorities and not-before times are read back exactly, acked ones are gone', async (context) => {
    const store = await suite.make();
    if (needsScheduling(suite, store, context)) return;
    const { nextSeq: s } = await store.open();
    const batch = mixed(s, at);
    await store.append(batch.slice(0, 3), false);
    await store.append(batch.slice(3), true);
    assert.deepEqual((await readAll(store)).map(shape), batch.map(shape));
    await store.ack([s + 1, s + 3], true);
    assert.deepEqual((await readAll(store)).map(shape), [batch[0]!, batch[2]!, batch[4]!, batch[5]!].map(shape));
    await store.close();
  });

  suite.test(
    'a priority or a not-before time outside the contract is refused with ERR_STORE and nothing of the batch is stored',
    async (context) => {
      const store = await suite.make();
      if (needsScheduling(suite, store, context)) return;
      const { nextSeq: s } = await store.open();
      for (const bad of [{ priority: PRIORITY_MAX + 1 }, { priority: 1.5 }, { notBefore: -1 }, { notBefore: Number.NaN }]) {
        const batch: StoredItem[] = [
          { seq: s, bytes: bytesOf('fine') },
          { seq: s + 1, bytes: bytesOf('bad'), ...bad },
        ];
        await assert.rejects(
          store.append(batch, true),
          (e: unknown) => (e as { code?: string }).code === 'ERR_STORE',
          `refused: ${JSON.stringify(bad)}`,
        );
        assert.deepEqual(await readAll(store), [], `nothing stored of ${JSON.stringify(bad)}`);
      }
      await store.close();
    },
  );

  for (const how of ['reopen', 'crash'] as const) {
    if (!hooks[how]) continue;
    const after = how === 'reopen' ? 'close and reopen' : 'a crash';
    suite.test(
      `priorities and not-before times survive ${after}; scheduledFrom is at or below the oldest scheduled item`,
      async (context) => {
        let store = await suite.make();
        if (needsScheduling(suite, store, context)) return;
        if (how === 'reopen' && !store.features.reopen && skipped(context, `${suite.name} does not declare features.reopen`)) return;
        const { nextSeq: s } = await store.open();
        const batch = mixed(s, at);
        await store.append(batch, true);
        await store.ack([s + 1], true);
        if (how === 'reopen') await store.close();
        store = await suite.again(store, how);
        const r = await store.open();
        const left = batch.filter((i) => i.seq !== s + 1);
        assert.deepEqual((await readAll(store)).map(shape), left.map(shape));
        assert.ok(r.scheduledFrom !== undefined && Number.isSafeInteger(r.scheduledFrom), `scheduledFrom ${r.scheduledFrom}`);
        assert.ok(r.scheduledFrom! <= s + 2, `scheduledFrom ${r.scheduledFrom} is above seq ${s + 2}, which is scheduled`);
        await store.close();
      },
    );
  }

  suite.test('through a queue: ready items by priority then seq, delayed ones once due', async (context) => {
    let store = await suite.make();
    if (needsScheduling(suite, store, context)) return;
    const clock = new ManualClock();
    let [tx, rx] = await new Builder(store).clock(clock).open();
    await tx.push('p0');
    await tx.push('later', { delayMs: 1000 });
    await tx.push('p3', { priority: 3 });
    await tx.push('p-1', { priority: -1 });
    await tx.push('p3 later', { priority: 3, delayMs: 500 });
    const take = (): Promise<string[]> => drain(rx);
    assert.deepEqual(await take(), ['p3', 'p0', 'p-1']);
    clock.advance(500);
    assert.deepEqual(await take(), ['p3 later']);
    if (hooks.reopen && store.features.reopen) {
      await tx.close();
      store = await suite.again(store, 'reopen');
      [tx, rx] = await new Builder(store).clock(clock).open();
      assert.equal(rx.stats().delayed, 1);
      assert.deepEqual(await take(), []);
    }
    clock.advance(500);
    assert.deepEqual(await take(), ['later']);
    await tx.close();
  });
}
