/**
 * The production {@link FileSystem} over node:fs. This is the only module of the package that
 * imports node:fs; LogStore reaches the disk only through the interface.
 *
 * Locking (BRIEF lesson 14): with the optional peer dependency `fs-ext` installed, a kernel
 * `flock` on `LOCK` (released by the kernel when the holder dies). Without it, a lock file that
 * holds the owner's pid, created complete by link(); a lock file whose pid is not alive is taken
 * over by rename, serialised by a `LOCK.takeover` mutex file (see `pidFileLock`).
 */
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import type { FileStat, FileSystem, LockHandle, OpenMode } from './log/file-system.js';

interface FsExt {
  flockSync(fd: number, flags: 'exnb' | 'un'): void;
}

/** `fs-ext` is an optional peer: loaded when present, never required. */
const fsExt: FsExt | null = (() => {
  try {
    const mod = createRequire(import.meta.url)('fs-ext') as Partial<FsExt>;
    return typeof mod.flockSync === 'function' ? (mod as FsExt) : null;
  } catch {
    return null;
  }
})();

const isWindows = process.platform === 'win32';

function lockedError(lockPath: string, pid: number | null): Error {
  const err = new Error(`${lockPath} is held${pid !== null ? ` by pid ${pid}` : ''}`) as Error & { code: string; pid?: number };
  err.code = 'ELOCKED';
  if (pid !== null) err.pid = pid;
  return err;
}

function readPid(path: string): number | null {
  let text: string;
  try {
    text = fs.readFileSync(path, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw e;
  }
  const pid = Number.parseInt(text.trim(), 10);
  return Number.isSafeInteger(pid) && pid > 0 ? pid : null;
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

function writeFileDurably(path: string, text: string, flags: string): void {
  const fd = fs.openSync(path, flags, 0o600);
  try {
    fs.writeSync(fd, text);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

function flockLock(lockPath: string): LockHandle {
  const ext = fsExt!;
  const fd = fs.openSync(lockPath, fs.constants.O_RDWR | fs.constants.O_CREAT, 0o600);
  try {
    ext.flockSync(fd, 'exnb');
  } catch (e) {
    fs.closeSync(fd);
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'EAGAIN' || code === 'EWOULDBLOCK') throw lockedError(lockPath, readPid(lockPath));
    throw e;
  }
  // The pid is informational only (for the ERR_LOCKED message); the kernel lock is what counts.
  fs.ftruncateSync(fd, 0);
  fs.writeSync(fd, `${process.pid}\n`, 0);
  let released = false;
  return {
    release() {
      if (released) return;
      released = true;
      try {
        ext.flockSync(fd, 'un');
      } finally {
        fs.closeSync(fd);
      }
    },
  };
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
function linkNew(from: string, path: string, text: string): boolean {
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
function readHolder(path: string): { exists: boolean; pid: number | null } {
  let text: string;
  try {
    text = fs.readFileSync(path, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return { exists: false, pid: null };
    throw e;
  }
  const pid = Number.parseInt(text.trim(), 10);
  return { exists: true, pid: Number.isSafeInteger(pid) && pid > 0 ? pid : null };
}

/**
 * The pid lock (no fs-ext). Every lock file is born complete: the pid is written to
 * `LOCK.tmp-<pid>` and fsynced, then linked (created; fails if it exists) or renamed into place,
 * so no process ever sees an empty LOCK of a live holder. A stale LOCK (a dead pid; our own pid
 * while this process does not hold it, as after a container restart that reuses pids; or no pid
 * at all) is replaced only under the mutex `LOCK.takeover` (created by link, so one process takes
 * over at a time), after checking the holder again under it. Found by review: two processes
 * replacing the same stale LOCK both read their own pid back.
 */
export function pidFileLock(lockPath: string, env: PidLockEnv = processEnv): LockHandle {
  const me = env.pid;
  const stale = (pid: number | null): boolean =>
    pid === null || (pid === me ? !heldByThisProcess.has(lockPath) : !env.isAlive(pid));
  const tmp = `${lockPath}.tmp-${me}`;
  const mutex = lockPath + TAKEOVER_SUFFIX;
  const text = `${me}\n`;
  try {
    for (let attempt = 0; attempt < 4; attempt++) {
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

function pidFileHandle(lockPath: string, me: number): LockHandle {
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

/** The node:fs implementation of {@link FileSystem}. */
export const nodeFileSystem: FileSystem = {
  mkdirp(path, mode) {
    fs.mkdirSync(path, { recursive: true, mode });
  },
  readdir(path) {
    return fs.readdirSync(path);
  },
  stat(path): FileStat | null {
    let st: fs.Stats;
    try {
      st = fs.statSync(path);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw e;
    }
    return { size: st.size, isFile: st.isFile(), isDirectory: st.isDirectory() };
  },
  open(path, mode: OpenMode, fileMode = 0o600) {
    // Never 'a': positional writes are ignored on an fd opened in append mode (BRIEF lesson 16).
    const flags = mode === 'read' ? 'r' : mode === 'readWrite' ? 'r+' : 'wx+';
    return fs.openSync(path, flags, fileMode);
  },
  close(fd) {
    fs.closeSync(fd);
  },
  read(fd, buffer, offset, length, position) {
    return fs.readSync(fd, buffer, offset, length, position);
  },
  write(fd, buffer, offset, length, position) {
    let done = 0;
    while (done < length) {
      done += fs.writeSync(fd, buffer, offset + done, length - done, position + done);
    }
  },
  size(fd) {
    return fs.fstatSync(fd).size;
  },
  truncate(fd, length) {
    fs.ftruncateSync(fd, length);
  },
  fdatasync(fd) {
    return new Promise((resolve, reject) => fs.fdatasync(fd, (e) => (e ? reject(e) : resolve())));
  },
  fsync(fd) {
    return new Promise((resolve, reject) => fs.fsync(fd, (e) => (e ? reject(e) : resolve())));
  },
  fsyncDir(path) {
    return new Promise((resolve, reject) => {
      fs.open(path, 'r', (e, fd) => {
        if (e) {
          // Windows cannot open or fsync a directory (BRIEF lesson 16); tolerated there only.
          if (isWindows && (e.code === 'EPERM' || e.code === 'EISDIR')) return resolve();
          return reject(e);
        }
        fs.fsync(fd, (e2) => {
          fs.close(fd, () => {
            if (e2 && !(isWindows && (e2.code === 'EPERM' || e2.code === 'EBADF'))) reject(e2);
            else resolve();
          });
        });
      });
    });
  },
  rename(from, to) {
    fs.renameSync(from, to);
  },
  unlink(path) {
    fs.unlinkSync(path);
  },
  lock(lockPath) {
    return fsExt !== null ? flockLock(lockPath) : pidFileLock(lockPath);
  },
  realpath(path) {
    return fs.realpathSync.native(path);
  },
};

/** Whether the kernel lock (`fs-ext`) is in use. */
export const kernelLockAvailable: boolean = fsExt !== null;
