/**
 * SqliteStore: the Store contract over SQLite, exported as `persistent-queue/sqlite`.
 *
 * SQLite comes from `node:sqlite` where the running Node has it (22.5 and later, without a flag
 * from 22.13), else from the optional peer `better-sqlite3` 12.x. Both are loaded with a dynamic
 * import when a store is opened, so importing this module (let alone the package root) loads
 * neither.
 *
 * Layout: one database file in WAL mode, held with `locking_mode=EXCLUSIVE` for the life of the
 * store, so one process owns the queue. Table `items(seq INTEGER PRIMARY KEY, bytes BLOB)` holds
 * unacked items; table `meta` holds the format version and `nextSeq`, so that a seq is never
 * reused even after every item was acked and deleted.
 *
 * Format 2 adds delivery counts and the dead-letter queue: table `marks(seq INTEGER PRIMARY KEY,
 * deliveries, first_at, last_at, last_error)` holds the newest delivery mark of unacked items,
 * table `dead(seq INTEGER PRIMARY KEY, bytes BLOB, deliveries, first_at, last_at, dead_at,
 * reason)` the dead letters, and `meta` also `deliveredBelow`. A store stays at format 1 until the
 * first mark, bound or dead letter is written, so that releases which know only format 1 keep
 * opening a store that never used them; the tables and the new version are written in the
 * transaction that stores that first record.
 *
 * Durability: every call that writes is one transaction (the core already batches, so under
 * `group` one commit serves the whole batch). A call with `sync` commits under
 * `synchronous=FULL` (the WAL is fsynced before the commit returns); a call without commits under
 * `synchronous=NORMAL` (the WAL is written, not fsynced). See `#setSynchronous` for why NORMAL
 * rather than OFF. `deadLetter` always commits under FULL: the contract makes a move durable
 * whatever the policy.
 */
import { closeSync, fsyncSync, openSync, realpathSync, statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { claimOpen, PROCESS_FILES } from './fs/open-registry.js';
import { OpenError, QueueError } from './errors.js';
import { belowFault, deadLetterFault, markFault, repeatedSeq } from './delivery-records.js';
import type { DeadLetter, DeadLetterRange, DeliveryMark, ReadRange, Redrive, Store, StoredItem, StoreFeatures, StoreRecovery } from './store.js';
import { expectation, maxBytesOption, nonEmptyString, nonNegativeInteger, optionsObject } from './validate.js';

/** Which SQLite binding a {@link SqliteStore} runs on. */
export type SqliteDriver = 'node:sqlite' | 'better-sqlite3';

export interface SqliteStoreOptions {
  /**
   * Largest payload accepted, in bytes. At most 512 MiB (SQLite's own limit on a value is
   * 1,000,000,000 bytes by default).
   * @default 16777216 (16 MiB), as LogStore
   */
  maxItemBytes?: number;
  /**
   * `'auto'` uses `node:sqlite` when the running Node has it and `better-sqlite3` otherwise.
   * Naming a driver uses that one or fails.
   * @default 'auto'
   */
  driver?: 'auto' | SqliteDriver;
  /**
   * Mode of the database file when this call creates it. SQLite gives its `-wal` file the same mode.
   * @default 0o600
   */
  fileMode?: number;
}

/** Version of the table layout described at the top of this file; kept in `meta` under `format`. */
export const SQLITE_FORMAT_VERSION = 2;
/** The format a store has until it first stores delivery state, which needs no new table. */
const PLAIN_FORMAT_VERSION = 1;

/**
 * What format 2 adds to a format-1 database, run inside the transaction that stores the first
 * delivery record, so that the tables and the version appear together or not at all.
 */
const DELIVERY_SCHEMA =
  'CREATE TABLE marks (seq INTEGER PRIMARY KEY, deliveries INTEGER NOT NULL, first_at INTEGER NOT NULL,' +
  ' last_at INTEGER NOT NULL, last_error TEXT NOT NULL);' +
  'CREATE TABLE dead (seq INTEGER PRIMARY KEY, bytes BLOB NOT NULL, deliveries INTEGER NOT NULL,' +
  ' first_at INTEGER NOT NULL, last_at INTEGER NOT NULL, dead_at INTEGER NOT NULL, reason TEXT NOT NULL);' +
  "INSERT INTO meta (key, value) VALUES ('deliveredBelow', 1);" +
  `UPDATE meta SET value = ${SQLITE_FORMAT_VERSION} WHERE key = 'format';`;

/** Statements over the format-2 tables; prepared once those exist. */
interface DeliveryStatements {
  setBelow: SqlStatement;
  putMark: SqlStatement;
  deleteMark: SqlStatement;
  putDead: SqlStatement;
  deleteDead: SqlStatement;
  selectDead: SqlStatement;
}

function prepareDeliveries(db: SqlDatabase): DeliveryStatements {
  return {
    setBelow: db.prepare("UPDATE meta SET value = ? WHERE key = 'deliveredBelow'"),
    putMark: db.prepare('INSERT OR REPLACE INTO marks (seq, deliveries, first_at, last_at, last_error) VALUES (?, ?, ?, ?, ?)'),
    deleteMark: db.prepare('DELETE FROM marks WHERE seq = ?'),
    putDead: db.prepare('INSERT INTO dead (seq, bytes, deliveries, first_at, last_at, dead_at, reason) VALUES (?, ?, ?, ?, ?, ?, ?)'),
    deleteDead: db.prepare('DELETE FROM dead WHERE seq = ?'),
    selectDead: db.prepare('SELECT seq, bytes, deliveries, first_at, last_at, dead_at, reason FROM dead WHERE seq > ? ORDER BY seq LIMIT ?'),
  };
}

type Row = Record<string, number | bigint | string | Uint8Array | null>;

const DEFAULT_MAX_ITEM_BYTES = 16 * 1024 * 1024;
const MAX_ITEM_BYTES_CAP = 512 * 1024 * 1024;
/** Every successful call settles with this one promise: the drivers are synchronous. */
const DONE = Promise.resolve();
const MISSING_PEER = 'SqliteStore needs better-sqlite3 12.x on Node < 22.5: npm install better-sqlite3@12';

// The two drivers share this much API. They are typed here, not imported, so that neither has to
// be installed to type-check or to use the rest of the package.
interface SqlRunResult {
  changes: number | bigint;
}
interface SqlStatement {
  run(...params: unknown[]): SqlRunResult;
  get(...params: unknown[]): unknown;
  all(...params: unknown[]): unknown[];
}
interface SqlDatabase {
  exec(sql: string): void;
  prepare(sql: string): SqlStatement;
  close(): void;
}
type SqlConstructor = new (path: string, options: Record<string, unknown>) => SqlDatabase;


/** Load a driver. The specifier is a variable so that no bundler or type checker resolves it eagerly. */
async function loadDriver(wanted: 'auto' | SqliteDriver): Promise<{ driver: SqliteDriver; Database: SqlConstructor }> {
  if (wanted !== 'better-sqlite3') {
    const builtin: string = 'node:sqlite';
    try {
      const mod = (await import(builtin)) as { DatabaseSync?: SqlConstructor };
      if (typeof mod.DatabaseSync === 'function') return { driver: 'node:sqlite', Database: mod.DatabaseSync };
      throw new Error('node:sqlite has no DatabaseSync');
    } catch (e) {
      if (wanted === 'node:sqlite') {
        throw new OpenError('ERR_STORE', `node:sqlite is not available in Node ${process.versions.node}`, { cause: e });
      }
    }
  }
  const peer: string = 'better-sqlite3';
  try {
    const mod = (await import(peer)) as { default?: SqlConstructor };
    if (typeof mod.default !== 'function') throw new Error('better-sqlite3 has no default export');
    return { driver: 'better-sqlite3', Database: mod.default };
  } catch (e) {
    throw new OpenError('ERR_STORE', MISSING_PEER, { cause: e });
  }
}

/** SQLite's primary result code of a driver error, or 0 when it is not a SQLite error. */
function sqliteResult(e: unknown): number {
  if (e === null || typeof e !== 'object') return 0;
  const err = e as { code?: unknown; errcode?: unknown; message?: unknown };
  // node:sqlite (newer releases) carries the extended code as a number.
  if (typeof err.errcode === 'number') return err.errcode & 0xff;
  // better-sqlite3 names it: SQLITE_BUSY, SQLITE_BUSY_RECOVERY, ...
  if (typeof err.code === 'string' && err.code.startsWith('SQLITE_')) {
    const name = err.code.slice('SQLITE_'.length).split('_')[0]!;
    return SQLITE_RESULTS[name] ?? -1;
  }
  // Early node:sqlite releases give only sqlite3_errmsg().
  if (err.code === 'ERR_SQLITE_ERROR' && typeof err.message === 'string') {
    for (const [text, result] of SQLITE_MESSAGES) if (err.message.includes(text)) return result;
    return -1;
  }
  return 0;
}

const SQLITE_BUSY = 5;
const SQLITE_LOCKED = 6;
const SQLITE_CORRUPT = 11;
const SQLITE_FULL = 13;
const SQLITE_NOTADB = 26;
const SQLITE_RESULTS: Record<string, number> = {
  BUSY: SQLITE_BUSY,
  LOCKED: SQLITE_LOCKED,
  CORRUPT: SQLITE_CORRUPT,
  FULL: SQLITE_FULL,
  NOTADB: SQLITE_NOTADB,
};
const SQLITE_MESSAGES: [string, number][] = [
  ['database is locked', SQLITE_BUSY],
  ['database table is locked', SQLITE_LOCKED],
  ['malformed', SQLITE_CORRUPT],
  ['database or disk is full', SQLITE_FULL],
  ['file is not a database', SQLITE_NOTADB],
];

function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/** The OpenError for a failure while opening `file`. */
function openError(file: string, e: unknown): OpenError {
  if (e instanceof OpenError) return e;
  switch (sqliteResult(e)) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return new OpenError('ERR_LOCKED', `Store ${file} is locked by another process`, { cause: e, file });
    case SQLITE_CORRUPT:
      return new OpenError('ERR_CORRUPT', `Store ${file} is damaged: ${message(e)}`, { cause: e, file });
    case SQLITE_NOTADB:
      return new OpenError('ERR_STORE', `Store ${file} is not a SQLite database`, { cause: e, file });
    default:
      return new OpenError('ERR_STORE', `Cannot open store ${file}: ${message(e)}`, { cause: e, file });
  }
}

/** Create `file` empty with `mode` unless it exists, and make its directory entry durable. */
function createFile(file: string, mode: number): void {
  let fd: number;
  try {
    fd = openSync(file, 'wx', mode);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EEXIST') return;
    throw e;
  }
  // The file is new and SQLite has not opened it, so this fd holds no lock that closing it could drop.
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  const dir = openSync(dirname(file), 'r');
  try {
    fsyncSync(dir);
  } catch (e) {
    // Directories cannot be fsynced on Windows.
    if (!(process.platform === 'win32' && (e as NodeJS.ErrnoException).code === 'EPERM')) throw e;
  } finally {
    closeSync(dir);
  }
}

/** The durable Store over one SQLite database file. */
export class SqliteStore implements Store {
  readonly maxItemBytes: number;
  readonly features: StoreFeatures = { reopen: true, crashSafe: true, deliveries: true };
  /** Absolute path of the database file. */
  readonly path: string;
  /** The binding this store runs on. */
  readonly driver: SqliteDriver;

  #db: SqlDatabase;
  readonly #unclaim: () => void;
  #state: 'recovered' | 'open' | 'closed' = 'recovered';
  #nextSeq: number;
  #count: number;
  #deliveredBelow = 1;
  #deadLetters = 0;
  /** Seqs with a row in `marks`: an ack deletes a mark only for these, so plain acks touch one table. */
  readonly #marked = new Set<number>();
  /** The marks found at open, handed out once by `open()`. */
  #recoveredMarks: DeliveryMark[] = [];
  /** Statements over the format-2 tables; undefined while the database is at format 1. */
  #deliveries: DeliveryStatements | undefined;
  /** The `synchronous` pragma in force: true for FULL, false for NORMAL. */
  #synchronousFull = true;
  /**
   * True while the database file may hold pages that were never fsynced: at open, since a session
   * of an earlier version may have committed under OFF (see `#setSynchronous`).
   */
  #dbFileUnsynced = true;

  #begin: SqlStatement;
  #commit: SqlStatement;
  #rollback: SqlStatement;
  #insert: SqlStatement;
  #setNextSeq: SqlStatement;
  #delete: SqlStatement;
  #select: SqlStatement;
  #holds: SqlStatement;

  private constructor(path: string, unclaim: () => void, driver: SqliteDriver, db: SqlDatabase, maxItemBytes: number) {
    this.path = path;
    this.#unclaim = unclaim;
    this.driver = driver;
    this.#db = db;
    this.maxItemBytes = maxItemBytes;
    this.#begin = db.prepare('BEGIN IMMEDIATE');
    this.#commit = db.prepare('COMMIT');
    this.#rollback = db.prepare('ROLLBACK');
    this.#insert = db.prepare('INSERT INTO items (seq, bytes) VALUES (?, ?)');
    this.#setNextSeq = db.prepare("UPDATE meta SET value = ? WHERE key = 'nextSeq'");
    this.#delete = db.prepare('DELETE FROM items WHERE seq = ?');
    this.#select = db.prepare('SELECT seq, bytes FROM items WHERE seq > ? AND seq < ? ORDER BY seq LIMIT ?');
    this.#holds = db.prepare('SELECT 1 AS held FROM items WHERE seq = ?');
    const meta = db.prepare("SELECT value FROM meta WHERE key = 'nextSeq'").get() as { value: number | bigint } | undefined;
    const last = db.prepare('SELECT max(seq) AS seq FROM items').get() as { seq: number | bigint | null };
    this.#nextSeq = Math.max(Number(meta?.value ?? 1), Number(last.seq ?? 0) + 1);
    // count(*) walks the table's b-tree inside SQLite; nothing is loaded into memory.
    this.#count = Number((db.prepare('SELECT count(*) AS n FROM items').get() as { n: number | bigint }).n);
    if (SqliteStore.#formatOf(db) > PLAIN_FORMAT_VERSION) this.#recoverDeliveries(db);
  }

  static #formatOf(db: SqlDatabase): number {
    return Number((db.prepare("SELECT value FROM meta WHERE key = 'format'").get() as { value: number | bigint }).value);
  }

  /** Read what format 2 adds. Marks of acked items were deleted at open (`#prepareSchema`). */
  #recoverDeliveries(db: SqlDatabase): void {
    this.#deliveries = prepareDeliveries(db);
    const below = db.prepare("SELECT value FROM meta WHERE key = 'deliveredBelow'").get() as { value: number | bigint } | undefined;
    this.#deliveredBelow = Number(below?.value ?? 1);
    this.#deadLetters = Number((db.prepare('SELECT count(*) AS n FROM dead').get() as { n: number | bigint }).n);
    // A dead letter's seq was appended once, so nextSeq is above it already; kept as a second guard.
    const lastDead = db.prepare('SELECT max(seq) AS seq FROM dead').get() as { seq: number | bigint | null };
    this.#nextSeq = Math.max(this.#nextSeq, Number(lastDead.seq ?? 0) + 1);
    const rows = db.prepare('SELECT seq, deliveries, first_at, last_at, last_error FROM marks ORDER BY seq').all() as Row[];
    for (const row of rows) {
      const mark: DeliveryMark = {
        seq: Number(row.seq),
        deliveries: Number(row.deliveries),
        firstDeliveredAt: Number(row.first_at),
        lastDeliveredAt: Number(row.last_at),
        lastError: String(row.last_error),
      };
      this.#recoveredMarks.push(mark);
      this.#marked.add(mark.seq);
    }
  }

  /**
   * Open (creating if missing) the database file at `path` and lock it for this process. Its
   * directory must exist. Rejects with `OpenError`: `ERR_LOCKED` when another process (or another
   * store in this process) holds it, `ERR_STORE` when the file is not a queue database or the
   * driver is missing, `ERR_CORRUPT`, `ERR_UNSUPPORTED_VERSION`. Arguments are validated first
   * (`TypeError`/`RangeError`), before anything is touched.
   */
  static async open(path: string, options?: SqliteStoreOptions): Promise<SqliteStore> {
    nonEmptyString('path', path);
    const o = optionsObject('options', options);
    const maxItemBytes = maxBytesOption('options.maxItemBytes', o.maxItemBytes, DEFAULT_MAX_ITEM_BYTES, MAX_ITEM_BYTES_CAP);
    const wanted = o.driver ?? 'auto';
    if (typeof wanted !== 'string') {
      throw new TypeError(expectation('options.driver', "'auto', 'node:sqlite' or 'better-sqlite3'", wanted));
    }
    if (wanted !== 'auto' && wanted !== 'node:sqlite' && wanted !== 'better-sqlite3') {
      throw new RangeError(expectation('options.driver', "'auto', 'node:sqlite' or 'better-sqlite3'", wanted));
    }
    const fileMode = o.fileMode === undefined ? 0o600 : nonNegativeInteger('options.fileMode', o.fileMode);

    const file = resolve(path);
    const { driver, Database } = await loadDriver(wanted);
    try {
      if (statSync(file, { throwIfNoEntry: false })?.isDirectory()) {
        throw new OpenError('ERR_STORE', `Store path ${file} is a directory, not a database file`, { file });
      }
      // Created here rather than by SQLite, which would use mode 0o644 and not fsync the directory.
      createFile(file, fileMode);
    } catch (e) {
      throw openError(file, e);
    }
    const key = realpathSync(file);
    // A second connection from this process must not reach SQLite: if it came from another copy of
    // the SQLite library (node:sqlite beside better-sqlite3), closing it would drop the POSIX lock
    // the first one holds.
    const unclaim = claimOpen(PROCESS_FILES, key, file);
    let db: SqlDatabase | undefined;
    try {
      // No busy timeout: a store held by another process is refused at once, not after 5 s.
      db = new Database(file, { timeout: 0 });
      SqliteStore.#prepareSchema(db, file);
      return new SqliteStore(file, unclaim, driver, db, maxItemBytes);
    } catch (e) {
      try {
        db?.close();
      } catch {
        // The open already failed; that error is the one to report.
      }
      unclaim();
      if (db === undefined && !(e instanceof OpenError) && sqliteResult(e) === 0 && driver === 'better-sqlite3') {
        // better-sqlite3 loads its native addon on first use: a broken install surfaces here.
        throw new OpenError('ERR_STORE', `${MISSING_PEER} (its native addon failed to load: ${message(e)})`, { cause: e, file });
      }
      throw openError(file, e);
    }
  }

  /**
   * Lock the database, check it is ours (or empty), and create the schema. Nothing is written
   * before the checks pass, so a refused file is left as it was.
   */
  static #prepareSchema(db: SqlDatabase, file: string): void {
    // Must come before the first read: the lock taken then is never released until close.
    db.prepare('PRAGMA locking_mode = EXCLUSIVE').get();
    const tables = (db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as { name: string }[]).map(
      (t) => t.name,
    );
    if (tables.length > 0) {
      const format = tables.includes('meta')
        ? (db.prepare("SELECT value FROM meta WHERE key = 'format'").get() as { value: number | bigint } | undefined)
        : undefined;
      if (format === undefined || !tables.includes('items')) {
        throw new OpenError('ERR_STORE', `Store ${file} is a SQLite database but not a persistent-queue store`, { file });
      }
      if (Number(format.value) > SQLITE_FORMAT_VERSION) {
        throw new OpenError(
          'ERR_UNSUPPORTED_VERSION',
          `Store ${file} has format ${format.value}; this version reads up to ${SQLITE_FORMAT_VERSION}`,
          { file },
        );
      }
      if (Number(format.value) > PLAIN_FORMAT_VERSION && !(tables.includes('marks') && tables.includes('dead'))) {
        throw new OpenError('ERR_CORRUPT', `Store ${file} has format ${format.value} but lacks its marks or dead table`, { file });
      }
    }
    const mode = db.prepare('PRAGMA journal_mode = WAL').get() as { journal_mode: string };
    if (mode.journal_mode.toLowerCase() !== 'wal') {
      throw new OpenError('ERR_STORE', `Store ${file} cannot use WAL mode (journal_mode is ${mode.journal_mode})`, { file });
    }
    db.exec('PRAGMA synchronous = FULL');
    // An exclusive transaction takes the write lock now, so that ownership is settled at open
    // rather than at the first push; in EXCLUSIVE locking mode it is then held until close.
    db.exec('BEGIN EXCLUSIVE');
    try {
      if (tables.length === 0) {
        db.exec(
          'CREATE TABLE items (seq INTEGER PRIMARY KEY, bytes BLOB NOT NULL);' +
            'CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);',
        );
        // A new store starts at format 1 too: it needs format 2 only once it stores delivery state.
        db.prepare("INSERT INTO meta (key, value) VALUES ('format', ?), ('nextSeq', 1)").run(PLAIN_FORMAT_VERSION);
      } else if (tables.includes('marks')) {
        // Deleted here rather than by an ack that crossed a mark: every later ack deletes its marks.
        db.exec('DELETE FROM marks WHERE seq NOT IN (SELECT seq FROM items)');
      }
      db.exec('COMMIT');
    } catch (e) {
      db.exec('ROLLBACK');
      throw e;
    }
  }

  /** Returns what the store holds. Callable once per instance; a closed store needs a new `SqliteStore.open`. */
  open(): Promise<StoreRecovery> {
    if (this.#state !== 'recovered') {
      return Promise.reject(
        this.#state === 'open'
          ? new OpenError('ERR_LOCKED', `SqliteStore for ${this.path} already backs an open queue`)
          : new OpenError('ERR_STORE', `SqliteStore for ${this.path} was closed; open it again with SqliteStore.open(path)`),
      );
    }
    this.#state = 'open';
    const marks = this.#recoveredMarks;
    this.#recoveredMarks = [];
    return Promise.resolve({ nextSeq: this.#nextSeq, count: this.#count, deliveredBelow: this.#deliveredBelow, marks, deadLetters: this.#deadLetters });
  }

  append(items: readonly StoredItem[], sync: boolean): Promise<void> {
    if (this.#state !== 'open') return Promise.reject(new QueueError('ERR_CLOSED', 'SqliteStore is not open'));
    if (items.length === 0) return Promise.reject(new QueueError('ERR_STORE', 'SqliteStore.append got an empty batch'));
    const order = this.#orderFault(items);
    if (order !== undefined) return Promise.reject(order);
    const next = items[items.length - 1]!.seq + 1;
    return this.#transaction(sync, () => {
      for (const item of items) this.#insert.run(item.seq, item.bytes);
      this.#setNextSeq.run(next);
    }).then(() => {
      this.#nextSeq = next;
      this.#count += items.length;
    });
  }

  ack(seqs: readonly number[], sync: boolean): Promise<void> {
    if (this.#state !== 'open') return Promise.reject(new QueueError('ERR_CLOSED', 'SqliteStore is not open'));
    if (seqs.length === 0) return Promise.reject(new QueueError('ERR_STORE', 'SqliteStore.ack got an empty batch'));
    // Only items handed out more than once have marks: a plain ack skips the marks table.
    const marked = this.#marked.size === 0 ? [] : seqs.filter((seq) => this.#marked.has(seq));
    try {
      this.#write(sync, () => {
        for (const seq of seqs) {
          if (Number(this.#delete.run(seq).changes) !== 1) {
            throw new QueueError('ERR_STORE', `SqliteStore cannot ack seq ${seq}: not held`);
          }
        }
        for (const seq of marked) this.#deliveries!.deleteMark.run(seq);
      });
    } catch (e) {
      return Promise.reject(e);
    }
    this.#count -= seqs.length;
    for (const seq of marked) this.#marked.delete(seq);
    return DONE;
  }

  /** Finishes synchronously (a commit under the flag's `synchronous` level), or throws. */
  markDelivered(below: number, marks: readonly DeliveryMark[], sync: boolean): void {
    if (this.#state !== 'open') throw new QueueError('ERR_CLOSED', 'SqliteStore is not open');
    const fault = belowFault(below) ?? marks.map(markFault).find((f) => f !== undefined);
    if (fault !== undefined) throw new QueueError('ERR_STORE', `SqliteStore.markDelivered: ${fault}`);
    // The bound every format-1 store has already: storing it would change the format for nothing.
    if (this.#deliveries === undefined && below === 1 && marks.length === 0) return;
    let deliveries: DeliveryStatements;
    try {
      this.#write(sync, () => {
        deliveries = this.#deliveries ?? this.#upgrade();
        for (const mark of marks) {
          if (this.#holds.get(mark.seq) === undefined) throw new QueueError('ERR_STORE', `SqliteStore cannot mark seq ${mark.seq}: not held`);
          deliveries.putMark.run(mark.seq, mark.deliveries, mark.firstDeliveredAt, mark.lastDeliveredAt, mark.lastError);
        }
        deliveries.setBelow.run(below);
      });
    } catch (e) {
      throw e;
    }
    this.#deliveries = deliveries!;
    this.#deliveredBelow = below;
    for (const mark of marks) this.#marked.add(mark.seq);
  }

  deadLetter(entries: readonly DeadLetter[]): Promise<void> {
    if (this.#state !== 'open') return Promise.reject(new QueueError('ERR_CLOSED', 'SqliteStore is not open'));
    const fault = entries.map((e) => deadLetterFault(e, this.maxItemBytes)).find((f) => f !== undefined);
    if (fault !== undefined) return Promise.reject(new QueueError('ERR_STORE', `SqliteStore.deadLetter: ${fault}`));
    const twice = repeatedSeq(entries.map((e) => e.seq));
    if (twice !== undefined) return Promise.reject(new QueueError('ERR_STORE', `SqliteStore.deadLetter got seq ${twice} twice`));
    if (entries.length === 0) return DONE;
    let deliveries: DeliveryStatements;
    try {
      // Under FULL whatever the policy: a resolved move must survive power loss.
      this.#write(true, () => {
        deliveries = this.#deliveries ?? this.#upgrade();
        for (const e of entries) {
          if (Number(this.#delete.run(e.seq).changes) !== 1) throw new QueueError('ERR_STORE', `SqliteStore cannot dead-letter seq ${e.seq}: not held`);
          deliveries.putDead.run(e.seq, e.bytes, e.deliveries, e.firstDeliveredAt, e.lastDeliveredAt, e.deadAt, e.reason);
          if (this.#marked.has(e.seq)) deliveries.deleteMark.run(e.seq);
        }
      });
    } catch (e) {
      return Promise.reject(e);
    }
    this.#deliveries = deliveries!;
    this.#count -= entries.length;
    this.#deadLetters += entries.length;
    for (const e of entries) this.#marked.delete(e.seq);
    return DONE;
  }

  /** Synchronous, as `read`. */
  readDeadLetters(range: DeadLetterRange): readonly DeadLetter[] {
    if (this.#state === 'closed') throw new QueueError('ERR_CLOSED', 'SqliteStore is closed');
    if (this.#deliveries === undefined) return [];
    const rows = this.#deliveries.selectDead.all(range.after, range.limit) as Row[];
    return rows.map((row) => ({
      seq: Number(row.seq),
      bytes: row.bytes as Uint8Array,
      deliveries: Number(row.deliveries),
      firstDeliveredAt: Number(row.first_at),
      lastDeliveredAt: Number(row.last_at),
      deadAt: Number(row.dead_at),
      reason: String(row.reason),
    }));
  }

  dropDeadLetters(seqs: readonly number[], sync: boolean): Promise<void> {
    if (this.#state !== 'open') return Promise.reject(new QueueError('ERR_CLOSED', 'SqliteStore is not open'));
    const twice = repeatedSeq(seqs);
    if (twice !== undefined) return Promise.reject(new QueueError('ERR_STORE', `SqliteStore.dropDeadLetters got seq ${twice} twice`));
    if (seqs.length === 0) return DONE;
    const deliveries = this.#deliveries;
    if (deliveries === undefined) return Promise.reject(new QueueError('ERR_STORE', `SqliteStore holds no dead letter ${seqs[0]}`));
    try {
      this.#write(sync, () => {
        for (const seq of seqs) {
          if (Number(deliveries.deleteDead.run(seq).changes) !== 1) throw new QueueError('ERR_STORE', `SqliteStore holds no dead letter ${seq}`);
        }
      });
    } catch (e) {
      return Promise.reject(e);
    }
    this.#deadLetters -= seqs.length;
    return DONE;
  }

  redrive(moves: readonly Redrive[], sync: boolean): Promise<void> {
    if (this.#state !== 'open') return Promise.reject(new QueueError('ERR_CLOSED', 'SqliteStore is not open'));
    if (moves.length === 0) return DONE;
    const items = moves.map((m) => m.item);
    const order = this.#orderFault(items);
    if (order !== undefined) return Promise.reject(order);
    const twice = repeatedSeq(moves.map((m) => m.from));
    if (twice !== undefined) return Promise.reject(new QueueError('ERR_STORE', `SqliteStore.redrive got dead letter ${twice} twice`));
    const deliveries = this.#deliveries;
    if (deliveries === undefined) return Promise.reject(new QueueError('ERR_STORE', `SqliteStore holds no dead letter ${moves[0]!.from}`));
    const next = items[items.length - 1]!.seq + 1;
    try {
      this.#write(sync, () => {
        for (const move of moves) {
          if (Number(deliveries.deleteDead.run(move.from).changes) !== 1) throw new QueueError('ERR_STORE', `SqliteStore holds no dead letter ${move.from}`);
          this.#insert.run(move.item.seq, move.item.bytes);
        }
        this.#setNextSeq.run(next);
      });
    } catch (e) {
      return Promise.reject(e);
    }
    this.#nextSeq = next;
    this.#count += moves.length;
    this.#deadLetters -= moves.length;
    return DONE;
  }

  /**
   * Create the format-2 tables inside the running transaction and return statements over them.
   * The caller keeps the statements only once the transaction committed: after a rollback the
   * tables are gone again and the database is still at format 1.
   */
  #upgrade(): DeliveryStatements {
    this.#db.exec(DELIVERY_SCHEMA);
    return prepareDeliveries(this.#db);
  }

  /**
   * Make every earlier commit durable without a new one: a checkpoint, which fsyncs the WAL
   * before copying its frames and the database file after. A commit would not do: one that
   * changes nothing (the same `nextSeq` again) writes no frame, and SQLite then fsyncs nothing
   * (seen with strace). With no frame left to copy, every commit is durable already: the
   * checkpoint that copied them synced them, under FULL or NORMAL (`#setSynchronous`).
   */
  sync(): Promise<void> {
    if (this.#state !== 'open') return Promise.reject(new QueueError('ERR_CLOSED', 'SqliteStore is not open'));
    try {
      this.#setSynchronous(true);
      this.#db.exec('PRAGMA wal_checkpoint(PASSIVE)');
      return Promise.resolve();
    } catch (e) {
      return Promise.reject(new QueueError('ERR_STORE', `SqliteStore ${this.path}: sync failed: ${message(e)}`, { cause: e, file: this.path }));
    }
  }

  /** Synchronous: both drivers are, so `tryReserve()` is served without waiting. */
  read(range: ReadRange): readonly StoredItem[] {
    if (this.#state === 'closed') throw new QueueError('ERR_CLOSED', 'SqliteStore is closed');
    const rows = this.#select.all(range.after, range.before, range.limit) as { seq: number | bigint; bytes: Uint8Array }[];
    const out: StoredItem[] = new Array(rows.length);
    for (let i = 0; i < rows.length; i++) out[i] = { seq: Number(rows[i]!.seq), bytes: rows[i]!.bytes };
    return out;
  }

  /** Release the database and its lock. Idempotent. */
  async close(): Promise<void> {
    if (this.#state === 'closed') return;
    this.#state = 'closed';
    this.#unclaim();
    try {
      this.#db.close();
    } catch (e) {
      throw new QueueError('ERR_STORE', `Closing ${this.path} failed: ${message(e)}`, { cause: e, file: this.path });
    }
  }

  /**
   * Why a non-empty batch of new items cannot be stored (seqs not consecutive from at least
   * `nextSeq`, or a payload over `maxItemBytes`), or undefined. Shared by `append` and `redrive`.
   */
  #orderFault(items: readonly StoredItem[]): QueueError | undefined {
    let expected = items[0]!.seq;
    if (!Number.isSafeInteger(expected) || expected < this.#nextSeq) {
      return new QueueError('ERR_STORE', `SqliteStore expected a seq of at least ${this.#nextSeq}, got ${expected}`);
    }
    for (const item of items) {
      if (item.seq !== expected++ || item.bytes.length > this.maxItemBytes) {
        return new QueueError('ERR_STORE', `SqliteStore got seq ${item.seq} (${item.bytes.length} bytes) out of order or over maxItemBytes`);
      }
    }
    return undefined;
  }

  /** `#write` as a promise. */
  #transaction(sync: boolean, body: () => void): Promise<void> {
    try {
      this.#write(sync, body);
      return DONE;
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /**
   * Run `body` as one transaction, committed under FULL when `sync` and NORMAL otherwise; throws
   * the QueueError to reject with. Both drivers are synchronous, so the whole transaction runs
   * inside this call and never interleaves with another, and the caller updates its state right
   * after it, before any other call can look.
   */
  #write(sync: boolean, body: () => void): void {
    try {
      this.#setSynchronous(sync);
      this.#begin.run();
      try {
        body();
        this.#commit.run();
      } catch (e) {
        try {
          this.#rollback.run();
        } catch {
          // SQLite may already have rolled the transaction back (SQLITE_FULL does).
        }
        throw e;
      }
      if (sync && this.#dbFileUnsynced) {
        // See #setSynchronous. The commit above put at least one frame in the WAL, so this
        // checkpoint has something to copy and therefore ends with an fsync of the database file.
        this.#db.exec('PRAGMA wal_checkpoint(PASSIVE)');
        this.#dbFileUnsynced = false;
      }
    } catch (e) {
      if (e instanceof QueueError) throw e;
      // SQLite rolls a transaction that hit SQLITE_FULL back and stays consistent: only this batch fails.
      const code = sqliteResult(e) === SQLITE_FULL ? 'ERR_STORE_FULL' : 'ERR_STORE';
      throw new QueueError(code, `SqliteStore ${this.path}: ${message(e)}`, { cause: e, file: this.path });
    }
  }

  /**
   * The Store contract passes `sync` per call rather than the policy, so the pragma follows the
   * flag. Under `lazy` acks it changes twice per group commit (acks unsynced, pushes synced).
   *
   * Unsynced commits run under NORMAL, not OFF. Under OFF, a checkpoint copies WAL frames into the
   * database file without fsyncing it, and the WAL is later overwritten from the start: those
   * pages then exist only in the page cache, and a later FULL commit, which fsyncs only the WAL,
   * would leave them exposed (the contract says a synced batch makes every earlier batch durable
   * too). Under NORMAL, SQLite fsyncs the WAL before and the database file after every checkpoint,
   * so a FULL commit covers every earlier commit by itself. (With OFF, every FULL commit after an
   * OFF one needed a checkpoint of its own: measured, lazy acks over `group` pushes end to end ran
   * at 16–17 k msgs/s against 21–24 k with acks under `group`.) The first FULL commit of each
   * session is still followed by a checkpoint, which under FULL ends with an fsync of the
   * database file: a session of an earlier version may have run under OFF.
   */
  #setSynchronous(sync: boolean): void {
    if (sync === this.#synchronousFull) return;
    this.#db.exec(sync ? 'PRAGMA synchronous = FULL' : 'PRAGMA synchronous = NORMAL');
    this.#synchronousFull = sync;
  }
}
