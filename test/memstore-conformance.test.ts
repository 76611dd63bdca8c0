import { expect, test } from 'vitest';
import { runStoreConformance } from '../src/conformance.js';
import { MemStore } from '../src/mem-store.js';
import type { StoreFeatures } from '../src/store.js';

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
    override readonly features: StoreFeatures = { reopen: false, crashSafe: false };
  }
  const registered: { name: string; fn: (context?: unknown) => Promise<void> }[] = [];
  runStoreConformance((name, fn) => registered.push({ name, fn }), { name: 'NoReopen', create: () => new NoReopen(), reopen: (p) => p });
  const reopenTests = registered.filter((r) => /reopen|return to the store at close/.test(r.name) && !/declares/.test(r.name));
  expect(reopenTests.length).toBe(3);
  for (const r of reopenTests) {
    const notes: string[] = [];
    await r.fn({ skip: (note?: string) => notes.push(note ?? '') });
    expect(notes, r.name).toEqual(['NoReopen does not declare features.reopen']);
    // Without a way to skip, the test fails instead of passing silently.
    await expect(r.fn(undefined)).rejects.toThrow(/does not declare features.reopen/);
  }
});
