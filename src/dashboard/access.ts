/**
 * How the dashboard reaches a queue (docs/internals/dashboard.md, "The dashboard"): through its
 * owner's endpoint while a process serves it (live figures, timings, dead-letter actions), and
 * through the store's files read-only always (items, and everything while nobody serves it).
 * Nothing here takes the store's lock or writes a byte of it: the dashboard acts only through the
 * owner.
 */
import { readdirSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { QueueError, isQueueError } from '../contract/errors.js';
import { nodeFileSystem } from '../fs/node-fs.js';
import { LogStore } from '../stores/log/index.js';
import { classifyEntry } from '../stores/log/engine/format.js';
import { liveHolder } from '../stores/log/engine/store-dir.js';
import { EndpointClient } from '../remote/client.js';

/** How long a look that found no owner is trusted before the socket is tried again. */
const ABSENT_RECHECK_MS = 1000;

/** How long a read-only view of the files is used before a changed directory is read again. */
const FILES_FRESH_MS = 1000;

/** A read-only view unused for this long is closed: it holds a descriptor per segment. */
const FILES_IDLE_MS = 10_000;

/** The owner, connected. */
export interface OwnerLink {
  readonly client: EndpointClient;
  /** Its pid, as its lock file names it; null when not known. */
  readonly pid: number | null;
}

/** What the directory holds: a log, only pushes spooled before any process opened it, or nothing a store would. */
export type DirKind = 'log' | 'spool' | 'none';

export class QueueAccess {
  readonly dir: string;
  #owner: OwnerLink | null = null;
  #reaching: Promise<OwnerLink | null> | null = null;
  #absentUntil = 0;
  /** Why the last look found no owner (or could not talk to it). */
  absentReason = 'not asked yet';
  #files: LogStore | null = null;
  #filesAt = 0;
  #filesPrint = '';
  #filesUsed = 0;
  #opening: Promise<LogStore | null> | null = null;
  #idleTimer: ReturnType<typeof setInterval> | null = null;
  #closed = false;

  constructor(dir: string) {
    this.dir = resolve(dir);
  }

  /** What the directory holds now; `ERR_NOT_FOUND` or `ERR_STORE` when it is no store at all. */
  kind(): DirKind {
    let names: string[];
    try {
      const st = statSync(this.dir, { throwIfNoEntry: false });
      if (st === undefined) throw new QueueError('ERR_NOT_FOUND', `No store at ${this.dir}: no such directory`, { file: this.dir });
      if (!st.isDirectory()) throw new QueueError('ERR_STORE', `Store path ${this.dir} exists and is not a directory`, { file: this.dir });
      names = readdirSync(this.dir);
    } catch (error) {
      if (error instanceof QueueError) throw error;
      throw new QueueError('ERR_STORE', `Cannot read ${this.dir}: ${(error as Error).message}`, { cause: error, file: this.dir });
    }
    const kinds = names.map(classifyEntry);
    if (kinds.includes('segment') || kinds.includes('cursor')) return 'log';
    return kinds.includes('spool') ? 'spool' : 'none';
  }

  /**
   * The process that serves the queue, connected, or null when none does. A connection that was
   * lost is replaced at the next call; a look that found none is trusted for a second.
   */
  owner(): Promise<OwnerLink | null> {
    if (this.#closed) return Promise.resolve(null);
    if (this.#owner !== null) return Promise.resolve(this.#owner);
    if (performance.now() < this.#absentUntil) return Promise.resolve(null);
    this.#reaching ??= this.#reach().finally(() => {
      this.#reaching = null;
    });
    return this.#reaching;
  }

  async #reach(): Promise<OwnerLink | null> {
    try {
      const reached = await EndpointClient.reach(this.dir);
      if ('client' in reached) {
        if (this.#closed) {
          await reached.client.close();
          return null;
        }
        this.#owner = { client: reached.client, pid: liveHolder(nodeFileSystem, this.dir)?.pid ?? null };
        return this.#owner;
      }
      this.absentReason = reached.absent;
    } catch (error) {
      // One serves but cannot be talked to (another protocol version, say): shown, files read instead.
      this.absentReason = (error as Error).message;
    }
    this.#absentUntil = performance.now() + ABSENT_RECHECK_MS;
    return null;
  }

  /**
   * Run `fn` on the owner. A connection found gone (`ERR_OWNER_GONE`: the owner closed its queue
   * or died) is dropped, and the call is made once more on whatever serves now; null when nothing does.
   */
  async withOwner<T>(fn: (owner: OwnerLink) => Promise<T>): Promise<{ owner: OwnerLink; value: T } | null> {
    for (let attempt = 0; attempt < 2; attempt++) {
      const owner = await this.owner();
      if (owner === null) return null;
      try {
        return { owner, value: await fn(owner) };
      } catch (error) {
        if (!isQueueError(error, 'ERR_OWNER_GONE') && !isQueueError(error, 'ERR_CLOSED')) throw error;
        this.#drop(owner);
        this.absentReason = (error as Error).message;
      }
    }
    return null;
  }

  #drop(owner: OwnerLink): void {
    if (this.#owner !== owner) return;
    this.#owner = null;
    void owner.client.close().catch(() => undefined);
  }

  /**
   * The store's files, opened read-only (no lock, no write), or null when the directory holds no
   * log yet. The same view serves for a second; after that a directory whose files changed is read
   * again. Throws what the read-only open throws (`ERR_CORRUPT`...).
   */
  files(): Promise<LogStore | null> {
    if (this.#closed) return Promise.reject(new QueueError('ERR_CLOSED', 'The dashboard is closed'));
    this.#filesUsed = performance.now();
    const now = this.#filesUsed;
    if (this.#files !== null && now - this.#filesAt < FILES_FRESH_MS) return Promise.resolve(this.#files);
    this.#opening ??= this.#refreshFiles().finally(() => {
      this.#opening = null;
    });
    return this.#opening;
  }

  async #refreshFiles(): Promise<LogStore | null> {
    const print = this.#fingerprint();
    if (this.#files !== null && print === this.#filesPrint) {
      this.#filesAt = performance.now();
      return this.#files;
    }
    if (this.kind() !== 'log') {
      await this.#closeFiles();
      return null;
    }
    const store = await LogStore.open(this.dir, { readOnly: true });
    if (this.#closed) {
      await store.close();
      throw new QueueError('ERR_CLOSED', 'The dashboard is closed');
    }
    const old = this.#files;
    this.#files = store;
    this.#filesAt = performance.now();
    this.#filesPrint = print;
    await old?.close().catch(() => undefined);
    this.#idleTimer ??= setInterval(() => {
      if (this.#files !== null && performance.now() - this.#filesUsed > FILES_IDLE_MS) void this.#closeFiles();
    }, FILES_IDLE_MS).unref();
    return store;
  }

  async #closeFiles(): Promise<void> {
    const store = this.#files;
    this.#files = null;
    this.#filesPrint = '';
    await store?.close().catch(() => undefined);
  }

  /** Names, sizes and change times of the store's files: equal while nothing was written. */
  #fingerprint(): string {
    let names: string[];
    try {
      names = readdirSync(this.dir).sort();
    } catch {
      return '';
    }
    const parts: string[] = [];
    for (const name of names) {
      const kind = classifyEntry(name);
      if (kind !== 'segment' && kind !== 'cursor' && kind !== 'spool') continue;
      const st = statSync(join(this.dir, name), { throwIfNoEntry: false });
      if (st !== undefined) parts.push(`${name}:${st.size}:${st.mtimeMs}`);
    }
    return parts.join('|');
  }

  /** Close the owner's connection and the files. */
  async close(): Promise<void> {
    this.#closed = true;
    if (this.#idleTimer !== null) clearInterval(this.#idleTimer);
    this.#idleTimer = null;
    const owner = this.#owner;
    this.#owner = null;
    await Promise.all([owner?.client.close().catch(() => undefined), this.#closeFiles()]);
  }
}
