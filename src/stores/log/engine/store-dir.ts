// The store directory before recovery reads it (FORMAT.md §5): found or created, and locked.
import { dirname, join } from 'node:path';
import { OpenError } from '../../../contract/errors.js';
import type { FileSystem, LockHandle } from '../../../fs/file-system.js';
import { errnoCode } from './durability.js';
import { LOCK_FILE, classifyEntry } from './format.js';
import type { ResolvedOptions } from './options.js';

/** An I/O error of the open path, with its errno error as `cause` (never called corruption). */
export function openFailed(what: string, dir: string, e: unknown): OpenError {
  const code = errnoCode(e);
  const hint = code === 'EACCES' || code === 'EPERM' ? ' (permission denied)' : code === 'ENOTDIR' ? ' (a part of the path is a file)' : '';
  return new OpenError('ERR_STORE', `${what} ${dir}${hint}: ${(e as Error)?.message ?? String(e)}`, { cause: e, file: dir });
}

/**
 * Make sure `dir` is a directory the store can use. With `mustExist` it must already hold a store
 * (a segment or the cursor file), else `ERR_NOT_FOUND`; otherwise a missing directory is created
 * with its new entries made durable. Creates nothing when it throws.
 */
export async function prepareDirectory(fs: FileSystem, dir: string, opts: ResolvedOptions): Promise<void> {
  let st;
  try {
    st = fs.stat(dir);
  } catch (e) {
    throw openFailed('Cannot open store', dir, e);
  }
  if (st !== null && !st.isDirectory) throw new OpenError('ERR_STORE', `Store path ${dir} exists and is not a directory`, { file: dir });
  if (opts.mustExist) {
    if (st === null) throw new OpenError('ERR_NOT_FOUND', `No store at ${dir}: no such directory`, { file: dir });
    let names: string[];
    try {
      names = fs.readdir(dir);
    } catch (e) {
      throw openFailed('Cannot read store directory', dir, e);
    }
    const kinds = names.map(classifyEntry);
    if (!kinds.includes('segment') && !kinds.includes('cursor')) {
      throw new OpenError('ERR_NOT_FOUND', `No store at ${dir}: the directory holds no segment or cursor file`, { file: dir });
    }
    return;
  }
  if (st !== null) return;
  // Without the parent's fsync a power loss can take the whole store directory with it.
  const created: string[] = [];
  try {
    for (let d = dir; fs.stat(d) === null && dirname(d) !== d; d = dirname(d)) created.push(d);
    fs.mkdirp(dir, opts.dirMode);
    for (const d of created.reverse()) await fs.fsyncDir(dirname(d));
  } catch (e) {
    throw openFailed('Cannot create store directory', dir, e);
  }
}

/** Take the store's process lock, or `ERR_LOCKED` naming the holder. */
export function takeLock(fs: FileSystem, dir: string): LockHandle {
  const lockPath = join(dir, LOCK_FILE);
  try {
    return fs.lock(lockPath);
  } catch (e) {
    if (errnoCode(e) !== 'ELOCKED') throw e;
    const pid = (e as { pid?: unknown }).pid;
    // The holder may be this very process: another worker thread, or another copy of the package
    // loaded beside this one, opened the store. Saying "another process" with our own pid misleads.
    const holder =
      pid === process.pid
        ? `this process (pid ${pid}): another worker thread or another copy of this package has it open; reach it from here with connect()`
        : `another process${typeof pid === 'number' ? ` (pid ${pid})` : ''}`;
    throw new OpenError('ERR_LOCKED', `Store ${dir} is locked by ${holder}`, {
      cause: e,
      file: lockPath,
    });
  }
}

/**
 * The live process that holds the store's lock, found without taking it (the file system's
 * `lockHolder`), or null: nobody holds it, or the file system cannot tell. The readers that take
 * no lock (a read-only open, `verify`, salvage) ask, to read a live writer's tail as a write in
 * progress (the tail table's `liveWriter`).
 */
export function liveHolder(fs: FileSystem, dir: string): { readonly pid: number | null } | null {
  if (fs.lockHolder === undefined) return null;
  try {
    return fs.lockHolder(join(dir, LOCK_FILE));
  } catch {
    return null; // nothing known of a holder: the store is read as one nobody holds
  }
}
