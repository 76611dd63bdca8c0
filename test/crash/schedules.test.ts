/**
 * A schedule at every crash point of its fires, on the simulated crash disk. A queue over a
 * LogStore schedules `tick` every second with `catchUp: 'all'`; the clock moves through eight slots,
 * each fired as one item; every other item is acked (acks synced before they resolve), and the
 * queue is closed and opened again half-way. Every crash point of the whole trace (every prefix,
 * every torn length of the last write, F3 zero tails: power losses at every step of every fire, ack,
 * roll, checkpoint and segment deletion) is recovered by a new queue opened twelve seconds later,
 * whose catch-up fires what the schedule has not, and checked:
 * - once the schedule's definition was durable, it is there; before, it may be, and without it no
 *   item is;
 * - every slot up to the reopen exists exactly once: as an item in the queue, or acked, never both
 *   and never twice;
 * - an item whose ack resolved never comes back, and a slot whose fire resolved is never fired again.
 * Deterministic: no randomness beyond the disk's seed, time only on a manual clock.
 */
import { describe, expect, it } from 'vitest';
import { Builder } from '../../src/core/builder.js';
import { LogStore } from '../../src/stores/log/log-store.js';
import { CrashFileSystem, ManualClock, formatCrashPoint } from '../../src/testing/index.js';

const DIR = '/q';
const OPTIONS = { segmentBytes: 512, preallocate: false } as const;
const T0 = Date.parse('2026-01-01T00:00:00Z');
const SLOTS = 8;
const REOPENED_AT = T0 + 20_500;

interface Recorded {
  fs: CrashFileSystem;
  /** Trace length once `schedule()` resolved. */
  definedAt: number;
  /** Slot -> trace length once its fire was stored. */
  firedAt: Map<number, number>;
  /** Slot -> trace lengths at which its item's ack was issued and resolved. */
  acks: Map<number, { issued: number; resolved: number }>;
}

/** Wait until the fires the clock set off are stored (each is a push, admitted when its slot fires). */
async function fired(tx: { stats(): { pendingPushes: number } }): Promise<void> {
  for (let turns = 0; tx.stats().pendingPushes > 0; turns++) {
    if (turns > 100_000) throw new Error('the fires were never stored');
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
}

async function record(): Promise<Recorded> {
  const fs = new CrashFileSystem({ seed: 57 });
  const clock = new ManualClock(T0 + 500);
  const rec: Recorded = { fs, definedAt: Infinity, firedAt: new Map(), acks: new Map() };
  const open = async () => new Builder(await LogStore.open(DIR, { ...OPTIONS, fs, clock })).clock(clock).ackDurability('group').open();
  let [tx, rx] = await open();
  await tx.schedule('tick', { everyMs: 1000 }, `tick ${'.'.repeat(40)}`, { catchUp: 'all', maxCatchUp: 1000 });
  rec.definedAt = fs.traceLength;
  for (let k = 1; k <= SLOTS; k++) {
    clock.advance(1000);
    await fired(tx);
    rec.firedAt.set(T0 + k * 1000, fs.traceLength);
    for (let item = rx.tryReserve(); item !== null; item = rx.tryReserve()) {
      const slot = item.fired!.slot;
      if ((slot / 1000) % 2 === 0) {
        const issued = fs.traceLength;
        await item.ack();
        rec.acks.set(slot, { issued, resolved: fs.traceLength });
      }
    }
    if (k === SLOTS / 2) {
      await tx.close();
      [tx, rx] = await open();
    }
  }
  await tx.close();
  return rec;
}

describe('a schedule at every crash point', () => {
  it('everySlotExistsExactlyOnceAfterAPowerLossAnywhereAndTheCatchUp', async () => {
    const rec = await record();
    let states = 0;
    let withSchedule = 0;
    for (const point of rec.fs.crashPoints({ zeroTail: true })) {
      states++;
      const where = `crash point ${formatCrashPoint(point)} (${rec.fs.reproLine()})`;
      const fs = rec.fs.crashAt(point);
      const clock = new ManualClock(REOPENED_AT);
      let store: LogStore;
      try {
        store = await LogStore.open(DIR, { ...OPTIONS, fs, clock });
      } catch (e) {
        // Before the store's directory was durable nothing had resolved: no store is fine.
        expect(point.at < rec.definedAt, `${where}: open failed: ${String(e)}`).toBe(true);
        continue;
      }
      const [tx, rx] = await new Builder(store).clock(clock).open();
      await fired(tx);
      const got: number[] = [];
      for (let item = rx.tryReserve(); item !== null; item = rx.tryReserve()) got.push(item.fired!.slot);
      const defined = tx.schedules().length === 1;
      if (point.at >= rec.definedAt) expect(defined, `${where}: the schedule was defined`).toBe(true);
      if (!defined) {
        expect(got, `${where}: items without a schedule`).toEqual([]);
        await tx.close();
        continue;
      }
      withSchedule++;
      expect(new Set(got).size, `${where}: a slot fired twice: ${got.join(',')}`).toBe(got.length);
      const last = Math.floor((REOPENED_AT - T0) / 1000);
      for (let k = 1; k <= last; k++) {
        const slot = T0 + k * 1000;
        const ack = rec.acks.get(slot);
        const there = got.includes(slot);
        if (ack !== undefined && ack.resolved <= point.at) expect(there, `${where}: slot ${k} came back after its ack`).toBe(false);
        else if (ack === undefined || ack.issued > point.at) expect(there, `${where}: slot ${k} is missing`).toBe(true);
      }
      expect(
        got.every((slot) => slot > T0 && slot <= REOPENED_AT),
        `${where}: slots out of range: ${got.join(',')}`,
      ).toBe(true);
      expect(tx.schedules()[0]!.firedThrough, `${where}: progress`).toBe(T0 + last * 1000);
      await tx.close();
    }
    console.log(`[schedules] ${states} crash states explored, ${withSchedule} with the schedule defined`);
    expect(withSchedule).toBeGreaterThan(200);
  });
});
