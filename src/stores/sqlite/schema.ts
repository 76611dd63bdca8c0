/**
 * SqliteStore's table layout, format by format: implements FORMAT.md §10 (SqliteStore).
 *
 * Each format adds tables to the one before; a store is written at the lowest format that holds
 * what it stores, and the tables of a new format and its version number are written in the one
 * transaction that stores its first record, so that they appear together or not at all.
 */
import { scheduleFault, storedItem } from '../../contract/records/schedules.js';
import type { StoredItem, StoredKey } from '../../contract/store.js';
import { keyFault } from '../../contract/records/keys.js';
import type { Row, SqlDatabase, SqlStatement } from './driver.js';

/** Tables `items` and `meta` (keys `format` and `nextSeq`). */
export const PLAIN_FORMAT_VERSION = 1;
/** Adds tables `marks` and `dead` and the `meta` key `deliveredBelow`. */
export const DELIVERY_FORMAT_VERSION = 2;
/** Adds table `schedule`: the priority and not-before time of scheduled items. */
export const SCHEDULE_FORMAT_VERSION = 3;
/** Adds table `keys`: the idempotency key of each item pushed with one, kept after its ack. */
export const KEYS_FORMAT_VERSION = 4;
/** The newest format this code reads and writes. */
export const NEWEST_FORMAT_VERSION = KEYS_FORMAT_VERSION;

/** The tables of a new store (format 1), and its `meta` rows. */
export const PLAIN_SCHEMA =
  'CREATE TABLE items (seq INTEGER PRIMARY KEY, bytes BLOB NOT NULL);' +
  'CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);' +
  `INSERT INTO meta (key, value) VALUES ('format', ${PLAIN_FORMAT_VERSION}), ('nextSeq', 1);`;

/** What format 2 adds to a format-1 database. */
export const DELIVERY_SCHEMA =
  'CREATE TABLE marks (seq INTEGER PRIMARY KEY, deliveries INTEGER NOT NULL, first_at INTEGER NOT NULL,' +
  ' last_at INTEGER NOT NULL, last_error TEXT NOT NULL);' +
  'CREATE TABLE dead (seq INTEGER PRIMARY KEY, bytes BLOB NOT NULL, deliveries INTEGER NOT NULL,' +
  ' first_at INTEGER NOT NULL, last_at INTEGER NOT NULL, dead_at INTEGER NOT NULL, reason TEXT NOT NULL);' +
  "INSERT INTO meta (key, value) VALUES ('deliveredBelow', 1);" +
  `UPDATE meta SET value = ${DELIVERY_FORMAT_VERSION} WHERE key = 'format';`;

/**
 * What format 3 adds to a format-2 database: one row per unacked item that has a priority or a
 * not-before time, keyed by the item's seq; plain items have none.
 *
 * A table of its own rather than two columns of `items` under a partial index: SQLite builds a
 * new index by reading every row of its table, so adding one to `items` would read the whole
 * backlog inside the first scheduled push (the drivers are synchronous: the event loop would
 * stall with it), while a new table is created empty at once. Plain items then cost nothing:
 * their rows keep two columns, and their appends, acks and reads never touch this table. The
 * table's primary key is its index: open reads its seqs (the scheduled items only, never the
 * plain backlog), the first of which is `scheduledFrom`, and an ack deletes a row in the
 * transaction that deletes its item.
 */
export const SCHEDULE_SCHEMA =
  'CREATE TABLE schedule (seq INTEGER PRIMARY KEY, priority INTEGER NOT NULL, not_before INTEGER NOT NULL);' +
  `UPDATE meta SET value = ${SCHEDULE_FORMAT_VERSION} WHERE key = 'format';`;

/**
 * What format 4 adds to a format-3 database: one row per idempotency key the store holds, keyed by
 * the seq of the item pushed with it. Inserted in the transaction that inserts the item; unlike a
 * schedule row, left in place by the item's ack or move to `dead` (a retried push must still find
 * the key), and deleted once older than the bound the queue gives `keepKeysFrom`. A table of its
 * own for the reasons `schedule` is one: created empty at once, never touched by plain items.
 */
export const KEYS_SCHEMA =
  'CREATE TABLE keys (seq INTEGER PRIMARY KEY, key TEXT NOT NULL, keyed_at INTEGER NOT NULL);' +
  `UPDATE meta SET value = ${KEYS_FORMAT_VERSION} WHERE key = 'format';`;

/** The tables a store of each format above 1 must have beside `items` and `meta`. */
const TABLES_OF_FORMAT: ReadonlyMap<number, readonly string[]> = new Map([
  [DELIVERY_FORMAT_VERSION, ['marks', 'dead']],
  [SCHEDULE_FORMAT_VERSION, ['marks', 'dead', 'schedule']],
  [KEYS_FORMAT_VERSION, ['marks', 'dead', 'schedule', 'keys']],
]);

/** A table that a database at `format` lacks, or undefined when it has them all. */
export function missingTable(format: number, tables: readonly string[]): string | undefined {
  return (TABLES_OF_FORMAT.get(format) ?? []).find((name) => !tables.includes(name));
}

/**
 * A value read from an INTEGER column as a number: NaN for anything else (a REAL with a
 * fraction, TEXT, a BLOB: the column's affinity stores every value that is an integer as one) and
 * for an integer past the safe ones, which JavaScript cannot hold exactly.
 */
function storedInteger(value: unknown): number {
  if (typeof value === 'bigint')
    return value >= -BigInt(Number.MAX_SAFE_INTEGER) && value <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(value) : Number.NaN;
  return typeof value === 'number' && Number.isSafeInteger(value) ? value : Number.NaN;
}

/** A stored value as an error message shows it. */
function shown(value: unknown): string {
  if (value instanceof Uint8Array) return `a blob of ${value.length} bytes`;
  return typeof value === 'string' ? JSON.stringify(value) : String(value);
}

/**
 * What is wrong with the `meta.format` value `value`, or undefined when it names a format
 * (FORMAT.md §10.4): it must be an integer of at least {@link PLAIN_FORMAT_VERSION}. One above
 * the newest format is a format, newer than this code: the caller refuses it as such.
 */
export function formatFault(value: unknown): string | undefined {
  const format = storedInteger(value);
  if (Number.isNaN(format) || format < PLAIN_FORMAT_VERSION)
    return `meta.format is ${shown(value)}, not a format version (an integer of at least ${PLAIN_FORMAT_VERSION})`;
  return undefined;
}

/**
 * The item a row of {@link ScheduleStatements.selectItems} holds, or what makes its `schedule`
 * row impossible (FORMAT.md §10.3): a priority or a not-before time the Store contract refuses
 * on append (`scheduleFault`), so that a store never hands the queue one it would not store.
 */
export function itemOfRow(row: Row): StoredItem | string {
  const seq = Number(row.seq);
  const bytes = row.bytes as Uint8Array;
  // A plain item has no schedule row: the join gives null in both columns (they are NOT NULL).
  if (row.priority === null && row.not_before === null) return { seq, bytes };
  const priority = storedInteger(row.priority);
  const notBefore = storedInteger(row.not_before);
  const fault = scheduleFault({ seq, bytes, priority, notBefore });
  if (fault !== undefined) return `the schedule row of seq ${seq} is (${shown(row.priority)}, ${shown(row.not_before)}): ${fault}`;
  return storedItem(seq, bytes, priority, notBefore);
}

/** Statements over the format-2 tables; prepared once those exist. */
export interface DeliveryStatements {
  setBelow: SqlStatement;
  putMark: SqlStatement;
  deleteMark: SqlStatement;
  putDead: SqlStatement;
  deleteDead: SqlStatement;
  selectDead: SqlStatement;
}

export function prepareDeliveries(db: SqlDatabase): DeliveryStatements {
  return {
    setBelow: db.prepare("UPDATE meta SET value = ? WHERE key = 'deliveredBelow'"),
    putMark: db.prepare('INSERT OR REPLACE INTO marks (seq, deliveries, first_at, last_at, last_error) VALUES (?, ?, ?, ?, ?)'),
    deleteMark: db.prepare('DELETE FROM marks WHERE seq = ?'),
    putDead: db.prepare('INSERT INTO dead (seq, bytes, deliveries, first_at, last_at, dead_at, reason) VALUES (?, ?, ?, ?, ?, ?, ?)'),
    deleteDead: db.prepare('DELETE FROM dead WHERE seq = ?'),
    selectDead: db.prepare(
      'SELECT seq, bytes, deliveries, first_at, last_at, dead_at, reason FROM dead WHERE seq > ? ORDER BY seq LIMIT ?',
    ),
  };
}

/** Statements over the format-3 table; prepared once it exists. */
export interface ScheduleStatements {
  put: SqlStatement;
  delete: SqlStatement;
  /** Items in `(after, before)` with their schedule, at most `limit`: `priority` and `not_before` are null for plain items. */
  selectItems: SqlStatement;
}

export function prepareSchedule(db: SqlDatabase): ScheduleStatements {
  return {
    put: db.prepare('INSERT INTO schedule (seq, priority, not_before) VALUES (?, ?, ?)'),
    delete: db.prepare('DELETE FROM schedule WHERE seq = ?'),
    selectItems: db.prepare(
      'SELECT items.seq AS seq, items.bytes AS bytes, schedule.priority AS priority, schedule.not_before AS not_before' +
        ' FROM items LEFT JOIN schedule ON schedule.seq = items.seq' +
        ' WHERE items.seq > ? AND items.seq < ? ORDER BY items.seq LIMIT ?',
    ),
  };
}

/** The seqs of a format-3 database's `schedule` rows, in order. */
export function scheduledSeqs(db: SqlDatabase): number[] {
  const rows = db.prepare('SELECT seq FROM schedule ORDER BY seq').all() as { seq: number | bigint }[];
  return rows.map((row) => Number(row.seq));
}

/** Statements over the format-4 table; prepared once it exists. */
export interface KeyStatements {
  put: SqlStatement;
  delete: SqlStatement;
}

export function prepareKeys(db: SqlDatabase): KeyStatements {
  return {
    put: db.prepare('INSERT INTO keys (seq, key, keyed_at) VALUES (?, ?, ?)'),
    delete: db.prepare('DELETE FROM keys WHERE seq = ?'),
  };
}

/**
 * Every row of a format-4 database's `keys` table, in seq order, or what makes one impossible
 * (FORMAT.md §10.5): a key that is not TEXT of 1 to 255 UTF-8 bytes, or a time that is not a
 * non-negative safe integer, is a value no append could have written.
 */
export function storedKeys(db: SqlDatabase): StoredKey[] | string {
  const rows = db.prepare('SELECT seq, key, keyed_at FROM keys ORDER BY seq').all() as Row[];
  const keys: StoredKey[] = [];
  for (const row of rows) {
    const seq = storedInteger(row.seq);
    const keyedAt = storedInteger(row.keyed_at);
    const fault = keyFault({ seq, bytes: new Uint8Array(0), key: row.key as string, keyedAt });
    if (fault !== undefined) return `the keys row of seq ${shown(row.seq)} is (${shown(row.key)}, ${shown(row.keyed_at)}): ${fault}`;
    keys.push({ key: row.key as string, seq, keyedAt });
  }
  return keys;
}
