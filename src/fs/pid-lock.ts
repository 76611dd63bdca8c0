/**
 * The pid lock file, used when the kernel lock (`fs-ext`) is not installed (FORMAT.md §5): a lock
 * file that holds the owner's pid, created complete by link(); a lock file whose pid is not alive
 * is taken over by rename, serialised by a `LOCK.takeover` mutex file.
 */
import * as fs from 'node:fs';
import { basename, dirname, join } from 'node:path';
import type { LockHandle } from './file-system.js';

/** The error a held lock throws: `code: 'ELOCKED'` and, where known, the holder's `pid`. */
export function lockedError(lockPath: string, pid: number | null): Error {
  const err = new Error(`${lockPath} is held${pid !== null ? ` by pid ${pid}` : ''}`) as Error & { code: string; pid?: number };
  err.code = 'ELOCKED';
  if (pid !== null) err.pid = pid;
  return err;
}

/** The pid a lock file's text names (its leading decimal digits, FORMAT.md §5), or null. */
export function pidIn(text: string): number | null {
  const pid = Number.parseInt(text.trim(), 10);
  return Number.isSafeInteger(pid) && pid > 0 ? pid : null;
}

export function readPid(path: string): number | null {
  return readHolder(path).pid;
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    // EPERM: the process exists but belongs to someone else.
    return (e as NodeJS.ErrnoException).code !== 'ESRCH';
  }
}

export function writeFileDurably(path: string, text: string, flags: string): void {
  const fd = fs.openSync(path, flags, 0o600);
  try {
    fs.writeSync(fd, text);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/** What the pid lock needs from the process; tests substitute it to replay interleavings. */
export interface PidLockEnv {
  readonly pid: number;
  isAlive(pid: number): boolean;
  /** Test hook: called when a stale holder was seen, before taking the lock over. */
  readonly afterStaleSeen?: () => void;
}

const processEnv: PidLockEnv = { pid: process.pid, isAlive };

/** Lock files this process holds, by path: our own pid in a LOCK we do not hold is a stale one. */
const heldByThisProcess = new Set<string>();

/** Suffix of the mutex file that serialises takeovers of a stale lock (FORMAT.md §5). */
const TAKEOVER_SUFFIX = '.takeover';

/** Create `path` as a new name of `from` (atomic, fails with EEXIST); false when it exists. */
export function linkNew(from: string, path: string, text: string): boolean {
  for (let attempt = 0; ; attempt++) {
    try {
      fs.linkSync(from, path);
      return true;
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === 'EEXIST') return false;
      // `from` is a tmp file that a concurrent opener's stray cleanup may delete: write it again.
      if (code !== 'ENOENT' || attempt > 0) throw e;
      writeFileDurably(from, text, 'w');
    }
  }
}

/** `exists: false` when there is no file; `pid: null` when it exists but names no pid. */
export function readHolder(path: string): { exists: boolean; pid: number | null } {
  let text: string;
  try {
    text = fs.readFileSync(path, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return { exists: false, pid: null };
    throw e;
  }
  return { exists: true, pid: pidIn(text) };
}

/**
 * Whether the holder `pid` named by the lock file `lockPath` is gone: no pid at all, a pid that is
 * not alive, or our own pid while this process does not hold the lock.
 */
export function isStaleHolder(lockPath: string, pid: number | null, env: PidLockEnv = processEnv): boolean {
  return pid === null || (pid === env.pid ? !heldByThisProcess.has(lockPath) : !env.isAlive(pid));
}

/**
 * The pid lock (no fs-ext). Every lock file is born complete: the pid is written to
 * `LOCK.tmp-<pid>` and fsynced, then linked (created; fails if it exists) or renamed into place,
 * so no process ever sees an empty LOCK of a live holder. A stale LOCK (a dead pid; our own pid
 * while this process does not hold it, as after a container restart that reuses pids; or no pid
 * at all) is replaced only under the mutex `LOCK.takeover` (created by link, so one process takes
 * over at a time), after checking the holder again under it: without the mutex, two processes
 * replacing the same stale LOCK could both read their own pid back and both think they hold it.
 */
export function pidFileLock(lockPath: string, env: PidLockEnv = processEnv): LockHandle {
  const me = env.pid;
  const stale = (pid: number | null): boolean => isStaleHolder(lockPath, pid, env);
  const tmp = `${lockPath}.tmp-${me}`;
  const mutex = lockPath + TAKEOVER_SUFFIX;
  const text = `${me}\n`;
  try {
    for (let attempt = 0; attempt < 4; attempt++) {
      // A live holder is refused before the tmp file is written and fsynced: an open that waits
      // for the lock tries again and again while it is held.
      const before = readHolder(lockPath);
      if (before.exists && !stale(before.pid)) throw lockedError(lockPath, before.pid);
      // (Re)written each attempt: a rename below consumes it.
      if (!fs.existsSync(tmp)) writeFileDurably(tmp, text, 'w');
      if (linkNew(tmp, lockPath, text)) return pidFileHandle(lockPath, me);
      const seen = readHolder(lockPath);
      if (!seen.exists) continue; // released meanwhile: try to create it again
      if (!stale(seen.pid)) throw lockedError(lockPath, seen.pid);
      env.afterStaleSeen?.();
      if (!linkNew(tmp, mutex, text)) {
        const other = readHolder(mutex);
        // Another process is taking the lock over right now; it wins.
        if (other.exists && !stale(other.pid)) throw lockedError(lockPath, other.pid);
        // Left by a process that died inside its takeover (a few syscalls): remove it, retry.
        if (other.exists) fs.rmSync(mutex, { force: true });
        continue;
      }
      try {
        const now = readHolder(lockPath);
        if (!now.exists) continue; // released meanwhile: create it, never replace it
        if (!stale(now.pid)) throw lockedError(lockPath, now.pid);
        // Atomic replace: LOCK never disappears, so no process can create it in between.
        fs.renameSync(tmp, lockPath);
        return pidFileHandle(lockPath, me);
      } finally {
        fs.rmSync(mutex, { force: true });
      }
    }
    throw lockedError(lockPath, readPid(lockPath));
  } finally {
    fs.rmSync(tmp, { force: true });
  }
}

/**
 * Remove the `LOCK.tmp-<pid>` files of openers that died inside a lock attempt (a few syscalls):
 * each opener removes its own, and recovery leaves them alone because a live opener may be using
 * its own right now. Called by a new holder of the lock, of either kind.
 */
export function removeDeadOpenersFiles(lockPath: string, env: PidLockEnv = processEnv): void {
  const dir = dirname(lockPath);
  const prefix = `${basename(lockPath)}.tmp-`;
  for (const name of fs.readdirSync(dir)) {
    if (!name.startsWith(prefix)) continue;
    const pid = Number(name.slice(prefix.length));
    if (Number.isSafeInteger(pid) && pid > 0 && pid !== env.pid && !env.isAlive(pid)) fs.rmSync(join(dir, name), { force: true });
  }
}

function pidFileHandle(lockPath: string, me: number): LockHandle {
  removeDeadOpenersFiles(lockPath);
  heldByThisProcess.add(lockPath);
  let released = false;
  return {
    release() {
      if (released) return;
      released = true;
      heldByThisProcess.delete(lockPath);
      // Remove the file only while it is still ours.
      if (readPid(lockPath) === me) fs.unlinkSync(lockPath);
    },
  };
}

