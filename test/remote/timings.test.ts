/**
 * The owner's timings (src/remote/timings.ts): push-to-hand-out and hand-out-to-ack latencies,
 * measured from the queue's diagnostics channels only while someone asks, and served through the
 * endpoint's TIMINGS request. Durations are measured on an injected clock, so nothing here sleeps
 * or asserts a real time.
 */
import diagnosticsChannel from 'node:diagnostics_channel';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, test } from 'vitest';
import { channels } from '../../src/lib/diagnostics.js';
import { LogStore } from '../../src/stores/log/log-store.js';
import { MemStore } from '../../src/stores/mem/mem-store.js';
import { Builder } from '../../src/core/builder.js';
import { EndpointClient } from '../../src/remote/client.js';
import { REQ_TIMINGS, decodeRequest, encodeBare, FRAME_HEADER_BYTES } from '../../src/remote/protocol.js';
import {
  SAMPLES_PER_SECOND_MAX,
  TIMING_WINDOW_SECONDS,
  TRACKED_ITEMS_MAX,
  TimingCollector,
  WATCH_IDLE_MS,
  binOf,
  binUpperMs,
  type TimingClock,
} from '../../src/remote/timings.js';

const dirs: string[] = [];
const collectors: TimingCollector[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  // A test that failed half-way leaves no subscriber behind for the next one.
  for (const c of collectors.splice(0)) c.stop();
});

function collect(queueId: () => number, clock: TimingClock): TimingCollector {
  const c = new TimingCollector(queueId, clock);
  collectors.push(c);
  return c;
}

/** A clock the test moves: wall and monotonic time advance together. */
function manualClock(startWall = 1_700_000_000_000): TimingClock & { advance(ms: number): void } {
  let offset = 0;
  return { wall: () => startWall + offset, mono: () => offset, advance: (ms) => void (offset += ms) };
}

const watched = (): boolean[] =>
  [channels.push, channels.deliver, channels.ack, channels.nack, channels.deadLetter].map((c) => diagnosticsChannel.hasSubscribers(c));

describe('the collector', () => {
  test('aCollectorNobodyAskedSubscribesToNothing', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    const collector = collect(() => rx.stats().queueId, manualClock());
    await tx.push('a');
    await rx.tryReserve()!.ack();
    expect(collector.watching).toBe(false);
    expect(watched()).toEqual([false, false, false, false, false]);
    collector.read();
    expect(watched()).toEqual([true, true, true, true, true]);
    collector.stop();
    expect(watched()).toEqual([false, false, false, false, false]);
    await tx.close();
  });

  test('aCollectorStopsWatchingOnceNobodyAskedForItsIdleTime', () => {
    const clock = manualClock();
    const collector = collect(() => 1, clock);
    collector.read();
    clock.advance(WATCH_IDLE_MS - 1);
    collector.sweep();
    expect(collector.watching).toBe(true);
    collector.read();
    clock.advance(WATCH_IDLE_MS - 1);
    collector.sweep();
    expect(collector.watching).toBe(true);
    clock.advance(1);
    collector.sweep();
    expect(collector.watching).toBe(false);
    expect(watched()).toEqual([false, false, false, false, false]);
  });

  test('pushToHandOutAndHandOutToAckAreMeasuredPerSecond', async () => {
    const clock = manualClock();
    const [tx, rx] = await new Builder(new MemStore()).open();
    const collector = collect(() => rx.stats().queueId, clock);
    expect(collector.read().buckets).toEqual([]);
    await tx.pushMany(['a', 'b', 'c']);
    clock.advance(10);
    const items = [rx.tryReserve()!, rx.tryReserve()!, rx.tryReserve()!];
    clock.advance(5);
    await items[0]!.ack();
    await items[1]!.ack();
    clock.advance(20);
    await items[2]!.ack();
    const { buckets } = collector.read();
    expect(buckets).toHaveLength(1);
    const [bucket] = buckets;
    expect(bucket!.handout).toMatchObject({ count: 3, max: 10 });
    // A percentile is the upper bound of its histogram bin: within a factor of √2 above the value.
    expect(bucket!.handout!.p50).toBeGreaterThanOrEqual(10);
    expect(bucket!.handout!.p50).toBeLessThanOrEqual(10 * Math.SQRT2);
    expect(bucket!.ack).toMatchObject({ count: 3, max: 25 });
    expect(bucket!.ack!.p50).toBeGreaterThanOrEqual(5);
    expect(bucket!.ack!.p50).toBeLessThanOrEqual(5 * Math.SQRT2);
    expect(bucket!.ack!.p99).toBe(25);
    collector.stop();
    await tx.close();
  });

  test('itemsPushedOrHandedOutBeforeTheWatchAreNotTimed', async () => {
    const clock = manualClock();
    const [tx, rx] = await new Builder(new MemStore()).open();
    const collector = collect(() => rx.stats().queueId, clock);
    await tx.pushMany(['early', 'held']);
    const held = rx.tryReserve()!;
    collector.read();
    const early = rx.tryReserve()!;
    await held.ack();
    await early.ack();
    // `early` was handed out while watched but pushed before: its ack is timed, its hand-out is not.
    const [bucket] = collector.read().buckets;
    expect(bucket!.handout).toBeNull();
    expect(bucket!.ack!.count).toBe(1);
    collector.stop();
    await tx.close();
  });

  test('aRedeliveryIsNotAHandOutAndANackEndsTheAckTiming', async () => {
    const clock = manualClock();
    const [tx, rx] = await new Builder(new MemStore()).open();
    const collector = collect(() => rx.stats().queueId, clock);
    collector.read();
    await tx.push('x');
    const first = rx.tryReserve()!;
    clock.advance(50);
    await first.nack();
    const second = rx.tryReserve()!;
    clock.advance(100);
    await second.ack();
    const [bucket] = collector.read().buckets;
    expect(bucket!.handout!.count).toBe(1);
    // Timed from the second hand-out: the nack ended the first one's timing.
    expect(bucket!.ack).toMatchObject({ count: 1, max: 100 });
    collector.stop();
    await tx.close();
  });

  test('anotherQueueOfTheProcessIsNotCounted', async () => {
    const clock = manualClock();
    const [tx, rx] = await new Builder(new MemStore()).open();
    const [otherTx, otherRx] = await new Builder(new MemStore()).open();
    const collector = collect(() => rx.stats().queueId, clock);
    collector.read();
    await otherTx.pushMany(['o1', 'o2']);
    for (let item = otherRx.tryReserve(); item !== null; item = otherRx.tryReserve()) await item.ack();
    expect(collector.read().buckets).toEqual([]);
    await tx.push('mine');
    await rx.tryReserve()!.ack();
    expect(collector.read().buckets[0]!.handout!.count).toBe(1);
    collector.stop();
    await tx.close();
    await otherTx.close();
  });

  test('onlyTheLastWindowOfSecondsIsKept', async () => {
    const clock = manualClock();
    const [tx, rx] = await new Builder(new MemStore()).open();
    const collector = collect(() => rx.stats().queueId, clock);
    collector.read();
    for (let i = 0; i < 3; i++) {
      await tx.push(`s${i}`);
      await rx.tryReserve()!.ack();
      clock.advance((TIMING_WINDOW_SECONDS / 2 - 10) * 1000);
      collector.read(); // keeps the watch alive past its idle time
    }
    const { buckets } = collector.read();
    const now = clock.wall();
    expect(buckets.length).toBe(2);
    for (const b of buckets) expect(now - b.at).toBeLessThan(TIMING_WINDOW_SECONDS * 1000);
    collector.stop();
    await tx.close();
  });

  test('atMostABudgetOfItemsIsTimedEachSecond', async () => {
    const clock = manualClock();
    const [tx, rx] = await new Builder(new MemStore()).open();
    const collector = collect(() => rx.stats().queueId, clock);
    collector.read();
    await tx.pushMany(Array.from({ length: SAMPLES_PER_SECOND_MAX * 3 }, () => new Uint8Array(1)));
    for (let item = rx.tryReserve(); item !== null; item = rx.tryReserve()) await item.ack();
    clock.advance(1000);
    await tx.pushMany(['a', 'b', 'c']);
    for (let item = rx.tryReserve(); item !== null; item = rx.tryReserve()) await item.ack();
    const counts = collector.read().buckets.map((b) => [b.handout?.count, b.ack?.count]);
    expect(counts).toEqual([
      [SAMPLES_PER_SECOND_MAX, SAMPLES_PER_SECOND_MAX],
      [3, 3],
    ]);
    await tx.close();
  });

  test('theItemsAwaitingTheirTimingAreBounded', async () => {
    const clock = manualClock();
    const [tx, rx] = await new Builder(new MemStore()).open();
    const collector = collect(() => rx.stats().queueId, clock);
    // A backlog growing for longer than the timed items can be held: the oldest pushes are forgotten.
    const seconds = Math.ceil(TRACKED_ITEMS_MAX / SAMPLES_PER_SECOND_MAX) + 10;
    for (let s = 0; s < seconds; s++) {
      collector.read();
      await tx.pushMany(Array.from({ length: SAMPLES_PER_SECOND_MAX }, () => new Uint8Array(1)));
      clock.advance(1000);
    }
    let firstTimed = 0;
    for (let item = rx.tryReserve(), n = 1; item !== null; item = rx.tryReserve(), n++) {
      void item.ack();
      if (firstTimed === 0 && (collector.read().buckets.at(-1)?.handout?.count ?? 0) > 0) firstTimed = n;
    }
    expect(firstTimed).toBe(seconds * SAMPLES_PER_SECOND_MAX - TRACKED_ITEMS_MAX + 1);
    expect(collector.read().buckets.at(-1)!.handout!.count).toBe(TRACKED_ITEMS_MAX);
    await tx.close();
  });

  test('aDurationFallsInABinWhoseUpperBoundIsWithinRootTwoAboveIt', () => {
    for (let ms = 0.001; ms < 1e6; ms *= 1.07) {
      const upper = binUpperMs(binOf(ms));
      expect(upper, `${ms} ms`).toBeGreaterThanOrEqual(ms);
      expect(upper, `${ms} ms`).toBeLessThanOrEqual(ms * Math.SQRT2 * 1.000001);
    }
    expect(binOf(0)).toBe(0);
    expect(binOf(-1)).toBe(0);
    expect(binOf(Number.NaN)).toBe(0);
  });
});

describe('through the endpoint', () => {
  test('aTimingsRequestIsAFrameWithoutABody', () => {
    const frame = encodeBare(REQ_TIMINGS, 7);
    expect(frame.length).toBe(FRAME_HEADER_BYTES);
    expect(decodeRequest({ type: REQ_TIMINGS, id: 7, body: frame.subarray(FRAME_HEADER_BYTES), owned: true })).toEqual({
      type: 'timings',
      id: 7,
    });
  });

  test('theOwnerAnswersTimingsAndStartsWatchingOnlyWhenAsked', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'pq-timings-'));
    dirs.push(dir);
    const [tx, rx] = await new Builder(await LogStore.open(dir)).open();
    const reached = await EndpointClient.reach(dir);
    if (!('client' in reached)) throw new Error(reached.absent);
    const client = reached.client;
    try {
      // Serving and answering stats does not watch.
      await client.stats();
      expect(watched()).toEqual([false, false, false, false, false]);
      const first = await client.timings();
      expect(first.buckets).toEqual([]);
      expect(typeof first.since).toBe('number');
      expect(watched()).toEqual([true, true, true, true, true]);
      await tx.pushMany(['a', 'b']);
      for (let item = rx.tryReserve(); item !== null; item = rx.tryReserve()) await item.ack();
      const later = await client.timings();
      const handouts = later.buckets.reduce((n, b) => n + (b.handout?.count ?? 0), 0);
      const acks = later.buckets.reduce((n, b) => n + (b.ack?.count ?? 0), 0);
      expect({ handouts, acks }).toEqual({ handouts: 2, acks: 2 });
    } finally {
      await client.close();
      await tx.close();
    }
    // Closing the queue stops the endpoint, and its watch with it.
    expect(watched()).toEqual([false, false, false, false, false]);
  });
});
