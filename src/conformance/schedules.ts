/**
 * The conformance tests of `features.schedules`: schedules stored, replaced and dropped, each
 * item's `fired` kept with it, and the progress the fires imply reported by `open`, through the
 * Store methods and through a queue. Registered by `runStoreConformance` (./suite.ts); a
 * store that does not declare the feature has them reported as skipped.
 */
import assert from 'node:assert/strict';
import { Builder } from '../core/builder.js';
import { MAX_SCHEDULE_NAME_BYTES, MAX_SCHEDULE_SPEC_BYTES, type Store, type StoredItem, type StoredSchedule } from '../contract/store.js';
import { ManualClock } from '../testing/manual-clock.js';
import { bytesOf, drain, readAll, skipped, textOf } from './support.js';

/** What the schedule tests need of the suite (./suite.ts). */
export interface SchedulesSuite<S extends Store> {
  name: string;
  test(name: string, fn: (context: unknown) => Promise<void>): void;
  make(): Promise<S>;
  again(previous: S, how: 'reopen' | 'crash'): Promise<S>;
}

function needsSchedules(suite: SchedulesSuite<Store>, store: Store, context: unknown): boolean {
  if (store.features.schedules !== true) return skipped(context, `${suite.name} does not declare features.schedules`);
  if (typeof store.putSchedule !== 'function' || typeof store.dropSchedule !== 'function') {
    throw new assert.AssertionError({ message: `${suite.name} declares features.schedules but has no putSchedule() or dropSchedule()` });
  }
  return false;
}

/** Schedules as the tests compare them: by name, bytes as text. */
function shapes(schedules: readonly StoredSchedule[] | undefined): [string, string, string, number, number][] {
  assert.ok(Array.isArray(schedules), 'open() reports schedules');
  return [...schedules].sort((a, b) => (a.name < b.name ? -1 : 1)).map((s) => [s.name, s.spec, textOf(s.bytes), s.firedThrough, s.nextAt]);
}

const T = 1_800_000_000_000;
const schedule = (name: string, firedThrough = T, spec = '{"every":10}'): StoredSchedule => ({
  name,
  spec,
  bytes: bytesOf(`${name} payload`),
  firedThrough,
  nextAt: firedThrough + 10,
});
const fired = (seq: number, name: string, slot: number): StoredItem => ({
  seq,
  bytes: bytesOf(`${name}@${slot}`),
  fired: { name, slot, next: slot + 10 },
});

export function scheduleTests<S extends Store>(suite: SchedulesSuite<S>, hooks: { reopen: boolean; crash: boolean }): void {
  suite.test('a store that never held a schedule reports none', async (context) => {
    const store = await suite.make();
    if (needsSchedules(suite, store, context)) return;
    const r = await store.open();
    assert.deepEqual(shapes(r.schedules), []);
    await store.close();
  });

  suite.test('a schedule or a fire outside the contract is refused with ERR_STORE and nothing changes', async (context) => {
    const store = await suite.make();
    if (needsSchedules(suite, store, context)) return;
    const { nextSeq: s } = await store.open();
    const good = schedule('good');
    await store.putSchedule!(good, true);
    const isStoreError = (e: unknown) => (e as { code?: string }).code === 'ERR_STORE';
    for (const bad of [
      { name: '' },
      { name: 'n'.repeat(MAX_SCHEDULE_NAME_BYTES + 1) },
      { name: 7 },
      { spec: 'x'.repeat(MAX_SCHEDULE_SPEC_BYTES + 1) },
      { spec: null },
      { bytes: 'not bytes' },
      { firedThrough: -1 },
      { firedThrough: 1.5 },
      { nextAt: Number.NaN },
    ]) {
      const candidate = { ...schedule('good', T + 999), ...bad } as unknown as StoredSchedule;
      await assert.rejects(store.putSchedule!(candidate, true), isStoreError, `refused: ${JSON.stringify(bad)}`);
    }
    for (const bad of [{ name: '' }, { slot: -1 }, { next: 1.5 }, { name: 'n'.repeat(MAX_SCHEDULE_NAME_BYTES + 1) }]) {
      const item = { ...fired(s + 1, 'good', T + 10), fired: { name: 'good', slot: T + 10, next: T + 20, ...bad } } as StoredItem;
      await assert.rejects(store.append([{ seq: s, bytes: bytesOf('fine') }, item], true), isStoreError, `refused: ${JSON.stringify(bad)}`);
      assert.deepEqual(await readAll(store), [], `nothing stored of ${JSON.stringify(bad)}`);
    }
    await store.close();
  });

  for (const how of ['reopen', 'crash'] as const) {
    if (!hooks[how]) continue;
    const after = how === 'reopen' ? 'close and reopen' : 'a crash';
    suite.test(
      `schedules survive ${after}, replaced and dropped, raised by the fires of items stored since, acked or not`,
      async (context) => {
        let store = await suite.make();
        if (needsSchedules(suite, store, context)) return;
        if (how === 'reopen' && !store.features.reopen && skipped(context, `${suite.name} does not declare features.reopen`)) return;
        const { nextSeq: s } = await store.open();
        await store.putSchedule!(schedule('daily'), true);
        await store.putSchedule!(schedule('gone'), true);
        await store.putSchedule!(schedule('replaced'), true);
        await store.append([fired(s, 'daily', T + 10), { seq: s + 1, bytes: bytesOf('plain') }], false);
        await store.append([fired(s + 2, 'daily', T + 20), fired(s + 3, 'nobody', T + 50), fired(s + 4, 'replaced', T + 10)], true);
        // A fire of an older slot than the progress does not lower it.
        await store.append([fired(s + 5, 'daily', T + 5)], true);
        await store.ack([s, s + 2], true);
        await store.dropSchedule!('gone', true);
        // Replaced after its fire: the replacement's progress stands.
        await store.putSchedule!(schedule('replaced', T + 30, '{"every":20}'), true);
        if (how === 'reopen') await store.close();
        store = await suite.again(store, how);
        const r = await store.open();
        assert.deepEqual(shapes(r.schedules), [
          ['daily', '{"every":10}', 'daily payload', T + 20, T + 30],
          ['replaced', '{"every":20}', 'replaced payload', T + 30, T + 40],
        ]);
        // Items are read back with their fire, as appended.
        assert.deepEqual(
          (await readAll(store)).map((i) => [i.seq, textOf(i.bytes), i.fired === undefined ? null : { ...i.fired }]),
          [
            [s + 1, 'plain', null],
            [s + 3, `nobody@${T + 50}`, { name: 'nobody', slot: T + 50, next: T + 60 }],
            [s + 4, `replaced@${T + 10}`, { name: 'replaced', slot: T + 10, next: T + 20 }],
            [s + 5, `daily@${T + 5}`, { name: 'daily', slot: T + 5, next: T + 15 }],
          ],
        );
        await store.close();
      },
    );
  }

  suite.test(
    'through a queue: a schedule fires each slot once, and catches up on what passed while the queue was closed',
    async (context) => {
      let store = await suite.make();
      if (needsSchedules(suite, store, context)) return;
      const clock = new ManualClock(T);
      let [tx, rx] = await new Builder(store).clock(clock).open();
      await tx.schedule('tick', { everyMs: 1000 }, 'tick', { catchUp: 'all' });
      clock.advance(2500);
      const slots = async (): Promise<number> => {
        // Let the fires the clock set off be stored: each is a push, admitted as the slot fires.
        for (let turns = 0; tx.stats().pendingPushes > 0; turns++) {
          if (turns > 100_000) throw new assert.AssertionError({ message: 'the fires were never stored' });
          await new Promise<void>((resolve) => setImmediate(resolve));
        }
        return (await drain(rx)).length;
      };
      let seen = await slots();
      assert.equal(seen, 2);
      if (hooks.reopen && store.features.reopen) {
        await tx.close();
        clock.advance(3000);
        store = await suite.again(store, 'reopen');
        [tx, rx] = await new Builder(store).clock(clock).open();
        // Slots 3, 4 and 5 passed while closed: caught up at open.
        seen += await slots();
        assert.equal(seen, 5);
        assert.deepEqual(
          tx.schedules().map((i) => [i.name, i.firedThrough, i.nextAt]),
          [['tick', T + 5000, T + 6000]],
        );
      }
      assert.equal(await tx.unschedule('tick'), true);
      clock.advance(5000);
      assert.equal(await slots(), 0);
      await tx.close();
    },
  );
}
