// Where `blockingSync: 'auto'` runs the sync of a batch (Durability.syncFd): on the calling thread
// while the event loop's other work during the recent flushes is shorter than what the threadpool's
// round trip adds to a flush, in the threadpool while it has more, never beside a running sync of
// the same file, and at most one per turn of the event loop. The loop's meter is a fake the test advances; the flushes are promises it settles.
import { describe, expect, it } from 'vitest';
import type { FileSystem } from '../../../src/fs/file-system.js';
import { Durability, LOOK_AGAIN_EVERY, type LoopMeter, type LoopTime } from '../../../src/stores/log/engine/durability.js';

const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** A FileSystem that records its syncs; the asynchronous ones wait for `settle`, one on the calling thread moves `clock` by 1 ms. */
function recordingFs(clock?: FakeLoop) {
  const calls = { onThread: [] as number[], threadpool: [] as number[], closed: [] as number[] };
  const pending: Array<() => void> = [];
  const later = (fd: number): Promise<void> => {
    calls.threadpool.push(fd);
    return new Promise<void>((resolve) => pending.push(resolve));
  };
  const now = (fd: number): void => {
    calls.onThread.push(fd);
    if (clock) clock.time += 1;
  };
  const fs = { fdatasync: later, fsync: later, fdatasyncSync: now, fsyncSync: now, close: (fd: number) => calls.closed.push(fd) };
  const settle = (): void => {
    for (const resolve of pending.splice(0)) resolve();
  };
  return { fs: fs as unknown as FileSystem, calls, settle };
}

/** An event loop whose idle and active time, and whose clock (ms), the test moves forward. */
class FakeLoop {
  idle = 0;
  active = 0;
  time = 0;
  readonly now = (): number => this.time;
  readonly meter: LoopMeter = (since?: LoopTime) =>
    since === undefined
      ? { idle: this.idle, active: this.active, utilization: 0 }
      : { idle: this.idle - since.idle, active: this.active - since.active, utilization: 0 };
}

function setup(meter: LoopMeter | null = new FakeLoop().meter, loop?: FakeLoop) {
  const rec = recordingFs(loop);
  const durability = new Durability(rec.fs, '/q', 'auto', loop?.meter ?? meter, loop?.now ?? (() => 0));
  /**
   * One batch sync of `fd` in a turn of its own; while it is in the threadpool the loop is idle
   * (`quiet`) or runs callbacks. Returns where it ran.
   */
  const batch = async (fd: number, quiet: boolean): Promise<'calling thread' | 'threadpool'> => {
    const before = rec.calls.threadpool.length;
    const sync = durability.syncFd(fd, true);
    await nextTurn(); // the meter's first reading is taken in this check phase
    const pooled = rec.calls.threadpool.length > before;
    if (pooled) {
      if (quiet && loop) loop.idle += 10;
      else if (loop) loop.active += 10;
      rec.settle();
    }
    await sync;
    await nextTurn();
    return pooled ? 'threadpool' : 'calling thread';
  };
  return { ...rec, durability, batch };
}

/** Batch syncs under a quiet loop until one runs on the calling thread; fails the test after `limit`. */
async function untilOnThread(s: ReturnType<typeof setup>, limit = 100): Promise<number> {
  for (let i = 1; i <= limit; i++) if ((await s.batch(3, true)) === 'calling thread') return i;
  throw new Error(`no batch sync ran on the calling thread in ${limit}`);
}

describe("blockingSync 'auto' for batches", () => {
  it('aBatchSyncMovesToTheCallingThreadOnceTheLoopSatIdleThroughTheFlushes_oneInSixteenStillGoesToTheThreadpool', async () => {
    const loop = new FakeLoop();
    const s = setup(null, loop);
    expect(await s.batch(3, true), 'before any flush was measured').toBe('threadpool');
    const n = await untilOnThread(s);
    expect(n).toBeGreaterThan(1);
    expect(n, 'a new store blocks after a few quiet readings, not some 30').toBeLessThan(8);
    const where: string[] = [];
    for (let i = 0; i < 4 * LOOK_AGAIN_EVERY; i++) where.push(await s.batch(3, true));
    expect(where.filter((w) => w === 'threadpool')).toHaveLength(4);
    // A sync of one operation runs on the calling thread, as before.
    const onThread = s.calls.onThread.length;
    await s.durability.syncFd(3, true, true);
    expect(s.calls.onThread).toHaveLength(onThread + 1);
  });

  /**
   * One batch sync of fd 3 in a turn of its own over a loop that runs callbacks for `share` of a
   * flush in the threadpool, which takes `flightMs` (a flush on the calling thread takes 1 ms).
   */
  async function timedBatch(s: ReturnType<typeof setup>, loop: FakeLoop, share: number, flightMs: number): Promise<string> {
    const before = s.calls.threadpool.length;
    const sync = s.durability.syncFd(3, true);
    await nextTurn();
    const pooled = s.calls.threadpool.length > before;
    if (pooled) {
      loop.active += 10 * share;
      loop.idle += 10 * (1 - share);
      loop.time += flightMs;
      s.settle();
    }
    await sync;
    await nextTurn();
    return pooled ? 'threadpool' : 'calling thread';
  }

  it('aLoopBusyForPartOfEachFlushStillBlocks_whileItsWorkIsShorterThanWhatTheThreadpoolAddsToAFlush', async () => {
    const loop = new FakeLoop();
    const s = setup(null, loop);
    // Flushes of 4 ms in the threadpool, timed while the loop sat idle, against 1 ms on the
    // calling thread: a loop that runs callbacks for less than 3/4 of a flush there does its work
    // in less than the round trip adds.
    for (let i = 0; i < 3 * LOOK_AGAIN_EVERY; i++) await timedBatch(s, loop, 0, 4);
    const busier: string[] = [];
    for (let i = 0; i < 6 * LOOK_AGAIN_EVERY; i++) busier.push(await timedBatch(s, loop, 0.6, 4));
    expect(
      busier.filter((w) => w === 'threadpool'),
      'busy 60 % of each flush: only the looks',
    ).toHaveLength(6);
    // Saturated: the looks see it, and the batches go back to the threadpool.
    const saturated: string[] = [];
    for (let i = 0; i < 12 * LOOK_AGAIN_EVERY; i++) saturated.push(await timedBatch(s, loop, 1, 4));
    expect(saturated.slice(-2 * LOOK_AGAIN_EVERY)).toEqual(Array(2 * LOOK_AGAIN_EVERY).fill('threadpool'));
  });

  it('whenTheThreadpoolAddsLittleToAFlush_aLoopBusyForPartOfEachKeepsItsBatchesThere', async () => {
    const loop = new FakeLoop();
    const s = setup(null, loop);
    // Flushes of 1.1 ms in the threadpool against 1 ms on the calling thread: an idle loop still
    // blocks, and once both were timed a loop busy 40 % of each flush sends its batches back.
    const idle: string[] = [];
    for (let i = 0; i < 3 * LOOK_AGAIN_EVERY; i++) idle.push(await timedBatch(s, loop, 0, 1.1));
    expect(idle.slice(-LOOK_AGAIN_EVERY)).toContain('calling thread');
    const busier: string[] = [];
    for (let i = 0; i < 6 * LOOK_AGAIN_EVERY; i++) busier.push(await timedBatch(s, loop, 0.4, 1.1));
    expect(busier.slice(-2 * LOOK_AGAIN_EVERY)).toEqual(Array(2 * LOOK_AGAIN_EVERY).fill('threadpool'));
  });

  it('whenAFlushOnTheCallingThreadTakesAsLongAsOneInTheThreadpool_anIdleLoopStillBlocks', async () => {
    const loop = new FakeLoop();
    const s = setup(null, loop);
    // Flushes of 0.8 ms in the threadpool against 1 ms on the calling thread: the share the loop
    // may be busy is taken at its least, 15 %, not below it.
    const where: string[] = [];
    for (let i = 0; i < 8 * LOOK_AGAIN_EVERY; i++) where.push(await timedBatch(s, loop, 0, 0.8));
    expect(where.slice(-4 * LOOK_AGAIN_EVERY).filter((w) => w === 'calling thread').length).toBeGreaterThanOrEqual(3 * LOOK_AGAIN_EVERY);
  });

  it('aConsumerBehindTheProducersSendsTheNextBatchSyncOfItsSegmentToTheThreadpool_notAnotherFilesSync', async () => {
    const loop = new FakeLoop();
    const s = setup(null, loop);
    await untilOnThread(s);
    s.durability.noteConsumerBehind(3);
    expect(await s.batch(7, true), 'the cursor file, say').toBe('calling thread');
    expect(await s.batch(3, true), 'the segment the note named').toBe('threadpool');
    expect(await s.batch(3, true), 'once per note').toBe('calling thread');
  });

  it('onlyBatchSyncsThatCouldHaveBlockedReadTheLoop_notTheBackgroundFlush', async () => {
    const loop = new FakeLoop();
    const s = setup(null, loop);
    await untilOnThread(s);
    // Background flushes under `none`, in the threadpool over a busy loop, say nothing of what a
    // batch's flush costs it: batches go on blocking.
    for (let i = 1; i <= 20; i++) {
      s.durability.afterUnsyncedWrite(5, i * 8 * 1024 * 1024);
      await nextTurn();
      loop.active += 10;
      s.settle();
      await nextTurn();
    }
    expect(await s.batch(3, true)).toBe('calling thread');
  });

  it('aFlushInTheThreadpoolOverABusyLoopIsNotTimed_itsCompletionWaitedForItsTurn', async () => {
    const loop = new FakeLoop();
    const s = setup(null, loop);
    // Flushes over a loop busy 40 % that take 20 ms to come back would put the threadpool's
    // round trip at 19/20 of a flush if they were timed; untimed, the share stays at its starting
    // figure's 1/2, and a loop busy 60 % keeps its batches in the threadpool.
    for (let i = 0; i < 3 * LOOK_AGAIN_EVERY; i++) await timedBatch(s, loop, 0.4, 20);
    const busier: string[] = [];
    for (let i = 0; i < 6 * LOOK_AGAIN_EVERY; i++) busier.push(await timedBatch(s, loop, 0.6, 20));
    expect(busier.slice(-2 * LOOK_AGAIN_EVERY)).toEqual(Array(2 * LOOK_AGAIN_EVERY).fill('threadpool'));
  });

  it('twoQuietReadingsDoNotMakeABusyLoopLookIdle_theAverageStartsBusy', async () => {
    const loop = new FakeLoop();
    const s = setup(null, loop);
    expect(await s.batch(3, true)).toBe('threadpool');
    expect(await s.batch(3, true)).toBe('threadpool');
    for (let i = 0; i < 3 * LOOK_AGAIN_EVERY; i++) expect(await s.batch(3, false)).toBe('threadpool');
    expect(s.calls.onThread).toEqual([]);
  });

  it('aBusyLoopKeepsBatchSyncsInTheThreadpool', async () => {
    const loop = new FakeLoop();
    const s = setup(null, loop);
    for (let i = 0; i < 100; i++) expect(await s.batch(3, false)).toBe('threadpool');
    expect(s.calls.onThread).toEqual([]);
    await s.durability.syncFd(3, true, true);
    expect(s.calls.onThread, 'a sync of one operation still runs on the calling thread').toEqual([3]);
  });

  it('aLoopThatGetsBusyIsSeenByTheSyncsStillSentToTheThreadpool_andBatchesGoBackThere', async () => {
    const loop = new FakeLoop();
    const s = setup(null, loop);
    await untilOnThread(s);
    for (let i = 0; i < 100; i++) await s.batch(3, true);
    // Busy from now on: only the syncs still sent to the threadpool see it.
    const where: string[] = [];
    for (let i = 0; i < 8 * LOOK_AGAIN_EVERY; i++) where.push(await s.batch(3, false));
    const firstOfTheRest = where.length - 2 * LOOK_AGAIN_EVERY;
    expect(where.slice(firstOfTheRest).every((w) => w === 'threadpool')).toBe(true);
    expect(where.slice(0, firstOfTheRest)).toContain('calling thread');
  });

  /** Two batch syncs of fd 3 in one turn: the first blocks, the second waits for the next turn while the loop does `gapMs` of other work. */
  async function twoInATurn(s: ReturnType<typeof setup>, loop: FakeLoop, gapMs: number): Promise<string[]> {
    const before = { onThread: s.calls.onThread.length, threadpool: s.calls.threadpool.length };
    const first = s.durability.syncFd(3, true);
    const second = s.durability.syncFd(3, true);
    loop.time += gapMs;
    if (s.calls.threadpool.length > before.threadpool) {
      loop.active += 10;
      s.settle();
    }
    await first;
    await nextTurn();
    if (s.calls.threadpool.length > before.threadpool) {
      loop.active += 10;
      s.settle();
    }
    await second;
    await nextTurn();
    return [
      ...s.calls.onThread.slice(before.onThread).map(() => 'calling thread'),
      ...s.calls.threadpool.slice(before.threadpool).map(() => 'threadpool'),
    ];
  }

  it('whileBatchSyncsWaitForTheNextTurn_theTurnBetweenIsTheLookAtTheLoop_soNoneGoesToTheThreadpoolToLook', async () => {
    const loop = new FakeLoop();
    const s = setup(null, loop);
    await untilOnThread(s);
    const pooled = s.calls.threadpool.length;
    // A quiet turn: 0.02 ms of other work against a 1 ms flush.
    for (let i = 0; i < 4 * LOOK_AGAIN_EVERY; i++) expect(await twoInATurn(s, loop, 0.02)).toEqual(['calling thread', 'calling thread']);
    expect(s.calls.threadpool.length - pooled, 'no look in the threadpool while the turns were measured').toBe(0);
  });

  it('withSeveralBatchesPutOffToOneTurn_onlyTheFirstReadsIt_theStallsOfTheOthersAreNotTheLoopsWork', async () => {
    const loop = new FakeLoop();
    const s = setup(null, loop);
    await untilOnThread(s);
    const pooled = s.calls.threadpool.length;
    for (let round = 0; round < 4 * LOOK_AGAIN_EVERY; round++) {
      // Four batches in one turn: the first blocks, the others block one per turn after it.
      const syncs = Array.from({ length: 4 }, () => s.durability.syncFd(3, true));
      for (let turn = 0; turn < 5; turn++) {
        loop.time += 0.02;
        await nextTurn();
        // A batch sent to the threadpool finishes over an idle loop.
        loop.idle += 10;
        s.settle();
      }
      await Promise.all(syncs);
      await nextTurn();
    }
    expect(s.calls.threadpool.length - pooled, 'an idle loop read as idle').toBe(0);
  });

  it('aLoopThatGetsBusyBetweenBatchSyncsOnTheCallingThreadIsSeenInTheTurnsBetween_andBatchesGoBackToTheThreadpool', async () => {
    const loop = new FakeLoop();
    const s = setup(null, loop);
    await untilOnThread(s);
    // 10 ms of other work in each turn against a 1 ms flush: the loop is busy.
    let rounds = 0;
    while (!(await twoInATurn(s, loop, 10)).includes('threadpool')) {
      rounds++;
      expect(rounds, 'batches go back to the threadpool before any would go there to look').toBeLessThan(LOOK_AGAIN_EVERY / 2 - 1);
    }
    // Busy in the threadpool too: every batch stays there.
    for (let i = 0; i < 2 * LOOK_AGAIN_EVERY; i++) expect(await s.batch(3, false)).toBe('threadpool');
  });

  it('neverOnTheCallingThreadBesideARunningSyncOfTheSameFile', async () => {
    const loop = new FakeLoop();
    const s = setup(null, loop);
    await untilOnThread(s);
    // Batches on the calling thread until one goes to the threadpool: left in flight.
    let inFlight: Promise<void> | null = null;
    for (let i = 0; i <= LOOK_AGAIN_EVERY && inFlight === null; i++) {
      const before = s.calls.threadpool.length;
      const sync = s.durability.syncFd(3, true);
      if (s.calls.threadpool.length > before) inFlight = sync;
      else await sync;
      await nextTurn();
    }
    expect(inFlight).not.toBeNull();
    const onThread = s.calls.onThread.length;
    const pooled = s.calls.threadpool.length;
    const same = s.durability.syncFd(3, true);
    const single = s.durability.syncFd(3, true, true);
    expect(s.calls.threadpool.slice(pooled), 'beside the running sync of fd 3').toEqual([3, 3]);
    await s.durability.syncFd(4, true);
    expect(s.calls.onThread.slice(onThread), 'another file is free').toEqual([4]);
    loop.idle += 10;
    s.settle();
    await Promise.all([inFlight, same, single]);
  });

  it('atMostOneBatchSyncOnTheCallingThreadPerTurn_theNextRunsInTheNextTurn_itsFileStaysOpenMeanwhile', async () => {
    const loop = new FakeLoop();
    const s = setup(null, loop);
    await untilOnThread(s);
    const onThread = s.calls.onThread.length;
    const first = s.durability.syncFd(3, true);
    const second = s.durability.syncFd(4, true);
    s.durability.closeWhenIdle(4);
    expect(s.calls.onThread.slice(onThread)).toEqual([3]);
    expect(s.calls.closed, 'fd 4 waits for its sync').toEqual([]);
    await first;
    await nextTurn();
    expect(s.calls.onThread.slice(onThread)).toEqual([3, 4]);
    await second;
    expect(s.calls.closed).toEqual([4]);
  });

  it('aBatchSyncWaitingForTheNextTurnJoinsASyncOfItsFileThatStartedMeanwhileInTheThreadpool', async () => {
    const loop = new FakeLoop();
    const s = setup(null, loop);
    await untilOnThread(s);
    // Count the batches since the last one sent to the threadpool, to place the next one.
    let sinceLook = 0;
    for (let i = 0; i < 2 * LOOK_AGAIN_EVERY; i++) sinceLook = (await s.batch(3, true)) === 'threadpool' ? 0 : sinceLook + 1;
    while (sinceLook < LOOK_AGAIN_EVERY - 3) sinceLook = (await s.batch(3, true)) === 'threadpool' ? 0 : sinceLook + 1;
    const onThread = s.calls.onThread.length;
    const pooled = s.calls.threadpool.length;
    const blocked = s.durability.syncFd(3, true); // on the calling thread
    const waiting = s.durability.syncFd(4, true); // the second in this turn: waits for the next
    const looking = s.durability.syncFd(4, true); // sent to the threadpool to look at the loop
    expect(s.calls.onThread.slice(onThread)).toEqual([3]);
    expect(s.calls.threadpool.slice(pooled)).toEqual([4]);
    await blocked;
    await nextTurn();
    expect(s.calls.onThread.slice(onThread), 'not beside the running sync of fd 4').toEqual([3]);
    expect(s.calls.threadpool.slice(pooled)).toEqual([4, 4]);
    loop.idle += 10;
    s.settle();
    await Promise.all([waiting, looking]);
  });

  it('theBackgroundFlushUnderNoneStaysInTheThreadpool_howeverQuietTheLoopWas', async () => {
    const loop = new FakeLoop();
    const s = setup(null, loop);
    await untilOnThread(s);
    const onThread = s.calls.onThread.length;
    const pooled = s.calls.threadpool.length;
    s.durability.afterUnsyncedWrite(5, 8 * 1024 * 1024);
    expect(s.calls.threadpool.slice(pooled)).toEqual([5]);
    expect(s.calls.onThread).toHaveLength(onThread);
    s.settle();
  });

  it('withoutALoopMeter_orWithOneThatReportsNoTime_batchSyncsStayInTheThreadpool', async () => {
    const none = setup(null);
    for (let i = 0; i < 50; i++) expect(await none.batch(3, true)).toBe('threadpool');
    const stub = setup(() => ({ idle: 0, active: 0, utilization: 0 }));
    for (let i = 0; i < 50; i++) expect(await stub.batch(3, true)).toBe('threadpool');
  });

  it('aFailedSyncOnTheCallingThreadFailsTheInstance', async () => {
    const loop = new FakeLoop();
    const s = setup(null, loop);
    await untilOnThread(s);
    (s.fs as { fdatasyncSync: (fd: number) => void }).fdatasyncSync = () => {
      throw Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO' });
    };
    await expect(s.durability.syncFd(3, true)).rejects.toMatchObject({ code: 'EIO' });
    expect(s.durability.failure?.code).toBe('ERR_STORE_FAILED');
  });
});
