// The stores that keep priorities and not-before times (features.scheduling), for the tests that
// run over each: a fresh store, and how to open it again over the same data after a close.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LogStore, MemStore, type Store } from '../../src/index.js';
import { LevelStore } from '../../src/stores/level/index.js';
import { SqliteStore } from '../../src/stores/sqlite/index.js';
import { CrashFileSystem } from '../../src/testing/index.js';
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
    [
      'LogStore',
      async (cleanups) => {
        const dir = tempDir(cleanups, 'pq-sched-');
        return { store: await LogStore.open(dir), reopen: () => LogStore.open(dir) };
      },
    ],
    [
      'SqliteStore',
      async (cleanups) => {
        const path = join(tempDir(cleanups, 'pq-sched-sqlite-'), 'queue.db');
        return { store: await SqliteStore.open(path), reopen: () => SqliteStore.open(path) };
      },
    ],
    [
      'LevelStore',
      async (cleanups) => {
        const path = join(tempDir(cleanups, 'pq-sched-level-'), 'queue');
        return { store: await LevelStore.open(path), reopen: () => LevelStore.open(path) };
      },
    ],
  ];
  return stores;
}

/** The stores the scheduling model runs over (harness/scheduling-model.ts). */
export function scheduleTargets(cleanups: (() => void)[]): [string, ScheduleTarget][] {
  // The crash disk of the current run: a crash replaces it with what survived.
  let fs: CrashFileSystem | undefined;
  let disks = 0;
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
    [
      'SqliteStore',
      {
        name: 'SqliteStore',
        crashes: false,
        open: async () => SqliteStore.open(join(tempDir(cleanups, 'pq-sched-model-sqlite-'), 'queue.db')),
        restart: async (previous) => SqliteStore.open((previous as SqliteStore).path),
      },
    ],
    [
      'LevelStore',
      {
        name: 'LevelStore',
        crashes: false,
        open: async () => LevelStore.open(join(tempDir(cleanups, 'pq-sched-model-level-'), 'queue')),
        restart: async (previous) => LevelStore.open((previous as LevelStore).path),
      },
    ],
    [
      'LogStore on the crash disk',
      {
        name: 'LogStore on the crash disk',
        crashes: true,
        open: async () => {
          fs = new CrashFileSystem({ seed: ++disks });
          return LogStore.open('/queue', { fs });
        },
        restart: async (_previous, how) => {
          if (how === 'crash') fs = fs!.crash();
          return LogStore.open('/queue', { fs: fs! });
        },
      },
    ],
  ];
}
