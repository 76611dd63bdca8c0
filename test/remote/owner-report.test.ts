/**
 * What the owner reports of its groups and schedules through the endpoint (FORMAT.md §15.2, GROUPS
 * and SCHEDULES): the busiest groups, bounded whatever their number; schedules a page at a time;
 * and bad input refused with a typed error that changes nothing.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { connect as netConnect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, test } from 'vitest';
import { LogStore } from '../../src/stores/log/log-store.js';
import { Builder, type Consumer, type Producer } from '../../src/core/builder.js';
import { EndpointClient } from '../../src/remote/client.js';
import { connect } from '../../src/remote/connect.js';
import {
  FRAME_OVERHEAD_BYTES,
  GROUPS_LIMIT_MAX,
  REQ_GROUPS,
  SCHEDULES_LIMIT_MAX,
  encodeGroups,
  encodeHello,
  encodeSchedules,
  newFrame,
} from '../../src/remote/protocol.js';
import { EndpointServer } from '../../src/remote/server.js';
import type { OwnerSurface } from '../../src/contract/owner-surface.js';
import { MAX_GROUP_BYTES, MAX_SCHEDULE_NAME_BYTES } from '../../src/contract/store.js';
import { ManualClock } from '../../src/testing/index.js';

const dirs: string[] = [];
const closers: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function freshDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'pq-report-'));
  dirs.push(d);
  return d;
}

async function owner(
  setup: (b: Builder) => Builder = (b) => b,
  maxItemBytes = 64,
): Promise<{ dir: string; tx: Producer; rx: Consumer; client: EndpointClient }> {
  const dir = freshDir();
  const [tx, rx] = await setup(new Builder(await LogStore.open(dir, { maxItemBytes })).durability('none')).open();
  closers.push(() => rx.close());
  const reached = await EndpointClient.reach(dir);
  if (!('client' in reached)) throw new Error(reached.absent);
  closers.push(() => reached.client.close());
  return { dir, tx, rx, client: reached.client };
}

/** A group name of `MAX_GROUP_BYTES` control characters, which JSON writes six bytes each: the longest answer a group can make. */
function longName(n: number): string {
  let name = '';
  for (let i = 0; i < MAX_GROUP_BYTES; i++) {
    name += String.fromCharCode(1 + (n % 31));
    n = Math.floor(n / 31);
  }
  return name;
}

describe('the owner reports its groups', () => {
  test('theBusiestGroupsAreListedAndTheAnswerStaysBoundedWithManyGroups', async () => {
    // The smallest frames a queue can have: its maxItemBytes of 64 leaves the overhead alone.
    const o = await owner();
    await o.tx.pushMany(['w1', 'w2', 'w3'], { group: 'warm' });
    for (let i = 0; i < 3; i++) expect(o.rx.tryReserve()).not.toBeNull();
    const many = 5000;
    await o.tx.pushMany(['h1', 'h2', 'h3', 'h4', 'h5'], { group: 'hot' });
    for (let i = 0; i < many; i++) await o.tx.push(`g${i}`, { group: longName(i) });
    // One item of each group at a time: hot's other four wait aside.
    let taken = 0;
    while (o.rx.tryReserve({ groupConcurrency: 1 }) !== null) taken++;
    expect(taken).toBe(many + 1);

    const stats = await o.client.stats();
    expect(stats.groups).toEqual({ busy: many + 2, waiting: 1 });
    const report = await o.client.groups(GROUPS_LIMIT_MAX);
    expect(report.total).toBe(many + 2);
    expect(report.groups).toHaveLength(GROUPS_LIMIT_MAX);
    expect(report.groups.slice(0, 2)).toEqual([
      { group: 'hot', inFlight: 1, groupLimited: 4, rateLimited: 0, rateWaitMs: 0 },
      { group: 'warm', inFlight: 3, groupLimited: 0, rateLimited: 0, rateWaitMs: 0 },
    ]);
    // Ties by name: the first names in JavaScript's order among the 5,000 of one item each.
    const names = Array.from({ length: many }, (_, i) => longName(i)).sort();
    expect(report.groups.slice(2).map((g) => g.group)).toEqual(names.slice(0, GROUPS_LIMIT_MAX - 2));
    expect([report.inFlight, report.groupLimited, report.rateLimited, report.rateLimit, report.queueRateWaitMs]).toEqual([
      many + 4,
      4,
      0,
      null,
      null,
    ]);
    // The answer is bounded by the limit: it fits the frame overhead whatever the queue's maxItemBytes.
    expect(Buffer.byteLength(JSON.stringify(report))).toBeLessThan(FRAME_OVERHEAD_BYTES);
    expect((await o.client.groups(1)).groups.map((g) => g.group)).toEqual(['hot']);
  });

  test('aGroupThatLeftIsNoLongerReported', async () => {
    const o = await owner();
    await o.tx.pushMany(['a', 'b'], { group: 'tenant' });
    const first = o.rx.tryReserve({ groupConcurrency: 1 })!;
    expect(o.rx.tryReserve({ groupConcurrency: 1 })).toBeNull();
    expect((await o.client.groups(10)).groups).toEqual([{ group: 'tenant', inFlight: 1, groupLimited: 1, rateLimited: 0, rateWaitMs: 0 }]);
    await first.ack();
    const second = (await o.rx.reserve({ groupConcurrency: 1 }))!;
    expect((await o.client.groups(10)).groups).toEqual([{ group: 'tenant', inFlight: 1, groupLimited: 0, rateLimited: 0, rateWaitMs: 0 }]);
    await second.ack();
    expect(await o.client.groups(10)).toMatchObject({ total: 0, groups: [], inFlight: 0 });
    expect((await o.client.stats()).groups).toEqual({ busy: 0, waiting: 0 });
  });

  test('aGroupWaitingForItsRateWindowIsReportedWithItsWait', async () => {
    const clock = new ManualClock();
    const o = await owner((b) => b.clock(clock).rateLimit({ max: 1, perMs: 1000, by: 'group' }));
    await o.tx.pushMany(['1', '2', '3'], { group: 'api' });
    const item = o.rx.tryReserve()!;
    expect(o.rx.tryReserve()).toBeNull();
    expect((await o.client.groups(10)).groups).toEqual([{ group: 'api', inFlight: 1, groupLimited: 0, rateLimited: 2, rateWaitMs: 1000 }]);
    // Settled, its window still shut: the group is reported for the items that wait for it.
    await item.ack();
    clock.advance(400);
    const report = await o.client.groups(10);
    expect(report.groups).toEqual([{ group: 'api', inFlight: 0, groupLimited: 0, rateLimited: 2, rateWaitMs: 600 }]);
    expect([report.total, report.rateLimited, report.rateLimit]).toEqual([1, 2, { max: 1, perMs: 1000, by: 'group' }]);
  });

  test('underALimitForTheQueueTheReportSaysWhenItsWindowOpens', async () => {
    const clock = new ManualClock();
    const o = await owner((b) => b.clock(clock).rateLimit({ max: 1, perMs: 500 }));
    await o.tx.pushMany(['1', '2'], { group: 'g' });
    expect(o.rx.tryReserve()).not.toBeNull();
    expect(o.rx.tryReserve()).toBeNull();
    const report = await o.client.groups(10);
    expect([report.queueRateWaitMs, report.groups]).toEqual([
      500,
      [{ group: 'g', inFlight: 1, groupLimited: 0, rateLimited: 0, rateWaitMs: 0 }],
    ]);
  });
});

describe('the owner reports its schedules', () => {
  test('pagesOfSchedulesByNameCoverEveryScheduleOnce', async () => {
    const o = await owner();
    const total = 250;
    for (let i = 0; i < total; i++) await o.tx.schedule(`s${String(i).padStart(3, '0')}`, { everyMs: 60_000 * (1 + (i % 5)) }, `tick ${i}`);
    expect((await o.client.stats()).schedules).toEqual({ count: total });
    const listed = o.tx.schedules();
    const seen: unknown[] = [];
    let after = '';
    for (let pages = 0; ; pages++) {
      expect(pages).toBeLessThan(10);
      const page = await o.client.schedules(after, SCHEDULES_LIMIT_MAX);
      expect(page.total).toBe(total);
      seen.push(...page.schedules);
      if (!page.more) break;
      after = page.schedules.at(-1)!.name;
    }
    expect(seen).toEqual(listed);
    expect((await o.client.schedules('s248', 5)).schedules.map((s) => s.name)).toEqual(['s249']);
    expect(await o.client.schedules('t', 5)).toEqual({ total, schedules: [], more: false });
  });

  test('aPageOfLongNamesIsCutToOneFrameAndGoesOnWhereItStopped', async () => {
    // 100 schedules of the longest names that JSON writes longest: more than a frame of a queue of small items holds.
    const o = await owner();
    const name = (i: number): string => `${String(i).padStart(3, '0')}${'\u0001'.repeat(MAX_SCHEDULE_NAME_BYTES - 3)}`;
    for (let i = 0; i < SCHEDULES_LIMIT_MAX; i++) await o.tx.schedule(name(i), { everyMs: 3_600_000 }, 'x');
    const first = await o.client.schedules('', SCHEDULES_LIMIT_MAX);
    expect(first.more).toBe(true);
    expect(first.schedules.length).toBeGreaterThan(0);
    expect(first.schedules.length).toBeLessThan(SCHEDULES_LIMIT_MAX);
    const names = first.schedules.map((s) => s.name);
    let after = names.at(-1)!;
    for (;;) {
      const page = await o.client.schedules(after, SCHEDULES_LIMIT_MAX);
      names.push(...page.schedules.map((s) => s.name));
      if (!page.more) break;
      after = page.schedules.at(-1)!.name;
    }
    expect(names).toEqual(Array.from({ length: SCHEDULES_LIMIT_MAX }, (_, i) => name(i)));
  });

  test('anOwnerWhoseStoreKeepsNoSchedulesAnswersErrUnsupported', async () => {
    const dir = freshDir();
    const surface = {
      dir,
      maxItemBytes: 64,
      stats: () => ({ groups: { busy: 0, waiting: 0 } }),
      groups: () => ({ total: 0, groups: [], inFlight: 0, groupLimited: 0, rateLimited: 0, rateLimit: null, queueRateWaitMs: null }),
      schedules: () => undefined,
      consuming: false,
    } as unknown as OwnerSurface;
    const server = await EndpointServer.start(dir, surface);
    closers.push(() => server.close());
    const reached = await EndpointClient.reach(dir);
    if (!('client' in reached)) throw new Error(reached.absent);
    closers.push(() => reached.client.close());
    await expect(reached.client.schedules('', 10)).rejects.toMatchObject({ code: 'ERR_UNSUPPORTED' });
    expect((await reached.client.groups(10)).total).toBe(0);
  });
});

describe('bad input to the reports', () => {
  /** A raw connection to the owner's socket; `closed` resolves when the owner cuts it. */
  function rawSocket(dir: string): Promise<{ socket: Socket; closed: Promise<void> }> {
    return new Promise((resolve, reject) => {
      const socket = netConnect({ path: join(dir, 'pq.sock') });
      const closed = new Promise<void>((r) => socket.on('close', () => r()));
      socket.once('connect', () => resolve({ socket, closed }));
      socket.once('error', reject);
    });
  }

  test('theClientRefusesABadLimitOrNameWithATypedErrorAndSendsNothing', async () => {
    const o = await owner();
    await o.tx.push('x', { group: 'g' });
    await o.tx.schedule('nightly', { everyMs: 86_400_000 }, 'report');
    const before = [await o.client.stats(), o.tx.schedules()];
    const cases: [() => Promise<unknown>, RangeErrorConstructor | TypeErrorConstructor][] = [
      [() => o.client.groups(0), RangeError],
      [() => o.client.groups(GROUPS_LIMIT_MAX + 1), RangeError],
      [() => o.client.groups(1.5), RangeError],
      [() => o.client.groups('5' as unknown as number), TypeError],
      [() => o.client.schedules('', 0), RangeError],
      [() => o.client.schedules('', SCHEDULES_LIMIT_MAX + 1), RangeError],
      [() => o.client.schedules(5 as unknown as string, 10), TypeError],
      [() => o.client.schedules('n'.repeat(MAX_SCHEDULE_NAME_BYTES + 1), 10), RangeError],
    ];
    for (const [call, type] of cases) await expect(call()).rejects.toBeInstanceOf(type);
    // Nothing was sent, nothing changed: the same connection answers as before.
    const after = [await o.client.stats(), o.tx.schedules()];
    expect(after[1]).toEqual(before[1]);
    expect((after[0] as Record<string, unknown>).pushed).toBe((before[0] as Record<string, unknown>).pushed);
    expect((await o.client.groups(5)).total).toBe(0);
  });

  test('aMalformedGroupsOrSchedulesFrameClosesOnlyItsConnectionAndChangesNothing', async () => {
    const o = await owner();
    await o.tx.schedule('nightly', { everyMs: 86_400_000 }, 'report');
    const producer = await connect(o.dir);
    closers.push(() => producer.close());
    expect(await producer.push('before')).toBe(1);
    const schedulesBefore = o.tx.schedules();
    const zeroLimit = encodeSchedules(2, new TextEncoder().encode('a'), 5);
    zeroLimit.fill(0, 9, 13);
    const notUtf8 = encodeSchedules(2, new Uint8Array([0xff]), 5);
    const attacks = [encodeGroups(2, 0), encodeGroups(2, GROUPS_LIMIT_MAX + 1), newFrame(REQ_GROUPS, 2, 9), zeroLimit, notUtf8];
    for (const attack of attacks) {
      const { socket, closed } = await rawSocket(o.dir);
      socket.write(encodeHello(1));
      socket.write(attack);
      await closed;
    }
    expect(await producer.push('after')).toBe(2);
    expect(o.tx.stats().pushed).toBe(2);
    expect(o.tx.schedules()).toEqual(schedulesBefore);
    expect((await o.client.schedules('', 10)).schedules.map((s) => s.name)).toEqual(['nightly']);
  });

  test('aReportNeverChangesTheQueue', async () => {
    const o = await owner();
    await o.tx.pushMany(['a', 'b', 'c'], { group: 'g' });
    const item = o.rx.tryReserve({ groupConcurrency: 1 })!;
    const before = o.tx.stats();
    await o.client.groups(GROUPS_LIMIT_MAX);
    await o.client.schedules('', SCHEDULES_LIMIT_MAX);
    expect(o.tx.stats()).toEqual(before);
    await item.ack();
    // The items set aside are still handed out, in order.
    const rest: string[] = [];
    for (let next = await o.rx.reserve({ groupConcurrency: 1 }); next !== null; next = o.rx.tryReserve({ groupConcurrency: 1 })) {
      rest.push(new TextDecoder().decode(next.bytes));
      await next.ack();
    }
    expect(rest).toEqual(['b', 'c']);
  });
});
