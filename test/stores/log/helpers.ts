/** Shared helpers for the LogStore tests: temp dirs, byte surgery, hashing, a seeded PRNG, fs wrappers. */
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { crc32c32 } from '../../../src/stores/log/engine/crc.js';
import type { FileSystem } from '../../../src/fs/file-system.js';
import {
  FRAME_CRC_START,
  FRAME_HEADER_BYTES,
  FRAME_OFF_CRC,
  FRAME_OFF_LENGTH,
  FRAME_OFF_META_BYTES,
  readU16,
  readU32,
  writeU32,
} from '../../../src/stores/log/engine/format.js';
import { LogStore, nodeFileSystem, type LogStoreOptions } from '../../../src/stores/log/log-store.js';
import type { StoredItem } from '../../../src/contract/store.js';

const made: string[] = [];

/** A fresh directory under the OS temp dir; removed by `cleanupDirs`. */
export function freshDir(): string {
  const d = fs.mkdtempSync(join(tmpdir(), 'pq-log-'));
  made.push(d);
  return join(d, 'store');
}

export function cleanupDirs(): void {
  for (const d of made.splice(0)) fs.rmSync(d, { recursive: true, force: true });
}

export const enc = (s: string): Uint8Array => new TextEncoder().encode(s);
export const dec = (b: Uint8Array): string => new TextDecoder().decode(b);

export function items(first: number, texts: string[]): StoredItem[] {
  return texts.map((t, i) => ({ seq: first + i, bytes: enc(t) }));
}

/** Open, and call the Store's open(). */
export async function openStore(dir: string, options?: LogStoreOptions): Promise<{ store: LogStore; nextSeq: number; count: number }> {
  const store = await LogStore.open(dir, options);
  const r = await store.open();
  return { store, ...r };
}

export function readAllTexts(store: LogStore, after = 0): string[] {
  return store.read({ after, before: Number.MAX_SAFE_INTEGER, limit: 1_000_000 }).map((i) => dec(i.bytes));
}

export function readAllSeqs(store: LogStore, after = 0): number[] {
  return store.read({ after, before: Number.MAX_SAFE_INTEGER, limit: 1_000_000 }).map((i) => i.seq);
}

export function segFiles(dir: string): string[] {
  return fs
    .readdirSync(dir)
    .filter((n) => /^seg-\d{20}\.log$/.test(n))
    .sort();
}

/** XOR one byte of a file with `mask`. */
export function flipByte(path: string, offset: number, mask = 0x01): void {
  const b = fs.readFileSync(path);
  b[offset] = b[offset]! ^ mask;
  fs.writeFileSync(path, b);
}

/** Cut `n` bytes off the end of a file. */
export function truncateBy(path: string, n: number): void {
  const size = fs.statSync(path).size;
  fs.truncateSync(path, size - n);
}

/** Append bytes to a file. */
export function appendBytes(path: string, bytes: Uint8Array): void {
  fs.appendFileSync(path, bytes);
}

/** Recompute the CRC of the frame at `offset` (after editing its fields), so later checks are exercised. */
export function fixCrc(path: string, offset: number): void {
  const b = fs.readFileSync(path);
  const length = readU32(b, offset + FRAME_OFF_LENGTH);
  const meta = readU16(b, offset + FRAME_OFF_META_BYTES);
  const end = Math.min(b.length, offset + FRAME_HEADER_BYTES + meta + length);
  writeU32(b, offset + FRAME_OFF_CRC, crc32c32(b.subarray(offset + FRAME_CRC_START, end)));
  fs.writeFileSync(path, b);
}

/** Name → sha256 of every file in a directory (to prove a failed open changed nothing). */
export function hashDir(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const n of fs.readdirSync(dir).sort()) {
    const p = join(dir, n);
    if (fs.statSync(p).isFile()) out[n] = createHash('sha256').update(fs.readFileSync(p)).digest('hex');
  }
  return out;
}

/** mulberry32: a tiny seeded PRNG (tests never use the unseeded global generator). */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A FileSystem over node that counts bytes read and lets a test inject failures. */
export class WrappedFs implements FileSystem {
  bytesRead = 0;
  /** Return an error to throw from `write`, or null. */
  onWrite: ((fd: number, length: number, position: number) => Error | null) | null = null;
  onFdatasync: ((fd: number) => Error | null) | null = null;
  fdatasyncs = 0;
  constructor(readonly inner: FileSystem = nodeFileSystem) {}
  mkdirp(p: string, m: number) {
    this.inner.mkdirp(p, m);
  }
  readdir(p: string) {
    return this.inner.readdir(p);
  }
  stat(p: string) {
    return this.inner.stat(p);
  }
  open(p: string, mode: 'read' | 'readWrite' | 'create', fm?: number) {
    return this.inner.open(p, mode, fm);
  }
  close(fd: number) {
    this.inner.close(fd);
  }
  read(fd: number, b: Uint8Array, o: number, l: number, pos: number) {
    const n = this.inner.read(fd, b, o, l, pos);
    this.bytesRead += n;
    return n;
  }
  write(fd: number, b: Uint8Array, o: number, l: number, pos: number) {
    const err = this.onWrite?.(fd, l, pos) ?? null;
    if (err !== null) {
      // Simulate a partial write before the failure, like a real ENOSPC.
      const half = Math.floor(l / 2);
      if (half > 0) this.inner.write(fd, b, o, half, pos);
      throw err;
    }
    this.inner.write(fd, b, o, l, pos);
  }
  size(fd: number) {
    return this.inner.size(fd);
  }
  truncate(fd: number, l: number) {
    this.inner.truncate(fd, l);
  }
  fdatasync(fd: number) {
    this.fdatasyncs++;
    const err = this.onFdatasync?.(fd) ?? null;
    return err !== null ? Promise.reject(err) : this.inner.fdatasync(fd);
  }
  fsync(fd: number) {
    return this.inner.fsync(fd);
  }
  fsyncDir(p: string) {
    return this.inner.fsyncDir(p);
  }
  rename(a: string, b: string) {
    this.inner.rename(a, b);
  }
  unlink(p: string) {
    this.inner.unlink(p);
  }
  lock(p: string) {
    return this.inner.lock(p);
  }
  lockHolder(p: string) {
    return this.inner.lockHolder?.(p) ?? null;
  }
  realpath(p: string) {
    return this.inner.realpath!(p);
  }
}

export function errno(code: string): Error {
  const e = new Error(`${code}: simulated`) as Error & { code: string };
  e.code = code;
  return e;
}

/**
 * A process-crash snapshot of an open store: copies every file as it is now (what the page cache
 * holds), without the LOCK file and the endpoint's socket (a socket cannot be copied; the one a
 * crash leaves is stale, and the next owner replaces it), into a fresh directory. The original
 * store stays open.
 */
export function crashCopy(dir: string): string {
  const to = freshDir();
  fs.mkdirSync(to, { recursive: true, mode: 0o700 });
  for (const n of fs.readdirSync(dir)) {
    if (n === 'LOCK' || fs.lstatSync(join(dir, n)).isSocket()) continue;
    fs.copyFileSync(join(dir, n), join(to, n));
  }
  return to;
}

export async function expectOpenError(
  dir: string,
  code: string,
  options?: LogStoreOptions,
): Promise<{ file?: string; offset?: number; message: string }> {
  const before = hashDir(dir);
  let err: unknown;
  try {
    const s = await LogStore.open(dir, options);
    await s.close();
  } catch (e) {
    err = e;
  }
  const e = err as { name?: string; code?: string; file?: string; offset?: number; message: string } | undefined;
  if (e === undefined) throw new Error(`expected OpenError ${code}, but the open succeeded`);
  if (e.name !== 'OpenError' || e.code !== code) throw new Error(`expected OpenError ${code}, got ${e.name} ${e.code}: ${e.message}`);
  const after = hashDir(dir);
  // A failed open changes no byte (the LOCK file is the lock, not store data).
  delete before.LOCK;
  delete after.LOCK;
  if (JSON.stringify(before) !== JSON.stringify(after))
    throw new Error(`failed open changed the directory: ${JSON.stringify({ before, after })}`);
  return e;
}
