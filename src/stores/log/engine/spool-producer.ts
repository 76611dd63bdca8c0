// Writes FORMAT.md §14 "Spool files": the producer side of the spool.
/**
 * Pushes made while no process has the queue open. Each producer appends to a spool file of its
 * own in `<store>/spool/`, taking no store lock, so any number of producer processes spool at once:
 *
 * - the file is made whole before anyone can see it: header written to `<id>.pqs.tmp`, fsynced,
 *   renamed to `<id>.pqs`, the directory fsynced (a new file is durable before a push in it resolves);
 * - the producer holds `<id>.lock` while it writes, so the owner can tell a live producer (whose
 *   torn last frame may be a write in progress) from a dead one (whose torn tail is final);
 * - pushes gather while a write and its sync run, and go as one write and one fdatasync (group
 *   commit, as the queue's own pushes do); under `sync` each push is a write and an fdatasync of
 *   its own; under `none` the write alone;
 * - `close()` appends an END frame: the owner may delete the file once it has ingested everything.
 *
 * A spooled push resolves with 0 for each payload: its seq is given when the owner ingests it.
 */
import { join } from 'node:path';
import { QueueError } from '../../../contract/errors.js';
import type { FileSystem, LockHandle } from '../../../fs/file-system.js';
import type { ProducerBackend, SpoolOptions } from '../../../remote/backend.js';
import type { RemotePushOptions } from '../../../contract/owner-surface.js';
import type { StoredItem } from '../../../contract/store.js';
import { errnoCode } from './durability.js';
import {
  FRAME_HEADER_BYTES,
  RECORD_ITEM,
  RECORD_SPOOL_END,
  SPOOL_DIR,
  SPOOL_LOCK_SUFFIX,
  SPOOL_SUFFIX,
  TMP_SUFFIX,
  classifyEntry,
} from './format.js';
import { encodeFrame, encodeFrameInPlace, encodeScheduledItemFrame } from './frame.js';
import { itemMetaBytes } from './item-meta.js';
import { encodeSpoolHeader, newSpoolId } from './spool-file.js';

/** What the spool's producer side is given beyond `SpoolOptions`: the file system (the node one, or the simulated disk in tests). */
export interface SpoolProducerOptions extends SpoolOptions {
  readonly fs: FileSystem;
  /** Milliseconds since the epoch: a key's `keyedAt` and the file's creation time. */
  readonly now?: () => number;
  readonly fileMode?: number;
  readonly dirMode?: number;
}

interface Waiting {
  readonly payloads: readonly Uint8Array[];
  readonly options: RemotePushOptions;
  readonly resolve: (seqs: number[]) => void;
  readonly reject: (error: unknown) => void;
  readonly signal: AbortSignal | undefined;
  onAbort: (() => void) | undefined;
}

const EMPTY = new Uint8Array(0);

/**
 * Open a spool file of this producer's own in the store directory `dir` (created when missing, as
 * `LogStore.open` would create it). A directory that holds anything a store would not is refused
 * (`ERR_STORE`): the spool never writes into a directory that is not a store's.
 */
export async function openSpool(dir: string, options: SpoolProducerOptions): Promise<ProducerBackend> {
  const fs = options.fs;
  const fileMode = options.fileMode ?? 0o600;
  const dirMode = options.dirMode ?? 0o700;
  const now = options.now ?? Date.now;
  const st = fs.stat(dir);
  if (st !== null && !st.isDirectory) throw new QueueError('ERR_STORE', `Store path ${dir} exists and is not a directory`, { file: dir });
  if (st !== null) {
    const foreign = fs.readdir(dir).filter((n) => classifyEntry(n) === 'foreign');
    if (foreign.length > 0)
      throw new QueueError(
        'ERR_STORE',
        `${dir} is not a store directory: it holds ${foreign.slice(0, 3).join(', ')}${foreign.length > 3 ? ', ...' : ''}`,
        { file: dir },
      );
  }
  const spoolDir = join(dir, SPOOL_DIR);
  if (fs.stat(spoolDir) === null) {
    // Both entries durable before the first spool file is: a power loss must not take the directory with it.
    const storeMissing = st === null;
    fs.mkdirp(spoolDir, dirMode);
    if (storeMissing) await fs.fsyncDir(join(dir, '..'));
    await fs.fsyncDir(dir);
  }
  const id = newSpoolId((n) => globalThis.crypto.getRandomValues(new Uint8Array(n)));
  const lock = fs.lock(join(spoolDir, id + SPOOL_LOCK_SUFFIX));
  const path = join(spoolDir, id + SPOOL_SUFFIX);
  const tmp = path + TMP_SUFFIX;
  let fd = -1;
  try {
    fd = fs.open(tmp, 'create', fileMode);
    const header = encodeSpoolHeader(id, now());
    fs.write(fd, header, 0, header.length, 0);
    await fs.fsync(fd);
    fs.rename(tmp, path);
    await fs.fsyncDir(spoolDir);
    return new SpoolProducer(fs, fd, header.length, lock, options.durability, now, path);
  } catch (e) {
    if (fd >= 0) fs.close(fd);
    try {
      if (fs.stat(tmp) !== null) fs.unlink(tmp);
    } catch {
      // Left behind: the owner deletes a stray tmp file whose producer is gone.
    }
    lock.release();
    if (errnoCode(e) === 'ENOSPC')
      throw new QueueError('ERR_STORE_FULL', `No room for a spool file in ${spoolDir}`, { cause: e, file: spoolDir });
    throw new QueueError('ERR_STORE', `Cannot create a spool file in ${spoolDir}: ${(e as Error)?.message ?? e}`, {
      cause: e,
      file: spoolDir,
    });
  }
}

class SpoolProducer implements ProducerBackend {
  readonly mode = 'spool' as const;
  readonly #fs: FileSystem;
  readonly #fd: number;
  readonly #lock: LockHandle;
  readonly #durability: SpoolOptions['durability'];
  readonly #now: () => number;
  readonly #path: string;
  #offset: number;
  /** Number of the last record written. */
  #record = 0;
  #waiting: Waiting[] = [];
  #busy = false;
  #failure: QueueError | null = null;
  #closing: Promise<void> | null = null;
  #idle: (() => void) | null = null;

  constructor(
    fs: FileSystem,
    fd: number,
    offset: number,
    lock: LockHandle,
    durability: SpoolOptions['durability'],
    now: () => number,
    path: string,
  ) {
    this.#fs = fs;
    this.#fd = fd;
    this.#offset = offset;
    this.#lock = lock;
    this.#durability = durability;
    this.#now = now;
    this.#path = path;
  }

  pushMany(payloads: Uint8Array[], options: RemotePushOptions, signal: AbortSignal | undefined): Promise<number[]> {
    if (this.#failure !== null) return Promise.reject(this.#failure);
    if (this.#closing !== null) return Promise.reject(new QueueError('ERR_CLOSED', 'This producer is closed'));
    if (signal?.aborted) return Promise.reject(signal.reason);
    return new Promise<number[]>((resolve, reject) => {
      const w: Waiting = { payloads, options, resolve, reject, signal, onAbort: undefined };
      if (signal !== undefined) {
        // Withdrawn while it waits for the write in progress; once written it is stored.
        w.onAbort = () => {
          const i = this.#waiting.indexOf(w);
          if (i < 0) return;
          this.#waiting.splice(i, 1);
          reject(signal.reason);
        };
        signal.addEventListener('abort', w.onAbort, { once: true });
      }
      this.#waiting.push(w);
      this.#flush();
    });
  }

  /** One write (and one sync) at a time; whatever gathered meanwhile goes next, as one batch. */
  #flush(): void {
    if (this.#busy || this.#waiting.length === 0) {
      if (!this.#busy) this.#idle?.();
      return;
    }
    // Under `sync` every push is a write and a sync of its own.
    const batch = this.#durability === 'sync' ? [this.#waiting.shift()!] : this.#waiting.splice(0);
    for (const w of batch) if (w.onAbort !== undefined) w.signal!.removeEventListener('abort', w.onAbort);
    this.#busy = true;
    void this.#write(batch).finally(() => {
      this.#busy = false;
      this.#flush();
    });
  }

  async #write(batch: Waiting[]): Promise<void> {
    const first = this.#record + 1;
    let record = first;
    const keyedAt = this.#now();
    const items: StoredItem[] = [];
    let bytes = 0;
    for (const w of batch) {
      const { priority = 0, notBefore = 0, keys } = w.options;
      w.payloads.forEach((payload, i) => {
        const key = keys?.[i];
        const item: StoredItem =
          key === undefined
            ? { seq: record, bytes: payload, priority, notBefore }
            : { seq: record, bytes: payload, priority, notBefore, key, keyedAt };
        record++;
        items.push(item);
        bytes += FRAME_HEADER_BYTES + payload.length + itemMetaBytes(item);
      });
    }
    const buf = new Uint8Array(bytes);
    let end = 0;
    for (const item of items) {
      const meta = itemMetaBytes(item);
      end = meta === 0 ? encodeFrame(buf, end, item.seq, RECORD_ITEM, item.bytes) : encodeScheduledItemFrame(buf, end, item, meta);
    }
    const at = this.#offset;
    try {
      this.#fs.write(this.#fd, buf, 0, end, at);
    } catch (e) {
      if (errnoCode(e) === 'ENOSPC') {
        // Cut back what landed, durably, so the numbers are used again by the next write and a
        // power loss cannot bring back records whose push was refused.
        try {
          this.#fs.truncate(this.#fd, at);
          await this.#fs.fdatasync(this.#fd);
        } catch (cut) {
          return this.#fail(cut, batch);
        }
        const full = new QueueError('ERR_STORE_FULL', `No room in ${this.#path} for ${items.length} spooled item(s)`, {
          cause: e,
          file: this.#path,
        });
        for (const w of batch) w.reject(full);
        return;
      }
      return this.#fail(e, batch);
    }
    this.#offset = at + end;
    this.#record = record - 1;
    if (this.#durability !== 'none') {
      try {
        await this.#fs.fdatasync(this.#fd);
      } catch (e) {
        return this.#fail(e, batch);
      }
    }
    for (const w of batch) w.resolve(w.payloads.map(() => 0));
  }

  /** Fail-stop: a failed write or sync leaves the file's tail unknown; this producer takes nothing more. */
  #fail(cause: unknown, batch: Waiting[]): void {
    this.#failure ??= new QueueError(
      'ERR_STORE_FAILED',
      `The spool file ${this.#path} failed; connect again: ${(cause as Error)?.message ?? cause}`,
      { cause, file: this.#path },
    );
    for (const w of [...batch, ...this.#waiting.splice(0)]) w.reject(this.#failure);
  }

  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    if (this.#busy || this.#waiting.length > 0) await new Promise<void>((resolve) => (this.#idle = resolve));
    try {
      if (this.#failure === null) {
        const end = new Uint8Array(FRAME_HEADER_BYTES);
        encodeFrameInPlace(end, 0, this.#record + 1, RECORD_SPOOL_END, EMPTY.length);
        this.#fs.write(this.#fd, end, 0, end.length, this.#offset);
        this.#offset += end.length;
        // The END frame lets the owner delete the file; without it (lost to a power loss) the owner
        // waits for the lock instead, so it needs no sync of its own under `none`.
        if (this.#durability !== 'none') await this.#fs.fdatasync(this.#fd);
      }
    } catch {
      // The records before it are whole; the owner finishes the file once the lock is free.
    } finally {
      this.#fs.close(this.#fd);
      this.#lock.release();
    }
  }
}
