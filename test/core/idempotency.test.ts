// Producer-side idempotency keys in the queue: push(value, { key }) stores nothing for a key the
// queue remembers, refusals of bad input, the window and maxKeys, concurrent pushes of one key,
// a failed or aborted first push, and stores without the feature.
import diagnostics from 'node:diagnostics_channel';
import { describe, expect, it } from 'vitest';
import { Builder, MemStore, QueueError } from '../../src/index.js';
import { ManualClock } from '../../src/testing/index.js';
import { RecordingStore, firstContractStore } from '../support/stores.js';

const code = (c: string) => (e: unknown) => e instanceof QueueError && e.code === c;

describe('idempotency keys', () => {
  it('aRetriedKeyStoresNothingAndResolvesWithTheSeqItHas', async () => {
    const store = new RecordingStore();
    const [tx, rx] = await new Builder(store).open();
    const seq = await tx.push('first', { key: 'k' });
    const appends = store.calls.filter((c) => c.op === 'append').length;
    expect(await tx.push('second', { key: 'k' })).toBe(seq);
    expect(await tx.push('third', { key: 'k', priority: 5, delayMs: 10 })).toBe(seq);
    expect(store.calls.filter((c) => c.op === 'append').length).toBe(appends);
    expect(rx.stats().ready).toBe(1);
    const item = rx.tryReserve()!;
    expect(new TextDecoder().decode(item.bytes)).toBe('first');
    await item.ack();
    expect(await tx.push('after ack', { key: 'k' })).toBe(seq);
    expect(rx.tryReserve()).toBeNull();
    await tx.close();
  });

  it('badKeysAreTypedErrorsAndStoreNothing', async () => {
    const store = new RecordingStore();
    const [tx, rx] = await new Builder(store).open();
    await expect(tx.push('a', { key: 5 as never })).rejects.toThrow(TypeError);
    await expect(tx.push('a', { key: '' })).rejects.toThrow(RangeError);
    await expect(tx.push('a', { key: 'x'.repeat(256) })).rejects.toThrow(/Expected `options.key` to be a string of 1 to 255 UTF-8 bytes/);
    await expect(tx.push('a', { key: 'é'.repeat(128) })).rejects.toThrow(RangeError);
    await expect(tx.push('a', { key: '\uDC00' })).rejects.toThrow(RangeError);
    await expect(tx.pushMany(['a'], { key: 'k' })).rejects.toThrow(TypeError);
    expect(store.calls).toEqual([]);
    expect(rx.stats().ready).toBe(0);
    // The longest key is fine, in bytes, not characters.
    await expect(tx.push('a', { key: 'é'.repeat(127) + 'x' })).resolves.toBe(1);
    await tx.close();
  });

  it('builderOptionsAreValidated', () => {
    const b = new Builder(new MemStore());
    expect(() => b.idempotency({ windowMs: 0 })).toThrow(RangeError);
    expect(() => b.idempotency({ windowMs: 1.5 })).toThrow(RangeError);
    expect(() => b.idempotency({ maxKeys: -1 })).toThrow(RangeError);
    expect(() => b.idempotency({ windowMs: '1' as never })).toThrow(TypeError);
    expect(() => b.idempotency({ window: 5 } as never)).toThrow(TypeError);
    expect(() => b.idempotency(null as never)).toThrow(TypeError);
  });

  it('aStoreWithoutTheFeatureRefusesKeyedPushesAndAnExplicitIdempotencyAtOpen', async () => {
    await expect(new Builder(firstContractStore()).idempotency({ windowMs: 1000 }).open()).rejects.toSatisfy(code('ERR_UNSUPPORTED'));
    const [tx, rx] = await new Builder(firstContractStore()).open();
    await expect(tx.push('a', { key: 'k' })).rejects.toSatisfy(code('ERR_UNSUPPORTED'));
    expect(rx.stats().ready).toBe(0);
    expect(await tx.push('plain')).toBe(1);
    await tx.close();
  });

  it('twoConcurrentPushesOfOneKeyStoreOneItem', async () => {
    const store = new RecordingStore();
    const [tx, rx] = await new Builder(store).open();
    store.hold = true;
    const a = tx.push('a', { key: 'k' });
    await store.heldCount(1);
    const b = tx.push('b', { key: 'k' });
    const c = tx.push('c', { key: 'other' });
    store.hold = false;
    store.releaseAll();
    const [sa, sb, sc] = await Promise.all([a, b, c]);
    expect(sb).toBe(sa);
    expect(sc).not.toBe(sa);
    expect(rx.stats().ready).toBe(2);
    await tx.close();
  });

  it('aPushOfTheKeyMadeWhileItsFirstPushIsStoredDuringTheCallStoresNothing', async () => {
    // Over MemStore a push is stored within push() once a call returned Store.done, and the
    // push event is published there: a subscriber pushing the same key must find it pending.
    for (const many of [false, true]) {
      const [tx, rx] = await new Builder(new MemStore()).open();
      await tx.push('warm-up');
      await rx.tryReserve()!.ack();
      let again: Promise<number | number[]> | undefined;
      const onPush = () => {
        if (again !== undefined) return;
        again = many ? tx.pushMany(['dup'], { keys: ['k'] }) : tx.push('dup', { key: 'k' });
      };
      diagnostics.subscribe('persistent-queue:push', onPush);
      try {
        const first = many ? tx.pushMany(['dup'], { keys: ['k'] }) : tx.push('dup', { key: 'k' });
        const seqs = [await first, await again!];
        expect(seqs).toEqual(many ? [[2], [2]] : [2, 2]);
        expect(rx.stats().ready).toBe(1);
      } finally {
        diagnostics.unsubscribe('persistent-queue:push', onPush);
      }
      await tx.close();
    }
  });

  it('aFailedFirstPushLetsTheWaitingPushOfItsKeyStoreItsOwnItem', async () => {
    const store = new RecordingStore();
    const [tx, rx] = await new Builder(store).open();
    store.failNextAppend = new QueueError('ERR_STORE_FULL', 'disk full');
    const a = tx.push('a', { key: 'k' });
    const b = tx.push('b', { key: 'k' });
    await expect(a).rejects.toSatisfy(code('ERR_STORE_FULL'));
    const seq = await b;
    const item = rx.tryReserve()!;
    expect([item.seq, new TextDecoder().decode(item.bytes)]).toEqual([seq, 'b']);
    expect(await tx.push('c', { key: 'k' })).toBe(seq);
    await tx.close();
  });

  it('anAbortedWaitForAnotherPushOfTheKeyRejectsOnlyTheWaiter', async () => {
    const store = new RecordingStore();
    const [tx, rx] = await new Builder(store).open();
    store.hold = true;
    const a = tx.push('a', { key: 'k' });
    await store.heldCount(1);
    const ac = new AbortController();
    const b = tx.push('b', { key: 'k', signal: ac.signal });
    ac.abort(new Error('gave up'));
    await expect(b).rejects.toThrow('gave up');
    store.hold = false;
    store.releaseAll();
    expect(await a).toBe(1);
    expect(rx.stats().ready).toBe(1);
    await tx.close();
  });

  it('aKeyIsForgottenOnceItsWindowHasPassedOnTheQueueClock', async () => {
    const clock = new ManualClock();
    const store = new MemStore();
    const [tx] = await new Builder(store).clock(clock).idempotency({ windowMs: 1000 }).open();
    const first = await tx.push('a', { key: 'k' });
    clock.advance(999);
    expect(await tx.push('a', { key: 'k' })).toBe(first);
    clock.advance(1);
    const second = await tx.push('a', { key: 'k' });
    expect(second).toBe(first + 1);
    expect(await tx.push('a', { key: 'k' })).toBe(second);
    await tx.close();
    // The store was told it may drop the old key: a reopen does not bring it back.
    const r = await store.open();
    expect(r.keys!.map((k) => k.seq)).toEqual([second]);
    await store.close();
  });

  it('maxKeysRefusesNewKeysWithErrKeysFullUntilOneExpires', async () => {
    const clock = new ManualClock();
    const store = new MemStore();
    const [tx, rx] = await new Builder(store).clock(clock).idempotency({ windowMs: 1000, maxKeys: 2 }).open();
    await tx.push('a', { key: 'a' });
    clock.advance(10);
    await tx.push('b', { key: 'b' });
    await expect(tx.push('c', { key: 'c' })).rejects.toSatisfy(code('ERR_KEYS_FULL'));
    expect(rx.stats().ready).toBe(2);
    // Known keys and unkeyed pushes still go.
    expect(await tx.push('a', { key: 'a' })).toBe(1);
    expect(await tx.push('plain')).toBe(3);
    clock.advance(990);
    expect(await tx.push('c', { key: 'c' })).toBe(4);
    await tx.close();
  });

  it('keysComeBackAfterAReopenAndOnlyTheNewestSeqOfAKeyCounts', async () => {
    const clock = new ManualClock();
    const store = new MemStore();
    let [tx] = await new Builder(store).clock(clock).idempotency({ windowMs: 1000 }).open();
    await tx.push('a', { key: 'k' });
    clock.advance(1000);
    const newer = await tx.push('a', { key: 'k' });
    await tx.close();
    [tx] = await new Builder(store).clock(clock).idempotency({ windowMs: 5000 }).open();
    expect(await tx.push('a', { key: 'k' })).toBe(newer);
    await tx.close();
  });

  it('aKeyedPushOverAClosedQueueRejectsWithErrClosed', async () => {
    const [tx] = await new Builder(new MemStore()).open();
    await tx.push('a', { key: 'k' });
    await tx.close();
    await expect(tx.push('a', { key: 'k' })).rejects.toSatisfy(code('ERR_CLOSED'));
  });
  it('pushManyWithKeysStoresEachNewKeyOnceInOneBatchAndGivesRememberedKeysTheirSeqs', async () => {
    const store = new RecordingStore();
    const [tx, rx] = await new Builder(store).open();
    const a = await tx.push('a', { key: 'A' });
    const appends = store.calls.filter((c) => c.op === 'append').length;
    const seqs = await tx.pushMany(['a again', 'b', 'b twice', 'c'], { keys: ['A', 'B', 'B', 'C'] });
    expect(seqs).toEqual([a, a + 1, a + 1, a + 2]);
    const batches = store.calls.filter((c) => c.op === 'append').slice(appends);
    expect(batches.map((c) => c.seqs)).toEqual([[a + 1, a + 2]]);
    expect(await tx.pushMany(['b', 'c'], { keys: ['B', 'C'] })).toEqual([a + 1, a + 2]);
    expect(await tx.push('c', { key: 'C' })).toBe(a + 2);
    const texts: string[] = [];
    for (let item = rx.tryReserve(); item; item = rx.tryReserve()) texts.push(new TextDecoder().decode(item.bytes));
    expect(texts).toEqual(['a', 'b', 'c']);
    await tx.close();
  });

  it('pushManyKeysAreCheckedWholeAndABadBatchStoresNothing', async () => {
    const store = new RecordingStore();
    const [tx, rx] = await new Builder(store).open();
    await expect(tx.pushMany(['a'], { keys: 'A' as never })).rejects.toThrow(TypeError);
    await expect(tx.pushMany(['a', 'b'], { keys: ['A'] })).rejects.toThrow(RangeError);
    await expect(tx.pushMany(['a', 'b'], { keys: ['A', ''] })).rejects.toThrow(/options.keys\[1\]/);
    await expect(tx.pushMany(['a', 'b'], { keys: ['A', 7 as never] })).rejects.toThrow(TypeError);
    await expect(tx.push('a', { keys: ['A'] } as never)).rejects.toThrow(TypeError);
    expect(store.calls).toEqual([]);
    expect(rx.stats().ready).toBe(0);
    expect(await tx.pushMany([], { keys: [] })).toEqual([]);
    const [plain] = await new Builder(firstContractStore()).open();
    await expect(plain.pushMany([], { keys: [] })).rejects.toSatisfy(code('ERR_UNSUPPORTED'));
    await expect(plain.pushMany(['a'], { keys: ['A'] })).rejects.toSatisfy(code('ERR_UNSUPPORTED'));
    await plain.close();
    await tx.close();
  });

  it('aPushManyBatchWhoseNewKeysPassMaxKeysIsRefusedWhole', async () => {
    const store = new MemStore();
    const [tx, rx] = await new Builder(store).idempotency({ maxKeys: 3 }).open();
    await tx.push('a', { key: 'A' });
    await expect(tx.pushMany(['a', 'b', 'c', 'd'], { keys: ['A', 'B', 'C', 'D'] })).rejects.toSatisfy(code('ERR_KEYS_FULL'));
    expect(rx.stats().ready).toBe(1);
    expect(await tx.pushMany(['a', 'b', 'c'], { keys: ['A', 'B', 'C'] })).toEqual([1, 2, 3]);
    await tx.close();
  });

  it('aPushManyKeyBeingStoredByAnotherPushWaitsForItsSeq', async () => {
    const store = new RecordingStore();
    const [tx, rx] = await new Builder(store).open();
    store.hold = true;
    const a = tx.push('a', { key: 'A' });
    await store.heldCount(1);
    const many = tx.pushMany(['a again', 'b'], { keys: ['A', 'B'] });
    await store.heldCount(1);
    store.hold = false;
    store.releaseAll();
    const first = await a;
    expect(await many).toEqual([first, first + 1]);
    expect(rx.stats().ready).toBe(2);
    await tx.close();
  });
  it('anAbortedKeyedPushLeavesItsKeysFreeForTheNextPush', async () => {
    const store = new RecordingStore();
    const [tx, rx] = await new Builder(store).capacity(2).open();
    await tx.pushMany(['fills', 'the queue']);
    const ac = new AbortController();
    const one = tx.push('a', { key: 'A', signal: ac.signal });
    const many = tx.pushMany(['b', 'c'], { keys: ['B', 'C'], signal: ac.signal });
    ac.abort(new Error('gave up'));
    await expect(one).rejects.toThrow('gave up');
    await expect(many).rejects.toThrow('gave up');
    await (await rx.reserve())!.ack();
    expect(await tx.push('a', { key: 'A' })).toBe(3);
    await (await rx.reserve())!.ack();
    expect(await tx.pushMany(['b'], { keys: ['B'] })).toEqual([4]);
    await tx.close();
  });
});
