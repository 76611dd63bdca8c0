// Durable schedules through a queue: slots of { everyMs } and { cron, tz } on the queue's clock,
// each slot one ordinary item, the catch-up policies at open (none, the last, all bounded) across a
// downtime that spans a DST change, declaring a schedule again at each start, unschedule, a cron
// schedule in a process without cron-parser, and bad input at every entry point: a typed error,
// nothing stored.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Builder, type Consumer, LogStore, MemStore, type Producer, QueueError, json } from '../../src/index.js';
import type { StoreFeatures } from '../../src/contract/store.js';
import { ManualClock } from '../../src/testing/index.js';
import { distUrl, hideSource, runModule } from '../support/child-process.js';
import { cleanupDirs, freshDir } from '../stores/log/helpers.js';

afterAll(cleanupDirs);

const iso = (ms: number) => new Date(ms).toISOString();
const at = (text: string) => Date.parse(text);

/** Wait until every fire the clock set off is stored: each is a push, admitted when its slot fires. */
async function fired(tx: { stats(): { pendingPushes: number } }): Promise<void> {
  for (let turns = 0; tx.stats().pendingPushes > 0; turns++) {
    if (turns > 100_000) throw new Error('the fires were never stored');
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
}

/** The slots of the items ready now (acked as they are taken), as ISO times. */
async function slots(tx: Producer, rx: Consumer): Promise<string[]> {
  await fired(tx);
  const out: string[] = [];
  for (let item = rx.tryReserve(); item !== null; item = rx.tryReserve()) {
    out.push(iso(item.fired!.slot));
    await item.ack();
  }
  return out;
}

describe('every', () => {
  it('firesOneItemPerSlotOnTheMultiplesOfThePeriodFromTheFirstSlotAfterTheSchedule', async () => {
    const clock = new ManualClock(at('2026-01-01T00:00:00.250Z'));
    const [tx, rx] = await new Builder(new MemStore()).clock(clock).open();
    const info = await tx.schedule('tick', { everyMs: 1000 }, 'tick');
    expect(iso(info.nextAt!)).toBe('2026-01-01T00:00:01.000Z');
    clock.advance(3250);
    expect(await slots(tx, rx)).toEqual(['2026-01-01T00:00:01.000Z', '2026-01-01T00:00:02.000Z', '2026-01-01T00:00:03.000Z']);
    expect(tx.schedules()).toMatchObject([
      { name: 'tick', everyMs: 1000, catchUp: 'last', firedThrough: at('2026-01-01T00:00:03Z'), nextAt: at('2026-01-01T00:00:04Z') },
    ]);
    await tx.close();
  });

  it('itsItemsAreOrdinaryItemsWithThePriorityAndGroupAskedForAndRetriesAndDeadLettersApply', async () => {
    const clock = new ManualClock(at('2026-01-01T00:00:00Z'));
    const [tx, rx] = await new Builder(new MemStore()).clock(clock).maxDeliveries(2).retry({ kind: 'fixed', delayMs: 0 }).open();
    await tx.push('pushed before');
    await tx.schedule('report', { everyMs: 60_000 }, 'run the report', { priority: 5, group: 'reports' });
    clock.advance(60_000);
    await fired(tx);
    const first = rx.tryReserve()!;
    // Its priority puts it ahead of the item pushed before it.
    expect([new TextDecoder().decode(first.bytes), first.fired]).toEqual([
      'run the report',
      { name: 'report', slot: at('2026-01-01T00:01:00Z') },
    ]);
    await first.nack();
    const failing = new AbortController();
    const seen: string[] = [];
    await rx.process(
      (item) => {
        seen.push(new TextDecoder().decode(item.bytes));
        if (item.fired !== undefined) throw new Error('the report failed');
        failing.abort();
      },
      { signal: failing.signal, groupConcurrency: 1 },
    );
    expect(seen).toEqual(['run the report', 'pushed before']);
    const [letter] = await rx.deadLetters.list();
    expect(letter).toMatchObject({ deliveries: 2, reason: 'Error: the report failed' });
    // The schedule goes on: the next slot fires.
    clock.advance(60_000);
    expect(await slots(tx, rx)).toEqual(['2026-01-01T00:02:00.000Z']);
    await tx.close();
  });
});

describe('catch-up at open', () => {
  /** Schedule every second with `options`, let two slots fire, close for 5.5 s, reopen: the slots caught up. */
  async function downtime(options: { catchUp: 'none' | 'last' | 'all'; maxCatchUp?: number }): Promise<{ caught: string[]; next: string }> {
    const store = new MemStore();
    const clock = new ManualClock(at('2026-01-01T00:00:00Z'));
    let [tx, rx] = await new Builder(store).clock(clock).open();
    await tx.schedule('tick', { everyMs: 1000 }, 'tick', options);
    clock.advance(2000);
    expect(await slots(tx, rx)).toEqual(['2026-01-01T00:00:01.000Z', '2026-01-01T00:00:02.000Z']);
    await tx.close();
    clock.advance(5500);
    [tx, rx] = await new Builder(store).clock(clock).open();
    const caught = await slots(tx, rx);
    const next = iso(tx.schedules()[0]!.nextAt!);
    await tx.close();
    return { caught, next };
  }

  it('noneFiresNoSlotThatPassedWhileClosed', async () => {
    expect(await downtime({ catchUp: 'none' })).toEqual({ caught: [], next: '2026-01-01T00:00:08.000Z' });
  });

  it('lastFiresTheLatestSlotThatPassedWhileClosed', async () => {
    expect(await downtime({ catchUp: 'last' })).toEqual({ caught: ['2026-01-01T00:00:07.000Z'], next: '2026-01-01T00:00:08.000Z' });
  });

  it('allFiresEverySlotThatPassedWhileClosedInOrder', async () => {
    const caught = ['03', '04', '05', '06', '07'].map((s) => `2026-01-01T00:00:${s}.000Z`);
    expect(await downtime({ catchUp: 'all' })).toEqual({ caught, next: '2026-01-01T00:00:08.000Z' });
  });

  it('allIsBoundedByMaxCatchUpAndKeepsTheLatest', async () => {
    expect(await downtime({ catchUp: 'all', maxCatchUp: 2 })).toEqual({
      caught: ['2026-01-01T00:00:06.000Z', '2026-01-01T00:00:07.000Z'],
      next: '2026-01-01T00:00:08.000Z',
    });
  });
});

describe('cron across DST changes', () => {
  /** A cron schedule made at `from`, closed, reopened at `to`: the slots caught up, and the next one. */
  async function across(
    cron: string,
    catchUp: 'none' | 'last' | 'all',
    from: string,
    to: string,
  ): Promise<{ caught: string[]; next: string }> {
    const store = new MemStore();
    const clock = new ManualClock(at(from));
    let [tx, rx] = await new Builder(store).clock(clock).open();
    await tx.schedule('nightly', { cron, tz: 'Europe/Berlin' }, 'run', { catchUp });
    await tx.close();
    clock.set(at(to));
    [tx, rx] = await new Builder(store).clock(clock).open();
    const caught = await slots(tx, rx);
    const next = iso(tx.schedules()[0]!.nextAt!);
    await tx.close();
    return { caught, next };
  }

  // Berlin moves from UTC+1 to UTC+2 at 02:00 on 2026-03-29: 03:00 local is 02:00 UTC before, 01:00 UTC after.
  const spring = ['2026-03-28T02:00:00.000Z', '2026-03-29T01:00:00.000Z', '2026-03-30T01:00:00.000Z'];

  it('allFiresEachNightOfADowntimeThatSpansTheSpringChangeAtItsLocalTime', async () => {
    expect(await across('0 3 * * *', 'all', '2026-03-27T12:00:00Z', '2026-03-30T12:00:00Z')).toEqual({
      caught: spring,
      next: '2026-03-31T01:00:00.000Z',
    });
  });

  it('lastFiresOnlyTheLatestNightOfThatDowntime', async () => {
    expect(await across('0 3 * * *', 'last', '2026-03-27T12:00:00Z', '2026-03-30T12:00:00Z')).toEqual({
      caught: [spring[2]!],
      next: '2026-03-31T01:00:00.000Z',
    });
  });

  it('noneFiresNoNightOfThatDowntime', async () => {
    expect(await across('0 3 * * *', 'none', '2026-03-27T12:00:00Z', '2026-03-30T12:00:00Z')).toEqual({
      caught: [],
      next: '2026-03-31T01:00:00.000Z',
    });
  });

  it('aLocalTimeThatHappensTwiceWhenTheClocksGoBackFiresOnce', async () => {
    // 02:30 happens twice in Berlin on 2026-10-25 (CEST, then CET): one slot that day.
    expect(await across('30 2 * * *', 'all', '2026-10-24T12:00:00Z', '2026-10-26T12:00:00Z')).toEqual({
      caught: ['2026-10-25T00:30:00.000Z', '2026-10-26T01:30:00.000Z'],
      next: '2026-10-27T01:30:00.000Z',
    });
  });

  it('anHourlyScheduleFiresEveryHourOfTheNightTheClocksGoBack', async () => {
    const { caught } = await across('0 * * * *', 'all', '2026-10-24T23:30:00Z', '2026-10-25T03:30:00Z');
    expect(caught).toEqual([
      '2026-10-25T00:00:00.000Z',
      '2026-10-25T01:00:00.000Z',
      '2026-10-25T02:00:00.000Z',
      '2026-10-25T03:00:00.000Z',
    ]);
  });
});

describe('declaring and deleting', () => {
  it('declaringTheSameScheduleAgainAtEachStartChangesNothingAndChangingItFiresFromThenOn', async () => {
    const store = new MemStore();
    const clock = new ManualClock(at('2026-01-01T00:00:00Z'));
    const declare = (tx: Producer, everyMs = 1000) => tx.schedule('tick', { everyMs }, 'tick', { catchUp: 'all' });
    let [tx, rx] = await new Builder(store).clock(clock).open();
    await declare(tx);
    clock.advance(1000);
    expect(await slots(tx, rx)).toEqual(['2026-01-01T00:00:01.000Z']);
    await tx.close();
    clock.advance(2000);
    [tx, rx] = await new Builder(store).clock(clock).open();
    // At open, the catch-up; the declaration after it keeps the schedule's progress.
    const info = await declare(tx);
    expect([iso(info.firedThrough), iso(info.nextAt!)]).toEqual(['2026-01-01T00:00:03.000Z', '2026-01-01T00:00:04.000Z']);
    expect(await slots(tx, rx)).toEqual(['2026-01-01T00:00:02.000Z', '2026-01-01T00:00:03.000Z']);
    clock.advance(500);
    // Another period: the schedule is replaced and fires from now on, none of its slots before.
    const changed = await declare(tx, 400);
    expect(iso(changed.nextAt!)).toBe('2026-01-01T00:00:03.600Z');
    clock.advance(300);
    expect(await slots(tx, rx)).toEqual(['2026-01-01T00:00:03.600Z']);
    await tx.close();
  });

  it('unscheduleStopsTheFiresAndLeavesTheItemsFiredBefore', async () => {
    const clock = new ManualClock(at('2026-01-01T00:00:00Z'));
    const [tx, rx] = await new Builder(new MemStore()).clock(clock).open();
    await tx.schedule('tick', { everyMs: 1000 }, 'tick');
    clock.advance(1000);
    await fired(tx);
    expect(await tx.unschedule('tick')).toBe(true);
    expect(await tx.unschedule('tick')).toBe(false);
    expect(tx.schedules()).toEqual([]);
    clock.advance(5000);
    expect(await slots(tx, rx)).toEqual(['2026-01-01T00:00:01.000Z']);
    await tx.close();
  });

  it('aScheduleOverLogStoreSurvivesAReopenWithItsValueThroughTheCodec', async () => {
    const dir = freshDir();
    const clock = new ManualClock(at('2026-01-01T00:00:00Z'));
    const open = async () => new Builder(await LogStore.open(dir)).clock(clock).codec(json<{ job: string }>()).open();
    let [tx, rx] = await open();
    await tx.schedule('nightly', { cron: '0 3 * * *' }, { job: 'backup' }, { catchUp: 'all' });
    await tx.close();
    clock.set(at('2026-01-03T12:00:00Z'));
    [tx, rx] = await open();
    await fired(tx);
    const got: [unknown, string][] = [];
    for (let item = rx.tryReserve(); item !== null; item = rx.tryReserve()) {
      got.push([item.value, iso(item.fired!.slot)]);
      await item.ack();
    }
    expect(got).toEqual([
      [{ job: 'backup' }, '2026-01-01T03:00:00.000Z'],
      [{ job: 'backup' }, '2026-01-02T03:00:00.000Z'],
      [{ job: 'backup' }, '2026-01-03T03:00:00.000Z'],
    ]);
    expect(tx.schedules()).toMatchObject([{ name: 'nightly', cron: '0 3 * * *', tz: 'UTC', nextAt: at('2026-01-04T03:00:00Z') }]);
    await tx.close();
  });
});

describe('bad input', () => {
  it('everyBadArgumentOfScheduleIsATypedErrorAndStoresNothing', async () => {
    const store = new MemStore();
    const [tx] = await new Builder(store).open();
    const cases: [unknown[], typeof TypeError | typeof RangeError][] = [
      [['', { everyMs: 1 }, 'v'], RangeError],
      [['n'.repeat(129), { everyMs: 1 }, 'v'], RangeError],
      [[5, { everyMs: 1 }, 'v'], TypeError],
      [['s', undefined, 'v'], TypeError],
      [['s', {}, 'v'], TypeError],
      [['s', { everyMs: 0 }, 'v'], RangeError],
      [['s', { everyMs: 1.5 }, 'v'], RangeError],
      [['s', { everyMs: '1' }, 'v'], TypeError],
      [['s', { everyMs: 1, cron: '* * * * *' }, 'v'], TypeError],
      [['s', { every: 1 }, 'v'], TypeError],
      [['s', { cron: '' }, 'v'], RangeError],
      [['s', { cron: 5 }, 'v'], TypeError],
      [['s', { cron: '61 * * * *' }, 'v'], RangeError],
      [['s', { cron: 'every night' }, 'v'], RangeError],
      [['s', { cron: '* * * * *', tz: 'Mars/Olympus' }, 'v'], RangeError],
      [['s', { cron: '* * * * *', tz: 2 }, 'v'], TypeError],
      [['s', { everyMs: 1 }, 5], TypeError],
      [['s', { everyMs: 1 }, 'v', { catchUp: 'some' }], RangeError],
      [['s', { everyMs: 1 }, 'v', { catchUp: 1 }], TypeError],
      [['s', { everyMs: 1 }, 'v', { maxCatchUp: 0 }], RangeError],
      [['s', { everyMs: 1 }, 'v', { priority: 200 }], RangeError],
      [['s', { everyMs: 1 }, 'v', { group: '' }], RangeError],
      [['s', { everyMs: 1 }, 'v', { delayMs: 5 }], TypeError],
      [['s', { everyMs: 1 }, 'v', null], TypeError],
    ];
    for (const [args, type] of cases) {
      await expect((tx.schedule as (...a: unknown[]) => Promise<unknown>)(...args), JSON.stringify(args)).rejects.toThrow(type);
    }
    await expect(tx.unschedule('' as string)).rejects.toThrow(RangeError);
    await expect(tx.unschedule(7 as unknown as string)).rejects.toThrow(TypeError);
    expect(tx.schedules()).toEqual([]);
    await tx.close();
    expect((await store.open()).schedules).toEqual([]);
  });

  it('aScheduleOverAStoreWithoutSchedulesOrAClosedQueueIsRefusedAndStoresNothing', async () => {
    class NoSchedules extends MemStore {
      override readonly features: StoreFeatures = {
        reopen: true,
        crashSafe: false,
        deliveries: true,
        scheduling: true,
        idempotency: true,
        groups: true,
      };
    }
    const [tx] = await new Builder(new NoSchedules()).open();
    const code = (c: string) => (e: unknown) => e instanceof QueueError && e.code === c;
    await expect(tx.schedule('s', { everyMs: 1000 }, 'v')).rejects.toSatisfy(code('ERR_UNSUPPORTED'));
    await expect(tx.unschedule('s')).rejects.toSatisfy(code('ERR_UNSUPPORTED'));
    expect(tx.schedules()).toEqual([]);
    await tx.close();
    const [tx2] = await new Builder(new MemStore()).open();
    await tx2.close();
    await expect(tx2.schedule('s', { everyMs: 1000 }, 'v')).rejects.toSatisfy(code('ERR_CLOSED'));
  });

  it('aCronScheduleInAProcessWithoutCronParserIsRefusedNamingThePackageWhileEveryMsSchedulesRun', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'pq-cron-missing-'));
    try {
      // Stored with cron-parser here; the child has none.
      const store = join(dir, 'q');
      const clock = new ManualClock(at('2026-01-01T00:00:00Z'));
      const [tx] = await new Builder(await LogStore.open(store)).clock(clock).open();
      await tx.schedule('nightly', { cron: '0 3 * * *' }, 'n');
      await tx.close();
      writeFileSync(join(dir, 'hide.mjs'), hideSource(['cron-parser']));
      const child = runModule(
        dir,
        'child.mjs',
        `import { Builder, LogStore } from ${JSON.stringify(distUrl('index.js'))};
process.on('warning', (w) => { if (w.code === 'PQ_SCHEDULE') console.log(JSON.stringify({ warning: w.message })); });
const [tx] = await new Builder(await LogStore.open(process.argv[2])).open();
try { await tx.schedule('hourly', { cron: '0 * * * *' }, 'h'); } catch (e) { console.log(JSON.stringify({ code: e.code, message: e.message })); }
const every = await tx.schedule('tick', { everyMs: 60000 }, 't');
console.log(JSON.stringify({ listed: tx.schedules().map((s) => [s.name, s.nextAt === null, s.problem !== undefined]), every: every.nextAt > 0 }));
await tx.close();
console.log('done');
`,
        [store],
        ['--import', join(dir, 'hide.mjs')],
      );
      await child.until((lines) => lines.includes('done'));
      await child.kill();
      const out = child.lines.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Record<string, unknown>);
      expect(out.find((o) => 'code' in o)).toMatchObject({ code: 'ERR_UNSUPPORTED' });
      expect(String(out.find((o) => 'code' in o)!.message)).toContain('npm install cron-parser');
      expect(String(out.find((o) => 'warning' in o)?.warning)).toContain('nightly');
      expect(out.find((o) => 'listed' in o)).toEqual({
        listed: [
          ['nightly', true, true],
          ['tick', false, false],
        ],
        every: true,
      });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
