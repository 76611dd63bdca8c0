import { test } from 'vitest';
import { runStoreConformance } from '../src/conformance.js';
import { MemStore } from '../src/mem-store.js';

runStoreConformance(test, { name: 'MemStore', create: () => new MemStore(), reopen: (previous) => previous });
