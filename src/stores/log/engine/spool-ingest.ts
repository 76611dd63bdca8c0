// Reads FORMAT.md §14 "Spool files" and carries out §14.4 "Ingestion" (the owner's side).
/**
 * The owner's half of the spool: it ingests the spool files of `<store>/spool/` when the queue
 * opens and, while it runs, at each poll (`spoolPollMs`). A file's records go to the queue as
 * pushes, in the file's order, each item carrying its origin (file id, record number) in its
 * frame; the store learns from those frames, and from its checkpoint's spool table, how far each
 * file was ingested (`SpoolProgress`), so a crash at any moment resumes every file at the record
 * after the last one stored. A file is deleted once it is ingested whole and closed: by its END
 * frame, or, when its producer died (its lock is free), at its last whole record (the torn tail a
 * dead producer leaves is cut, as the log's own tails are; damage followed by valid records is
 * reported and the file is left as it is, never skipped). The deletion is made durable (the spool
 * directory fsynced) before the file's entry leaves the spool table.
 */
import { join } from 'node:path';
import type { FileSystem, LockHandle } from '../../../fs/file-system.js';
import type { Clock } from '../../../lib/clock.js';
import { unrefTimer } from '../../../lib/clock.js';
import { errnoCode } from './durability.js';
import { SPOOL_DIR, SPOOL_HEADER_BYTES, SPOOL_LOCK_SUFFIX, SPOOL_SUFFIX, TMP_SUFFIX, parseSpoolName } from './format.js';
import { FileWindow, FrameReader } from './frame-reader.js';
import { closeQuietly } from './layout.js';
import { decodeSpoolHeader, SpoolFrames, type SpoolRecord } from './spool-file.js';
import type { SpoolProgress } from './spool-progress.js';

/** Records pushed per call: a chunk waits for capacity as one push would. */
const INGEST_CHUNK_RECORDS = 1024;

/** What the ingestion hands its records to: the queue (a push per record, each with its origin). */
export type IngestPush = (file: string, records: readonly SpoolRecord[]) => Promise<void>;

/** A spool file the owner could not ingest, and why (reported once, never skipped). */
export interface SpoolProblem {
  readonly file: string;
  readonly reason: string;
}

/** What `pq stats` and `inspect()` show of the spool. */
export interface SpoolStats {
  /** Spool files in the directory. */
  files: number;
  /** Records read from them and not ingested yet (known at the last poll). */
  pendingRecords: number;
  /** Records ingested by this owner since it opened. */
  ingested: number;
  /** Bytes of torn tails cut from the files of producers that died. */
  tornBytes: number;
  problems: SpoolProblem[];
}

interface OpenFile {
  readonly id: string;
  /** When its producer created it (the header's time): files are ingested in that order. */
  readonly createdAt: number;
  fd: number;
  /** Offset after the last whole record read. */
  offset: number;
  /** Number of the last record read (ingested or about to be). */
  lastRecord: number;
  ended: boolean;
}

export interface SpoolIngestDeps {
  readonly fs: FileSystem;
  readonly dir: string;
  readonly progress: SpoolProgress;
  readonly clock: Clock;
  readonly pollMs: number;
  readonly chunkBytes: number;
  readonly push: IngestPush;
  /** A failure that must fail the store (a failed fsync of the spool directory). */
  readonly fail: (error: unknown) => void;
  /** A problem met with one file: reported, and the file left as it is. */
  readonly problem: (problem: SpoolProblem) => void;
  /** A poll that failed (the spool directory could not be read): reported; polls go on, further apart. */
  readonly pollFailed: (error: unknown) => void;
}

/** The longest wait between polls after failed ones. */
const POLL_BACKOFF_MAX_MS = 30_000;

export class SpoolIngest {
  readonly #d: SpoolIngestDeps;
  readonly #spoolDir: string;
  readonly #files = new Map<string, OpenFile>();
  readonly #broken = new Set<string>();
  #timer: unknown;
  /** The spool directory existed at the last pass: only then is there anything to poll. */
  #polling = false;
  /** Polls that failed in a row: each doubles the wait before the next. */
  #failedPolls = 0;
  #running: Promise<void> | null = null;
  #again = false;
  #stopped = false;
  readonly stats: SpoolStats = { files: 0, pendingRecords: 0, ingested: 0, tornBytes: 0, problems: [] };

  constructor(deps: SpoolIngestDeps) {
    this.#d = deps;
    this.#spoolDir = join(deps.dir, SPOOL_DIR);
  }

  /** Ingest what is there now, and poll from then on. Resolves once the first pass is done. */
  start(): Promise<void> {
    return this.poke();
  }

  /** Run a pass now (or right after the one running); resolves when it is done. */
  poke(): Promise<void> {
    if (this.#stopped) return Promise.resolve();
    if (this.#running !== null) {
      this.#again = true;
      return this.#running;
    }
    this.#disarm();
    this.#running = this.#pass()
      .then(
        () => {
          this.#failedPolls = 0;
        },
        (error: unknown) => {
          this.#failedPolls++;
          throw error;
        },
      )
      .finally(() => {
        this.#running = null;
        if (this.#again && !this.#stopped) {
          this.#again = false;
          // Its failure is counted, and reported by the next poll's timer.
          this.poke().catch(() => undefined);
        } else this.#arm();
      });
    return this.#running;
  }

  /** Stop polling; resolves once the pass in progress is done. Open files are closed. */
  async stop(): Promise<void> {
    this.#stopped = true;
    this.#disarm();
    await this.#running?.catch(() => undefined);
    for (const f of this.#files.values()) closeQuietly(this.#d.fs, f.fd);
    this.#files.clear();
  }

  /**
   * Poll again later, while a spool directory exists (a store whose producers never spooled sets
   * no timer). A producer that creates the directory while the owner runs is noticed by the owner's
   * watch of the store directory (the node binding) or at the next open.
   */
  #arm(): void {
    if (this.#stopped || this.#timer !== undefined || (!this.#polling && this.#failedPolls === 0)) return;
    const wait = Math.min(POLL_BACKOFF_MAX_MS, this.#d.pollMs * 2 ** Math.min(this.#failedPolls, 16));
    this.#timer = this.#d.clock.setTimeout(() => {
      this.#timer = undefined;
      this.poke().catch((error: unknown) => {
        if (!this.#stopped) this.#d.pollFailed(error);
      });
    }, wait);
    // The poll never keeps the owner alive: its waiting consumers do.
    unrefTimer(this.#timer);
  }

  #disarm(): void {
    if (this.#timer !== undefined) this.#d.clock.clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  async #pass(): Promise<void> {
    const { fs } = this.#d;
    if (fs.stat(this.#spoolDir) === null) {
      this.stats.files = 0;
      this.#polling = false;
      return;
    }
    this.#polling = true;
    const names = fs.readdir(this.#spoolDir);
    const ids = names
      .map(parseSpoolName)
      .filter((id): id is string => id !== null)
      .sort();
    this.stats.files = ids.length;
    let pending = 0;
    // In the order the files were created: one producer after another (two `pq push` runs in a row,
    // each with a file of its own) keep their order, as pushes of one producer do.
    const files = ids
      .filter((id) => !this.#broken.has(id))
      .map((id) => this.#open(id))
      .filter((f): f is OpenFile => f !== null);
    files.sort((a, b) => a.createdAt - b.createdAt || (a.id < b.id ? -1 : 1));
    for (const { id } of files) {
      if (this.#stopped) return;
      try {
        pending += await this.#ingestFile(id);
      } catch (e) {
        // The queue refused the records (it failed, or closed): the next pass, or the next open, goes on.
        if (this.#stopped) return;
        throw e;
      }
    }
    this.stats.pendingRecords = pending;
    this.#dropStrayTmpFiles(names);
  }

  /** Ingest what `id` holds beyond what the store has; returns the records still waiting in it. */
  async #ingestFile(id: string): Promise<number> {
    const f = this.#open(id);
    if (f === null) return 0;
    try {
      return await this.#ingestOpen(f);
    } catch (e) {
      // Reading moved the file's position past records the queue then refused (it began to
      // close, or failed): the next pass opens the file again and reads from what the store
      // holds. From the position it would see no record left, take the file for ingested and
      // delete it with those records never stored.
      if (this.#files.get(id) === f) {
        closeQuietly(this.#d.fs, f.fd);
        this.#files.delete(id);
      }
      throw e;
    }
  }

  async #ingestOpen(f: OpenFile): Promise<number> {
    const id = f.id;
    const read = this.#read(f);
    if (read.records.length > 0) {
      for (let i = 0; i < read.records.length; i += INGEST_CHUNK_RECORDS) {
        await this.#d.push(id, read.records.slice(i, i + INGEST_CHUNK_RECORDS));
        this.stats.ingested += Math.min(INGEST_CHUNK_RECORDS, read.records.length - i);
      }
    }
    if (f.ended) {
      await this.#finish(f);
      return 0;
    }
    // Not closed: is its producer still there? A free lock says it died.
    const lock = this.#tryLock(id);
    if (lock === null) return 0;
    try {
      // Read again under the lock: the producer may have written its last records and died since.
      const last = this.#read(f);
      if (last.records.length > 0) await this.#d.push(id, last.records);
      if (last.verdict === 'corrupt') {
        this.#report(f, last.reason);
        return 0;
      }
      if (last.verdict === 'torn') this.stats.tornBytes += last.tornBytes;
      await this.#finish(f);
      return 0;
    } finally {
      lock.release();
      this.#dropLockFile(id);
    }
  }

  /** The file, opened and positioned after what the store already holds of it; null when it is unreadable (reported). */
  #open(id: string): OpenFile | null {
    const known = this.#files.get(id);
    if (known !== undefined) return known;
    const { fs } = this.#d;
    const path = join(this.#spoolDir, id + SPOOL_SUFFIX);
    let fd: number;
    try {
      fd = fs.open(path, 'read');
    } catch (e) {
      if (errnoCode(e) === 'ENOENT') return null;
      throw e;
    }
    const size = fs.size(fd);
    const head = new Uint8Array(SPOOL_HEADER_BYTES);
    let n = 0;
    while (n < head.length) {
      const got = fs.read(fd, head, n, head.length - n, n);
      if (got === 0) break;
      n += got;
    }
    const header = decodeSpoolHeader(head.subarray(0, n), size, id);
    if ('kind' in header) {
      closeQuietly(fs, fd);
      this.#broken.add(id);
      const reason =
        header.kind === 'unsupported'
          ? `spool file version ${header.version} is newer than this release reads`
          : `${header.reason} (offset ${header.offset})`;
      this.#d.problem({ file: path, reason });
      this.stats.problems.push({ file: path, reason });
      return null;
    }
    const f: OpenFile = { id, createdAt: header.createdAt, fd, offset: SPOOL_HEADER_BYTES, lastRecord: 0, ended: false };
    this.#files.set(id, f);
    return f;
  }

  /**
   * Read the whole records after `f`'s position; returns those the store does not hold yet, and
   * how the data ends: at a clean end, a torn tail (a write in progress, or a dead producer's
   * last), or damage followed by valid records.
   */
  #read(f: OpenFile): { records: SpoolRecord[]; verdict: 'end' | 'torn' | 'corrupt'; reason: string; tornBytes: number } {
    const { fs } = this.#d;
    const size = fs.size(f.fd);
    const rules = new SpoolFrames(f.lastRecord);
    const frames = new FrameReader(new FileWindow(fs, f.fd, size, this.#d.chunkBytes), f.offset, rules);
    let verdict: 'end' | 'torn' | 'corrupt' = 'end';
    for (;;) {
      const v = frames.next();
      if (v === 'record') {
        frames.accept();
        continue;
      }
      verdict = v === 'end' ? 'end' : v === 'torn' ? 'torn' : 'corrupt';
      break;
    }
    f.offset = frames.offset;
    f.lastRecord = rules.lastRecord;
    if (rules.ended) f.ended = true;
    const done = this.#d.progress.of(f.id);
    return { records: rules.records.filter((r) => r.record > done), verdict, reason: frames.reason(), tornBytes: size - frames.offset };
  }

  #tryLock(id: string): LockHandle | null {
    try {
      return this.#d.fs.lock(join(this.#spoolDir, id + SPOOL_LOCK_SUFFIX));
    } catch (e) {
      if (errnoCode(e) === 'ELOCKED') return null;
      throw e;
    }
  }

  /**
   * Every record of `f` is in the store, and nothing more will come: delete the file (and its
   * lock file), make that durable, then forget its progress (the checkpoint no longer needs it).
   */
  async #finish(f: OpenFile): Promise<void> {
    const { fs } = this.#d;
    closeQuietly(fs, f.fd);
    this.#files.delete(f.id);
    fs.unlink(join(this.#spoolDir, f.id + SPOOL_SUFFIX));
    // Closed by its END frame: its producer let go of the lock already.
    if (f.ended) this.#dropLockFile(f.id);
    try {
      await fs.fsyncDir(this.#spoolDir);
    } catch (e) {
      this.#d.fail(e);
      throw e;
    }
    this.#d.progress.forget(f.id);
  }

  /** The lock file of a finished file: never needed again (ids are random), so it goes too. */
  #dropLockFile(id: string): void {
    try {
      const lockPath = join(this.#spoolDir, id + SPOOL_LOCK_SUFFIX);
      if (this.#d.fs.stat(lockPath) !== null) this.#d.fs.unlink(lockPath);
    } catch {
      // Left behind: harmless, and `pq` ignores lock files.
    }
  }

  #report(f: OpenFile, reason: string): void {
    closeQuietly(this.#d.fs, f.fd);
    this.#files.delete(f.id);
    this.#broken.add(f.id);
    const problem = {
      file: join(this.#spoolDir, f.id + SPOOL_SUFFIX),
      reason: `${reason} (offset ${f.offset}); its records from there on were not ingested`,
    };
    this.stats.problems.push(problem);
    this.#d.problem(problem);
  }

  /** `<id>.pqs.tmp` files of producers that died while creating their file. */
  #dropStrayTmpFiles(names: readonly string[]): void {
    for (const name of names) {
      if (!name.endsWith(SPOOL_SUFFIX + TMP_SUFFIX)) continue;
      const id = name.slice(0, -(SPOOL_SUFFIX + TMP_SUFFIX).length);
      if (parseSpoolName(id + SPOOL_SUFFIX) === null) continue;
      const lock = this.#tryLock(id);
      if (lock === null) continue;
      try {
        this.#d.fs.unlink(join(this.#spoolDir, name));
        this.#d.fs.unlink(join(this.#spoolDir, id + SPOOL_LOCK_SUFFIX));
      } catch {
        // Gone already.
      } finally {
        lock.release();
      }
    }
  }
}
