/**
 * LevelStore: the Store contract over LevelDB through the optional peer `classic-level`, exported
 * as `persistent-queue/level`. The peer is loaded with a dynamic import when a store is opened, so
 * importing this module (let alone the package root) loads no native code.
 *
 * Layout: one LevelDB directory. Each unacked item is a key `i` + its seq as 8 bytes big-endian
 * (so keys sort by seq) with the payload as value; `m:format` holds the layout version and
 * `m:nextSeq` the next seq, so that a seq is never reused after every item was acked.
 *
 * Format 2 adds delivery counts and the dead-letter queue: key `c` + seq holds the newest
 * delivery mark of an unacked item (deliveries, first and last delivery time as 8 bytes
 * big-endian each, then the last error in UTF-8), key `d` + seq a dead letter (deliveries, first
 * and last delivery time, time moved as 8 bytes each, the reason's length as 4 bytes, the reason
 * in UTF-8, then the payload), and `m:deliveredBelow` the bound below which items may have been
 * handed out. A store stays at format 1 until the first mark, bound or dead letter is written,
 * so that releases which know only format 1 keep opening a store that never used them; the
 * batch that writes that first record also writes `m:format` 2.
 *
 * Format 3 adds priorities and not-before times (`features.scheduling`): key `s` + seq holds the
 * priority (1 signed byte) and the not-before time (8 bytes big-endian) of an unacked item that
 * has either, put in the batch that puts the item and deleted in the batch that deletes it. A
 * prefix of its own rather than a header in the item's value: plain items keep their payload as
 * the whole value and cost no byte more, and the first key under `s` is the lowest scheduled seq,
 * so `scheduledFrom` takes one seek however large the plain backlog. A store stays at format 1 or
 * 2 until the first scheduled item is appended, whose batch also writes `m:format` 3. The keys
 * and values, byte for byte: FORMAT.md §11.
 *
 * Durability: every call that writes is one LevelDB write batch (the core already batches).
 * With `sync` it is written with `sync: true` (LevelDB fsyncs its log) and then the directory is
 * fsynced too; without, with `sync: false` (LevelDB hands the batch to the OS with write(2),
 * which survives the process exiting). `deadLetter` is always written with `sync: true`: the
 * contract makes a move durable whatever the policy.
 */
import { fsync, mkdirSync, openSync, closeSync, readdirSync, realpathSync, statSync } from 'node:fs';
import { resolve } from 'node:path';
import { claimOpen, PROCESS_FILES } from '../../fs/open-registry.js';
import { type BatchOp, type LevelDatabase, loadPeer, message, openError } from './peer.js';
import { FormatRaise } from './format-raise.js';
import { OpenError, QueueError } from '../../contract/errors.js';
import { belowFault, deadLetterFault, markFault, repeatedSeq } from '../../contract/records/deliveries.js';
import { DEFAULT_PRIORITY, firstScheduleFault, NO_NOT_BEFORE, scheduledOf, storedItem } from '../../contract/records/schedules.js';
import { firstKeyFault, KeyTable } from '../../contract/records/keys.js';
import {
  isScheduled,
  STORE_ID_PATTERN,
  type StoredKey,
  type DeadLetter,
  type DeadLetterRange,
  type DeliveryMark,
  type ReadRange,
  type Redrive,
  type Store,
  type StoredItem,
  type StoreFeatures,
  type StoreRecovery,
} from '../../contract/store.js';
import {
  DEAD_HIGH,
  DEAD_LOW,
  deadKey,
  decodeDead,
  decodeMark,
  decodeSchedule,
  DELIVERED_BELOW_KEY,
  DELIVERY_FORMAT_VERSION,
  encodeDead,
  encodeMark,
  encodeSchedule,
  FORMAT_KEY,
  STORE_ID_KEY,
  FORMAT_VALUE_BYTES,
  ITEM_KEY_BYTES,
  ITEMS_HIGH,
  ITEMS_LOW,
  itemKey,
  markKey,
  MARKS_HIGH,
  MARKS_LOW,
  NEWEST_FORMAT_VERSION,
  NEXT_SEQ_KEY,
  PLAIN_FORMAT_VERSION,
  readU64,
  SCHEDULE_FORMAT_VERSION,
  decodeKeyEntry,
  encodeKeyEntry,
  keyEntryKey,
  KEYS_FORMAT_VERSION,
  KEYS_HIGH,
  KEYS_LOW,
  SCHEDULE_HIGH,
  SCHEDULE_LOW,
  scheduleKey,
  seqOfKey,
  u64,
} from './format.js';
import { maxBytesOption, nonEmptyString, nonNegativeInteger, optionsObject } from '../../lib/validate.js';

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

/** Newest version of the key layout described at the top of this file; kept under `m:format`. */
export const LEVEL_FORMAT_VERSION = NEWEST_FORMAT_VERSION;

const DEFAULT_MAX_ITEM_BYTES = 16 * 1024 * 1024;
const MAX_ITEM_BYTES_CAP = 512 * 1024 * 1024;
/** How many keys one step of the count at open fetches; bounds memory, not the count. */
const COUNT_PAGE = 1024;

function fsyncAsync(fd: number): Promise<void> {
  return new Promise((resolvePromise, reject) => fsync(fd, (e) => (e ? reject(e) : resolvePromise())));
}

/** What {@link recover} finds in a database that passed the format check. */
interface Recovered {
  format: number;
  nextSeq: number;
  count: number;
  deliveredBelow: number;
  deadLetters: number;
  marks: DeliveryMark[];
  /** Seqs of the schedule keys, in order. */
  scheduled: number[];
  /** The store's identity (FORMAT.md §11.6). */
  storeId?: string;
  /** The idempotency keys (format 4), in seq order. */
  keys: StoredKey[];
}

/**
 * The store's identity: read, or, for a store created just now or written before identities,
 * created at random and stored (synced) before the open resolves, so that no crash takes back an
 * identity that was handed out. A value that is not a well-formed identity is not one: none is
 * reported, and it is left as it is.
 */
async function storeIdentity(db: LevelDatabase): Promise<string | undefined> {
  const stored = await db.get(STORE_ID_KEY);
  if (stored !== undefined) {
    const text = stored.toString('utf8');
    return STORE_ID_PATTERN.test(text) ? text : undefined;
  }
  const id = globalThis.crypto.randomUUID();
  await db.batch([{ type: 'put', key: STORE_ID_KEY, value: Buffer.from(id, 'utf8') }], { sync: true });
  return id;
}

/** The durable Store over one LevelDB directory. */
export class LevelStore implements Store {
  readonly maxItemBytes: number;
  readonly features: StoreFeatures = { reopen: true, crashSafe: true, deliveries: true, scheduling: true, idempotency: true };
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
  /** Writes the batches that need a newer format than the store may have: `m:format` is 1 until the first delivery record or scheduled item. */
  readonly #formats: FormatRaise;
  #deliveredBelow: number;
  #deadLetters: number;
  /** Seqs with a mark key: an ack deletes a mark only for these, so a plain ack writes no extra key. */
  readonly #marked: Set<number>;
  /** The marks found at open, handed out once by `open()`. */
  #recoveredMarks: DeliveryMark[];
  /**
   * Seqs with a schedule key: an ack deletes one only for these, so a plain ack writes no extra
   * key, and reads look up schedule keys only while one may exist. A seq is added before its
   * batch is handed to LevelDB, so a read that starts while it is in flight looks too. The queue
   * keeps every scheduled item in memory as well, so this set does not change the order of memory
   * a queue needs.
   */
  readonly #scheduled: Set<number>;
  /** The lowest seq with a schedule key at open, or undefined when there is none. */
  readonly #scheduledFrom: number | undefined;
  /**
   * Dead letters a `dropDeadLetters` or `redrive` in flight is moving: the contract lets the two
   * overlap, and each checks that its dead letters are held before its batch is written.
   */
  readonly #deadInFlight = new Set<number>();
  /** The store's identity (FORMAT.md §11.6). */
  readonly #storeId: string | undefined;
  /** The `k` keys, so that `keepKeysFrom` knows which to delete without reading them. */
  readonly #keys = new KeyTable();

  private constructor(path: string, unclaim: () => void, db: LevelDatabase, dirFd: number, maxItemBytes: number, recovered: Recovered) {
    this.path = path;
    this.#unclaim = unclaim;
    this.#db = db;
    this.#dirFd = dirFd;
    this.maxItemBytes = maxItemBytes;
    this.#nextSeq = recovered.nextSeq;
    this.#issuedNextSeq = recovered.nextSeq;
    this.#count = recovered.count;
    this.#formats = new FormatRaise(recovered.format, (ops, sync) => this.#write(ops, sync));
    this.#deliveredBelow = recovered.deliveredBelow;
    this.#deadLetters = recovered.deadLetters;
    this.#recoveredMarks = recovered.marks;
    this.#marked = new Set(recovered.marks.map((m) => m.seq));
    this.#scheduled = new Set(recovered.scheduled);
    this.#scheduledFrom = recovered.scheduled[0];
    this.#storeId = recovered.storeId;
    for (const k of recovered.keys) this.#keys.add(k);
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
      const format = await checkFormat(db, dir);
      const recovered = await recover(db, dir, format);
      recovered.storeId = await storeIdentity(db);
      // Directories cannot be opened or fsynced on Windows.
      if (process.platform !== 'win32') dirFd = openSync(dir, 'r');
      return new LevelStore(dir, unclaim, db, dirFd, maxItemBytes, recovered);
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
    const marks = this.#recoveredMarks;
    this.#recoveredMarks = [];
    return Promise.resolve({
      nextSeq: this.#nextSeq,
      count: this.#count,
      deliveredBelow: this.#deliveredBelow,
      marks,
      deadLetters: this.#deadLetters,
      scheduledFrom: this.#scheduledFrom ?? this.#nextSeq,
      ...(this.#storeId === undefined ? {} : { storeId: this.#storeId }),
      keys: this.#keys.list(),
    });
  }

  /**
   * Exact: the item values are read in pages and only their lengths kept, so memory stays bounded;
   * the time grows with the backlog, which is why only a queue with a byte capacity asks.
   */
  async payloadBytes(): Promise<number> {
    if (this.#state !== 'open') throw new QueueError('ERR_CLOSED', 'LevelStore is not open');
    let bytes = 0;
    const values = this.#db.values({ gt: ITEMS_LOW, lt: ITEMS_HIGH });
    try {
      for (let page = await values.nextv(COUNT_PAGE); page.length > 0; page = await values.nextv(COUNT_PAGE)) {
        for (const value of page) bytes += value.byteLength;
      }
    } catch (e) {
      throw new QueueError('ERR_STORE', `LevelStore ${this.path}: reading the payload sizes failed: ${message(e)}`, {
        cause: e,
        file: this.path,
      });
    } finally {
      await values.close();
    }
    return bytes;
  }

  /** Keys older than `at` are deleted by the next append's batch. */
  keepKeysFrom(at: number): void {
    this.#keys.keepKeysFrom(at);
  }

  async append(items: readonly StoredItem[], sync: boolean): Promise<void> {
    if (this.#state !== 'open') throw new QueueError('ERR_CLOSED', 'LevelStore is not open');
    if (items.length === 0) throw new QueueError('ERR_STORE', 'LevelStore.append got an empty batch');
    const ops = this.#itemPuts(items);
    const fault = firstScheduleFault(items) ?? firstKeyFault(items);
    if (fault !== undefined) throw new QueueError('ERR_STORE', `LevelStore.append: ${fault}`);
    const scheduled = scheduledOf(items);
    for (const item of scheduled) {
      ops.push({
        type: 'put',
        key: scheduleKey(item.seq),
        value: encodeSchedule(item.priority ?? DEFAULT_PRIORITY, item.notBefore ?? NO_NOT_BEFORE),
      });
      this.#scheduled.add(item.seq);
    }
    // The key goes in the batch that puts its item (both land or neither); keys past the queue's
    // window go in the batch of the next append, deleted by seq without reading them.
    let keyed = 0;
    for (const item of items) {
      if (item.key === undefined) continue;
      ops.push({ type: 'put', key: keyEntryKey(item.seq), value: encodeKeyEntry(item.key, item.keyedAt!) });
      keyed++;
    }
    for (const seq of this.#keys.expire()) ops.push({ type: 'del', key: keyEntryKey(seq) });
    const next = items[items.length - 1]!.seq + 1;
    ops.push({ type: 'put', key: NEXT_SEQ_KEY, value: u64(next) });
    this.#issuedNextSeq = Math.max(this.#issuedNextSeq, next);
    const format = keyed > 0 ? KEYS_FORMAT_VERSION : scheduled.length > 0 ? SCHEDULE_FORMAT_VERSION : 0;
    await (format > 0 ? this.#formats.write(ops, sync, format) : this.#write(ops, sync));
    if (keyed > 0) this.#keys.addItems(items);
    this.#nextSeq = next;
    this.#count += items.length;
  }

  /**
   * Deletes each key. LevelDB cannot tell whether a key existed without reading it first, so an
   * ack of a seq that is not held is not detected here (the core never sends one).
   */
  async ack(seqs: readonly number[], sync: boolean): Promise<void> {
    if (this.#state !== 'open') throw new QueueError('ERR_CLOSED', 'LevelStore is not open');
    if (seqs.length === 0) throw new QueueError('ERR_STORE', 'LevelStore.ack got an empty batch');
    const ops: BatchOp[] = seqs.map((seq) => ({ type: 'del', key: itemKey(seq) }));
    // Only items handed out more than once have marks: a plain ack deletes nothing else.
    const marked = this.#marked.size === 0 ? [] : seqs.filter((seq) => this.#marked.has(seq));
    for (const seq of marked) ops.push({ type: 'del', key: markKey(seq) });
    // So for scheduled items and their schedule keys.
    const scheduled = this.#scheduled.size === 0 ? [] : seqs.filter((seq) => this.#scheduled.has(seq));
    for (const seq of scheduled) ops.push({ type: 'del', key: scheduleKey(seq) });
    await this.#write(ops, sync);
    this.#count -= seqs.length;
    for (const seq of marked) this.#marked.delete(seq);
    for (const seq of scheduled) this.#scheduled.delete(seq);
  }

  /**
   * Checks that every marked seq is held (one read of their keys), then writes the marks and the
   * bound in one batch. A mark written beside an ack of its item that crossed it is deleted at
   * the next open.
   */
  async markDelivered(below: number, marks: readonly DeliveryMark[], sync: boolean): Promise<void> {
    if (this.#state !== 'open') throw new QueueError('ERR_CLOSED', 'LevelStore is not open');
    const fault = belowFault(below) ?? marks.map(markFault).find((f) => f !== undefined);
    if (fault !== undefined) throw new QueueError('ERR_STORE', `LevelStore.markDelivered: ${fault}`);
    // The bound every format-1 store has already: storing it would change the format for nothing.
    if (this.#formats.format === PLAIN_FORMAT_VERSION && below === 1 && marks.length === 0) return;
    const missing = await this.#firstMissing(marks.map((m) => itemKey(m.seq)));
    if (missing >= 0) throw new QueueError('ERR_STORE', `LevelStore cannot mark seq ${marks[missing]!.seq}: not held`);
    const ops: BatchOp[] = marks.map((m) => ({ type: 'put', key: markKey(m.seq), value: encodeMark(m) }));
    ops.push({ type: 'put', key: DELIVERED_BELOW_KEY, value: u64(below) });
    await this.#formats.write(ops, sync, DELIVERY_FORMAT_VERSION);
    this.#deliveredBelow = below;
    for (const m of marks) this.#marked.add(m.seq);
  }

  /** One batch, written with `sync: true` whatever the policy: deletes the items, puts the dead letters. */
  async deadLetter(entries: readonly DeadLetter[]): Promise<void> {
    if (this.#state !== 'open') throw new QueueError('ERR_CLOSED', 'LevelStore is not open');
    const fault = entries.map((e) => deadLetterFault(e, this.maxItemBytes)).find((f) => f !== undefined);
    if (fault !== undefined) throw new QueueError('ERR_STORE', `LevelStore.deadLetter: ${fault}`);
    const twice = repeatedSeq(entries.map((e) => e.seq));
    if (twice !== undefined) throw new QueueError('ERR_STORE', `LevelStore.deadLetter got seq ${twice} twice`);
    if (entries.length === 0) return;
    const missing = await this.#firstMissing(entries.map((e) => itemKey(e.seq)));
    if (missing >= 0) throw new QueueError('ERR_STORE', `LevelStore cannot dead-letter seq ${entries[missing]!.seq}: not held`);
    const ops: BatchOp[] = [];
    for (const e of entries) {
      ops.push({ type: 'del', key: itemKey(e.seq) }, { type: 'put', key: deadKey(e.seq), value: encodeDead(e) });
      if (this.#marked.has(e.seq)) ops.push({ type: 'del', key: markKey(e.seq) });
      // A dead letter keeps no priority or not-before time: a redriven item has neither.
      if (this.#scheduled.has(e.seq)) ops.push({ type: 'del', key: scheduleKey(e.seq) });
    }
    await this.#formats.write(ops, true, DELIVERY_FORMAT_VERSION);
    this.#count -= entries.length;
    this.#deadLetters += entries.length;
    for (const e of entries) {
      this.#marked.delete(e.seq);
      this.#scheduled.delete(e.seq);
    }
  }

  /** Asynchronous, as `read`. */
  async readDeadLetters(range: DeadLetterRange): Promise<readonly DeadLetter[]> {
    if (this.#state === 'closed') throw new QueueError('ERR_CLOSED', 'LevelStore is closed');
    if (this.#formats.format === PLAIN_FORMAT_VERSION || range.limit <= 0) return [];
    let entries: [Buffer, Buffer][];
    try {
      entries = await this.#db.iterator({ gt: deadKey(Math.max(0, range.after)), lt: DEAD_HIGH, limit: range.limit }).all();
    } catch (e) {
      throw new QueueError('ERR_STORE', `LevelStore ${this.path}: read failed: ${message(e)}`, { cause: e, file: this.path });
    }
    return entries.map(([key, value]) => {
      const dead = decodeDead(key, value);
      if (dead === undefined)
        throw new QueueError('ERR_CORRUPT', `LevelStore ${this.path}: the dead letter under ${key.toString('hex')} cannot be decoded`, {
          file: this.path,
        });
      return dead;
    });
  }

  async dropDeadLetters(seqs: readonly number[], sync: boolean): Promise<void> {
    if (this.#state !== 'open') throw new QueueError('ERR_CLOSED', 'LevelStore is not open');
    const twice = repeatedSeq(seqs);
    if (twice !== undefined) throw new QueueError('ERR_STORE', `LevelStore.dropDeadLetters got seq ${twice} twice`);
    if (seqs.length === 0) return;
    await this.#movingDead(seqs, async () => {
      await this.#write(
        seqs.map((seq) => ({ type: 'del', key: deadKey(seq) })),
        sync,
      );
      this.#deadLetters -= seqs.length;
    });
  }

  /** Assigns seqs as `append` does (and raises the `m:nextSeq` that `sync()` writes before its batch is handed over). */
  async redrive(moves: readonly Redrive[], sync: boolean): Promise<void> {
    if (this.#state !== 'open') throw new QueueError('ERR_CLOSED', 'LevelStore is not open');
    if (moves.length === 0) return;
    const ops = this.#itemPuts(moves.map((m) => m.item));
    const scheduled = moves.find((m) => isScheduled(m.item) || m.item.key !== undefined);
    if (scheduled !== undefined)
      throw new QueueError('ERR_STORE', `LevelStore.redrive got seq ${scheduled.item.seq} with a priority, a not-before time or a key`);
    const from = moves.map((m) => m.from);
    const twice = repeatedSeq(from);
    if (twice !== undefined) throw new QueueError('ERR_STORE', `LevelStore.redrive got dead letter ${twice} twice`);
    await this.#movingDead(from, async () => {
      const next = moves[moves.length - 1]!.item.seq + 1;
      for (const seq of from) ops.push({ type: 'del', key: deadKey(seq) });
      ops.push({ type: 'put', key: NEXT_SEQ_KEY, value: u64(next) });
      this.#issuedNextSeq = Math.max(this.#issuedNextSeq, next);
      await this.#write(ops, sync);
      this.#nextSeq = next;
      this.#count += moves.length;
      this.#deadLetters -= moves.length;
    });
  }

  /**
   * Run `write` once every dead letter in `seqs` is found held and claimed for this call, so that
   * an overlapping drop and redrive cannot both move one.
   */
  async #movingDead(seqs: readonly number[], write: () => Promise<void>): Promise<void> {
    const busy = seqs.find((seq) => this.#deadInFlight.has(seq));
    if (busy !== undefined) throw new QueueError('ERR_STORE', `LevelStore: dead letter ${busy} is being moved by another call`);
    if (this.#formats.format === PLAIN_FORMAT_VERSION) throw new QueueError('ERR_STORE', `LevelStore holds no dead letter ${seqs[0]}`);
    for (const seq of seqs) this.#deadInFlight.add(seq);
    try {
      const missing = await this.#firstMissing(seqs.map(deadKey));
      if (missing >= 0) throw new QueueError('ERR_STORE', `LevelStore holds no dead letter ${seqs[missing]}`);
      await write();
    } finally {
      for (const seq of seqs) this.#deadInFlight.delete(seq);
    }
  }

  /** Puts of a non-empty batch of new items, after checking their seqs follow on and their sizes. */
  #itemPuts(items: readonly StoredItem[]): BatchOp[] {
    let expected = items[0]!.seq;
    if (!Number.isSafeInteger(expected) || expected < this.#nextSeq) {
      throw new QueueError('ERR_STORE', `LevelStore expected a seq of at least ${this.#nextSeq}, got ${expected}`);
    }
    const ops: BatchOp[] = new Array(items.length);
    for (let i = 0; i < items.length; i++) {
      const item = items[i]!;
      if (item.seq !== expected++ || item.bytes.length > this.maxItemBytes) {
        throw new QueueError('ERR_STORE', `LevelStore got seq ${item.seq} (${item.bytes.length} bytes) out of order or over maxItemBytes`);
      }
      ops[i] = { type: 'put', key: itemKey(item.seq), value: item.bytes };
    }
    return ops;
  }

  /** Index of the first of `keys` that is not in the database, or -1. */
  async #firstMissing(keys: Buffer[]): Promise<number> {
    if (keys.length === 0) return -1;
    let held: boolean[];
    try {
      held = await this.#db.hasMany(keys);
    } catch (e) {
      throw new QueueError('ERR_STORE', `LevelStore ${this.path}: read failed: ${message(e)}`, { cause: e, file: this.path });
    }
    return held.indexOf(false);
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
    if (this.#scheduled.size > 0) return this.#readScheduled(range);
    let entries: [Buffer, Buffer][];
    try {
      entries = await this.#db.iterator({ gt: itemKey(Math.max(0, range.after)), lt: itemKey(range.before), limit: range.limit }).all();
    } catch (e) {
      throw new QueueError('ERR_STORE', `LevelStore ${this.path}: read failed: ${message(e)}`, { cause: e, file: this.path });
    }
    const out: StoredItem[] = new Array(entries.length);
    for (let i = 0; i < entries.length; i++) out[i] = { seq: seqOfKey(entries[i]![0]), bytes: entries[i]![1] };
    return out;
  }

  /**
   * `read` while schedule keys may exist: the items, then the schedule keys from the first seq
   * read to the last, both from one snapshot, so that an ack landing in between cannot leave an
   * item read without its schedule.
   */
  async #readScheduled(range: ReadRange): Promise<readonly StoredItem[]> {
    const low = Math.max(0, range.after);
    let entries: [Buffer, Buffer][];
    let schedule: [Buffer, Buffer][] = [];
    try {
      const snapshot = this.#db.snapshot();
      try {
        entries = await this.#db.iterator({ gt: itemKey(low), lt: itemKey(range.before), limit: range.limit, snapshot }).all();
        if (entries.length > 0) {
          const last = seqOfKey(entries[entries.length - 1]![0]);
          schedule = await this.#db.iterator({ gt: scheduleKey(low), lte: scheduleKey(last), snapshot }).all();
        }
      } finally {
        await snapshot.close();
      }
    } catch (e) {
      throw new QueueError('ERR_STORE', `LevelStore ${this.path}: read failed: ${message(e)}`, { cause: e, file: this.path });
    }
    const out: StoredItem[] = new Array(entries.length);
    let next = 0;
    for (let i = 0; i < entries.length; i++) {
      const seq = seqOfKey(entries[i]![0]);
      // Both lists are in seq order: walk the schedule keys beside the items.
      while (next < schedule.length && seqOfKey(schedule[next]![0]) < seq) next++;
      let priority = DEFAULT_PRIORITY;
      let notBefore = NO_NOT_BEFORE;
      if (next < schedule.length && seqOfKey(schedule[next]![0]) === seq) {
        const fields = decodeSchedule(schedule[next]![1]);
        if (fields === undefined) {
          throw new QueueError('ERR_CORRUPT', `LevelStore ${this.path}: the schedule entry of seq ${seq} cannot be decoded`, {
            file: this.path,
          });
        }
        ({ priority, notBefore } = fields);
      }
      out[i] = storedItem(seq, entries[i]![1], priority, notBefore);
    }
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

/**
 * A new database gets this store's format record (format 1: it needs 2 only once it stores
 * delivery state); another LevelDB database or a newer format is refused. Returns the format.
 */
async function checkFormat(db: LevelDatabase, dir: string): Promise<number> {
  const format = await db.get(FORMAT_KEY);
  if (format === undefined) {
    const any = await db.iterator({ limit: 1 }).all();
    if (any.length > 0) {
      throw new OpenError('ERR_STORE', `Store ${dir} is a LevelDB database but not a persistent-queue store`, { file: dir });
    }
    await db.batch(
      [
        { type: 'put', key: FORMAT_KEY, value: u64(PLAIN_FORMAT_VERSION) },
        { type: 'put', key: NEXT_SEQ_KEY, value: u64(1) },
      ],
      { sync: true },
    );
    return PLAIN_FORMAT_VERSION;
  }
  if (format.length !== FORMAT_VALUE_BYTES || readU64(format) > LEVEL_FORMAT_VERSION) {
    throw new OpenError(
      'ERR_UNSUPPORTED_VERSION',
      `Store ${dir} has format ${format.length === FORMAT_VALUE_BYTES ? readU64(format) : 'unknown'}; this version reads up to ${LEVEL_FORMAT_VERSION}`,
      { file: dir },
    );
  }
  // Formats count from 1: a lower value names none, and reading on would take the store for a
  // format it is not.
  if (readU64(format) < PLAIN_FORMAT_VERSION) {
    throw new OpenError('ERR_CORRUPT', `Store ${dir} has m:format ${readU64(format)}; formats start at ${PLAIN_FORMAT_VERSION}`, {
      file: dir,
    });
  }
  return readU64(format);
}

/** How many keys lie between `low` and `high`, counted in pages: memory stays bounded whatever the backlog. */
async function countKeys(db: LevelDatabase, low: Buffer, high: Buffer): Promise<number> {
  let count = 0;
  const keys = db.keys({ gt: low, lt: high });
  try {
    for (let page = await keys.nextv(COUNT_PAGE); page.length > 0; page = await keys.nextv(COUNT_PAGE)) count += page.length;
  } finally {
    await keys.close();
  }
  return count;
}

/** The highest seq under a prefix between `low` and `high`, or 0. */
async function lastSeq(db: LevelDatabase, low: Buffer, high: Buffer): Promise<number> {
  const last = await db.iterator({ gt: low, lt: high, reverse: true, limit: 1 }).all();
  return last.length > 0 ? seqOfKey(last[0]![0]) : 0;
}

/**
 * What the store holds. Marks whose item is gone (an ack that crossed the mark's write) are
 * deleted here, in one unsynced batch: losing it only means deleting them again at the next open.
 */
async function recover(db: LevelDatabase, dir: string, format: number): Promise<Recovered> {
  const stored = await db.get(NEXT_SEQ_KEY);
  let nextSeq = Math.max(stored === undefined ? 1 : readU64(stored), (await lastSeq(db, ITEMS_LOW, ITEMS_HIGH)) + 1);
  const count = await countKeys(db, ITEMS_LOW, ITEMS_HIGH);
  if (format === PLAIN_FORMAT_VERSION)
    return { format, nextSeq, count, deliveredBelow: 1, deadLetters: 0, marks: [], scheduled: [], keys: [] };
  const below = await db.get(DELIVERED_BELOW_KEY);
  if (below !== undefined && below.length !== 8)
    throw new OpenError('ERR_CORRUPT', `Store ${dir} has an m:deliveredBelow of ${below.length} bytes`, { file: dir });
  // A dead letter's seq was appended once, so nextSeq is above it already; kept as a second guard.
  nextSeq = Math.max(nextSeq, (await lastSeq(db, DEAD_LOW, DEAD_HIGH)) + 1);
  const deadLetters = await countKeys(db, DEAD_LOW, DEAD_HIGH);
  const marks: DeliveryMark[] = [];
  const stale: BatchOp[] = [];
  const entries = await db.iterator({ gt: MARKS_LOW, lt: MARKS_HIGH }).all();
  const held = entries.length === 0 ? [] : await db.hasMany(entries.map(([key]) => itemKey(seqOfKey(key))));
  for (let i = 0; i < entries.length; i++) {
    const [key, value] = entries[i]!;
    const mark = decodeMark(key, value);
    if (mark === undefined)
      throw new OpenError('ERR_CORRUPT', `Store ${dir} has a delivery mark under ${key.toString('hex')} that cannot be decoded`, {
        file: dir,
      });
    if (!held[i]) stale.push({ type: 'del', key });
    else marks.push(mark);
  }
  // Read before the first write: a damaged schedule key refuses the open with nothing written.
  const scheduled = format >= SCHEDULE_FORMAT_VERSION ? await keySeqs(db, dir, SCHEDULE_LOW, SCHEDULE_HIGH) : [];
  const keys = format >= KEYS_FORMAT_VERSION ? await keyEntries(db, dir) : [];
  if (stale.length > 0) await db.batch(stale, { sync: false });
  return { format, nextSeq, count, deliveredBelow: below === undefined ? 1 : readU64(below), deadLetters, marks, scheduled, keys };
}

/**
 * Every `k` key and its value, in seq order (FORMAT.md §11.5): the idempotency keys only, never the
 * plain backlog. A key that is not the prefix and a seq, or a value that cannot be decoded, is
 * ERR_CORRUPT, read before the first write.
 */
async function keyEntries(db: LevelDatabase, dir: string): Promise<StoredKey[]> {
  const keys: StoredKey[] = [];
  const entries = db.iterator({ gte: KEYS_LOW, lt: KEYS_HIGH });
  try {
    for (let page = await entries.nextv(COUNT_PAGE); page.length > 0; page = await entries.nextv(COUNT_PAGE)) {
      for (const [key, value] of page) {
        const entry = key.length === ITEM_KEY_BYTES ? decodeKeyEntry(value) : undefined;
        if (entry === undefined)
          throw new OpenError(
            'ERR_CORRUPT',
            `Store ${dir} has an idempotency key entry under ${key.toString('hex')} that cannot be decoded`,
            { file: dir },
          );
        keys.push({ key: entry.key, seq: seqOfKey(key), keyedAt: entry.keyedAt });
      }
    }
  } finally {
    await entries.close();
  }
  return keys;
}

/**
 * The seqs of the keys from `low` (a prefix) up to `high`, in order, read in pages. Used for the schedule
 * keys, which only scheduled items have: the plain backlog is never read. A key that is not a
 * prefix and a seq (9 bytes) is ERR_CORRUPT: its seq cannot be read, and the queue would count a
 * scheduled item that is not there or miss one that is.
 */
async function keySeqs(db: LevelDatabase, dir: string, low: Buffer, high: Buffer): Promise<number[]> {
  const seqs: number[] = [];
  // From `low` itself: a key that is the prefix alone is one of them, and damaged.
  const keys = db.keys({ gte: low, lt: high });
  try {
    for (let page = await keys.nextv(COUNT_PAGE); page.length > 0; page = await keys.nextv(COUNT_PAGE)) {
      for (const key of page) {
        if (key.length !== ITEM_KEY_BYTES)
          throw new OpenError(
            'ERR_CORRUPT',
            `Store ${dir} has a schedule key of ${key.length} bytes (${key.toString('hex')}), not ${ITEM_KEY_BYTES}`,
            { file: dir },
          );
        seqs.push(seqOfKey(key));
      }
    }
  } finally {
    await keys.close();
  }
  return seqs;
}
