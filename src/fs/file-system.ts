/**
 * The FileSystem interface: every byte LogStore reads or writes goes through it, so that a
 * simulated crash disk (`persistent-queue/testing`) can stand in for `node:fs`.
 *
 * Reads, writes and metadata calls are synchronous: the engine writes whole batches with one
 * positional write(2) and serves `tryReserve()` with a synchronous read, and a threadpool hop per
 * call would cost more than the call itself. The calls that wait on the device (fsync,
 * fdatasync, directory fsync) are asynchronous and run off the event loop; a store opened with
 * `blockingSync` calls the optional synchronous `fdatasyncSync`/`fsyncSync` for the syncs of its
 * segments and cursor instead (directory fsyncs stay asynchronous).
 *
 * Paths are absolute. File descriptors are small integers owned by the implementation.
 * Errors are thrown (or rejected) as Node-style errors carrying `code` (`ENOENT`, `EIO`,
 * `ENOSPC`, `EMFILE`, ...) so the engine can tell transient errors from corruption.
 */

/** What `stat` reports. */
export interface FileStat {
  readonly size: number;
  readonly isFile: boolean;
  readonly isDirectory: boolean;
}

/** How to open a file. */
export type OpenMode =
  /** Read only; the file must exist. */
  | 'read'
  /** Read and write at positions; the file must exist. Never append mode (positional writes). */
  | 'readWrite'
  /** Create a new file for reading and writing; fails with EEXIST if it exists. */
  | 'create';

/** A held process lock; `release()` is idempotent. */
export interface LockHandle {
  release(): void;
}

export interface FileSystem {
  /** Create a directory and its missing parents with `mode` (for the ones it creates). */
  mkdirp(path: string, mode: number): void;
  /** Names (not paths) of the entries in a directory. */
  readdir(path: string): string[];
  /** `null` when nothing exists at `path`. */
  stat(path: string): FileStat | null;

  open(path: string, mode: OpenMode, fileMode?: number): number;
  /** Close a descriptor. The engine never closes a descriptor with unsynced data it still needs. */
  close(fd: number): void;
  /** Read up to `length` bytes at `position` into `buffer[offset..]`; returns bytes read (0 at EOF). */
  read(fd: number, buffer: Uint8Array, offset: number, length: number, position: number): number;
  /** Write all of `buffer[offset..offset+length)` at `position`, or throw. */
  write(fd: number, buffer: Uint8Array, offset: number, length: number, position: number): void;
  /** Current size of an open file, in bytes. */
  size(fd: number): number;
  /** Cut (or zero-extend) an open file to `length` bytes. */
  truncate(fd: number, length: number): void;

  /** Make the file's data (and the metadata needed to read it, such as its size) durable. */
  fdatasync(fd: number): Promise<void>;
  /** Make the file's data and all its metadata durable. */
  fsync(fd: number): Promise<void>;
  /** Make the directory's entries (creates, renames, unlinks inside it) durable. */
  fsyncDir(path: string): Promise<void>;
  /**
   * Optional: `fdatasync` on the calling thread, returning once the data is durable. Only
   * LogStore's `blockingSync` option calls it; a FileSystem without it cannot be opened with that
   * option. Added after the first version of this interface; implementations may omit it.
   */
  fdatasyncSync?(fd: number): void;
  /** Optional: `fsync` on the calling thread (see `fdatasyncSync`). */
  fsyncSync?(fd: number): void;

  /** Atomically replace `to` with `from` (same directory). */
  rename(from: string, to: string): void;
  unlink(path: string): void;

  /**
   * Take the exclusive lock that makes one process the owner of a store directory. Throws an
   * error with `code: 'ELOCKED'` and, where known, `pid` (the holder) when another owner holds it.
   * A holder that dies releases the lock (kernel lock) or leaves a stale lock file whose dead
   * owner is detected and taken over.
   */
  lock(lockPath: string): LockHandle;

  /**
   * Optional: whether a live process holds the lock `lock(lockPath)` takes, found without taking
   * it or changing anything: `{ pid }` for a live holder (`pid` null when not known), null when
   * nobody holds it (no lock, or one whose holder died). A read-only open asks, so that a live
   * writer's tail reads as a write in progress rather than as a crash's torn tail. Without it, a
   * read-only open takes the store for one nobody holds. Added after the first version of this
   * interface; implementations may omit it.
   */
  lockHolder?(lockPath: string): { readonly pid: number | null } | null;

  /**
   * Optional: the canonical path of an existing directory (symlinks resolved). LogStore uses it to
   * refuse a second open of the same store in the same process; without it, the absolute path is
   * used as given. Added after the first version of this interface; implementations may omit it.
   */
  realpath?(path: string): string;
}
