/**
 * Public entry of the durable store: {@link LogStore} over the node:fs {@link FileSystem} unless
 * `options.fs` says otherwise. The engine under `src/stores/log/engine` takes its file system from here, so that
 * nothing there imports node:fs.
 */
import { type FSWatcher, watch } from 'node:fs';
import { clearTimeout, setTimeout } from 'node:timers';
import type { FileSystem } from '../../fs/file-system.js';
import { nodeFileSystem } from '../../fs/node-fs.js';
import { LogEngine, type LogStoreOptions } from './engine/log-engine.js';
import { SPOOL_DIR } from './engine/format.js';
import { EndpointServer } from '../../remote/server.js';
import type { OwnerSurface } from '../../contract/owner-surface.js';
import { salvageStore as salvageWith, type SalvageOptions, type SalvageResult } from './engine/salvage.js';
import { verifyStore as verifyWith, type VerifyOptions, type VerifyResult } from './engine/verify.js';

/**
 * The durable Store: a segmented write-ahead log plus an ack cursor (docs/internals/engine.md, FORMAT.md).
 * `const store = await LogStore.open(dir, options)`, then hand it to `new Builder(store)`.
 */
export class LogStore extends LogEngine {
  protected static override readonly defaultFileSystem: FileSystem = nodeFileSystem;
  /** The endpoint other processes push through while a queue over this store is open (`options.endpoint`). */
  #endpoint: EndpointServer | null = null;
  /** Notices the spool directory a producer makes while this owner serves (the spool's polls run only once it exists). */
  #watch: SpoolDirWatch | null = null;

  /** As the engine's `open`; typed as this class, which is what it constructs. */
  static override open(dir: string, options?: LogStoreOptions): Promise<LogStore> {
    // biome-ignore lint/complexity/noThisInStatic: the engine's open constructs `this`, so called on this class it makes one of this class.
    return super.open(dir, options) as Promise<LogStore>;
  }

  /**
   * Serve `surface` on the endpoint in the store directory. The Builder calls it once the queue is
   * open, so this process holds the store's lock: a socket left there by a killed owner is stale,
   * and replaced.
   */
  override async attach(surface: OwnerSurface): Promise<void> {
    await super.attach(surface);
    if (!this.serves || this.#endpoint !== null) return;
    this.#endpoint = await EndpointServer.start(this.dir, surface);
    // A producer that found no endpoint before it listened spools: it made its spool file before
    // it looked for the endpoint again (`connect`), so this pass, after the socket is up, sees it.
    void this.ingestSpool();
    // A producer that took this owner for none (it did not answer in time) makes the spool
    // directory later: the watch of the store directory starts the polls then.
    this.#watch = new SpoolDirWatch(this.dir, this.spoolPollMs, () => void this.ingestSpool());
  }

  /** Stop serving (the socket file is removed), then close the store. */
  override async close(): Promise<void> {
    this.#watch?.close();
    this.#watch = null;
    const endpoint = this.#endpoint;
    this.#endpoint = null;
    if (endpoint !== null) await endpoint.close();
    return super.close();
  }
}

/**
 * The watch of a store directory for the spool directory a producer makes there. The kernel
 * reports every write to the log's own files in that directory as well (a directory's watch
 * cannot ask for creations alone): one wake-up of the event loop and one callback per write,
 * measured at 7–8 % of the `group` push-only cell and 10 % of the `none` end-to-end one. So the
 * first report of any other name stops the watch for `pauseMs` (the spool's poll period); then it
 * watches again and `found` looks once, which sees a spool directory made during the pause. A
 * busy store pays one report per pause, an idle one nothing, and a spool directory made while the
 * store is quiet is seen at once. The pause runs on the runtime's own timers (node:timers), not on
 * the store's clock (`options.clock`, which a test may hold still or replace): it belongs to the
 * kernel's watch, and a clock nobody moves must not stop that watch for good.
 */
class SpoolDirWatch {
  readonly #dir: string;
  readonly #pauseMs: number;
  readonly #found: () => void;
  #watcher: FSWatcher | null = null;
  #timer: ReturnType<typeof setTimeout> | null = null;
  #closed = false;

  constructor(dir: string, pauseMs: number, found: () => void) {
    this.#dir = dir;
    this.#pauseMs = pauseMs;
    this.#found = found;
    this.#arm();
  }

  #arm(): void {
    try {
      const watcher = watch(this.#dir, (_event, name) => {
        if (name === SPOOL_DIR) this.#found();
        else this.#pause();
      });
      watcher.unref();
      watcher.on('error', () => {
        // Watching stopped: the spool is still ingested at the next open.
        this.close();
      });
      this.#watcher = watcher;
    } catch {
      // No watch here (a file system without inotify): the next open ingests what is spooled.
    }
  }

  #pause(): void {
    if (this.#timer !== null) return;
    this.#watcher?.close();
    this.#watcher = null;
    this.#timer = setTimeout(() => {
      this.#timer = null;
      if (this.#closed) return;
      this.#arm();
      this.#found();
    }, this.#pauseMs);
    this.#timer.unref();
  }

  close(): void {
    this.#closed = true;
    this.#watcher?.close();
    this.#watcher = null;
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
  }
}

/**
 * A full, read-only check of a store directory (`pq verify`): every header, every frame of every
 * segment, the chain of segments and the cursor. Never writes, locks or deletes anything.
 */
export function verifyStore(dir: string, options: VerifyOptions = {}): VerifyResult {
  return verifyWith(dir, { ...options, fs: options.fs ?? nodeFileSystem });
}

/**
 * Copy every intact, unacked item of the store in `src`, damaged or not, into a new store in
 * `dst` (missing, or an empty directory), and report what could not be copied. `src` is only
 * read: no byte, name, lock or timestamp there changes. The new store numbers the items from 1
 * in their order; `seqMap` says which old seq became which new one.
 */
export function salvageStore(src: string, dst: string, options: SalvageOptions = {}): Promise<SalvageResult> {
  return salvageWith(src, dst, { ...options, fs: options?.fs ?? nodeFileSystem });
}

export {
  MIN_SEGMENT_BYTES,
  type CompactionResult,
  type LogStoreOptions,
  type LogStoreRecoveryInfo,
  type LogStoreStats,
} from './engine/log-engine.js';
export type { FileSystem, FileStat, LockHandle, OpenMode } from '../../fs/file-system.js';
export { nodeFileSystem } from '../../fs/node-fs.js';
export type { VerifyOptions, VerifyProblem, VerifyResult } from './engine/verify.js';
export type { SalvageOptions, SalvageResult, SeqMapping } from './engine/salvage.js';
export type { DamagedRange, SeqRange } from './engine/store-walk.js';
