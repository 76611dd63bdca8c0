/**
 * The conformance tests of `features.idempotency`: each item's idempotency key kept with it, kept
 * after its ack, reported by `open`, let go by `keepKeysFrom`, through the Store methods and
 * through a queue. Registered by `runStoreConformance` (./suite.ts); a store that does not
 * declare the feature has them reported as skipped.
 */
import assert from 'node:assert/strict';
import { Builder } from '../core/builder.js';
import { MAX_KEY_BYTES, type Store, type StoredItem, type StoredKey } from '../contract/store.js';
import { ManualClock } from '../testing/manual-clock.js';
import { bytesOf, drain, readAll, skipped, textOf } from './support.js';

/** What the idempotency tests need of the suite (./suite.ts). */
export interface IdempotencySuite<S extends Store> {
  name: string;
  test(name: string, fn: (context: unknown) => Promise<void>): void;
  make(): Promise<S>;
  again(previous: S, how: 'reopen' | 'crash'): Promise<S>;
}

function needsKeys(suite: IdempotencySuite<Store>, store: Store, context: unknown): boolean {
  if (store.features.idempotency !== true) return skipped(context, `${suite.name} does not declare features.idempotency`);
  if (typeof store.keepKeysFrom !== 'function')
    throw new assert.AssertionError({ message: `${suite.name} declares features.idempotency but has no keepKeysFrom()` });
  return false;
}

/** Keys as the tests compare them: sorted by seq, the highest seq of each key kept. */
function keysOf(keys: readonly StoredKey[] | undefined): [string, number, number][] {
  assert.ok(Array.isArray(keys), 'open() reports keys');
  return [...keys].sort((a, b) => a.seq - b.seq).map((k) => [k.key, k.seq, k.keyedAt]);
}

const T = 1_800_000_000_000;

/** Keyed and plain items, keys of one byte, of the longest length and of characters beyond ASCII. */
function keyed(first: number): StoredItem[] {
  return [
    { seq: first, bytes: bytesOf('plain') },
    { seq: first + 1, bytes: bytesOf('k1'), key: 'order-1', keyedAt: T },
    { seq: first + 2, bytes: bytesOf('k2'), key: 'x'.repeat(MAX_KEY_BYTES), keyedAt: T + 5 },
    { seq: first + 3, bytes: bytesOf('k3 scheduled'), key: 'ключ-€-🔑', keyedAt: T + 9, priority: 3, notBefore: T + 100 },
    { seq: first + 4, bytes: bytesOf('k4'), key: 'k', keyedAt: 0 },
  ];
}

export function idempotencyTests<S extends Store>(suite: IdempotencySuite<S>, hooks: { reopen: boolean; crash: boolean }): void {
  suite.test('a store that never held a key reports no keys', async (context) => {
    const store = await suite.make();
    if (needsKeys(suite, store, context)) return;
    const r = await store.open();
    assert.deepEqual(keysOf(r.keys), []);
    await store.close();
  });

  suite.test(
    'keyed items read back with their bytes; a key outside the contract is refused with ERR_STORE and nothing of the batch is stored',
    async (context) => {
      const store = await suite.make();
      if (needsKeys(suite, store, context)) return;
      const { nextSeq: s } = await store.open();
      for (const bad of [
        { key: '' },
        { key: 'x'.repeat(MAX_KEY_BYTES + 1) },
        { key: 'é'.repeat(128) },
        { key: 5 },
        { key: 'a', keyedAt: -1 },
        { key: 'a', keyedAt: 1.5 },
        { key: 'a' },
        { keyedAt: 3 },
        { key: '\uD800', keyedAt: 1 },
      ]) {
        const item = { seq: s + 1, bytes: bytesOf('bad'), keyedAt: T, ...bad } as unknown as StoredItem;
        if (!('keyedAt' in bad) && 'key' in bad) delete (item as { keyedAt?: number }).keyedAt;
        const batch: StoredItem[] = [{ seq: s, bytes: bytesOf('fine'), key: 'fine', keyedAt: T }, item];
        await assert.rejects(
          store.append(batch, true),
          (e: unknown) => (e as { code?: string }).code === 'ERR_STORE',
          `refused: ${JSON.stringify(bad)}`,
        );
        assert.deepEqual(await readAll(store), [], `nothing stored of ${JSON.stringify(bad)}`);
      }
      const batch = keyed(s);
      await store.append(batch, true);
      assert.deepEqual(
        (await readAll(store)).map((i) => [i.seq, textOf(i.bytes)]),
        batch.map((i) => [i.seq, textOf(i.bytes)]),
      );
      await store.close();
    },
  );

  for (const how of ['reopen', 'crash'] as const) {
    if (!hooks[how]) continue;
    const after = how === 'reopen' ? 'close and reopen' : 'a crash';
    suite.test(`keys survive ${after}, those of acked items too, and keepKeysFrom lets the older ones go`, async (context) => {
      let store = await suite.make();
      if (needsKeys(suite, store, context)) return;
      if (how === 'reopen' && !store.features.reopen && skipped(context, `${suite.name} does not declare features.reopen`)) return;
      const { nextSeq: s } = await store.open();
      const batch = keyed(s);
      await store.append(batch.slice(0, 2), false);
      await store.append(batch.slice(2), true);
      await store.ack([s + 1, s + 3], true);
      if (how === 'reopen') await store.close();
      store = await suite.again(store, how);
      let r = await store.open();
      const all = batch.filter((i) => i.key !== undefined).map((i) => [i.key!, i.seq, i.keyedAt!] as [string, number, number]);
      assert.deepEqual(keysOf(r.keys), all);
      assert.deepEqual(
        (await readAll(store)).map((i) => i.seq),
        [s, s + 2, s + 4],
      );
      // Keys from T + 5 on must stay; older ones may go (now or later).
      store.keepKeysFrom!(T + 5);
      await store.ack([s], true);
      if (how === 'reopen') await store.close();
      store = await suite.again(store, how);
      r = await store.open();
      const kept = keysOf(r.keys);
      for (const k of all)
        if (k[2] >= T + 5)
          assert.ok(
            kept.some((x) => x[0] === k[0] && x[1] === k[1] && x[2] === k[2]),
            `key ${k[0]} (at ${k[2]}) kept`,
          );
      for (const k of kept)
        assert.ok(
          all.some((x) => x[1] === k[1] && x[0] === k[0]),
          `key ${k[0]} of seq ${k[1]} was stored`,
        );
      await store.close();
    });
  }

  suite.test(
    'through a queue: a retried key stores nothing and resolves with its seq, acked or not, until its window ends',
    async (context) => {
      let store = await suite.make();
      if (needsKeys(suite, store, context)) return;
      const clock = new ManualClock();
      const open = () => new Builder(store).clock(clock).idempotency({ windowMs: 1000 }).open();
      let [tx, rx] = await open();
      const a = await tx.push('a', { key: 'A' });
      assert.equal(await tx.push('a again', { key: 'A' }), a);
      // Two pushes of one key before either is stored: one item, one seq.
      const [b1, b2] = await Promise.all([tx.push('b', { key: 'B' }), tx.push('b twice', { key: 'B' })]);
      assert.equal(b1, b2);
      assert.deepEqual(await drain(rx), ['a', 'b']);
      // A batch: a remembered key, a key twice, new keys stored in one append.
      const many = await tx.pushMany(['c', 'a in a batch', 'd', 'c twice'], { keys: ['C', 'A', 'D', 'C'] });
      assert.deepEqual([many[1], many[3]], [a, many[0]]);
      assert.deepEqual(await drain(rx), ['c', 'd']);
      clock.advance(600);
      assert.equal(await tx.push('a after its ack', { key: 'A' }), a);
      if (hooks.reopen && store.features.reopen) {
        await tx.close();
        store = await suite.again(store, 'reopen');
        [tx, rx] = await open();
        assert.equal(await tx.push('a after a reopen', { key: 'A' }), a);
        assert.equal(await tx.push('b after a reopen', { key: 'B' }), b1);
        assert.deepEqual(await tx.pushMany(['c', 'd'], { keys: ['C', 'D'] }), [many[0], many[2]]);
      }
      assert.deepEqual(await drain(rx), []);
      clock.advance(400);
      const again = await tx.push('a, window over', { key: 'A' });
      assert.ok(again > b1, `a key past its window is stored again (seq ${again})`);
      assert.deepEqual(await drain(rx), ['a, window over']);
      await tx.close();
    },
  );
}
