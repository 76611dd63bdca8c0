/**
 * The production {@link FileSystem} over node:fs. This is the only module of the package that
 * imports node:fs; LogStore reaches the disk only through the interface.
 *
 * Locking: with the optional peer dependency `fs-ext` installed, a kernel `flock` on `LOCK`,
 * which the kernel releases when the holder dies. Without it, the pid lock file of
 * `./pid-lock.ts`. The choice is made at the first lock, not at import: importing the package
 * loads no native addon. `PERSISTENT_QUEUE_LOCK` (read once, when this module loads) forces it:
 * `pidfile` never loads fs-ext, `flock` refuses to open without it, `auto` (or unset) uses fs-ext
 * when it loads. The test suite runs the lock tests under both.
 */
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import type { FileStat, FileSystem, LockHandle, OpenMode } from './file-system.js';
import { PROCESS_FILES, shareScope } from './open-registry.js';
import {
  holderIn,
  isStaleHolder,
  linkNew,
  liveLockHolder,
  lockText,
  lockedError,
  pidFileLock,
  readPid,
  removeDeadOpenersFiles,
  writeFileDurably,
} from './pid-lock.js';

interface FsExt {
  flockSync(fd: number, flags: 'exnb' | 'un'): void;
}

/** Which lock a node file system takes: `auto` is the kernel lock when `fs-ext` loads, else the pid file. */
export type LockKind = 'auto' | 'flock' | 'pidfile';

const LOCK_ENV = 'PERSISTENT_QUEUE_LOCK';

/** The value of PERSISTENT_QUEUE_LOCK when this module loaded ('' when unset or unreadable). */
const lockFromEnv: string = (() => {
  try {
    return process.env[LOCK_ENV] ?? '';
  } catch {
    // A runtime that guards the environment (Deno without --allow-env) throws here: the default.
    return '';
  }
})();

/** `fs-ext` is an optional peer: loaded at the first kernel lock, when present, never required. */
let fsExtLoaded: { mod: FsExt | null; error: unknown } | undefined;

function loadFsExt(): { mod: FsExt | null; error: unknown } {
  if (fsExtLoaded === undefined) {
    try {
      const mod = createRequire(import.meta.url)('fs-ext') as Partial<FsExt>;
      fsExtLoaded =
        typeof mod.flockSync === 'function' ? { mod: mod as FsExt, error: null } : { mod: null, error: new Error('it has no flockSync') };
    } catch (e) {
      fsExtLoaded = { mod: null, error: e };
    }
  }
  return fsExtLoaded;
}

/** The lock function of a file system whose lock is `kind`. */
function lockOf(kind: LockKind): (lockPath: string) => LockHandle {
  return (lockPath) => {
    if (kind === 'pidfile') return pidFileLock(lockPath);
    const { mod, error } = loadFsExt();
    if (mod !== null) return flockLock(mod, lockPath);
    if (kind === 'flock') {
      throw new Error(`the kernel lock needs the package fs-ext (npm install fs-ext): ${(error as Error)?.message ?? String(error)}`, {
        cause: error,
      });
    }
    return pidFileLock(lockPath);
  };
}

/** The lock kind PERSISTENT_QUEUE_LOCK asks for; a value it does not know fails every open, by name. */
function envLock(lockPath: string): LockHandle {
  const kind = lockFromEnv === '' ? 'auto' : lockFromEnv;
  if (kind !== 'auto' && kind !== 'flock' && kind !== 'pidfile') {
    throw new Error(`${LOCK_ENV} must be auto, flock or pidfile, got '${lockFromEnv}'`);
  }
  return lockOf(kind)(lockPath);
}

const isWindows = process.platform === 'win32';

/**
 * What a kernel-lock holder writes into LOCK after its pid. A process without fs-ext (the pid
 * lock) reads the pid and sees a live holder; a process with fs-ext that got the flock knows the
 * writer is gone (the kernel dropped its lock), whether or not its pid now belongs to another
 * process.
 */
const FLOCK_MARK = 'flock';

/** True when `fd` is still the file named `path` (not removed or replaced since it was opened). */
function sameFile(fd: number, path: string): boolean {
  const now = fs.statSync(path, { throwIfNoEntry: false });
  const held = fs.fstatSync(fd);
  return now !== undefined && now.ino === held.ino && now.dev === held.dev;
}

/** A live holder of the pid lock (a process without fs-ext) named by the text of LOCK, or null. */
function pidFileHolder(lockPath: string, text: string): number | null {
  if (text.includes(FLOCK_MARK)) return null;
  const holder = holderIn(text);
  return holder.pid !== null && !isStaleHolder(lockPath, holder) ? holder.pid : null;
}

/**
 * The kernel lock. LOCK is born complete, like the pid lock's (`LOCK.tmp-<pid>` linked into
 * place): a process without fs-ext takes an empty LOCK for a stale one. The flock is taken on
 * whatever LOCK is there, then checked to still be the file named LOCK, because a holder removes
 * LOCK as it lets go, and a flock on a removed file locks nothing anyone else opens. A LOCK that
 * was there before us and names a live process without the flock mark belongs to a pid-lock
 * holder (a process without fs-ext) and is respected. Released: LOCK removed, then the flock
 * dropped, so that a refused or finished open leaves the directory as it found it.
 */
function flockLock(ext: FsExt, lockPath: string): LockHandle {
  const me = process.pid;
  const text = lockText(me, FLOCK_MARK);
  const tmp = `${lockPath}.tmp-${me}`;
  let written = false;
  try {
    for (let attempt = 0; attempt < 4; attempt++) {
      let fd = openExisting(lockPath);
      if (fd === null) {
        // Only a missing LOCK costs the tmp file and its fsync: a waiting open polls a held one.
        if (!written || !fs.existsSync(tmp)) writeFileDurably(tmp, text, 'w');
        written = true;
        linkNew(tmp, lockPath, text);
        fd = openExisting(lockPath);
        if (fd === null) continue; // released and removed meanwhile: create it again
      }
      let held = false;
      try {
        ext.flockSync(fd, 'exnb');
        held = true;
      } catch (e) {
        const code = (e as NodeJS.ErrnoException).code;
        if (code === 'EAGAIN' || code === 'EWOULDBLOCK') throw lockedError(lockPath, readPid(lockPath));
        throw e;
      } finally {
        if (!held) fs.closeSync(fd);
      }
      try {
        if (!sameFile(fd, lockPath)) {
          unlockAndClose(ext, fd);
          continue;
        }
        const found = fs.readFileSync(fd, 'utf8');
        if (found !== text) {
          const pid = pidFileHolder(lockPath, found);
          if (pid !== null) throw lockedError(lockPath, pid);
          // Overwritten in place (never emptied first): the flock is on this very file.
          fs.writeSync(fd, text, 0);
          fs.ftruncateSync(fd, Buffer.byteLength(text));
        }
      } catch (e) {
        unlockAndClose(ext, fd);
        throw e;
      }
      removeDeadOpenersFiles(lockPath);
      return flockHandle(ext, fd, lockPath, me);
    }
    throw lockedError(lockPath, readPid(lockPath));
  } finally {
    fs.rmSync(tmp, { force: true });
  }
}

function openExisting(path: string): number | null {
  try {
    return fs.openSync(path, fs.constants.O_RDWR);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw e;
  }
}

function unlockAndClose(ext: FsExt, fd: number): void {
  try {
    ext.flockSync(fd, 'un');
  } finally {
    fs.closeSync(fd);
  }
}

function flockHandle(ext: FsExt, fd: number, lockPath: string, me: number): LockHandle {
  let released = false;
  return {
    release() {
      if (released) return;
      released = true;
      try {
        // Removed while the flock is still held, and only while it is ours.
        if (sameFile(fd, lockPath) && readPid(lockPath) === me) fs.unlinkSync(lockPath);
      } finally {
        unlockAndClose(ext, fd);
      }
    },
  };
}

/** The node:fs calls of {@link FileSystem}, all but the lock. */
const fileCalls: Omit<FileSystem, 'lock'> = {
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
    // Never 'a': positional writes are ignored on an fd opened in append mode (docs/internals/engine.md, "Node specifics").
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
  fdatasyncSync(fd) {
    fs.fdatasyncSync(fd);
  },
  fsyncSync(fd) {
    fs.fsyncSync(fd);
  },
  fsyncDir(path) {
    return new Promise((resolve, reject) => {
      fs.open(path, 'r', (e, fd) => {
        if (e) {
          // Windows cannot open or fsync a directory (docs/internals/engine.md, "Node specifics"); tolerated there only.
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
  realpath(path) {
    return fs.realpathSync.native(path);
  },
  // Both kinds of lock name their holder in the lock file, so one reading serves either.
  lockHolder(lockPath) {
    return liveLockHolder(lockPath);
  },
};

/**
 * A node:fs {@link FileSystem} whose lock is `kind`, for tests that run one process under both
 * locks. Every one of them shares the real file system's open registry, so a second open of a
 * store in this process is refused whichever of them it goes through.
 */
export function createNodeFileSystem(kind: LockKind): FileSystem {
  const made: FileSystem = { ...fileCalls, lock: lockOf(kind) };
  shareScope(made, PROCESS_FILES);
  return made;
}

/** The node:fs implementation of {@link FileSystem}, with the lock PERSISTENT_QUEUE_LOCK chooses (FORMAT.md §5). */
export const nodeFileSystem: FileSystem = { ...fileCalls, lock: envLock };
shareScope(nodeFileSystem, PROCESS_FILES);
