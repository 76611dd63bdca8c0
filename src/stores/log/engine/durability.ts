/**
 * Durability bookkeeping of one LogStore: the syncs in flight per descriptor, the background flush
 * of the active segment, and fail-stop. Any failed write or sync fails the instance for good: an
 * fsync is never retried and a later success never stands in for a failed one (after EIO the page
 * cache no longer holds what was written; docs/internals/engine.md, "Failures"). Recovery is close
 * and reopen.
 */
import { QueueError } from '../../../contract/errors.js';
import type { FileSystem } from '../../../fs/file-system.js';
import { systemTime, type TimeSource } from '../../../lib/clock.js';
import { closeQuietly } from './layout.js';

/** Under `none`, the active segment is fdatasynced in the background every this many bytes. */
const BACKGROUND_FLUSH_BYTES = 8 * 1024 * 1024;

/**
 * Under `blockingSync: 'auto'`, a sync of a batch runs on the calling thread while the share of
 * the time the event loop ran callbacks (its other work) stays under `1 - stall / flight`, the
 * part of a flush in the threadpool that a blocking one saves: below it, the loop's other work per
 * flush takes less than that part, so a blocking flush and the work after it end before the
 * threadpool's flush would have (`#quietShare`). That share is never taken below this one, whatever
 * the two flushes measured (a loop this idle gains from blocking); and a flush in the threadpool is
 * timed only if the loop ran callbacks for less than this share of it (over a busier loop, its
 * completion waited for its turn).
 */
const LOOP_QUIET_SHARE = 0.15;
/**
 * `stall / flight` until both were timed: a batch sync on the calling thread took about half as
 * long as one in the threadpool on this machine's disk (0.18 ms against 0.46 ms over 2 s of the
 * README's push-only cell; 0.13 ms against 0.22–0.33 ms in its `process()` cell).
 */
const STALL_TO_FLIGHT_BEFORE_TIMED = 0.5;
/**
 * Weight of the latest reading in the loop's average, which starts at 1 (busy): a new store on an
 * idle loop blocks after six readings, not some 30 (each a batch synced in the threadpool at 2–3
 * times the cost), and the few syncs of an open or a quiet moment do not make a busy loop look
 * idle. The flush times' averages weigh their readings the same way once they have this many;
 * before, each weighs as much as the ones before it.
 */
const LOOP_WEIGHT = 1 / 8;
/**
 * While batch syncs run on the calling thread and none was put off to a later turn (see
 * `#noteGap`), one in this many still goes to the threadpool, to look at the loop again.
 */
export const LOOK_AGAIN_EVERY = 16;

/** The event loop's idle and active time (ms) so far, or since an earlier reading: `performance.eventLoopUtilization`. */
export interface LoopTime {
  readonly idle: number;
  readonly active: number;
  readonly utilization: number;
}
export type LoopMeter = (since?: LoopTime) => LoopTime;

/** The runtime's meter, or null where it has none (the loop then counts as busy). */
const runtimeLoopMeter: LoopMeter | null =
  typeof globalThis.performance?.eventLoopUtilization === 'function' ? (since) => performance.eventLoopUtilization(since) : null;

export function errnoCode(e: unknown): string | undefined {
  return typeof e === 'object' && e !== null && typeof (e as { code?: unknown }).code === 'string'
    ? (e as { code: string }).code
    : undefined;
}

export function isStoreFull(e: unknown): boolean {
  return e instanceof QueueError && e.code === 'ERR_STORE_FULL';
}

export class Durability {
  #failure: QueueError | null = null;
  /** Syncs in flight per fd: an fd is closed only when none is pending on it (docs/internals/engine.md, "Write path"). */
  readonly #syncsByFd = new Map<number, number>();
  readonly #closeWanted = new Set<number>();
  /** The syncs running per fd, for a success to wait on the others (see `syncFd`). */
  readonly #runningByFd = new Map<number, Set<Promise<void>>>();
  /**
   * Under 'auto': the share of the recent threadpool syncs' time during which the event loop ran
   * callbacks (a moving average; 1 until one was measured), and the batch syncs run on the calling
   * thread since the last one sent to the threadpool to measure it again.
   */
  #loopBusy = 1;
  #blockedBatches = 0;
  /** A batch's sync ran on the calling thread in this turn of the event loop (see `#blockBatch`). */
  #stalledThisTurn = false;
  /** How long the last batch sync on the calling thread took (ms; see `#noteGap`). */
  #stallMs = 0;
  /** How long batch syncs took on the calling thread, and in the threadpool from the call to their completion's turn (ms, moving averages; see `#quietShare`). */
  readonly #stall = new MovingAverage();
  readonly #flight = new MovingAverage();
  /** The fd of the segment whose next batch sync goes to the threadpool: a consumer that trails the producers handed out an item since its last one was placed (see `#batchMayBlock`); -1: none. */
  #consumerBehindFd = -1;
  /** Write offset of the active segment when its last data sync started. */
  #flushedOffset = 0;
  #backgroundFlush = false;

  constructor(
    private readonly fs: FileSystem,
    private readonly dir: string,
    /**
     * Where syncs run (`blockingSync`): true, on the calling thread; false, in the threadpool;
     * 'auto', on the calling thread when no other sync of the file is running and the sync covers
     * one operation (`single`) or the event loop was quiet (see `#batchMayBlock`). The options
     * checked that `fs` can sync on the calling thread.
     */
    private readonly blocking: boolean | 'auto' = false,
    private readonly loopMeter: LoopMeter | null = runtimeLoopMeter,
    /** A clock that never steps back (ms), for the gaps between blocking syncs. */
    private readonly now: TimeSource['monoNow'] = systemTime.monoNow,
  ) {}

  get failure(): QueueError | null {
    return this.#failure;
  }

  /** Fail the instance (once; the first cause wins) and return the error every call now gets. */
  markFailed(cause: unknown): QueueError {
    if (this.#failure === null) {
      const msg = cause instanceof Error ? cause.message : String(cause);
      this.#failure =
        cause instanceof QueueError && cause.code === 'ERR_STORE_FAILED'
          ? cause
          : new QueueError('ERR_STORE_FAILED', `LogStore for ${this.dir} failed and must be reopened: ${msg}`, { cause });
    }
    return this.#failure;
  }

  fail(cause: unknown): Promise<never> {
    return Promise.reject(this.markFailed(cause));
  }

  /**
   * fdatasync/fsync `fd`, counted so that the fd is not closed while the sync runs. Any failure
   * fails the instance. A success is reported only once every other sync of the same fd that was
   * still running has settled: of two syncs of one file in flight together, only one may be told
   * of a writeback error, and the other returns success over pages that never reached the disk.
   */
  syncFd(fd: number, dataOnly: boolean, single = false): Promise<void> {
    if (this.blocking === true) return this.#syncNow(fd, dataOnly);
    // Never on the calling thread beside a running sync of the same file, whose error it could not share.
    if (this.blocking === 'auto' && !this.#runningByFd.has(fd)) {
      // A sync of one operation has nothing to overlap with: the threadpool's round trip is all it would add.
      if (single) return this.#syncNow(fd, dataOnly);
      if (this.#batchMayBlock(fd)) return this.#blockBatch(fd, dataOnly);
      return this.#syncLater(fd, dataOnly, true);
    }
    return this.#syncLater(fd, dataOnly);
  }

  /**
   * `syncFd` in the threadpool. `batch`: a batch sync that could have blocked (no other sync of
   * its fd running): the loop is read through it, and its time from here to its completion's turn
   * joins the flights' average when the loop sat idle through it. Other syncs (of one operation
   * beside a running one, the background flush, those of an open or a roll) tell nothing of what a
   * batch's flush costs the loop.
   */
  #syncLater(fd: number, dataOnly: boolean, batch = false): Promise<void> {
    const start = batch ? this.now() : 0;
    this.#hold(fd);
    const sync = dataOnly ? this.fs.fdatasync(fd) : this.fs.fsync(fd);
    let running = this.#runningByFd.get(fd);
    if (running === undefined) this.#runningByFd.set(fd, (running = new Set()));
    running.add(sync);
    // How busy the loop is while the device flushes, read from the first check phase on, past the
    // rest of the work that started this sync (see `#batchMayBlock`).
    let loopAt: LoopTime | undefined;
    if (batch && this.loopMeter !== null) {
      const meter = this.loopMeter;
      setImmediate(() => {
        loopAt = meter();
      });
    }
    const done = (): void => {
      running.delete(sync);
      if (running.size === 0 && this.#runningByFd.get(fd) === running) this.#runningByFd.delete(fd);
      this.#release(fd);
    };
    return sync.then(
      async () => {
        done();
        if (loopAt !== undefined) {
          const share = this.#noteFlight(loopAt);
          // Timed only over a loop that sat idle through it: over a busy one the completion waits
          // for its turn, and the wait would pass for the flush's time.
          if (share < LOOP_QUIET_SHARE) this.#flight.note(this.now() - start);
        }
        // The failure handler of each of those syncs runs before this waiter is resumed (it was
        // attached first), so a failure among them is already recorded when it is looked at.
        if (running.size > 0) await Promise.allSettled([...running]);
        // After any failed sync, a later successful one proves nothing: the failed sync may have
        // dropped dirty pages that this one was meant to cover. (An ack written before a failed
        // fdatasync of the cursor must not resolve on the next, successful one.)
        if (this.#failure !== null) throw this.#failure;
      },
      (e: unknown) => {
        done();
        this.markFailed(e);
        throw e;
      },
    );
  }

  #hold(fd: number): void {
    this.#syncsByFd.set(fd, (this.#syncsByFd.get(fd) ?? 0) + 1);
  }

  #release(fd: number): void {
    const n = this.#syncsByFd.get(fd)! - 1;
    if (n > 0) this.#syncsByFd.set(fd, n);
    else {
      this.#syncsByFd.delete(fd);
      if (this.#closeWanted.delete(fd)) closeQuietly(this.fs, fd);
    }
  }

  /**
   * Under 'auto', whether a sync of a batch runs on the calling thread. In the threadpool, the
   * event loop goes on with other work while the device flushes: a consumer's handlers and acks,
   * a server's requests. Blocking is worth it while that work is shorter than what the
   * threadpool's round trip adds to a flush: the share of the time the loop ran callbacks (from
   * the first check phase after each flush in the threadpool started, and in the turns between
   * blocking ones: `#noteGap`) stays under `#quietShare()`. A consumer that keeps up with the
   * producers leaves the loop idle for part of each flush, and its work then runs between blocking
   * flushes; one that falls behind (`noteConsumerBehind`) gets the loop during every flush. While
   * batches block, the turns between them show what else the loop runs; where no batch waited for
   * a turn to measure one, one batch in LOOK_AGAIN_EVERY still goes to the threadpool, so that a
   * loop which got busy is seen within a few of them.
   */
  #batchMayBlock(fd: number): boolean {
    // A consumer behind the producers needs the loop between two flushes more than the flush
    // needs to be short: blocking would hand it less of the loop and let the backlog grow
    // (measured, the README's `for await` loop: 0.6–0.7× with every batch blocking beside it).
    if (fd === this.#consumerBehindFd) {
      this.#consumerBehindFd = -1;
      return false;
    }
    if (this.#loopBusy >= this.#quietShare()) return false;
    if (++this.#blockedBatches < LOOK_AGAIN_EVERY) return true;
    this.#blockedBatches = 0;
    return false;
  }

  /** A consumer handed out items that trail the producers' by more than two batches: the next batch sync of `fd`, the active segment, goes to the threadpool. */
  noteConsumerBehind(fd: number): void {
    this.#consumerBehindFd = fd;
  }

  /**
   * The share of the time the loop may run other callbacks while batch syncs still block: `1 -
   * stall / flight`, the share of a flush in the threadpool (from the call to its completion's
   * turn) that a blocking flush saves, from the averages of both (STALL_TO_FLIGHT_BEFORE_TIMED
   * until both were timed), and never under LOOP_QUIET_SHARE.
   */
  #quietShare(): number {
    const stall = this.#stall.value;
    const flight = this.#flight.value;
    const ratio = stall > 0 && flight > 0 ? stall / flight : STALL_TO_FLIGHT_BEFORE_TIMED;
    return Math.max(LOOP_QUIET_SHARE, 1 - ratio);
  }

  /** A sync in the threadpool settled: the share of the time since `since` that the loop ran callbacks joins the average, and is returned (NaN: not measured). */
  #noteFlight(since: LoopTime): number {
    const { idle, active } = this.loopMeter!(since);
    // A runtime whose meter reports no time at all tells nothing: the figure stays.
    if (!(idle + active > 0)) return Number.NaN;
    const share = active / (idle + active);
    this.#noteShare(share);
    return share;
  }

  /** A reading of the share of the time the loop ran other callbacks joins the average (LOOP_WEIGHT). */
  #noteShare(share: number): void {
    this.#loopBusy += (share - this.#loopBusy) * LOOP_WEIGHT;
  }

  /**
   * A batch's sync on the calling thread, at most one per turn of the event loop: a second one in
   * the same turn waits for the next, so that timers and I/O run between two stalls and no stall
   * is longer than one flush. (The queue's per-turn budget of store calls bounds them only once it
   * has run out: measured without this rule, 15 blocking syncs in one turn.)
   */
  #blockBatch(fd: number, dataOnly: boolean): Promise<void> {
    if (!this.#stalledThisTurn) {
      this.#stalledThisTurn = true;
      setImmediate(this.#turnEnded);
      const start = this.now();
      const synced = this.#syncNow(fd, dataOnly);
      this.#stallMs = this.now() - start;
      this.#stall.note(this.#stallMs);
      return synced;
    }
    this.#hold(fd);
    const putOff = this.now();
    return new Promise<void>((resolve) => setImmediate(resolve)).then(() => {
      // Only the first batch put off to this turn reads it: a later one would count the stall of
      // the one before it as the loop's other work.
      if (!this.#stalledThisTurn) this.#noteGap(this.now() - putOff);
      // A sync of the file may have started meanwhile: this one then joins it in the threadpool.
      const sync = this.#runningByFd.has(fd) ? this.#syncLater(fd, dataOnly) : this.#blockBatch(fd, dataOnly);
      this.#release(fd);
      return sync;
    });
  }

  /**
   * A batch sync put off to the next turn waited `gapMs` for it: the time the loop spent on
   * everything else it had to do (timers, I/O, other callbacks) after the last stall, and on its
   * own round (a few microseconds on an idle loop: 5 µs at the median against flushes of 140 µs,
   * measured in the README's push-only cell). Its share of that time and the stall's joins the
   * average the threadpool's syncs feed, and it is a look at the loop: while batches keep
   * waiting for turns, none has to go to the threadpool to look (a sync there costs a batch of 64
   * pushes 2–3 times a blocking one on this machine's disk).
   */
  #noteGap(gapMs: number): void {
    const total = gapMs + this.#stallMs;
    // A clock that did not move tells nothing: the figure and the count stay.
    if (!(total > 0)) return;
    this.#noteShare(gapMs / total);
    this.#blockedBatches = 0;
  }

  readonly #turnEnded = (): void => {
    this.#stalledThisTurn = false;
  };

  /**
   * `syncFd` on the calling thread (`blockingSync`). No other sync of the fd is in flight (under
   * `true` every sync runs here; under `'auto'` only when none runs), so none can share a
   * writeback error with it; the rules are the same: a failure fails the instance, and after a
   * failure no success is reported.
   */
  #syncNow(fd: number, dataOnly: boolean): Promise<void> {
    try {
      if (dataOnly) this.fs.fdatasyncSync!(fd);
      else this.fs.fsyncSync!(fd);
    } catch (e) {
      this.markFailed(e);
      return Promise.reject(e);
    }
    return this.#failure === null ? Promise.resolve() : Promise.reject(this.#failure);
  }

  /** fdatasync `fd`; a failure fails the instance. `single`: it covers one operation (see `syncFd`). */
  syncData(fd: number, single = false): Promise<void> {
    return this.syncFd(fd, true, single).then(undefined, (e: unknown) => this.fail(e));
  }

  /** Close `fd` now, or when the last sync pending on it settles. */
  closeWhenIdle(fd: number): void {
    if (this.#syncsByFd.has(fd)) this.#closeWanted.add(fd);
    else closeQuietly(this.fs, fd);
  }

  /**
   * A write hit a full disk: cut the file back to `at`, make the cut durable, then reject with
   * `ERR_STORE_FULL` (the store stays usable). Without the fdatasync a power loss could keep the
   * landed part of a batch whose push was rejected, and its retry would deliver it twice.
   */
  cutBack(fd: number, at: number, what: string, cause: unknown): Promise<never> {
    try {
      this.fs.truncate(fd, at);
    } catch (e) {
      return this.fail(e);
    }
    return this.syncData(fd).then(() => {
      throw new QueueError('ERR_STORE_FULL', `No space left on device (${what})`, { cause });
    });
  }

  /** A data sync of the active segment starts with its write position at `offset`. */
  noteSyncStarted(offset: number): void {
    this.#flushedOffset = offset;
  }

  /** A data sync of the active segment started with its write position at `offset` or later. */
  syncStartedAt(offset: number): boolean {
    return this.#flushedOffset >= offset;
  }

  /** A new active segment: nothing of it is flushed yet. */
  resetFlushed(): void {
    this.#flushedOffset = 0;
  }

  /**
   * Under `none` nothing syncs the active segment until it rolls, and the roll's fdatasync would
   * then flush the whole segment while appends wait (measured: ~0.3 s per 64 MiB segment, a third
   * of the run time at 1 M msgs/s). A background fdatasync every BACKGROUND_FLUSH_BYTES keeps the
   * dirty tail short. At most one is in flight; a failure fails the instance like any sync.
   */
  afterUnsyncedWrite(fd: number, offset: number): void {
    if (this.#backgroundFlush || offset - this.#flushedOffset < BACKGROUND_FLUSH_BYTES) return;
    this.#backgroundFlush = true;
    this.#flushedOffset = offset;
    const clear = (): void => {
      this.#backgroundFlush = false;
    };
    // In the threadpool under 'auto', however quiet the loop was lately: this flush is there so
    // that appends go on while it writes back up to BACKGROUND_FLUSH_BYTES.
    const flush = this.blocking === true ? this.#syncNow(fd, true) : this.#syncLater(fd, true);
    flush.then(undefined, (e: unknown) => this.fail(e)).then(clear, clear);
  }

  /** Close the descriptors that were waiting for their syncs (the store is closing). */
  release(): void {
    for (const fd of this.#closeWanted) closeQuietly(this.fs, fd);
    this.#closeWanted.clear();
  }
}

/** A moving average of times (ms) weighted as the loop's share is (LOOP_WEIGHT), with no starting figure: 0 until the first reading above 0. */
class MovingAverage {
  value = 0;
  #readings = 0;

  note(ms: number): void {
    // A clock that did not move tells nothing.
    if (!(ms > 0)) return;
    if (this.#readings < 1 / LOOP_WEIGHT) this.#readings++;
    this.value += (ms - this.value) / this.#readings;
  }
}
