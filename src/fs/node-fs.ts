/**
 * The production {@link FileSystem} over node:fs. This is the only module of the package that
 * imports node:fs; LogStore reaches the disk only through the interface.
 *
 * Locking: with the optional peer dependency `fs-ext` installed, a kernel `flock` on `LOCK`,
 * which the kernel releases when the holder dies. Without it, the pid lock file of
 * `./pid-lock.ts`.
 */
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import type { FileStat, FileSystem, LockHandle, OpenMode } from './file-system.js';
import { lockedError, pidFileLock, readPid } from './pid-lock.js';

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
    // Never 'a': positional writes are ignored on an fd opened in append mode (DESIGN.md, "Node specifics").
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
          // Windows cannot open or fsync a directory (DESIGN.md, "Node specifics"); tolerated there only.
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
