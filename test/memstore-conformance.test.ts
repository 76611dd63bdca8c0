import { expect, test } from 'vitest';
import { runStoreConformance } from '../src/conformance.js';
import { MemStore } from '../src/mem-store.js';

runStoreConformance(test, { name: 'MemStore', create: () => new MemStore(), reopen: (previous) => previous });

test('runStoreConformance rejects bad arguments with typed errors', () => {
  expect(() => runStoreConformance('test' as never, { name: 'x', create: () => new MemStore() })).toThrow(TypeError);
  expect(() => runStoreConformance(test, undefined as never)).toThrow(TypeError);
  expect(() => runStoreConformance(test, { name: '', create: () => new MemStore() })).toThrow(RangeError);
  expect(() => runStoreConformance(test, { name: 'x' } as never)).toThrow(/options.create/);
  expect(() => runStoreConformance(test, { name: 'x', create: () => new MemStore(), reopen: 5 as never })).toThrow(/options.reopen/);
});
