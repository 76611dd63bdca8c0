/**
 * A redelivery after a real crash: a child process handles an item under effectivelyOnce with a
 * LogProcessedSet, writes its side effect (a line in a file, fsynced), has the seq recorded, and
 * is SIGKILLed before the ack. The next process gets the item again (delivery 2) and skips it:
 * the side effect is in the file once. Children import the built package (dist/).
 */
import { appendFileSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { LogStore } from '../../src/stores/log/log-store.js';
import { effectivelyOnce } from '../../src/once/processed-set.js';
import { LogProcessedSet } from '../../src/once/log-processed-set.js';
import { Builder } from '../../src/core/builder.js';
import { distUrl, runModule } from '../support/child-process.js';

let dir: string;
afterEach(() => rmSync(dir, { recursive: true, force: true }));

const child = `
import { closeSync, fsyncSync, openSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { Builder, LogProcessedSet, LogStore, effectivelyOnce } from ${JSON.stringify(distUrl('index.js'))};
const dir = process.argv[2];
const [tx, rx] = await new Builder(await LogStore.open(join(dir, 'q'))).open();
await tx.pushMany(['order-1', 'order-2']);
const set = await LogProcessedSet.open(join(dir, 'set'));
const record = set.record.bind(set);
set.record = async (seq) => {
  await record(seq);
  // Recorded and durable; the ack has not been issued: die here.
  console.log('recorded ' + seq);
  process.kill(process.pid, 'SIGKILL');
};
const once = effectivelyOnce(rx, set, (item) => {
  const fd = openSync(join(dir, 'effects.log'), 'a');
  writeSync(fd, new TextDecoder().decode(item.bytes) + '\\n');
  fsyncSync(fd);
  closeSync(fd);
});
await rx.process(once);
`;

it('anItemWhoseHandlerWasKilledBeforeItsAckIsSkippedByTheNextProcess', async () => {
  dir = mkdtempSync(join(tmpdir(), 'pq-processed-kill-'));
  const lines = runModule(dir, 'child.mjs', child, [dir]);
  await lines.until((l) => l.includes('recorded 1'));
  await new Promise((resolve) =>
    lines.child.exitCode !== null || lines.child.signalCode !== null ? resolve(null) : lines.child.once('exit', resolve),
  );
  expect(lines.child.signalCode).toBe('SIGKILL');
  expect(readFileSync(join(dir, 'effects.log'), 'utf8')).toBe('order-1\n');

  const set = await LogProcessedSet.open(join(dir, 'set'));
  expect(set.has(1)).toBe(true);
  const [, rx] = await new Builder(await LogStore.open(join(dir, 'q'))).open();
  const deliveries: [number, number][] = [];
  const once = effectivelyOnce(rx, set, (item) => {
    appendFileSync(join(dir, 'effects.log'), `${new TextDecoder().decode(item.bytes)}\n`);
  });
  const stop = new AbortController();
  void rx.onIdle().then(() => stop.abort());
  await rx.process(
    async (item, context) => {
      deliveries.push([item.seq, item.deliveries]);
      await once(item, context);
    },
    { signal: stop.signal },
  );
  // After the crash order-1 counts the delivery it was killed in; order-2, never handed out, counts
  // none (README "Delivery counts": no record counts a delivery that has not happened).
  expect(deliveries).toEqual([
    [1, 2],
    [2, 1],
  ]);
  expect(once.skipped).toBe(1);
  expect(readFileSync(join(dir, 'effects.log'), 'utf8')).toBe('order-1\norder-2\n');
  await once.flush();
  expect(set.size).toBe(0);
  await rx.close();
  await set.close();
});

const sqliteChild = `
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { Builder, LogStore, effectivelyOnce } from ${JSON.stringify(distUrl('index.js'))};
import { SqliteProcessedSet } from ${JSON.stringify(distUrl('stores/sqlite/index.js'))};
const Database = createRequire(import.meta.url)('better-sqlite3');
const dir = process.argv[2];
const db = new Database(join(dir, 'app.db'));
db.exec('PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; CREATE TABLE IF NOT EXISTS orders (id TEXT)');
const [tx, rx] = await new Builder(await LogStore.open(join(dir, 'q'))).open();
await tx.pushMany(['order-1', 'order-2']);
const set = new SqliteProcessedSet(db);
const runOnce = set.runOnce.bind(set);
set.runOnce = (seq, effect) => {
  const ran = runOnce(seq, effect);
  // The order and the record committed together; the ack has not been issued: die here.
  console.log('committed ' + seq);
  process.kill(process.pid, 'SIGKILL');
  return ran;
};
const insert = db.prepare('INSERT INTO orders (id) VALUES (?)');
await rx.process(effectivelyOnce(rx, set, (item) => void insert.run(new TextDecoder().decode(item.bytes))));
`;

it('anItemWhoseSqliteTransactionCommittedBeforeTheKillIsSkippedByTheNextProcess', async () => {
  dir = mkdtempSync(join(tmpdir(), 'pq-processed-kill-'));
  const lines = runModule(dir, 'child.mjs', sqliteChild, [dir], [], { NODE_PATH: join(import.meta.dirname, '..', '..', 'node_modules') });
  await lines.until((l) => l.includes('committed 1'));
  await new Promise((resolve) =>
    lines.child.exitCode !== null || lines.child.signalCode !== null ? resolve(null) : lines.child.once('exit', resolve),
  );
  expect(lines.child.signalCode).toBe('SIGKILL');

  const { createRequire } = await import('node:module');
  const Database = createRequire(import.meta.url)('better-sqlite3') as new (
    path: string,
  ) => {
    exec(sql: string): unknown;
    prepare(sql: string): { run(...p: unknown[]): unknown; get(...p: unknown[]): unknown; all(): unknown[] };
    close(): void;
  };
  const { SqliteProcessedSet } = await import('../../src/stores/sqlite/index.js');
  const db = new Database(join(dir, 'app.db'));
  const set = new SqliteProcessedSet(db);
  const [, rx] = await new Builder(await LogStore.open(join(dir, 'q'))).open();
  const insert = db.prepare('INSERT INTO orders (id) VALUES (?)');
  const once = effectivelyOnce(rx, set, (item) => void insert.run(new TextDecoder().decode(item.bytes)));
  const stop = new AbortController();
  void rx.onIdle().then(() => stop.abort());
  await rx.process(once, { signal: stop.signal });
  expect(once.skipped).toBe(1);
  expect((db.prepare('SELECT id FROM orders ORDER BY id').all() as { id: string }[]).map((r) => r.id)).toEqual(['order-1', 'order-2']);
  await rx.close();
  db.close();
});
