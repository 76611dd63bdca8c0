/**
 * The SQLite bindings SqliteStore runs on (`node:sqlite` and the optional peer `better-sqlite3`):
 * the part of their API the store uses, how one is loaded, and how their errors map to ours.
 */
import { OpenError } from '../../contract/errors.js';

/** Which SQLite binding a SqliteStore runs on. */
export type SqliteDriver = 'node:sqlite' | 'better-sqlite3';

/** A row as the drivers return it. */
export type Row = Record<string, number | bigint | string | Uint8Array | null>;

export const MISSING_PEER = 'SqliteStore needs better-sqlite3 12.x on Node < 22.5: npm install better-sqlite3@12';

// The two drivers share this much API. They are typed here, not imported, so that neither has to
// be installed to type-check or to use the rest of the package.
export interface SqlRunResult {
  changes: number | bigint;
}
export interface SqlStatement {
  run(...params: unknown[]): SqlRunResult;
  get(...params: unknown[]): unknown;
  all(...params: unknown[]): unknown[];
}
export interface SqlDatabase {
  exec(sql: string): void;
  prepare(sql: string): SqlStatement;
  close(): void;
}
export type SqlConstructor = new (path: string, options: Record<string, unknown>) => SqlDatabase;

/** Load a driver. The specifier is a variable so that no bundler or type checker resolves it eagerly. */
export async function loadDriver(wanted: 'auto' | SqliteDriver): Promise<{ driver: SqliteDriver; Database: SqlConstructor }> {
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
export function sqliteResult(e: unknown): number {
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

export const SQLITE_BUSY = 5;
const SQLITE_LOCKED = 6;
const SQLITE_CORRUPT = 11;
export const SQLITE_FULL = 13;
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

export function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/** The OpenError for a failure while opening `file`. */
export function openError(file: string, e: unknown): OpenError {
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
