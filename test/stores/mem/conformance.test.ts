import { expect, test } from 'vitest';
import { runStoreConformance } from '../../../src/conformance/index.js';
import { MemStore } from '../../../src/stores/mem/mem-store.js';
import type { StoreFeatures } from '../../../src/contract/store.js';

runStoreConformance(test, { name: 'MemStore', create: () => new MemStore(), reopen: (previous) => previous });

test('runStoreConformance rejects bad arguments with typed errors', () => {
  expect(() => runStoreConformance('test' as never, { name: 'x', create: () => new MemStore() })).toThrow(TypeError);
  expect(() => runStoreConformance(test, undefined as never)).toThrow(TypeError);
  expect(() => runStoreConformance(test, { name: '', create: () => new MemStore() })).toThrow(RangeError);
  expect(() => runStoreConformance(test, { name: 'x' } as never)).toThrow(/options.create/);
  expect(() => runStoreConformance(test, { name: 'x', create: () => new MemStore(), reopen: 5 as never })).toThrow(/options.reopen/);
});

test('reopen tests of a store without features.reopen are reported as skipped, never passed', async () => {
  class NoReopen extends MemStore {
    override readonly features: StoreFeatures = {
      reopen: false,
      crashSafe: false,
      deliveries: true,
      scheduling: true,
      idempotency: true,
      groups: true,
      schedules: true,
    };
  }
  const registered: { name: string; fn: (context?: unknown) => Promise<void> }[] = [];
  runStoreConformance((name, fn) => registered.push({ name, fn }), { name: 'NoReopen', create: () => new NoReopen(), reopen: (p) => p });
  const reopenTests = registered.filter((r) => /reopen|return to the store at close/.test(r.name) && !/declares/.test(r.name));
  expect(reopenTests.length).toBe(11);
  for (const r of reopenTests) {
    const notes: string[] = [];
    await r.fn({ skip: (note?: string) => notes.push(note ?? '') });
    expect(notes, r.name).toEqual(['NoReopen does not declare features.reopen']);
    // Without a way to skip, the test fails instead of passing silently.
    await expect(r.fn(undefined)).rejects.toThrow(/does not declare features.reopen/);
  }
});

test('out-of-order acks behind an item left unacked are dropped from memory without changing what reads see', async () => {
  const seed = Number(process.env.PQ_SEED ?? 0x5eed);
  let state = seed >>> 0;
  const random = (): number => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const repro = `reproduce: PQ_SEED=0x${seed.toString(16)} npx vitest run test/stores/mem/conformance.test.ts -t "dropped from memory"`;
  const store = new MemStore();
  const { nextSeq: first } = await store.open();
  const live = new Set<number>();
  let next = first;
  const bytes = new Uint8Array([1]);
  // Seq `first` is never acked: every other ack is out of order, for the whole run.
  for (let round = 0; round < 40; round++) {
    const batch = Array.from({ length: 200 }, () => ({ seq: next++, bytes }));
    await store.append(batch, false);
    for (const item of batch) live.add(item.seq);
    const ackable = [...live].filter((s) => s !== first && random() < 0.9);
    for (let i = ackable.length - 1; i > 0; i--) {
      const j = Math.floor(random() * (i + 1));
      [ackable[i], ackable[j]] = [ackable[j]!, ackable[i]!];
    }
    for (let i = 0; i < ackable.length; i += 50) {
      await store.ack(ackable.slice(i, i + 50), false);
      for (const s of ackable.slice(i, i + 50)) live.delete(s);
    }
    const want = [...live].sort((a, b) => a - b);
    const got = (store.read({ after: 0, before: Number.MAX_SAFE_INTEGER, limit: 1e9 }) as readonly { seq: number }[]).map((i) => i.seq);
    expect(got, repro).toEqual(want);
    // A read from the middle starts at the right place.
    const mid = want[want.length >> 1]!;
    const page = (store.read({ after: mid - 1, before: mid + 1000, limit: 5 }) as readonly { seq: number }[]).map((i) => i.seq);
    expect(page, repro).toEqual(want.filter((s) => s >= mid && s < mid + 1000).slice(0, 5));
    // A seq already acked is refused; the held ones are not.
    const gone = first + 1 + Math.floor(random() * (next - first - 1));
    if (!live.has(gone)) await expect(store.ack([gone], false), repro).rejects.toMatchObject({ code: 'ERR_STORE' });
  }
  await store.close();
  const again = await store.open();
  expect(again.count, repro).toBe(live.size);
  await store.close();
});
