/**
 * `persistent-queue/sqlite`: SqliteStore, the Store contract over SQLite (sqlite-store.ts), and
 * SqliteProcessedSet, a processed set in the same database as the side effects (processed-set.ts).
 */
export { SQLITE_FORMAT_VERSION, SqliteStore, type SqliteStoreOptions } from './sqlite-store.js';
export type { SqliteDriver } from './driver.js';
export { SqliteProcessedSet, type SqliteProcessedSetDatabase, type SqliteProcessedSetOptions } from './processed-set.js';
