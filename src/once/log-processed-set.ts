/**
 * LogProcessedSet: a processed set kept in a LogStore of its own directory (docs/internals/core.md
 * "Processed sets", FORMAT.md §12). Each recorded seq is one 8-byte item of that store; forgetting
 * a seq acks its item. The store's framing, CRC checks, torn-tail rule, atomic cursor replacement,
 * compaction and fail-stop are what keep the set crash-safe: this file adds only the mapping from
 * processed seqs to store seqs, group commit of records, and the header item that marks the
 * directory as a set and names the queue's store it serves.
 */
import { OpenError, QueueError } from '../contract/errors.js';
import type { FileSystem } from '../fs/file-system.js';
import { LogStore } from '../stores/log/index.js';
import type { ProcessedSet } from './processed-set.js';
import { STORE_ID_PATTERN, type StoredItem } from '../contract/store.js';
import { expectation, knownKeys, optionsObject } from '../lib/validate.js';
import { SET_HEADER_SEQ, decodeEntry, decodeHeader, encodeEntry, encodeHeader } from './format.js';

export interface LogProcessedSetOptions {
  /**
   * When `record()` resolves. `'group'`: once its entry is fsynced (records written meanwhile
   * share one fsync), so the record survives a power loss; `'none'`: once written, so it survives
   * a process crash only. See docs/guides/effectively-once.md, "Processed sets".
   * @default 'group'
   */
  durability?: 'group' | 'none';
  /**
   * Size of the set's segments. The set holds few entries, of 28 bytes each in a segment, so its
   * segments are small. A sealed segment whose entries were all forgotten is compacted, not
   * deleted: the header item at store seq 1 is never forgotten, so the store's low-water mark
   * stays at 1 and compaction rewrites the live items into a new file (FORMAT.md §7, §12).
   * @default 1048576 (1 MiB)
   */
  segmentBytes?: number;
  /** As `LogStoreOptions.preallocate`. @default true */
  preallocate?: boolean;
  /** The file system all I/O goes through, as for `LogStore`. @default nodeFileSystem */
  fs?: FileSystem;
  /** Modes of what the set creates. @default 0o700 / 0o600 */
  dirMode?: number;
  fileMode?: number;
}

const DEFAULT_SEGMENT_BYTES = 1024 * 1024;
/** Entries read per call at open. */
const OPEN_READ_COUNT = 4096;

interface Waiter {
  readonly seq: number;
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
}

function checkSeq(name: string, seq: unknown): number {
  if (typeof seq !== 'number') throw new TypeError(expectation(name, 'a positive integer', seq));
  if (!Number.isSafeInteger(seq) || seq < 1) throw new RangeError(expectation(name, 'a positive integer', seq));
  return seq;
}

/** A processed set in a directory of its own, written through LogStore. One process opens it at a time. */
export class LogProcessedSet implements ProcessedSet {
  readonly dir: string;
  readonly #store: LogStore;
  readonly #sync: boolean;
  /** Processed seq → the store seq of its entry. */
  readonly #entries = new Map<number, number>();
  #highest = 0;
  #nextStoreSeq: number;
  /** Whether the header item is stored (or on its way): a new set writes it with its first record. */
  #headerWritten: boolean;
  /** The identity of the queue's store the set serves: from its header, or bound before its first record. */
  #storeId: string | null = null;
  /** Records waiting for the next append, and the promise each seq's caller holds. */
  #batch: Waiter[] = [];
  readonly #pending = new Map<number, Promise<void>>();
  #appending = false;
  /** Forgets (acks) run one after another: the store never sees two ack calls at once. */
  #acking: Promise<void> = Promise.resolve();
  #failure: QueueError | undefined;
  #closed = false;
  #closePromise: Promise<void> | undefined;
  #idle: (() => void) | undefined;

  private constructor(dir: string, store: LogStore, sync: boolean, nextStoreSeq: number) {
    this.dir = dir;
    this.#store = store;
    this.#sync = sync;
    this.#nextStoreSeq = Math.max(nextStoreSeq, SET_HEADER_SEQ);
    this.#headerWritten = nextStoreSeq > SET_HEADER_SEQ;
  }

  /**
   * Open (creating if missing) the set in `dir`: lock it, recover it, and read its entries into
   * memory. Rejects with `OpenError` as `LogStore.open` does, with `ERR_STORE` for a directory
   * holding a store that is not a processed set, and `ERR_UNSUPPORTED_VERSION` for a newer one.
   */
  static async open(dir: string, options?: LogProcessedSetOptions): Promise<LogProcessedSet> {
    if (typeof dir !== 'string' || dir.length === 0) throw new TypeError(expectation('dir', 'a non-empty string', dir));
    const o = optionsObject('options', options);
    knownKeys('options', o, ['durability', 'segmentBytes', 'preallocate', 'fs', 'dirMode', 'fileMode']);
    const durability = o.durability ?? 'group';
    if (typeof durability !== 'string') throw new TypeError(expectation('options.durability', "'group' or 'none'", durability));
    if (durability !== 'group' && durability !== 'none')
      throw new RangeError(expectation('options.durability', "'group' or 'none'", durability));
    const storeOptions: Record<string, unknown> = { segmentBytes: o.segmentBytes ?? DEFAULT_SEGMENT_BYTES };
    for (const key of ['preallocate', 'fs', 'dirMode', 'fileMode']) if (o[key] !== undefined) storeOptions[key] = o[key];
    const store = await LogStore.open(dir, storeOptions);
    try {
      const { nextSeq } = await store.open();
      const set = new LogProcessedSet(store.dir, store, durability === 'group', nextSeq);
      // A new set writes nothing yet: its header goes with its first record, so that it can name
      // the store the set was bound to by then (FORMAT.md §12).
      if (nextSeq > SET_HEADER_SEQ) set.#load(nextSeq);
      return set;
    } catch (error) {
      await store.close().catch(() => {});
      if (error instanceof QueueError) throw error;
      throw new OpenError('ERR_STORE', `The processed set in ${dir} failed to open: ${(error as Error)?.message ?? error}`, {
        cause: error,
      });
    }
  }

  /** Read the header and every entry (the unacked items of the store). */
  #load(nextSeq: number): void {
    const first = this.#store.read({ after: 0, before: nextSeq, limit: 1 })[0];
    if (first === undefined || first.seq !== SET_HEADER_SEQ) {
      throw new OpenError('ERR_STORE', `${this.dir} is not a processed set: it has no header item`, { file: this.dir });
    }
    this.#storeId = decodeHeader(first.bytes, this.dir).storeId;
    let after = SET_HEADER_SEQ;
    for (;;) {
      const items: readonly StoredItem[] = this.#store.read({ after, before: nextSeq, limit: OPEN_READ_COUNT });
      if (items.length === 0) return;
      for (const item of items) {
        const seq = decodeEntry(item.bytes, item.seq, this.dir);
        const older = this.#entries.get(seq);
        // A seq recorded twice (never by this class, but harmless): the newer entry stands, the older is dropped.
        if (older !== undefined) this.#ack([older]).catch(() => {});
        this.#entries.set(seq, item.seq);
        if (seq > this.#highest) this.#highest = seq;
        after = item.seq;
      }
    }
  }

  /** Entries held (recorded and not forgotten). */
  get size(): number {
    return this.#entries.size;
  }

  /** Whether `seq` is recorded. Answers from memory; a record still being written answers false. */
  has(seq: number): boolean {
    checkSeq('seq', seq);
    if (this.#failure) throw this.#failure;
    return this.#entries.has(seq);
  }

  /** The highest seq recorded since open (0 when none): for the wrapper's guard. */
  highest(): number {
    return this.#highest;
  }

  /**
   * The identity of the queue's store this set serves (`stats().storeId`), or null: a set with no
   * record yet that was never bound, or one whose header holds none (its first record came before
   * any binding, or it was written by an earlier format, FORMAT.md §12).
   */
  get storeId(): string | null {
    return this.#storeId;
  }

  /**
   * Bind the set to the store `storeId` unless it serves one already; answers the identity it
   * serves (null when it holds records and no identity). The identity is written in the header,
   * with the first record: until then a binding is kept in memory only. `effectivelyOnce` calls it.
   */
  bind(storeId: string): string | null {
    if (typeof storeId !== 'string') throw new TypeError(expectation('storeId', 'a store identity', storeId));
    if (!STORE_ID_PATTERN.test(storeId))
      throw new RangeError(expectation('storeId', 'a store identity of 1 to 64 characters from [A-Za-z0-9._-]', storeId));
    if (this.#failure) throw this.#failure;
    if (!this.#headerWritten && this.#storeId === null) this.#storeId = storeId;
    return this.#storeId;
  }

  /**
   * Record `seq`. Resolves once its entry is stored under the set's durability; records made while
   * an append runs share the next one. Recording a seq already held resolves at once.
   */
  record(seq: number): Promise<void> {
    try {
      checkSeq('seq', seq);
    } catch (error) {
      return Promise.reject(error);
    }
    const refused = this.#refusal();
    if (refused) return Promise.reject(refused);
    if (this.#entries.has(seq)) return Promise.resolve();
    const pending = this.#pending.get(seq);
    if (pending !== undefined) return pending;
    const promise = new Promise<void>((resolve, reject) => this.#batch.push({ seq, resolve, reject }));
    this.#pending.set(seq, promise);
    if (!this.#appending) this.#append();
    return promise;
  }

  #append(): void {
    const batch = this.#batch;
    this.#batch = [];
    const items: StoredItem[] = [];
    if (!this.#headerWritten) {
      // The header leads the first append: the store keeps a prefix of what it was given, so no
      // entry is ever stored without it. Never rewritten: the identity it holds is the set's for good.
      items.push({ seq: SET_HEADER_SEQ, bytes: encodeHeader(this.#storeId) });
      this.#headerWritten = true;
      this.#nextStoreSeq = SET_HEADER_SEQ + 1;
    }
    const first = this.#nextStoreSeq;
    for (let i = 0; i < batch.length; i++) items.push({ seq: first + i, bytes: encodeEntry(batch[i]!.seq) });
    this.#appending = true;
    this.#nextStoreSeq = first + batch.length;
    let written: Promise<void>;
    try {
      written = this.#store.append(items, this.#sync);
    } catch (error) {
      written = Promise.reject(error);
    }
    written.then(
      () => {
        for (let i = 0; i < batch.length; i++) {
          const w = batch[i]!;
          this.#entries.set(w.seq, first + i);
          if (w.seq > this.#highest) this.#highest = w.seq;
          this.#pending.delete(w.seq);
          w.resolve();
        }
        this.#appended();
      },
      (error: unknown) => {
        const failure = this.#fail(error);
        for (const w of batch) {
          this.#pending.delete(w.seq);
          w.reject(failure);
        }
        this.#appended();
      },
    );
  }

  #appended(): void {
    this.#appending = false;
    if (this.#batch.length === 0) {
      this.#idle?.();
      return;
    }
    if (this.#failure) {
      for (const w of this.#batch.splice(0)) {
        this.#pending.delete(w.seq);
        w.reject(this.#failure);
      }
      this.#idle?.();
      return;
    }
    this.#append();
  }

  /**
   * Drop these seqs. Their entries are acked in the store, unsynced: a power loss may bring some
   * back, which costs only their room (their items' acks are durable, so they never come back).
   * Seqs not held are ignored.
   */
  forget(seqs: readonly number[]): Promise<void> {
    const storeSeqs: number[] = [];
    try {
      if (!Array.isArray(seqs)) throw new TypeError(expectation('seqs', 'an array of positive integers', seqs));
      for (let i = 0; i < seqs.length; i++) checkSeq(`seqs[${i}]`, seqs[i]);
    } catch (error) {
      return Promise.reject(error);
    }
    const refused = this.#refusal();
    if (refused) return Promise.reject(refused);
    for (const seq of seqs) {
      const storeSeq = this.#entries.get(seq);
      if (storeSeq === undefined) continue;
      this.#entries.delete(seq);
      storeSeqs.push(storeSeq);
    }
    if (storeSeqs.length === 0) return Promise.resolve();
    return this.#ack(storeSeqs);
  }

  #ack(storeSeqs: number[]): Promise<void> {
    const done = this.#acking.then(() => {
      if (this.#failure) throw this.#failure;
      return this.#store.ack(storeSeqs, false);
    });
    this.#acking = done.catch(() => {});
    return done.catch((error: unknown) => {
      throw this.#fail(error);
    });
  }

  /** Fail-stop: any failed write or sync of the store fails the set; close and open it again. */
  #fail(cause: unknown): QueueError {
    this.#failure ??=
      cause instanceof QueueError && cause.code === 'ERR_STORE_FAILED'
        ? cause
        : new QueueError(
            'ERR_STORE_FAILED',
            `The processed set in ${this.dir} failed; close and open it again: ${(cause as Error)?.message ?? cause}`,
            { cause },
          );
    return this.#failure;
  }

  #refusal(): QueueError | undefined {
    if (this.#failure) return this.#failure;
    if (this.#closed) return new QueueError('ERR_CLOSED', `The processed set in ${this.dir} is closed`);
    return undefined;
  }

  /** Finish the records and forgets under way, then close the store. Idempotent. */
  close(): Promise<void> {
    this.#closePromise ??= this.#close();
    return this.#closePromise;
  }

  async #close(): Promise<void> {
    this.#closed = true;
    if (this.#appending) await new Promise<void>((resolve) => (this.#idle = resolve));
    await this.#acking;
    // A failed set still releases its directory; the failure was reported to the call it failed.
    if (this.#failure) await this.#store.close().catch(() => {});
    else await this.#store.close();
  }
}
