/**
 * SqliteProcessedSet: a processed set in a table of the user's own SQLite database (a
 * better-sqlite3 `Database`), written in the same transaction as the handler's side effects, so
 * that both commit or neither does. docs/guides/effectively-once.md "Processed sets", docs/internals/core.md "Processed sets".
 *
 * Nothing is loaded here: the caller hands over a database it opened, and the set uses only
 * `exec` and `prepare` on it. better-sqlite3 runs statements synchronously, so the transaction,
 * and the handler inside it, are synchronous.
 */
import type { TransactionalProcessedSet } from '../../once/processed-set.js';
import { STORE_ID_PATTERN } from '../../contract/store.js';
import { expectation, knownKeys, optionsObject } from '../../lib/validate.js';
import type { SqlDatabase, SqlStatement } from './driver.js';

export interface SqliteProcessedSetOptions {
  /**
   * The table that holds the processed seqs, created if missing: `(seq INTEGER PRIMARY KEY)`.
   * Letters, digits and underscores, not starting with a digit. Beside it, `<table>_meta`
   * `(key TEXT PRIMARY KEY, value TEXT)` holds one row, `storeId`: the identity of the queue's
   * store the set serves, written with the first record.
   * @default 'pq_processed'
   */
  table?: string;
}

/** The part of a better-sqlite3 `Database` the set uses. */
export interface SqliteProcessedSetDatabase {
  exec(sql: string): unknown;
  prepare(sql: string): { run(...params: unknown[]): unknown; get(...params: unknown[]): unknown };
}

const TABLE_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;
/** The key of the meta row that holds the store identity. */
const STORE_ID_KEY = 'storeId';
/** The savepoint name: a savepoint nests inside a transaction the caller may have open already. */
const SAVEPOINT = 'pq_processed_once';

function checkSeq(name: string, seq: unknown): number {
  if (typeof seq !== 'number') throw new TypeError(expectation(name, 'a positive integer', seq));
  if (!Number.isSafeInteger(seq) || seq < 1) throw new RangeError(expectation(name, 'a positive integer', seq));
  return seq;
}

/** A processed set in a table of a better-sqlite3 database, written in the side effects' transaction. */
export class SqliteProcessedSet implements TransactionalProcessedSet {
  readonly table: string;
  readonly #db: SqlDatabase;
  readonly #has: SqlStatement;
  readonly #insert: SqlStatement;
  readonly #delete: SqlStatement;
  readonly #max: SqlStatement;
  readonly #any: SqlStatement;
  readonly #getStoreId: SqlStatement;
  readonly #putStoreId: SqlStatement;
  /**
   * An identity bound while the table was empty, written in the transaction of the first record.
   * Kept after that: a transaction of the caller's that rolls back takes the row with the record,
   * and the next first record writes it again.
   */
  #binding: string | undefined;

  /** Creates the table if missing (in its own statement, committed at once). */
  constructor(db: SqliteProcessedSetDatabase, options?: SqliteProcessedSetOptions) {
    if (db === null || typeof db !== 'object' || typeof db.exec !== 'function' || typeof db.prepare !== 'function') {
      throw new TypeError(expectation('db', 'a better-sqlite3 Database', db));
    }
    const o = optionsObject('options', options);
    knownKeys('options', o, ['table']);
    const table = o.table ?? 'pq_processed';
    if (typeof table !== 'string') throw new TypeError(expectation('options.table', 'a table name', table));
    if (!TABLE_NAME.test(table))
      throw new RangeError(expectation('options.table', 'a table name of letters, digits and underscores', table));
    this.table = table;
    this.#db = db as unknown as SqlDatabase;
    this.#db.exec(`CREATE TABLE IF NOT EXISTS "${table}" (seq INTEGER PRIMARY KEY NOT NULL)`);
    this.#db.exec(`CREATE TABLE IF NOT EXISTS "${table}_meta" (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL)`);
    this.#has = this.#db.prepare(`SELECT 1 AS found FROM "${table}" WHERE seq = ?`);
    this.#insert = this.#db.prepare(`INSERT OR IGNORE INTO "${table}" (seq) VALUES (?)`);
    this.#delete = this.#db.prepare(`DELETE FROM "${table}" WHERE seq = ?`);
    this.#max = this.#db.prepare(`SELECT coalesce(max(seq), 0) AS highest FROM "${table}"`);
    this.#any = this.#db.prepare(`SELECT 1 AS found FROM "${table}" LIMIT 1`);
    this.#getStoreId = this.#db.prepare(`SELECT value FROM "${table}_meta" WHERE key = '${STORE_ID_KEY}'`);
    this.#putStoreId = this.#db.prepare(`INSERT OR IGNORE INTO "${table}_meta" (key, value) VALUES ('${STORE_ID_KEY}', ?)`);
  }

  /** The identity of the queue's store the set serves, as kept in `<table>_meta`; null when none is. */
  get storeId(): string | null {
    const row = this.#getStoreId.get() as { value: string } | undefined;
    return row === undefined ? null : row.value;
  }

  /**
   * Bind the set to the store `storeId` unless it serves one already; answers the identity it
   * serves. A set holding records and no identity (recorded before it was bound, or by an earlier
   * release) answers null and stays unbound: what it holds may be another store's. Otherwise the
   * identity is inserted in the transaction of the next record, so an unused set keeps none.
   * `effectivelyOnce` calls it.
   */
  bind(storeId: string): string | null {
    if (typeof storeId !== 'string') throw new TypeError(expectation('storeId', 'a store identity', storeId));
    if (!STORE_ID_PATTERN.test(storeId))
      throw new RangeError(expectation('storeId', 'a store identity of 1 to 64 characters from [A-Za-z0-9._-]', storeId));
    const kept = this.storeId;
    if (kept !== null) return kept;
    if (this.#any.get() !== undefined) return null;
    this.#binding ??= storeId;
    return this.#binding;
  }

  /** Inside the transaction of a record: the first record of a bound set writes its identity. */
  #writeBinding(): void {
    if (this.#binding !== undefined && this.#any.get() === undefined) this.#putStoreId.run(this.#binding);
  }

  has(seq: number): boolean {
    checkSeq('seq', seq);
    return this.#has.get(seq) !== undefined;
  }

  /**
   * Insert `seq`. On its own it commits at once; call it inside your own transaction (or use
   * {@link runOnce}) to commit it with the side effects.
   */
  record(seq: number): void {
    checkSeq('seq', seq);
    if (this.#binding === undefined) {
      this.#insert.run(seq);
      return;
    }
    this.#transaction(() => {
      this.#writeBinding();
      this.#insert.run(seq);
    });
  }

  forget(seqs: readonly number[]): void {
    if (!Array.isArray(seqs)) throw new TypeError(expectation('seqs', 'an array of positive integers', seqs));
    for (let i = 0; i < seqs.length; i++) checkSeq(`seqs[${i}]`, seqs[i]);
    if (seqs.length === 0) return;
    this.#transaction(() => {
      for (const seq of seqs) this.#delete.run(seq);
    });
  }

  highest(): number {
    const row = this.#max.get() as { highest: number | bigint };
    return Number(row.highest);
  }

  /**
   * In one transaction (a savepoint, so it nests in one the caller has open): unless `seq` is
   * recorded, run `effect` and insert `seq`. True when the effect ran. When `effect` throws,
   * everything it wrote is rolled back with the record, and the error is rethrown.
   */
  runOnce(seq: number, effect: () => void): boolean {
    checkSeq('seq', seq);
    if (typeof effect !== 'function') throw new TypeError(expectation('effect', 'a function', effect));
    return this.#transaction(() => {
      if (this.#has.get(seq) !== undefined) return false;
      effect();
      this.#writeBinding();
      this.#insert.run(seq);
      return true;
    });
  }

  #transaction<R>(body: () => R): R {
    const db = this.#db;
    db.exec(`SAVEPOINT ${SAVEPOINT}`);
    let result: R;
    try {
      result = body();
      // Inside the try: a commit that fails (a full disk) is undone like a failed body.
      db.exec(`RELEASE ${SAVEPOINT}`);
    } catch (error) {
      try {
        db.exec(`ROLLBACK TO ${SAVEPOINT}`);
        db.exec(`RELEASE ${SAVEPOINT}`);
      } catch {
        // SQLite rolled the whole transaction back itself (an error that ends it): nothing is left to undo.
      }
      throw error;
    }
    return result;
  }
}
