// The stores that keep priorities and not-before times (features.scheduling), for the tests that
// run over each: a fresh store, and how to open it again over the same data after a close.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MemStore, type Store } from '../../src/index.js';
import type { ScheduleTarget } from '../../harness/scheduling-model.js';

export type Opened = { store: Store; reopen: () => Promise<Store> };
export type MakeStore = (cleanups: (() => void)[]) => Promise<Opened>;

function tempDir(cleanups: (() => void)[], prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

export function schedulingStores(): [string, MakeStore][] {
  const stores: [string, MakeStore][] = [
    [
      'MemStore',
      async () => {
        const store = new MemStore();
        return { store, reopen: async () => store };
      },
    ],
  ];
  void tempDir;
  return stores;
}

/** The stores the scheduling model runs over (harness/scheduling-model.ts). */
export function scheduleTargets(cleanups: (() => void)[]): [string, ScheduleTarget][] {
  void cleanups;
  return [
    [
      'MemStore',
      {
        name: 'MemStore',
        crashes: false,
        open: async () => new MemStore(),
        restart: async (previous) => previous,
      },
    ],
  ];
}
