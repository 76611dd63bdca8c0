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
 * reused even after every item was acked and deleted, and the store's identity (`storeId`, a row
 * of no format: older releases never read it).
 *
 * Format 2 adds delivery counts and the dead-letter queue: table `marks(seq INTEGER PRIMARY KEY,
 * deliveries, first_at, last_at, last_error)` holds the newest delivery mark of unacked items,
 * table `dead(seq INTEGER PRIMARY KEY, bytes BLOB, deliveries, first_at, last_at, dead_at,
 * reason)` the dead letters, and `meta` also `deliveredBelow`. A store stays at format 1 until the
 * first mark, bound or dead letter is written, so that releases which know only format 1 keep
 * opening a store that never used them; the tables and the new version are written in the
 * transaction that stores that first record.
 *
 * Format 3 adds priorities and not-before times (`features.scheduling`): table
 * `schedule(seq INTEGER PRIMARY KEY, priority, not_before)` holds one row per unacked item that
 * has either, written and deleted in the transaction that writes or deletes the item (why a table
 * rather than columns: `SCHEDULE_SCHEMA` in src/stores/sqlite/schema.ts). A store stays at format 1 or 2
 * until the first scheduled item is appended, whose transaction creates the table (and the
 * format-2 tables when missing) and writes format 3. The layout, byte for byte: FORMAT.md §10.
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
import { claimOpen, PROCESS_FILES } from '../../fs/open-registry.js';
import { OpenError, QueueError } from '../../contract/errors.js';
import { belowFault, deadLetterFault, markFault, repeatedSeq } from '../../contract/records/deliveries.js';
import { DEFAULT_PRIORITY, firstScheduleFault, NO_NOT_BEFORE, scheduledOf } from '../../contract/records/schedules.js';
import { firstKeyFault, KeyTable } from '../../contract/records/keys.js';
import {
  loadDriver,
  message,
  MISSING_PEER,
  openError,
  type Row,
  type SqlDatabase,
  type SqliteDriver,
  sqliteResult,
  SQLITE_FULL,
  type SqlStatement,
} from './driver.js';
import {
  DELIVERY_FORMAT_VERSION,
  DELIVERY_SCHEMA,
  type DeliveryStatements,
  formatFault,
  itemOfRow,
  KEYS_FORMAT_VERSION,
  KEYS_SCHEMA,
  type KeyStatements,
  prepareKeys,
  storedKeys,
  missingTable,
  NEWEST_FORMAT_VERSION,
  PLAIN_SCHEMA,
  prepareDeliveries,
  prepareSchedule,
  SCHEDULE_FORMAT_VERSION,
  SCHEDULE_SCHEMA,
  scheduledSeqs,
  type ScheduleStatements,
} from './schema.js';
import {
  isScheduled,
  type DeadLetter,
  type DeadLetterRange,
  type DeliveryMark,
  type ReadRange,
  type Redrive,
  type Store,
  type StoredItem,
  type StoreFeatures,
  type StoreRecovery,
} from '../../contract/store.js';
import { expectation, maxBytesOption, nonEmptyString, nonNegativeInteger, optionsObject } from '../../lib/validate.js';

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

/** Newest version of the table layout described at the top of this file; kept in `meta` under `format`. */
export const SQLITE_FORMAT_VERSION = NEWEST_FORMAT_VERSION;

const DEFAULT_MAX_ITEM_BYTES = 16 * 1024 * 1024;
const MAX_ITEM_BYTES_CAP = 512 * 1024 * 1024;
/** Every successful call settles with this one promise: the drivers are synchronous. */
const DONE = Promise.resolve();

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
  readonly features: StoreFeatures = { reopen: true, crashSafe: true, deliveries: true, scheduling: true, idempotency: true };
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
  /** Statements over the format-3 table; undefined while the database is below format 3. */
  #schedule: ScheduleStatements | undefined;
  /**
   * Seqs with a row in `schedule`: an ack deletes a row only for these, so plain acks touch one
   * table, and reads join the table only while it holds a row. The queue keeps every scheduled
   * item in memory too, so this set does not change the order of memory a queue needs.
   */
  readonly #scheduled = new Set<number>();
  /** The lowest seq in `schedule` at open, or undefined when it has none. */
  #scheduledFrom: number | undefined;
  /** Statements over the format-4 table; undefined while the database is below format 4. */
  #keyStatements: KeyStatements | undefined;
  /** The rows of `keys`, so that `keepKeysFrom` knows which to delete without reading the table. */
  readonly #keys = new KeyTable();
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
  /** The store's identity, from `meta` (FORMAT.md §10.6). */
  readonly #storeId: string | undefined;

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
    const id = db.prepare("SELECT value FROM meta WHERE key = 'storeId'").get() as { value: unknown } | undefined;
    this.#storeId = typeof id?.value === 'string' ? id.value : undefined;
    const format = SqliteStore.#formatOf(db);
    if (format >= DELIVERY_FORMAT_VERSION) this.#recoverDeliveries(db);
    if (format >= SCHEDULE_FORMAT_VERSION) {
      this.#schedule = prepareSchedule(db);
      const seqs = scheduledSeqs(db);
      this.#scheduledFrom = seqs[0];
      for (const seq of seqs) this.#scheduled.add(seq);
    }
    if (format >= KEYS_FORMAT_VERSION) {
      this.#keyStatements = prepareKeys(db);
      const keys = storedKeys(db);
      if (typeof keys === 'string') throw new OpenError('ERR_CORRUPT', `Store ${path}: ${keys}`, { file: path });
      for (const k of keys) this.#keys.add(k);
    }
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
    const tables = (db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as { name: string }[]).map((t) => t.name);
    if (tables.length > 0) {
      const format = tables.includes('meta')
        ? (db.prepare("SELECT value FROM meta WHERE key = 'format'").get() as { value: number | bigint } | undefined)
        : undefined;
      if (format === undefined || !tables.includes('items')) {
        throw new OpenError('ERR_STORE', `Store ${file} is a SQLite database but not a persistent-queue store`, { file });
      }
      // Judged before anything is written: a value that names no format is damage, not a newer format.
      const fault = formatFault(format.value);
      if (fault !== undefined) throw new OpenError('ERR_CORRUPT', `Store ${file}: ${fault}`, { file });
      if (Number(format.value) > SQLITE_FORMAT_VERSION) {
        throw new OpenError(
          'ERR_UNSUPPORTED_VERSION',
          `Store ${file} has format ${format.value}; this version reads up to ${SQLITE_FORMAT_VERSION}`,
          { file },
        );
      }
      const missing = missingTable(Number(format.value), tables);
      if (missing !== undefined) {
        throw new OpenError('ERR_CORRUPT', `Store ${file} has format ${format.value} but lacks its ${missing} table`, { file });
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
        // A new store starts at format 1 too: it needs a newer one only once it stores what that adds.
        db.exec(PLAIN_SCHEMA);
      } else if (tables.includes('marks')) {
        // Deleted here rather than by an ack that crossed a mark: every later ack deletes its marks.
        db.exec('DELETE FROM marks WHERE seq NOT IN (SELECT seq FROM items)');
      }
      // The store's identity (FORMAT.md §10.6): created with the store, or at the first open of a
      // store written before identities, in the same transaction; a row older readers never read.
      db.prepare("INSERT OR IGNORE INTO meta (key, value) VALUES ('storeId', ?)").run(globalThis.crypto.randomUUID());
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
    return Promise.resolve({
      nextSeq: this.#nextSeq,
      count: this.#count,
      deliveredBelow: this.#deliveredBelow,
      marks,
      deadLetters: this.#deadLetters,
      scheduledFrom: this.#scheduledFrom ?? this.#nextSeq,
      ...(this.#storeId === undefined ? {} : { storeId: this.#storeId }),
      keys: this.#keys.list(),
    });
  }

  /** Exact: SQLite sums the blob lengths inside its b-tree; no payload is loaded into memory. */
  payloadBytes(): number {
    if (this.#state !== 'open') throw new QueueError('ERR_CLOSED', 'SqliteStore is not open');
    const row = this.#db.prepare('SELECT coalesce(sum(length(bytes)), 0) AS n FROM items').get() as { n: number | bigint };
    return Number(row.n);
  }

  /** Keys older than `at` are deleted by the next append's transaction. */
  keepKeysFrom(at: number): void {
    this.#keys.keepKeysFrom(at);
  }

  append(items: readonly StoredItem[], sync: boolean): Promise<void> {
    if (this.#state !== 'open') return Promise.reject(new QueueError('ERR_CLOSED', 'SqliteStore is not open'));
    if (items.length === 0) return Promise.reject(new QueueError('ERR_STORE', 'SqliteStore.append got an empty batch'));
    const order = this.#orderFault(items);
    if (order !== undefined) return Promise.reject(order);
    const fault = firstScheduleFault(items) ?? firstKeyFault(items);
    if (fault !== undefined) return Promise.reject(new QueueError('ERR_STORE', `SqliteStore.append: ${fault}`));
    const scheduled = scheduledOf(items);
    const keyed = items.filter((item) => item.key !== undefined);
    const next = items[items.length - 1]!.seq + 1;
    let deliveries = this.#deliveries;
    let schedule = this.#schedule;
    let keys = this.#keyStatements;
    // Keys past the queue's window go in the transaction of the next append (one that brings a
    // new key, or any other): deleted by seq, without reading the table.
    const expired = keys === undefined ? [] : this.#keys.expire();
    try {
      this.#write(sync, () => {
        for (const item of items) this.#insert.run(item.seq, item.bytes);
        if (scheduled.length > 0 || keyed.length > 0) {
          if (schedule === undefined) [deliveries, schedule] = this.#upgradeSchedule();
          for (const item of scheduled) schedule.put.run(item.seq, item.priority ?? DEFAULT_PRIORITY, item.notBefore ?? NO_NOT_BEFORE);
        }
        if (keyed.length > 0) {
          if (keys === undefined) keys = this.#upgradeKeys();
          for (const item of keyed) keys.put.run(item.seq, item.key!, item.keyedAt!);
        }
        for (const seq of expired) keys!.delete.run(seq);
        this.#setNextSeq.run(next);
      });
    } catch (e) {
      return Promise.reject(e);
    }
    this.#deliveries = deliveries;
    this.#schedule = schedule;
    this.#keyStatements = keys;
    this.#keys.addItems(keyed);
    this.#nextSeq = next;
    this.#count += items.length;
    for (const item of scheduled) this.#scheduled.add(item.seq);
    return DONE;
  }

  ack(seqs: readonly number[], sync: boolean): Promise<void> {
    if (this.#state !== 'open') return Promise.reject(new QueueError('ERR_CLOSED', 'SqliteStore is not open'));
    if (seqs.length === 0) return Promise.reject(new QueueError('ERR_STORE', 'SqliteStore.ack got an empty batch'));
    // Only items handed out more than once have marks: a plain ack skips the marks table.
    const marked = this.#marked.size === 0 ? [] : seqs.filter((seq) => this.#marked.has(seq));
    // So for scheduled items and the schedule table.
    const scheduled = this.#scheduled.size === 0 ? [] : seqs.filter((seq) => this.#scheduled.has(seq));
    try {
      this.#write(sync, () => {
        for (const seq of seqs) {
          if (Number(this.#delete.run(seq).changes) !== 1) {
            throw new QueueError('ERR_STORE', `SqliteStore cannot ack seq ${seq}: not held`);
          }
        }
        for (const seq of marked) this.#deliveries!.deleteMark.run(seq);
        for (const seq of scheduled) this.#schedule!.delete.run(seq);
      });
    } catch (e) {
      return Promise.reject(e);
    }
    this.#count -= seqs.length;
    for (const seq of marked) this.#marked.delete(seq);
    for (const seq of scheduled) this.#scheduled.delete(seq);
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
    this.#write(sync, () => {
      deliveries = this.#deliveries ?? this.#upgrade();
      for (const mark of marks) {
        if (this.#holds.get(mark.seq) === undefined) throw new QueueError('ERR_STORE', `SqliteStore cannot mark seq ${mark.seq}: not held`);
        deliveries.putMark.run(mark.seq, mark.deliveries, mark.firstDeliveredAt, mark.lastDeliveredAt, mark.lastError);
      }
      deliveries.setBelow.run(below);
    });
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
          if (Number(this.#delete.run(e.seq).changes) !== 1)
            throw new QueueError('ERR_STORE', `SqliteStore cannot dead-letter seq ${e.seq}: not held`);
          deliveries.putDead.run(e.seq, e.bytes, e.deliveries, e.firstDeliveredAt, e.lastDeliveredAt, e.deadAt, e.reason);
          if (this.#marked.has(e.seq)) deliveries.deleteMark.run(e.seq);
          // A dead letter keeps no priority or not-before time: a redriven item has neither.
          if (this.#scheduled.has(e.seq)) this.#schedule!.delete.run(e.seq);
        }
      });
    } catch (e) {
      return Promise.reject(e);
    }
    this.#deliveries = deliveries!;
    this.#count -= entries.length;
    this.#deadLetters += entries.length;
    for (const e of entries) {
      this.#marked.delete(e.seq);
      this.#scheduled.delete(e.seq);
    }
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
          if (Number(deliveries.deleteDead.run(seq).changes) !== 1)
            throw new QueueError('ERR_STORE', `SqliteStore holds no dead letter ${seq}`);
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
    const scheduled = items.find((item) => isScheduled(item) || item.key !== undefined);
    if (scheduled !== undefined)
      return Promise.reject(
        new QueueError('ERR_STORE', `SqliteStore.redrive got seq ${scheduled.seq} with a priority, a not-before time or a key`),
      );
    const twice = repeatedSeq(moves.map((m) => m.from));
    if (twice !== undefined) return Promise.reject(new QueueError('ERR_STORE', `SqliteStore.redrive got dead letter ${twice} twice`));
    const deliveries = this.#deliveries;
    if (deliveries === undefined) return Promise.reject(new QueueError('ERR_STORE', `SqliteStore holds no dead letter ${moves[0]!.from}`));
    const next = items[items.length - 1]!.seq + 1;
    try {
      this.#write(sync, () => {
        for (const move of moves) {
          if (Number(deliveries.deleteDead.run(move.from).changes) !== 1)
            throw new QueueError('ERR_STORE', `SqliteStore holds no dead letter ${move.from}`);
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
   * Create the format-3 table inside the running transaction (and the format-2 tables first when
   * the database is at format 1: each format holds the tables of the one before), and return
   * statements over both. Kept by the caller only once the transaction committed, as `#upgrade`.
   */
  #upgradeSchedule(): [DeliveryStatements, ScheduleStatements] {
    const deliveries = this.#deliveries ?? this.#upgrade();
    this.#db.exec(SCHEDULE_SCHEMA);
    return [deliveries, prepareSchedule(this.#db)];
  }

  /**
   * Create the format-4 table inside the running transaction, the format-2 and format-3 tables
   * being there already (the caller upgrades to format 3 first), and return statements over it.
   * Kept by the caller only once the transaction committed, as `#upgrade`.
   */
  #upgradeKeys(): KeyStatements {
    this.#db.exec(KEYS_SCHEMA);
    return prepareKeys(this.#db);
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
      return Promise.reject(
        new QueueError('ERR_STORE', `SqliteStore ${this.path}: sync failed: ${message(e)}`, { cause: e, file: this.path }),
      );
    }
  }

  /** Synchronous: both drivers are, so `tryReserve()` is served without waiting. */
  read(range: ReadRange): readonly StoredItem[] {
    if (this.#state === 'closed') throw new QueueError('ERR_CLOSED', 'SqliteStore is closed');
    if (this.#scheduled.size > 0) return this.#readScheduled(range);
    const rows = this.#select.all(range.after, range.before, range.limit) as { seq: number | bigint; bytes: Uint8Array }[];
    const out: StoredItem[] = new Array(rows.length);
    for (let i = 0; i < rows.length; i++) out[i] = { seq: Number(rows[i]!.seq), bytes: rows[i]!.bytes };
    return out;
  }

  /**
   * `read` joined with the schedule table, while that holds a row. A row whose priority or
   * not-before time the contract refuses is damage: the read throws ERR_CORRUPT and returns none
   * of the items, as LevelStore does for a schedule value it cannot decode.
   */
  #readScheduled(range: ReadRange): readonly StoredItem[] {
    const rows = this.#schedule!.selectItems.all(range.after, range.before, range.limit) as Row[];
    const out: StoredItem[] = new Array(rows.length);
    for (let i = 0; i < rows.length; i++) {
      const item = itemOfRow(rows[i]!);
      if (typeof item === 'string') throw new QueueError('ERR_CORRUPT', `SqliteStore ${this.path}: ${item}`, { file: this.path });
      out[i] = item;
    }
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
        return new QueueError(
          'ERR_STORE',
          `SqliteStore got seq ${item.seq} (${item.bytes.length} bytes) out of order or over maxItemBytes`,
        );
      }
    }
    return undefined;
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
