/** LogStore against the shipped Store conformance suite: on the real disk, and on the crash disk. */
import { afterAll, test } from 'vitest';
import { runStoreConformance } from '../../../src/conformance/index.js';
import { LogStore } from '../../../src/stores/log/log-store.js';
import { CrashFileSystem } from '../../../src/testing/index.js';
import { cleanupDirs, freshDir } from './helpers.js';

afterAll(cleanupDirs);

runStoreConformance(test, {
  name: 'LogStore',
  create: () => LogStore.open(freshDir(), { segmentBytes: 4096 }),
  reopen: (previous) => LogStore.open(previous.dir, { segmentBytes: 4096 }),
});

const disks = new WeakMap<LogStore, CrashFileSystem>();
let seed = 1;
runStoreConformance(test, {
  name: 'LogStore on CrashFileSystem',
  create: async () => {
    const fs = new CrashFileSystem({ seed: seed++ });
    const store = await LogStore.open('/store', { fs, segmentBytes: 4096 });
    disks.set(store, fs);
    return store;
  },
  reopen: async (previous) => {
    const fs = disks.get(previous)!;
    const store = await LogStore.open('/store', { fs, segmentBytes: 4096 });
    disks.set(store, fs);
    return store;
  },
  crash: async (previous) => {
    const fs = disks.get(previous)!.crash();
    const store = await LogStore.open('/store', { fs, segmentBytes: 4096 });
    disks.set(store, fs);
    return store;
  },
});
