/**
 * LevelStore: the Store contract over LevelDB through the optional peer `classic-level`, exported
 * as `persistent-queue/level`. The peer is loaded with a dynamic import when a store is opened, so
 * importing this module (let alone the package root) loads no native code.
 *
 * Layout: one LevelDB directory. Each unacked item is a key `i` + its seq as 8 bytes big-endian
 * (so keys sort by seq) with the payload as value; `m:format` holds the layout version and
 * `m:nextSeq` the next seq, so that a seq is never reused after every item was acked.
 *
 * Durability: every `append` and every `ack` call is one LevelDB write batch (the core already
 * batches). With `sync` it is written with `sync: true` (LevelDB fsyncs its log) and then the
 * directory is fsynced too; without, with `sync: false` (LevelDB hands the batch to the OS with
 * write(2), which survives the process exiting).
 */
import { fsync, mkdirSync, openSync, closeSync, readdirSync, realpathSync, statSync } from 'node:fs';
import { resolve } from 'node:path';
import { claimOpen, PROCESS_FILES } from './fs/open-registry.js';
import { OpenError, QueueError } from './errors.js';
import type { ReadRange, Store, StoredItem, StoreFeatures, StoreRecovery } from './store.js';
import { maxBytesOption, nonEmptyString, nonNegativeInteger, optionsObject } from './validate.js';

export interface LevelStoreOptions {
  /**
   * Largest payload accepted, in bytes. At most 512 MiB.
   * @default 16777216 (16 MiB), as LogStore
   */
  maxItemBytes?: number;
  /**
   * Mode of the store directory when this call creates it (LevelDB creates its files 0o644 inside it).
   * @default 0o700
   */
  dirMode?: number;
}

/** Version of the key layout described at the top of this file; kept under `m:format`. */
export const LEVEL_FORMAT_VERSION = 1;

const DEFAULT_MAX_ITEM_BYTES = 16 * 1024 * 1024;
const MAX_ITEM_BYTES_CAP = 512 * 1024 * 1024;
const MISSING_PEER = 'LevelStore needs classic-level: npm install classic-level@3';

const ITEM_PREFIX = 0x69; // 'i'
const ITEM_KEY_BYTES = 9;
const FORMAT_KEY = Buffer.from('m:format');
const NEXT_SEQ_KEY = Buffer.from('m:nextSeq');
/** Keys of all items lie strictly between these two. */
const ITEMS_LOW = Buffer.from([ITEM_PREFIX]);
const ITEMS_HIGH = Buffer.from([ITEM_PREFIX + 1]);
/** How many keys one step of the count at open fetches; bounds memory, not the count. */
const COUNT_PAGE = 1024;

function itemKey(seq: number): Buffer {
  const key = Buffer.allocUnsafe(ITEM_KEY_BYTES);
  key[0] = ITEM_PREFIX;
  key.writeBigUInt64BE(BigInt(seq), 1);
  return key;
}

function seqOfKey(key: Uint8Array): number {
  return Number(Buffer.from(key.buffer, key.byteOffset, key.byteLength).readBigUInt64BE(1));
}

function u64(value: number): Buffer {
  const b = Buffer.allocUnsafe(8);
  b.writeBigUInt64BE(BigInt(value));
  return b;
}

function readU64(value: Uint8Array): number {
  return Number(Buffer.from(value.buffer, value.byteOffset, value.byteLength).readBigUInt64BE(0));
}

// The part of classic-level this store uses. Typed here, not imported, so that the peer does not
// have to be installed to type-check or to use the rest of the package.
type BatchOp = { type: 'put'; key: Buffer; value: Uint8Array } | { type: 'del'; key: Buffer };
interface LevelIterator {
  nextv(size: number): Promise<[Buffer, Buffer][]>;
  all(): Promise<[Buffer, Buffer][]>;
  close(): Promise<void>;
}
interface LevelKeyIterator {
  nextv(size: number): Promise<Buffer[]>;
  close(): Promise<void>;
}
interface LevelDatabase {
  open(options: { createIfMissing: boolean }): Promise<void>;
  get(key: Buffer): Promise<Buffer | undefined>;
  batch(ops: BatchOp[], options: { sync: boolean }): Promise<void>;
  iterator(options: { gt?: Buffer; lt?: Buffer; limit?: number; reverse?: boolean }): LevelIterator;
  keys(options: { gt: Buffer; lt: Buffer }): LevelKeyIterator;
  close(): Promise<void>;
}
type LevelConstructor = new (location: string, options: Record<string, unknown>) => LevelDatabase;


async function loadPeer(): Promise<LevelConstructor> {
  const peer: string = 'classic-level';
  try {
    const mod = (await import(peer)) as { ClassicLevel?: LevelConstructor };
    if (typeof mod.ClassicLevel !== 'function') throw new Error('classic-level has no ClassicLevel export');
    return mod.ClassicLevel;
  } catch (e) {
    throw new OpenError('ERR_STORE', MISSING_PEER, { cause: e });
  }
}

function levelCode(e: unknown): string | undefined {
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/** The OpenError for a failure while opening `dir`. */
function openError(dir: string, e: unknown): OpenError {
  if (e instanceof OpenError) return e;
  // classic-level reports a failed open as LEVEL_DATABASE_NOT_OPEN with the reason as `cause`.
  const codes = [levelCode(e), levelCode((e as { cause?: unknown } | null)?.cause)];
  if (codes.includes('LEVEL_LOCKED')) {
    return new OpenError('ERR_LOCKED', `Store ${dir} is locked by another process`, { cause: e, file: dir });
  }
  if (codes.includes('LEVEL_CORRUPTION')) {
    return new OpenError('ERR_CORRUPT', `Store ${dir} is damaged: ${message(e)}`, { cause: e, file: dir });
  }
  return new OpenError('ERR_STORE', `Cannot open store ${dir}: ${message(e)}`, { cause: e, file: dir });
}

function fsyncAsync(fd: number): Promise<void> {
  return new Promise((resolvePromise, reject) => fsync(fd, (e) => (e ? reject(e) : resolvePromise())));
}

/** The durable Store over one LevelDB directory. */
export class LevelStore implements Store {
  readonly maxItemBytes: number;
  readonly features: StoreFeatures = { reopen: true, crashSafe: true };
  /** Absolute path of the LevelDB directory. */
  readonly path: string;

  #db: LevelDatabase;
  readonly #unclaim: () => void;
  /** The directory, kept open to fsync it after synced batches. */
  #dirFd: number;
  #state: 'recovered' | 'open' | 'closed' = 'recovered';
  #nextSeq: number;
  /**
   * The highest `m:nextSeq` handed to LevelDB, set before the write resolves: `sync()` writes
   * this one, so that a sync queued behind an append in flight cannot store an older value over
   * the append's (a seq would then be used again after a crash).
   */
  #issuedNextSeq: number;
  #count: number;

  private constructor(path: string, unclaim: () => void, db: LevelDatabase, dirFd: number, maxItemBytes: number, nextSeq: number, count: number) {
    this.path = path;
    this.#unclaim = unclaim;
    this.#db = db;
    this.#dirFd = dirFd;
    this.maxItemBytes = maxItemBytes;
    this.#nextSeq = nextSeq;
    this.#issuedNextSeq = nextSeq;
    this.#count = count;
  }

  /**
   * Open (creating if missing) the LevelDB directory at `path` and lock it for this process.
   * Rejects with `OpenError`: `ERR_LOCKED` when another process (or another store in this
   * process) holds it, `ERR_STORE` when the directory holds something else or the peer is
   * missing, `ERR_CORRUPT`, `ERR_UNSUPPORTED_VERSION`. Arguments are validated first
   * (`TypeError`/`RangeError`), before anything is touched.
   */
  static async open(path: string, options?: LevelStoreOptions): Promise<LevelStore> {
    nonEmptyString('path', path);
    const { maxItemBytes, dirMode } = levelOptions(options);
    const dir = resolve(path);
    const ClassicLevel = await loadPeer();
    const key = prepareDirectory(dir, dirMode);
    // Refused before classic-level sees it: a failed second open that closes its own handle on
    // LevelDB's LOCK file would silently drop the first holder's POSIX lock.
    const unclaim = claimOpen(PROCESS_FILES, key, dir);
    let db: LevelDatabase | undefined;
    let opened = false;
    let dirFd = -1;
    try {
      db = new ClassicLevel(dir, { keyEncoding: 'buffer', valueEncoding: 'buffer' });
      await db.open({ createIfMissing: true });
      opened = true;
      await checkFormat(db, dir);
      const stored = await db.get(NEXT_SEQ_KEY);
      const last = await db.iterator({ gt: ITEMS_LOW, lt: ITEMS_HIGH, reverse: true, limit: 1 }).all();
      const nextSeq = Math.max(stored === undefined ? 1 : readU64(stored), last.length > 0 ? seqOfKey(last[0]![0]) + 1 : 1);
      // Counted in pages: memory stays bounded whatever the backlog.
      let count = 0;
      const keys = db.keys({ gt: ITEMS_LOW, lt: ITEMS_HIGH });
      try {
        for (let page = await keys.nextv(COUNT_PAGE); page.length > 0; page = await keys.nextv(COUNT_PAGE)) count += page.length;
      } finally {
        await keys.close();
      }
      // Directories cannot be opened or fsynced on Windows.
      if (process.platform !== 'win32') dirFd = openSync(dir, 'r');
      return new LevelStore(dir, unclaim, db, dirFd, maxItemBytes, nextSeq, count);
    } catch (e) {
      if (dirFd >= 0) closeSync(dirFd);
      if (opened) await db!.close().catch(() => undefined);
      unclaim();
      throw openError(dir, e);
    }
  }

  /** Returns what the store holds. Callable once per instance; a closed store needs a new `LevelStore.open`. */
  open(): Promise<StoreRecovery> {
    if (this.#state !== 'recovered') {
      return Promise.reject(
        this.#state === 'open'
          ? new OpenError('ERR_LOCKED', `LevelStore for ${this.path} already backs an open queue`)
          : new OpenError('ERR_STORE', `LevelStore for ${this.path} was closed; open it again with LevelStore.open(path)`),
      );
    }
    this.#state = 'open';
    return Promise.resolve({ nextSeq: this.#nextSeq, count: this.#count });
  }

  async append(items: readonly StoredItem[], sync: boolean): Promise<void> {
    if (this.#state !== 'open') throw new QueueError('ERR_CLOSED', 'LevelStore is not open');
    if (items.length === 0) throw new QueueError('ERR_STORE', 'LevelStore.append got an empty batch');
    let expected = items[0]!.seq;
    if (!Number.isSafeInteger(expected) || expected < this.#nextSeq) {
      throw new QueueError('ERR_STORE', `LevelStore expected a seq of at least ${this.#nextSeq}, got ${expected}`);
    }
    const ops: BatchOp[] = new Array(items.length + 1);
    for (let i = 0; i < items.length; i++) {
      const item = items[i]!;
      if (item.seq !== expected++ || item.bytes.length > this.maxItemBytes) {
        throw new QueueError('ERR_STORE', `LevelStore got seq ${item.seq} (${item.bytes.length} bytes) out of order or over maxItemBytes`);
      }
      ops[i] = { type: 'put', key: itemKey(item.seq), value: item.bytes };
    }
    ops[items.length] = { type: 'put', key: NEXT_SEQ_KEY, value: u64(expected) };
    this.#issuedNextSeq = Math.max(this.#issuedNextSeq, expected);
    await this.#write(ops, sync);
    this.#nextSeq = expected;
    this.#count += items.length;
  }

  /**
   * Deletes each key. LevelDB cannot tell whether a key existed without reading it first, so an
   * ack of a seq that is not held is not detected here (the core never sends one).
   */
  async ack(seqs: readonly number[], sync: boolean): Promise<void> {
    if (this.#state !== 'open') throw new QueueError('ERR_CLOSED', 'LevelStore is not open');
    if (seqs.length === 0) throw new QueueError('ERR_STORE', 'LevelStore.ack got an empty batch');
    await this.#write(
      seqs.map((seq) => ({ type: 'del', key: itemKey(seq) })),
      sync,
    );
    this.#count -= seqs.length;
  }

  /**
   * Make every earlier write durable: one write with `sync: true` (of the newest value `nextSeq`
   * was given, by the last append handed to LevelDB, resolved or not) fsyncs LevelDB's log, which
   * holds the unsynced writes before it, and then the directory.
   * LevelDB does not sync a log it switches away from; its records reach a table file at the
   * next memtable flush, which LevelDB syncs, so a power loss in between may still undo an ack
   * stored without sync (a redelivery, as for any unsynced ack).
   */
  async sync(): Promise<void> {
    if (this.#state !== 'open') throw new QueueError('ERR_CLOSED', 'LevelStore is not open');
    await this.#write([{ type: 'put', key: NEXT_SEQ_KEY, value: u64(this.#issuedNextSeq) }], true);
  }

  /** Asynchronous: classic-level iterators are. */
  async read(range: ReadRange): Promise<readonly StoredItem[]> {
    if (this.#state === 'closed') throw new QueueError('ERR_CLOSED', 'LevelStore is closed');
    if (range.limit <= 0 || range.after + 1 >= range.before) return [];
    let entries: [Buffer, Buffer][];
    try {
      entries = await this.#db
        .iterator({ gt: itemKey(Math.max(0, range.after)), lt: itemKey(range.before), limit: range.limit })
        .all();
    } catch (e) {
      throw new QueueError('ERR_STORE', `LevelStore ${this.path}: read failed: ${message(e)}`, { cause: e, file: this.path });
    }
    const out: StoredItem[] = new Array(entries.length);
    for (let i = 0; i < entries.length; i++) out[i] = { seq: seqOfKey(entries[i]![0]), bytes: entries[i]![1] };
    return out;
  }

  /** Release the database and its lock. Idempotent. */
  async close(): Promise<void> {
    if (this.#state === 'closed') return;
    this.#state = 'closed';
    try {
      if (this.#dirFd >= 0) closeSync(this.#dirFd);
      await this.#db.close();
    } catch (e) {
      throw new QueueError('ERR_STORE', `Closing ${this.path} failed: ${message(e)}`, { cause: e, file: this.path });
    } finally {
      this.#unclaim();
    }
  }

  async #write(ops: BatchOp[], sync: boolean): Promise<void> {
    try {
      await this.#db.batch(ops, { sync });
      // LevelDB fsyncs the directory only for its MANIFEST, not when it starts a new log file
      // (LevelDB #196): without this, a power loss could drop the new log's directory entry and
      // with it batches that were reported synced.
      if (sync && this.#dirFd >= 0) await fsyncAsync(this.#dirFd);
    } catch (e) {
      // LevelDB refuses every later write after a failed one, so any failure fails the queue.
      throw new QueueError('ERR_STORE', `LevelStore ${this.path}: write failed: ${message(e)}`, { cause: e, file: this.path });
    }
  }
}

/** The options of {@link LevelStore.open}, validated, with their defaults. */
function levelOptions(options: LevelStoreOptions | undefined): { maxItemBytes: number; dirMode: number } {
  const o = optionsObject('options', options);
  const maxItemBytes = maxBytesOption('options.maxItemBytes', o.maxItemBytes, DEFAULT_MAX_ITEM_BYTES, MAX_ITEM_BYTES_CAP);
  return { maxItemBytes, dirMode: o.dirMode === undefined ? 0o700 : nonNegativeInteger('options.dirMode', o.dirMode) };
}

/** Create a missing store directory, refuse a path that is not one; returns its canonical path. */
function prepareDirectory(dir: string, dirMode: number): string {
  try {
    const st = statSync(dir, { throwIfNoEntry: false });
    if (st !== undefined && !st.isDirectory()) {
      throw new OpenError('ERR_STORE', `Store path ${dir} exists and is not a directory`, { file: dir });
    }
    if (st === undefined) {
      mkdirSync(dir, { recursive: true, mode: dirMode });
    } else {
      // LevelDB would happily create its files among someone else's: refuse a non-empty
      // directory that is not a LevelDB database, before LevelDB sees it.
      const names = readdirSync(dir);
      if (names.length > 0 && !names.includes('CURRENT')) {
        throw new OpenError('ERR_STORE', `Store directory ${dir} holds files that are not a LevelDB database`, { file: dir });
      }
    }
    return realpathSync(dir);
  } catch (e) {
    throw openError(dir, e);
  }
}

/** A new database gets this store's format record; another LevelDB database or a newer format is refused. */
async function checkFormat(db: LevelDatabase, dir: string): Promise<void> {
  const format = await db.get(FORMAT_KEY);
  if (format === undefined) {
    const any = await db.iterator({ limit: 1 }).all();
    if (any.length > 0) {
      throw new OpenError('ERR_STORE', `Store ${dir} is a LevelDB database but not a persistent-queue store`, { file: dir });
    }
    await db.batch(
      [
        { type: 'put', key: FORMAT_KEY, value: u64(LEVEL_FORMAT_VERSION) },
        { type: 'put', key: NEXT_SEQ_KEY, value: u64(1) },
      ],
      { sync: true },
    );
  } else if (format.length !== 8 || readU64(format) > LEVEL_FORMAT_VERSION) {
    throw new OpenError(
      'ERR_UNSUPPORTED_VERSION',
      `Store ${dir} has format ${format.length === 8 ? readU64(format) : 'unknown'}; this version reads up to ${LEVEL_FORMAT_VERSION}`,
      { file: dir },
    );
  }
}
