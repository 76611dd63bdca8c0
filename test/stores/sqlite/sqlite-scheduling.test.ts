import { createRequire } from 'node:module';
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { expect, test } from 'vitest';
import { isQueueError } from '../../../src/contract/errors.js';
import { SqliteStore } from '../../../src/stores/sqlite/index.js';
import { freshDir } from '../../support/backend-suite.js';
import { runSchedulingSuite } from '../../support/scheduling-suite.js';
import { runKeySuite } from '../../support/key-suite.js';

type Db = {
  prepare(sql: string): { get(...a: unknown[]): unknown; all(...a: unknown[]): unknown[]; run(...a: unknown[]): unknown };
  exec(sql: string): void;
  close(): void;
};
const Database = createRequire(import.meta.url)('better-sqlite3') as new (path: string) => Db;

function withDb<T>(path: string, fn: (db: Db) => T): T {
  const db = new Database(path);
  try {
    return fn(db);
  } finally {
    db.close();
  }
}

runSchedulingSuite({
  name: 'SqliteStore',
  distModule: 'stores/sqlite/index.js',
  className: 'SqliteStore',
  open: (path) => SqliteStore.open(path),
  pathIn: (dir) => join(dir, 'queue.db'),
  format: async (path) =>
    withDb(path, (db) => (db.prepare("SELECT value FROM meta WHERE key = 'format'").get() as { value: number }).value),
  setFormat: async (path, format) => withDb(path, (db) => void db.prepare("UPDATE meta SET value = ? WHERE key = 'format'").run(format)),
  scheduleEntries: async (path) =>
    withDb(path, (db) => {
      const tables = (db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as { name: string }[]).map((t) => t.name);
      if (!tables.includes('schedule')) return [];
      return (db.prepare('SELECT seq FROM schedule ORDER BY seq').all() as { seq: number }[]).map((r) => r.seq);
    }),
  snapshot: async (path) => readFileSync(path),
});

async function withPath(fn: (path: string) => Promise<void>): Promise<void> {
  const dir = freshDir('pq-sqlite-sched-');
  try {
    await fn(join(dir, 'queue.db'));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const bytes = (text: string): Uint8Array => new TextEncoder().encode(text);

/** The statement of FORMAT.md's section `heading` that starts with `start`, without its `;`. */
function formatDocStatement(heading: string, start: string): string {
  const doc = readFileSync(new URL('../../../FORMAT.md', import.meta.url), 'utf8');
  const section = doc.slice(doc.indexOf(heading));
  const line = section.split('\n').find((l) => l.startsWith(start));
  if (line === undefined) throw new Error(`FORMAT.md ${heading} has no statement starting with ${start}`);
  return line.replace(/;$/, '');
}

test('SqliteStore: a scheduled item is a row of `schedule` (seq, priority, not_before); a plain item has none', () =>
  withPath(async (path) => {
    const store = await SqliteStore.open(path);
    await store.open();
    await store.append(
      [
        { seq: 1, bytes: bytes('a') },
        { seq: 2, bytes: bytes('b'), priority: -128, notBefore: 9_007_199_254_740_991 },
        { seq: 3, bytes: bytes('c'), notBefore: 1_700_000_000_000 },
      ],
      true,
    );
    await store.close();
    withDb(path, (db) => {
      // The table is created exactly as FORMAT.md §10.3 writes it.
      expect(db.prepare("SELECT sql FROM sqlite_master WHERE name = 'schedule'").get()).toEqual({
        sql: formatDocStatement('### 10.3', 'CREATE TABLE schedule'),
      });
      expect(db.prepare('SELECT seq, priority, not_before FROM schedule ORDER BY seq').all()).toEqual([
        { seq: 2, priority: -128, not_before: 9_007_199_254_740_991 },
        { seq: 3, priority: 0, not_before: 1_700_000_000_000 },
      ]);
      // The items table is unchanged: two columns, the payload as it was pushed.
      expect(db.prepare('SELECT seq, bytes FROM items ORDER BY seq').all()).toEqual(
        [1, 2, 3].map((seq) => ({ seq, bytes: Buffer.from('abc'[seq - 1]!) })),
      );
      const tables = (db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").all() as { name: string }[]).map(
        (t) => t.name,
      );
      expect(tables).toEqual(['dead', 'items', 'marks', 'meta', 'schedule']);
    });
  }));

test('SqliteStore: a scheduled append that is refused leaves a format-1 store at format 1 without the schedule table', () =>
  withPath(async (path) => {
    const store = await SqliteStore.open(path);
    await store.open();
    await store.append([{ seq: 1, bytes: bytes('a') }], true);
    // Refused before the transaction begins: one bad field refuses the whole batch.
    await expect(
      store.append(
        [
          { seq: 2, bytes: bytes('b'), priority: 5 },
          { seq: 3, bytes: bytes('c'), priority: 200 },
        ],
        true,
      ),
    ).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_STORE'));
    await store.close();
    withDb(path, (db) => {
      expect(db.prepare("SELECT value FROM meta WHERE key = 'format'").get()).toEqual({ value: 1 });
      expect(db.prepare("SELECT count(*) AS n FROM sqlite_master WHERE name = 'schedule'").get()).toEqual({ n: 0 });
    });
  }));

test('SqliteStore: a format-3 store without its schedule table is refused with ERR_CORRUPT and left unchanged', () =>
  withPath(async (path) => {
    const store = await SqliteStore.open(path);
    await store.open();
    await store.append([{ seq: 1, bytes: bytes('a'), priority: 1 }], true);
    await store.close();
    withDb(path, (db) => db.exec('DROP TABLE schedule'));
    const before = readFileSync(path);
    await expect(SqliteStore.open(path)).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_CORRUPT'));
    expect(readFileSync(path).equals(before)).toBe(true);
  }));

test('SqliteStore: an append whose transaction rolls back after creating the schedule table leaves format 1, and the next one upgrades', () =>
  withPath(async (path) => {
    let store = await SqliteStore.open(path);
    await store.open();
    await store.append([{ seq: 1, bytes: bytes('a') }], true);
    await store.close();
    // A trigger makes the last statement of the next append (raising nextSeq to 4) fail, after
    // the transaction created the schedule table and stored a row in it.
    withDb(path, (db) =>
      db.exec(
        "CREATE TRIGGER fail_once BEFORE UPDATE ON meta WHEN NEW.key = 'nextSeq' AND NEW.value = 4 BEGIN SELECT RAISE(ABORT, 'refused by the test'); END",
      ),
    );
    store = await SqliteStore.open(path);
    await store.open();
    await expect(
      store.append(
        [
          { seq: 2, bytes: bytes('b') },
          { seq: 3, bytes: bytes('c'), priority: 7 },
        ],
        true,
      ),
    ).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_STORE'));
    expect(store.read({ after: 0, before: 10, limit: 10 }).map((i) => i.seq)).toEqual([1]);
    // The store did not keep statements over the table that was rolled back.
    await store.append([{ seq: 2, bytes: bytes('b'), priority: 7 }], true);
    expect(store.read({ after: 0, before: 10, limit: 10 }).map((i) => ({ ...i, bytes: Buffer.from(i.bytes).toString() }))).toEqual([
      { seq: 1, bytes: 'a' },
      { seq: 2, bytes: 'b', priority: 7 },
    ]);
    await store.ack([2], true);
    await store.close();
    withDb(path, (db) => {
      expect(db.prepare("SELECT value FROM meta WHERE key = 'format'").get()).toEqual({ value: 3 });
      expect(db.prepare('SELECT count(*) AS n FROM schedule').get()).toEqual({ n: 0 });
    });
  }));

test.each([
  ['0', 0],
  ['-1', -1],
  ['2.5', 2.5],
  ["'three'", 'three'],
  ["x'03'", Buffer.from([3])],
])('SqliteStore: a meta.format of %s, not an integer of at least 1, is refused with ERR_CORRUPT and left unchanged', (_shown, value) =>
  withPath(async (path) => {
    const store = await SqliteStore.open(path);
    await store.open();
    await store.append([{ seq: 1, bytes: bytes('a') }], true);
    await store.close();
    withDb(path, (db) => void db.prepare("UPDATE meta SET value = ? WHERE key = 'format'").run(value));
    const before = readFileSync(path);
    await expect(SqliteStore.open(path)).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_CORRUPT'));
    expect(readFileSync(path).equals(before)).toBe(true);
  }),
);

test.each([
  [128, 0],
  [-129, 0],
  [1.5, 0],
  ['high', 0],
  [1, -1],
  [1, 2.5],
  [1, 'later'],
  [1, 2n ** 60n],
  [1, Buffer.from([1])],
])(
  'SqliteStore: a schedule row (priority %o, not_before %o) the contract refuses is ERR_CORRUPT when its item is read',
  (priority, notBefore) =>
    withPath(async (path) => {
      let store = await SqliteStore.open(path);
      await store.open();
      await store.append(
        [
          { seq: 1, bytes: bytes('a') },
          { seq: 2, bytes: bytes('b'), priority: 3, notBefore: 1_700_000_000_000 },
        ],
        true,
      );
      await store.close();
      withDb(path, (db) => void db.prepare('UPDATE schedule SET priority = ?, not_before = ? WHERE seq = 2').run(priority, notBefore));
      store = await SqliteStore.open(path);
      await store.open();
      // The plain item before it still reads; a read that reaches the row returns nothing.
      expect(store.read({ after: 0, before: 2, limit: 10 }).map((i) => i.seq)).toEqual([1]);
      expect(() => store.read({ after: 0, before: 10, limit: 10 })).toThrow(expect.objectContaining({ code: 'ERR_CORRUPT' }));
      await store.close();
    }),
);

runKeySuite({
  name: 'SqliteStore',
  open: (path) => SqliteStore.open(path),
  pathIn: (dir) => join(dir, 'queue.db'),
  format: async (path) =>
    withDb(path, (db) => (db.prepare("SELECT value FROM meta WHERE key = 'format'").get() as { value: number }).value),
  setFormat: async (path, format) => withDb(path, (db) => void db.prepare("UPDATE meta SET value = ? WHERE key = 'format'").run(format)),
  keyEntries: async (path) =>
    withDb(path, (db) => {
      const tables = (db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as { name: string }[]).map((t) => t.name);
      if (!tables.includes('keys')) return [];
      return (db.prepare('SELECT seq FROM keys ORDER BY seq').all() as { seq: number }[]).map((r) => r.seq);
    }),
  damageKey: async (path, seq) => withDb(path, (db) => void db.prepare("UPDATE keys SET key = '' WHERE seq = ?").run(seq)),
  snapshot: async (path) => readFileSync(path),
});

test('SqliteStore: the keys table is the statement of FORMAT.md §10.5', () =>
  withPath(async (path) => {
    const store = await SqliteStore.open(path);
    await store.open();
    await store.append([{ seq: 1, bytes: bytes('a'), key: 'k', keyedAt: 5 }], true);
    await store.close();
    const sql = withDb(path, (db) => (db.prepare("SELECT sql FROM sqlite_master WHERE name = 'keys'").get() as { sql: string }).sql);
    expect(sql).toBe(formatDocStatement('### 10.5', 'CREATE TABLE keys'));
    expect(withDb(path, (db) => db.prepare('SELECT seq, key, keyed_at FROM keys').all())).toEqual([{ seq: 1, key: 'k', keyed_at: 5 }]);
  }));
