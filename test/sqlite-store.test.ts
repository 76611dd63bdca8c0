import { createRequire } from 'node:module';
import { mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, test } from 'vitest';
import { isQueueError } from '../src/errors.js';
import { Builder } from '../src/queue.js';
import { SqliteStore } from '../src/sqlite-store.js';
import { freshDir, runBackendSuite } from './support/backend-suite.js';

runBackendSuite({
  name: 'SqliteStore',
  distModule: 'sqlite-store.js',
  className: 'SqliteStore',
  peer: 'better-sqlite3',
  peerOptions: "{ driver: 'better-sqlite3' }",
  open: (path, options) => SqliteStore.open(path, options),
  pathIn: (dir) => join(dir, 'queue.db'),
});

type Db = { prepare(sql: string): { get(...a: unknown[]): unknown; run(...a: unknown[]): unknown }; exec(sql: string): void; close(): void };
const Database = createRequire(import.meta.url)('better-sqlite3') as new (path: string) => Db;

async function withDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = freshDir('pq-sqlite-');
  try {
    await fn(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test('SqliteStore: the database is WAL, items live in `items` and nextSeq in `meta`, the file is 0o600', () =>
  withDir(async (dir) => {
    const path = join(dir, 'queue.db');
    const store = await SqliteStore.open(path);
    expect(['node:sqlite', 'better-sqlite3']).toContain(store.driver);
    const [tx, rx] = await new Builder(store).open();
    await tx.pushMany(['a', 'b', 'c']);
    await (await rx.reserve())!.ack();
    await tx.close();
    if (process.platform !== 'win32') expect(statSync(path).mode & 0o777).toBe(0o600);
    const db = new Database(path);
    try {
      expect(db.prepare('PRAGMA journal_mode').get()).toEqual({ journal_mode: 'wal' });
      expect(db.prepare('SELECT count(*) AS n FROM items').get()).toEqual({ n: 2 });
      expect(db.prepare("SELECT value FROM meta WHERE key = 'nextSeq'").get()).toEqual({ value: 4 });
    } finally {
      db.close();
    }
  }));

test('SqliteStore: a SQLite database that is not a queue is refused with ERR_STORE and left unchanged', () =>
  withDir(async (dir) => {
    const path = join(dir, 'other.db');
    const db = new Database(path);
    db.exec('CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT); INSERT INTO notes (text) VALUES (\'keep me\');');
    db.close();
    const before = readFileSync(path);
    await expect(SqliteStore.open(path)).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_STORE'));
    expect(readFileSync(path).equals(before)).toBe(true);
  }));

test('SqliteStore: a file that is not a database is refused with ERR_STORE and left unchanged', () =>
  withDir(async (dir) => {
    const path = join(dir, 'text.db');
    writeFileSync(path, 'this is not a database, but it is long enough to have a header: '.repeat(4));
    const before = readFileSync(path);
    await expect(SqliteStore.open(path)).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_STORE'));
    expect(readFileSync(path).equals(before)).toBe(true);
  }));

test('SqliteStore: a directory or a path in a missing directory is refused with ERR_STORE', () =>
  withDir(async (dir) => {
    mkdirSync(join(dir, 'sub'));
    await expect(SqliteStore.open(join(dir, 'sub'))).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_STORE'));
    await expect(SqliteStore.open(join(dir, 'missing', 'q.db'))).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_STORE'));
  }));

test('SqliteStore: a store written by a newer format is refused with ERR_UNSUPPORTED_VERSION and left unchanged', () =>
  withDir(async (dir) => {
    const path = join(dir, 'queue.db');
    await (await SqliteStore.open(path)).close();
    const db = new Database(path);
    db.prepare("UPDATE meta SET value = 2 WHERE key = 'format'").run();
    db.close();
    const before = readFileSync(path);
    await expect(SqliteStore.open(path)).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_UNSUPPORTED_VERSION'));
    expect(readFileSync(path).equals(before)).toBe(true);
  }));

test('SqliteStore: a bad driver option is a TypeError/RangeError', async () => {
  await expect(SqliteStore.open('/nonexistent/q.db', { driver: 'sqlite3' as 'node:sqlite' })).rejects.toThrow(RangeError);
  await expect(SqliteStore.open('/nonexistent/q.db', { driver: 3 as unknown as 'node:sqlite' })).rejects.toThrow(TypeError);
});

test('SqliteStore: read is synchronous, so tryReserve serves a backlog found at open', () =>
  withDir(async (dir) => {
    const path = join(dir, 'queue.db');
    let store = await SqliteStore.open(path);
    let [tx, rx] = await new Builder(store).open();
    await tx.pushMany(['x', 'y']);
    await tx.close();
    store = await SqliteStore.open(path);
    expect(Array.isArray(store.read({ after: 0, before: 10, limit: 10 }))).toBe(true);
    [tx, rx] = await new Builder(store).open();
    const item = rx.tryReserve();
    expect(item && new TextDecoder().decode(item.bytes)).toBe('x');
    await item!.ack();
    await tx.close();
  }));

test('SqliteStore: an ack of a seq that is not held rejects and removes nothing', () =>
  withDir(async (dir) => {
    const store = await SqliteStore.open(join(dir, 'queue.db'));
    const { nextSeq } = await store.open();
    await store.append([{ seq: nextSeq, bytes: new Uint8Array([1]) }], true);
    await expect(store.ack([nextSeq, nextSeq + 5], true)).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_STORE'));
    expect(store.read({ after: 0, before: Number.MAX_SAFE_INTEGER, limit: 10 }).map((i) => i.seq)).toEqual([nextSeq]);
    await store.close();
  }));
