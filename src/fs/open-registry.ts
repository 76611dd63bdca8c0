/**
 * The stores open in this process, one registry for every backend. A second open of the same
 * store in the same process is refused here, before the backend touches its files: POSIX record
 * locks belong to the process, so a second open that failed and closed its own descriptor on the
 * lock file would silently drop the first holder's lock (LevelDB's LOCK file behaves exactly so).
 */
import { OpenError } from '../contract/errors.js';

/**
 * Paths are kept per scope: a simulated disk is its own namespace, so two simulated disks may
 * each hold a store at `/q`. Stores on the real file system share one scope.
 */
const claimed = new WeakMap<object, Set<string>>();

/** The scope of every store on the real file system. */
export const PROCESS_FILES: object = Object.freeze({ name: 'the file system of this process' });

/** Objects that stand for another scope: each node:fs FileSystem stands for PROCESS_FILES. */
const aliases = new WeakMap<object, object>();

/** Make `alias` name the same scope as `scope` (a FileSystem over the real disk, say). */
export function shareScope(alias: object, scope: object): void {
  aliases.set(alias, aliases.get(scope) ?? scope);
}

/**
 * Claim `key` (a canonical path) in `scope`; returns the release function (idempotent). Throws
 * `OpenError` `ERR_LOCKED` when the path is already claimed.
 */
export function claimOpen(given: object, key: string, shown: string = key): () => void {
  const scope = aliases.get(given) ?? given;
  let set = claimed.get(scope);
  if (set === undefined) claimed.set(scope, (set = new Set()));
  if (set.has(key)) {
    throw new OpenError('ERR_LOCKED', `Store ${shown} is already open in this process (pid ${process.pid})`, { file: shown });
  }
  set.add(key);
  let released = false;
  return () => {
    if (released) return;
    released = true;
    set.delete(key);
  };
}
