// The peers a user would pick instead, driven directly (not through the Store contract) doing the
// same queue work with the same batching: better-sqlite3 12 (WAL; synchronous=FULL when durable,
// OFF otherwise) and classic-level (sync true/false). Each returns { msgs, seconds }.
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);

function withDir(base, prefix, body) {
  const dir = mkdtempSync(join(base, prefix));
  return Promise.resolve()
    .then(() => body(dir))
    .finally(() => rmSync(dir, { recursive: true, force: true }));
}

/**
 * SQLite: `mode` is 'perCommit' (batch inserts per transaction) or 'endToEnd' (a transaction of
 * `batch` inserts, then one that reads the `batch` oldest rows and deletes them).
 */
export function sqlitePeer(base, { durable, mode, batch, payload, count, budgetMs }) {
  const Database = require('better-sqlite3');
  return withDir(base, 'pq-sqlite-', (dir) => {
    const db = new Database(join(dir, 'q.db'));
    try {
      db.pragma('journal_mode = WAL');
      db.pragma(`synchronous = ${durable ? 'FULL' : 'OFF'}`);
      db.exec('CREATE TABLE q (seq INTEGER PRIMARY KEY, payload BLOB NOT NULL)');
      const insert = db.prepare('INSERT INTO q (seq, payload) VALUES (?, ?)');
      const oldest = db.prepare('SELECT seq, payload FROM q ORDER BY seq LIMIT ?');
      const remove = db.prepare('DELETE FROM q WHERE seq BETWEEN ? AND ?');
      let seq = 1;
      const insertMany = db.transaction((n) => {
        for (let k = 0; k < n; k++) insert.run(seq++, payload);
      });
      const takeMany = db.transaction((n) => {
        const rows = oldest.all(n);
        if (rows.length) remove.run(rows[0].seq, rows[rows.length - 1].seq);
        return rows.length;
      });
      const t0 = performance.now();
      const deadline = t0 + budgetMs;
      let msgs = 0;
      while (msgs < count && performance.now() < deadline) {
        if (batch === 1 && mode === 'perCommit') insert.run(seq++, payload);
        else insertMany(batch);
        if (mode === 'endToEnd') takeMany(batch);
        msgs += batch;
      }
      return { msgs, seconds: (performance.now() - t0) / 1000 };
    } finally {
      db.close();
    }
  });
}

const key = (seq) => String(seq).padStart(16, '0');

/** LevelDB: `batch` = 1 uses put(), otherwise batch(); 'endToEnd' also reads the oldest `batch` and deletes them in one batch. */
export function levelPeer(base, { sync, mode, batch, payload, count, budgetMs }) {
  return withDir(base, 'pq-level-', async (dir) => {
    const { ClassicLevel } = await import('classic-level');
    const db = new ClassicLevel(join(dir, 'db'), { keyEncoding: 'utf8', valueEncoding: 'view' });
    await db.open();
    try {
      let seq = 1;
      let readFrom = 0;
      const t0 = performance.now();
      const deadline = t0 + budgetMs;
      let msgs = 0;
      while (msgs < count && performance.now() < deadline) {
        if (batch === 1) await db.put(key(seq++), payload, { sync });
        else {
          const ops = new Array(batch);
          for (let k = 0; k < batch; k++) ops[k] = { type: 'put', key: key(seq++), value: payload };
          await db.batch(ops, { sync });
        }
        if (mode === 'endToEnd') {
          const rows = await db.iterator({ gt: key(readFrom), limit: batch }).all();
          await db.batch(
            rows.map(([k]) => ({ type: 'del', key: k })),
            { sync },
          );
          readFrom = Number(rows[rows.length - 1][0]);
        }
        msgs += batch;
      }
      return { msgs, seconds: (performance.now() - t0) / 1000 };
    } finally {
      await db.close();
    }
  });
}
