import { createRequire } from 'node:module';
import { mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, test } from 'vitest';
import { isQueueError } from '../../../src/contract/errors.js';
import { Builder } from '../../../src/core/builder.js';
import { SQLITE_FORMAT_VERSION, SqliteStore } from '../../../src/stores/sqlite/index.js';
import type { DeadLetter } from '../../../src/contract/store.js';
import { freshDir, runBackendSuite } from '../../support/backend-suite.js';
import { distUrl, lineWriterSource, runModule } from '../../support/child-process.js';

runBackendSuite({
  name: 'SqliteStore',
  distModule: 'stores/sqlite/index.js',
  className: 'SqliteStore',
  peer: 'better-sqlite3',
  peerOptions: "{ driver: 'better-sqlite3' }",
  open: (path, options) => SqliteStore.open(path, options),
  pathIn: (dir) => join(dir, 'queue.db'),
});

type Db = {
  prepare(sql: string): { get(...a: unknown[]): unknown; all(...a: unknown[]): unknown[]; run(...a: unknown[]): unknown };
  exec(sql: string): void;
  close(): void;
};
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
    db.exec("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT); INSERT INTO notes (text) VALUES ('keep me');");
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
    db.prepare("UPDATE meta SET value = 5 WHERE key = 'format'").run();
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

/** The format version and table names of a closed database. */
function layout(path: string): { format: number; tables: string[] } {
  const db = new Database(path);
  try {
    const format = (db.prepare("SELECT value FROM meta WHERE key = 'format'").get() as { value: number }).value;
    const tables = (db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").all() as { name: string }[]).map(
      (t) => t.name,
    );
    return { format, tables };
  } finally {
    db.close();
  }
}

const bytes = (text: string): Uint8Array => new TextEncoder().encode(text);
const dead = (seq: number, text: string, reason: string): DeadLetter => ({
  seq,
  bytes: bytes(text),
  deliveries: 5,
  firstDeliveredAt: 1_700_000_000_001,
  lastDeliveredAt: 1_700_000_000_002,
  deadAt: 1_700_000_000_003,
  reason,
});

test('SqliteStore: a store that never keeps delivery state stays at format 1 and works; the first dead letter makes it format 2', () =>
  withDir(async (dir) => {
    const path = join(dir, 'queue.db');
    expect(SQLITE_FORMAT_VERSION).toBe(4);
    // Written through the format-1 calls only: appends, acks, reads, a close; no delivery state.
    let store = await SqliteStore.open(path);
    await store.open();
    await store.append(
      [1, 2, 3].map((seq) => ({ seq, bytes: bytes('abc'[seq - 1]!) })),
      true,
    );
    expect(store.read({ after: 0, before: 4, limit: 10 }).length).toBe(3);
    await store.ack([1], true);
    await store.close();
    expect(layout(path)).toEqual({ format: 1, tables: ['items', 'meta'] });

    store = await SqliteStore.open(path);
    let r = await store.open();
    expect(r).toEqual({
      nextSeq: 4,
      count: 2,
      deliveredBelow: 1,
      marks: [],
      deadLetters: 0,
      scheduledFrom: 4,
      storeId: expect.any(String),
      keys: [],
    });
    expect(store.readDeadLetters({ after: 0, limit: 10 })).toEqual([]);
    await store.append([{ seq: 4, bytes: bytes('d') }], true);
    await store.ack([2], true);
    // Nothing new to store: the bound every format-1 store has, and no marks.
    store.markDelivered(1, [], true);
    // Contract violations on a format-1 store are refused and write nothing.
    await expect(store.dropDeadLetters([3], true)).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_STORE'));
    await expect(store.redrive([{ from: 3, item: { seq: 5, bytes: bytes('c') } }], true)).rejects.toSatisfy((e: unknown) =>
      isQueueError(e, 'ERR_STORE'),
    );
    await expect(store.deadLetter([dead(9, 'x', 'not held')])).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_STORE'));
    expect(() => store.markDelivered(5, [{ seq: 9, deliveries: 2, firstDeliveredAt: 0, lastDeliveredAt: 0, lastError: '' }], true)).toThrow(
      expect.objectContaining({ code: 'ERR_STORE' }),
    );
    await store.close();
    expect(layout(path)).toEqual({ format: 1, tables: ['items', 'meta'] });

    store = await SqliteStore.open(path);
    r = await store.open();
    expect([r.nextSeq, r.count]).toEqual([5, 2]);
    await store.deadLetter([dead(3, 'c', 'poison')]);
    await store.close();
    expect(layout(path)).toEqual({ format: 2, tables: ['dead', 'items', 'marks', 'meta'] });

    store = await SqliteStore.open(path);
    r = await store.open();
    expect(r).toEqual({
      nextSeq: 5,
      count: 1,
      deliveredBelow: 1,
      marks: [],
      deadLetters: 1,
      scheduledFrom: 5,
      storeId: expect.any(String),
      keys: [],
    });
    expect(store.readDeadLetters({ after: 0, limit: 10 }).map((d) => ({ ...d, bytes: new TextDecoder().decode(d.bytes) }))).toEqual([
      { ...dead(3, 'c', 'poison'), bytes: 'c' },
    ]);
    await store.close();
  }));

test('SqliteStore: the first delivery mark makes a format-1 store format 2; a refused one leaves it at format 1', () =>
  withDir(async (dir) => {
    const path = join(dir, 'queue.db');
    let store = await SqliteStore.open(path);
    await store.open();
    await store.append(
      [
        { seq: 1, bytes: bytes('a') },
        { seq: 2, bytes: bytes('b') },
      ],
      true,
    );
    const mark = { seq: 2, deliveries: 2, firstDeliveredAt: 10, lastDeliveredAt: 20, lastError: 'boom' };
    // One mark of a seq that is not held refuses the whole call, the upgrade with it.
    expect(() => store.markDelivered(3, [mark, { ...mark, seq: 7 }], false)).toThrow(expect.objectContaining({ code: 'ERR_STORE' }));
    await store.close();
    expect(layout(path).format).toBe(1);
    store = await SqliteStore.open(path);
    await store.open();
    await store.markDelivered(3, [mark], false);
    await store.ack([1], false);
    await store.close();
    expect(layout(path).format).toBe(2);
    store = await SqliteStore.open(path);
    expect(await store.open()).toEqual({
      nextSeq: 3,
      count: 1,
      deliveredBelow: 3,
      marks: [mark],
      deadLetters: 0,
      scheduledFrom: 3,
      storeId: expect.any(String),
      keys: [],
    });
    // The ack of a marked item deletes its mark in the same transaction.
    await store.ack([2], true);
    await store.close();
    const db = new Database(path);
    try {
      expect(db.prepare('SELECT count(*) AS n FROM marks').get()).toEqual({ n: 0 });
    } finally {
      db.close();
    }
  }));

test('SqliteStore: a queue opened over a format-1 store stores its first-delivery bound, which makes it format 2', () =>
  withDir(async (dir) => {
    const path = join(dir, 'queue.db');
    const store = await SqliteStore.open(path);
    await store.open();
    await store.append([{ seq: 1, bytes: bytes('a') }], true);
    await store.close();
    expect(layout(path).format).toBe(1);
    const [tx, rx] = await new Builder(await SqliteStore.open(path)).open();
    expect(new TextDecoder().decode((await rx.reserve())!.bytes)).toBe('a');
    await tx.close();
    expect(layout(path).format).toBe(2);
  }));

test('SqliteStore: a format-2 store is refused with ERR_UNSUPPORTED_VERSION at format 5 and left unchanged', () =>
  withDir(async (dir) => {
    const path = join(dir, 'queue.db');
    const store = await SqliteStore.open(path);
    await store.open();
    await store.append([{ seq: 1, bytes: bytes('a') }], true);
    await store.deadLetter([dead(1, 'a', 'poison')]);
    await store.close();
    expect(layout(path).format).toBe(2);
    const db = new Database(path);
    db.prepare("UPDATE meta SET value = 5 WHERE key = 'format'").run();
    db.close();
    const before = readFileSync(path);
    await expect(SqliteStore.open(path)).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_UNSUPPORTED_VERSION'));
    expect(readFileSync(path).equals(before)).toBe(true);
  }));

test('SqliteStore: contract violations of the delivery methods reject with ERR_STORE and change nothing', () =>
  withDir(async (dir) => {
    const store = await SqliteStore.open(join(dir, 'queue.db'));
    await store.open();
    await store.append(
      [1, 2, 3].map((seq) => ({ seq, bytes: bytes(`p${seq}`) })),
      true,
    );
    await store.deadLetter([dead(1, 'p1', 'first')]);
    const refused = (p: Promise<void>) => expect(p).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_STORE'));
    await refused(store.deadLetter([dead(2, 'p2', 'ok'), dead(1, 'p1', 'already dead')]));
    await refused(store.deadLetter([dead(2, 'p2', 'ok'), dead(2, 'p2', 'twice')]));
    await refused(store.deadLetter([dead(2, 'p2', 'x'.repeat(1025))]));
    await refused(store.dropDeadLetters([1, 2], true));
    await refused(store.redrive([{ from: 1, item: { seq: 3, bytes: bytes('p1') } }], true));
    await refused(store.redrive([{ from: 2, item: { seq: 4, bytes: bytes('p2') } }], true));
    await refused((async () => store.markDelivered(0, [], true))());
    await refused(
      (async () => store.markDelivered(4, [{ seq: 1, deliveries: 2, firstDeliveredAt: 0, lastDeliveredAt: 0, lastError: '' }], true))(),
    );
    await refused(
      (async () => store.markDelivered(4, [{ seq: 2, deliveries: 0, firstDeliveredAt: 0, lastDeliveredAt: 0, lastError: '' }], true))(),
    );
    expect(store.read({ after: 0, before: 10, limit: 10 }).map((i) => i.seq)).toEqual([2, 3]);
    expect(store.readDeadLetters({ after: 0, limit: 10 }).map((d) => [d.seq, d.reason])).toEqual([[1, 'first']]);
    await store.close();
    const again = await SqliteStore.open(join(dir, 'queue.db'));
    expect(await again.open()).toEqual({
      nextSeq: 4,
      count: 2,
      deliveredBelow: 1,
      marks: [],
      deadLetters: 1,
      scheduledFrom: 4,
      storeId: expect.any(String),
      keys: [],
    });
    await again.close();
  }));

test('SqliteStore: a dead letter that resolved survives kill -9 of the writer process, even under durability none', () =>
  withDir(async (dir) => {
    const path = join(dir, 'queue.db');
    const writer = runModule(
      dir,
      'dead-writer.mjs',
      `import { SqliteStore } from ${JSON.stringify(distUrl('stores/sqlite/index.js'))};
${lineWriterSource}
const store = await SqliteStore.open(process.argv[2]);
await store.open();
const bytes = (s) => new TextEncoder().encode(s);
for (let seq = 1; ; seq += 2) {
  // Unsynced appends and acks around the synced move: the move alone must survive.
  await store.append([{ seq, bytes: bytes('p' + seq) }, { seq: seq + 1, bytes: bytes('p' + (seq + 1)) }], false);
  await store.deadLetter([{ seq, bytes: bytes('p' + seq), deliveries: 3, firstDeliveredAt: 1, lastDeliveredAt: 2, deadAt: 3, reason: 'r' + seq }]);
  out(String(seq)); // in the pipe when it returns: the kill may come right after
  await store.ack([seq + 1], false);
}
`,
      [path],
    );
    try {
      await writer.until((lines) => lines.length >= 200);
    } finally {
      await writer.kill();
    }
    const moved = writer.lines.filter((l) => /^\d+$/.test(l)).map(Number);
    const store = await SqliteStore.open(path);
    const r = await store.open();
    const held = store.readDeadLetters({ after: 0, limit: 1_000_000 });
    const bySeq = new Map(held.map((d) => [d.seq, d]));
    const missing = moved.filter((seq) => bySeq.get(seq)?.reason !== `r${seq}`);
    expect(missing, 'dead letters reported moved and missing after kill -9').toEqual([]);
    // Never in both: no dead letter is also still an item.
    const items = new Set(store.read({ after: 0, before: Number.MAX_SAFE_INTEGER, limit: 1_000_000 }).map((i) => i.seq));
    expect(held.filter((d) => items.has(d.seq))).toEqual([]);
    expect(r.deadLetters).toBe(held.length);
    expect(r.nextSeq).toBeGreaterThan(Math.max(...moved) + 1);
    await store.close();
  }));
