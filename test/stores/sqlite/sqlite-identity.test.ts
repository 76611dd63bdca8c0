/** SqliteStore's identity (FORMAT.md §10.6): a `meta` row created with the store, kept across reopens. */
import { createRequire } from 'node:module';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { expect, test } from 'vitest';
import { Builder } from '../../../src/core/builder.js';
import { SqliteStore } from '../../../src/stores/sqlite/index.js';
import { freshDir } from '../../support/backend-suite.js';

type Db = { prepare(sql: string): { get(...a: unknown[]): unknown; run(...a: unknown[]): unknown }; close(): void };
const Database = createRequire(import.meta.url)('better-sqlite3') as new (path: string) => Db;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

async function idOf(path: string): Promise<string | undefined> {
  const [tx] = await new Builder(await SqliteStore.open(path)).open();
  const id = tx.stats().storeId;
  await tx.close();
  return id;
}

test('SqliteStore: a new store gets a random identity in `meta`, kept across reopens, new when the file is created again', async () => {
  const dir = freshDir('pq-sqlite-id-');
  try {
    const path = join(dir, 'queue.db');
    const id = await idOf(path);
    expect(id).toMatch(UUID);
    expect(await idOf(path)).toBe(id);
    const db = new Database(path);
    try {
      expect(db.prepare("SELECT value FROM meta WHERE key = 'storeId'").get()).toEqual({ value: id });
    } finally {
      db.close();
    }
    for (const f of ['queue.db', 'queue.db-wal', 'queue.db-shm']) rmSync(join(dir, f), { force: true });
    const again = await idOf(path);
    expect(again).toMatch(UUID);
    expect(again).not.toBe(id);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('SqliteStore: a store written before identities gets one at its next open and keeps it', async () => {
  const dir = freshDir('pq-sqlite-id-');
  try {
    const path = join(dir, 'queue.db');
    await idOf(path);
    const db = new Database(path);
    db.prepare("DELETE FROM meta WHERE key = 'storeId'").run();
    db.close();
    const id = await idOf(path);
    expect(id).toMatch(UUID);
    expect(await idOf(path)).toBe(id);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
