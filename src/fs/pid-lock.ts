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

/**
 * What tells this process from an earlier one that had the same pid (a container restarted, pids
 * reused): when it started. Every thread and every copy of this package in the process computes
 * the same value, so a LOCK written by another worker thread, or by another copy of the package
 * loaded beside this one, is known for a live holder in this very process, not a stale one. On
 * Linux it is the start time in clock ticks since boot (field 22 of /proc/self/stat); elsewhere
 * the wall-clock second the process started.
 */
export const PROCESS_START: string = processStart();

function processStart(): string {
  return linuxStart('self') ?? `s${Math.round(Date.now() / 1000 - process.uptime())}`;
}

/** The Linux start stamp of process `pid` (`self` for this one), or null where /proc does not tell it. */
function linuxStart(pid: number | 'self'): string | null {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the parenthesised command name start at field 3; field 22 is the start time.
    const ticks = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
    if (ticks !== undefined && /^\d+$/.test(ticks)) return `t${ticks}`;
  } catch {
    // Not Linux, or the process is gone.
  }
  return null;
}

/** The start stamp a lock file's text carries (`start=<stamp>`, FORMAT.md §5), or null. */
export function startIn(text: string): string | null {
  return /(?:^|\s)start=(\S+)/.exec(text)?.[1] ?? null;
}

/** The text of a LOCK (or its tmp file) this process writes: its pid, a mark, its start stamp. */
export function lockText(pid: number, mark: string | null, start: string = PROCESS_START): string {
  return `${pid}${mark === null ? '' : ` ${mark}`} start=${start}\n`;
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
  /** This process's start stamp ({@link PROCESS_START}). */
  readonly start?: string;
  isAlive(pid: number): boolean;
  /** Test hook: called when a stale holder was seen, before taking the lock over. */
  readonly afterStaleSeen?: () => void;
}

const processEnv: PidLockEnv = { pid: process.pid, start: PROCESS_START, isAlive };

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

/** Who a lock file names: its pid and start stamp (null when missing). */
export interface Holder {
  readonly pid: number | null;
  readonly start: string | null;
}

export function holderIn(text: string): Holder {
  return { pid: pidIn(text), start: startIn(text) };
}

/** `exists: false` when there is no file; `pid: null` when it exists but names no pid. */
export function readHolder(path: string): Holder & { exists: boolean } {
  let text: string;
  try {
    text = fs.readFileSync(path, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return { exists: false, pid: null, start: null };
    throw e;
  }
  return { exists: true, ...holderIn(text) };
}

/**
 * Whether the holder named by the lock file `lockPath` is gone: no pid at all, a pid that is not
 * alive, or our own pid with another start stamp (an earlier process that had our pid) while this
 * copy of the package does not hold the lock. Our own pid with our own start stamp is this
 * process: another worker thread or another copy of the package holds the store.
 */
export function isStaleHolder(lockPath: string, holder: Holder, env: PidLockEnv = processEnv): boolean {
  const { pid } = holder;
  if (pid === null) return true;
  if (pid !== env.pid) return !env.isAlive(pid);
  if (heldByThisProcess.has(lockPath)) return false;
  return holder.start === null || holder.start !== (env.start ?? PROCESS_START);
}

/**
 * The live process that the lock file `lockPath` names, of either kind (both write the holder's
 * pid and start stamp into it and remove it as they let go), found by reading the file only: no
 * lock is taken, so a writer opening the store meanwhile is not refused because of the question.
 * Null when there is no lock file, it names no pid, or its holder is gone: a pid that is not
 * alive, or, where the start time of a live pid can be read (Linux), a pid now used by another
 * process than the one that wrote the file. Our own pid with our own start stamp is this process.
 */
export function liveLockHolder(lockPath: string, env: PidLockEnv = processEnv): { pid: number } | null {
  let holder: Holder & { exists: boolean };
  try {
    holder = readHolder(lockPath);
  } catch {
    return null; // unreadable: nothing known of a holder
  }
  const { pid, start } = holder;
  if (!holder.exists || pid === null) return null;
  if (pid === env.pid) return start === (env.start ?? PROCESS_START) ? { pid } : null;
  if (!env.isAlive(pid)) return null;
  const now = start?.startsWith('t') ? linuxStart(pid) : null;
  return now !== null && now !== start ? null : { pid };
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
  const stale = (holder: Holder): boolean => isStaleHolder(lockPath, holder, env);
  const tmp = `${lockPath}.tmp-${me}`;
  const mutex = lockPath + TAKEOVER_SUFFIX;
  const text = lockText(me, null, env.start ?? PROCESS_START);
  let written = false;
  try {
    for (let attempt = 0; attempt < 4; attempt++) {
      // A live holder is refused before the tmp file is written and fsynced: an open that waits
      // for the lock tries again and again while it is held.
      const before = readHolder(lockPath);
      if (before.exists && !stale(before)) throw lockedError(lockPath, before.pid);
      // (Re)written each attempt: a rename below consumes it.
      if (!written || !fs.existsSync(tmp)) writeFileDurably(tmp, text, 'w');
      written = true;
      if (linkNew(tmp, lockPath, text)) return pidFileHandle(lockPath, me);
      const seen = readHolder(lockPath);
      if (!seen.exists) continue; // released meanwhile: try to create it again
      if (!stale(seen)) throw lockedError(lockPath, seen.pid);
      env.afterStaleSeen?.();
      if (!linkNew(tmp, mutex, text)) {
        const other = readHolder(mutex);
        // Another process is taking the lock over right now; it wins.
        if (other.exists && !stale(other)) throw lockedError(lockPath, other.pid);
        // Left by a process that died inside its takeover (a few syscalls): remove it, retry.
        if (other.exists) fs.rmSync(mutex, { force: true });
        continue;
      }
      try {
        const now = readHolder(lockPath);
        if (!now.exists) continue; // released meanwhile: create it, never replace it
        if (!stale(now)) throw lockedError(lockPath, now.pid);
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
  // Tidying only, after the lock is taken: a failure here must not fail the open and leave the
  // lock held by nobody who will release it.
  try {
    for (const name of fs.readdirSync(dir)) {
      if (!name.startsWith(prefix)) continue;
      const pid = Number(name.slice(prefix.length));
      if (Number.isSafeInteger(pid) && pid > 0 && pid !== env.pid && !env.isAlive(pid)) fs.rmSync(join(dir, name), { force: true });
    }
  } catch {
    // A file that cannot be removed now is removed by a later holder.
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
