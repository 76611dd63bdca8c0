/**
 * The cumulative counters of stats() against a seeded random program, the store usage figures,
 * and the moments drained() and onIdle() settle.
 */
import diagnosticsChannel from 'node:diagnostics_channel';
import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import {
  Builder,
  LogStore,
  MemStore,
  QueueError,
  channels,
  type Consumer,
  type Producer,
  type Reserved,
  type Store,
} from '../../src/index.js';
import { CrashFileSystem, Prng, formatSeed, seedFromEnv, withReproduction } from '../../src/testing/index.js';
import { RecordingStore, tick } from '../support/stores.js';

const code = (c: string) => (e: unknown) => e instanceof QueueError && e.code === c;

/** Whether `promise` has settled, after every queued microtask and one turn have run. */
async function settledYet(promise: Promise<unknown>): Promise<boolean> {
  let settled = false;
  promise.then(
    () => (settled = true),
    () => (settled = true),
  );
  await tick();
  return settled;
}

/** Messages per channel key for one queue, counted while `body` runs. */
async function countMessages(queueId: () => number, body: () => Promise<void>): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  const subscriptions = Object.entries(channels).map(([key, name]) => {
    counts[key] = 0;
    const fn = (m: unknown) => {
      if ((m as { queueId: number }).queueId === queueId()) counts[key]!++;
    };
    diagnosticsChannel.subscribe(name, fn);
    return [name, fn] as const;
  });
  try {
    await body();
  } finally {
    for (const [name, fn] of subscriptions) diagnosticsChannel.unsubscribe(name, fn);
  }
  return counts;
}

interface Kind {
  name: string;
  open(): Promise<{ store: Store; inspect?: () => { bytesOnDisk: number; segments: number } }>;
}

const KINDS: Kind[] = [
  { name: 'MemStore', open: async () => ({ store: new MemStore() }) },
  {
    name: 'LogStore',
    open: async () => {
      const store = await LogStore.open('/q', { fs: new CrashFileSystem({ seed: 3 }), segmentBytes: 512 });
      return { store, inspect: () => ({ bytesOnDisk: store.inspect().bytesOnDisk, segments: store.inspect().segments.length }) };
    },
  },
];

describe('cumulative counters', () => {
  for (const kind of KINDS) {
    it(`theCountersMatchASeededRandomProgramOfPushesAcksAndNacks (${kind.name})`, async () => {
      const seed = seedFromEnv(0x0b5e7);
      const rnd = new Prng(seed);
      const { store, inspect } = await kind.open();
      const [tx, rx] = await new Builder(store).durability('group').open();
      const model = { pushed: 0, acked: 0, nacked: 0, redelivered: 0 };
      const deliveries = new Map<number, number>();
      const held: Reserved[] = [];
      let deferred: Promise<void>[] = [];
      let step = 0;
      let op = '';
      let segmentsMax = 0;
      let deliveredCount = 0;
      const line = () => `SEED=${formatSeed(seed)} npx vitest run test/core/observability.test.ts -t "${kind.name}" (step ${step}, ${op})`;
      const counts = await countMessages(
        () => rx.stats().queueId,
        () =>
          withReproduction(line, async () => {
            for (step = 0; step < 600; step++) {
              const r = rnd.int(100);
              if (r < 30) {
                const n = rnd.intBetween(1, 4);
                op = `push ${n}`;
                const payloads = Array.from({ length: n }, () => rnd.bytes(rnd.intBetween(0, 40)));
                if (n === 1 && rnd.bool()) await tx.push(payloads[0]!);
                else await tx.pushMany(payloads);
                model.pushed += n;
              } else if (r < 55) {
                op = 'reserve';
                const item = rx.tryReserve();
                if (item) {
                  deliveredCount++;
                  const d = (deliveries.get(item.seq) ?? 0) + 1;
                  deliveries.set(item.seq, d);
                  expect(item.deliveries).toBe(d);
                  if (d > 1) model.redelivered++;
                  held.push(item);
                }
              } else if (held.length > 0) {
                const item = held.splice(rnd.int(held.length), 1)[0]!;
                if (r < 82) {
                  op = `ack ${item.seq}`;
                  // Some acks are left to resolve later, together with the acks issued meanwhile.
                  if (rnd.bool(0.4)) deferred.push(item.ack());
                  else {
                    await item.ack();
                    model.acked++;
                  }
                } else {
                  op = `nack ${item.seq}`;
                  await item.nack();
                  model.nacked++;
                }
              }
              const stats = rx.stats();
              // A deferred ack counts once it resolved, which may already have happened.
              expect(stats.acked).toBeGreaterThanOrEqual(model.acked);
              expect(stats.acked).toBeLessThanOrEqual(model.acked + deferred.length);
              if (deferred.length > 0 && rnd.bool(0.3)) {
                op = `await ${deferred.length} deferred acks`;
                await Promise.all(deferred);
                model.acked += deferred.length;
                deferred = [];
              }
              if (deferred.length === 0) expect(rx.stats()).toMatchObject(model);
              if (inspect) {
                const usage = inspect();
                expect(rx.stats()).toMatchObject(usage);
                segmentsMax = Math.max(segmentsMax, usage.segments);
              } else {
                expect(rx.stats().bytesOnDisk).toBeUndefined();
              }
            }
            await Promise.all(deferred);
            model.acked += deferred.length;
            expect(rx.stats()).toMatchObject(model);
          }),
      );
      // The channels tell the same story as the counters.
      expect(counts).toMatchObject({
        push: model.pushed,
        ack: model.acked,
        nack: model.nacked,
        retry: model.redelivered,
        deliver: deliveredCount,
      });
      expect(model.redelivered, 'the program redelivered something').toBeGreaterThan(0);
      if (inspect) expect(segmentsMax, 'the program rolled segments').toBeGreaterThan(1);
      await rx.close();
    });
  }

  it('theCountersBelongToTheQueueInstanceAndStartAtZeroOnEveryOpen', async () => {
    const store = new MemStore();
    const [tx, rx] = await new Builder(store).open();
    await tx.pushMany(['a', 'b']);
    await rx.tryReserve()!.nack();
    await rx.tryReserve()!.ack();
    expect(rx.stats()).toMatchObject({ pushed: 2, acked: 1, nacked: 1, redelivered: 1 });
    expect(tx.stats()).toMatchObject({ pushed: 2, acked: 1, nacked: 1, redelivered: 1 });
    const firstId = rx.stats().queueId;
    await rx.close();
    expect(rx.stats()).toMatchObject({ pushed: 2, acked: 1, nacked: 1, redelivered: 1, closed: true });
    const [, rx2] = await new Builder(store).open();
    expect(rx2.stats()).toMatchObject({ ready: 1, pushed: 0, acked: 0, nacked: 0, redelivered: 0 });
    expect(rx2.stats().queueId).toBeGreaterThan(firstId);
    // The item redelivered in the first instance is a first delivery in this one.
    expect(rx2.tryReserve()!.deliveries).toBe(1);
    expect(rx2.stats().redelivered).toBe(0);
    await rx2.close();
  });

  it('bytesOnDiskAndSegmentsComeFromAStoreThatReportsUsageAndOnlyWhileTheQueueIsOpen', async () => {
    const store = await LogStore.open('/q', { fs: new CrashFileSystem({ seed: 4 }) });
    const [tx, rx] = await new Builder(store).open();
    await tx.push('x');
    const inspected = store.inspect();
    expect(rx.stats()).toMatchObject({ bytesOnDisk: inspected.bytesOnDisk, segments: inspected.segments.length });
    expect(inspected.bytesOnDisk).toBeGreaterThan(0);
    await rx.close();
    expect(rx.stats().bytesOnDisk).toBeUndefined();
    expect(rx.stats().segments).toBeUndefined();
    const [tx2, rx2] = await new Builder(new MemStore()).open();
    expect('bytesOnDisk' in rx2.stats()).toBe(false);
    await tx2.close();
  });
});

describe('drained() and onIdle()', () => {
  async function open(store: Store = new RecordingStore()): Promise<{ store: RecordingStore; tx: Producer; rx: Consumer }> {
    const [tx, rx] = await new Builder(store).open();
    return { store: store as RecordingStore, tx, rx };
  }

  it('bothResolveAtOnceWhenTheyAlreadyHold', async () => {
    const { tx, rx } = await open();
    expect(await settledYet(rx.drained())).toBe(true);
    expect(await settledYet(rx.onIdle())).toBe(true);
    expect(await settledYet(tx.onIdle())).toBe(true);
    await rx.close();
  });

  it('drainedResolvesWhenTheLastReadyItemIsHandedOutAndOnIdleWhenItsAckIsStored', async () => {
    const { store, tx, rx } = await open();
    await tx.pushMany(['a', 'b']);
    const drained = rx.drained();
    const idle = rx.onIdle();
    const a = rx.tryReserve()!;
    expect(await settledYet(drained)).toBe(false);
    const b = rx.tryReserve()!;
    expect(await settledYet(drained)).toBe(true);
    await a.ack();
    store.hold = true;
    const acked = b.ack();
    await store.heldCount(1);
    expect(await settledYet(idle), 'the last ack is issued, not stored').toBe(false);
    store.releaseAll();
    await acked;
    expect(await settledYet(idle)).toBe(true);
    await rx.close();
  });

  it('drainedWaitsForAPushStillBeingStored', async () => {
    const { store, tx, rx } = await open();
    store.hold = true;
    const pushed = tx.push('x');
    await store.heldCount(1);
    expect(rx.stats()).toMatchObject({ ready: 0, pendingPushes: 1 });
    const drained = tx.drained();
    expect(await settledYet(drained)).toBe(false);
    store.releaseAll();
    await pushed;
    expect(await settledYet(drained), 'stored, not yet handed out').toBe(false);
    rx.tryReserve();
    expect(await settledYet(drained)).toBe(true);
    await rx.close();
  });

  it('aNackedItemIsReadyAgainSoTheQueueIsNotIdleUntilItIsAcked', async () => {
    const { tx, rx } = await open();
    await tx.push('x');
    const idle = tx.onIdle();
    await rx.tryReserve()!.nack();
    expect(await settledYet(idle)).toBe(false);
    const drained = rx.drained();
    expect(await settledYet(drained)).toBe(false);
    await rx.tryReserve()!.ack();
    expect(await settledYet(drained)).toBe(true);
    expect(await settledYet(idle)).toBe(true);
    await rx.close();
  });

  it('anAbortedPushThatWasTheLastPendingOneLetsTheWaitersResolve', async () => {
    const store = new RecordingStore();
    const [tx, rx] = await new Builder(store).capacity(1).open();
    await tx.push('a');
    const stop = new AbortController();
    const blocked = tx.push('b', { signal: stop.signal });
    const item = rx.tryReserve()!;
    const drained = rx.drained();
    expect(await settledYet(drained), 'a push waits for capacity').toBe(false);
    stop.abort();
    await expect(blocked).rejects.toBeDefined();
    expect(await settledYet(drained)).toBe(true);
    await item.ack();
    await rx.onIdle();
    await rx.close();
  });

  it('aBacklogFoundAtOpenKeepsTheQueueFromBeingIdle', async () => {
    const store = new MemStore();
    const [tx] = await new Builder(store).open();
    await tx.push('left');
    await tx.close();
    const [, rx] = await new Builder(store).open();
    const idle = rx.onIdle();
    expect(await settledYet(idle)).toBe(false);
    await rx.tryReserve()!.ack();
    expect(await settledYet(idle)).toBe(true);
    await rx.close();
  });

  it('aCloseWithItemsOutstandingRejectsTheWaitersWithErrClosed', async () => {
    const { tx, rx } = await open();
    await tx.pushMany(['a', 'b']);
    rx.tryReserve();
    const drained = rx.drained();
    const idle = rx.onIdle();
    await rx.close();
    await expect(drained).rejects.toSatisfy(code('ERR_CLOSED'));
    await expect(idle).rejects.toSatisfy(code('ERR_CLOSED'));
    // After close they answer from the state close left: items remain, so neither holds.
    await expect(rx.drained()).rejects.toSatisfy(code('ERR_CLOSED'));
    await expect(tx.onIdle()).rejects.toSatisfy(code('ERR_CLOSED'));
  });

  it('closeStoresTheAcksUnderWayFirstSoAWaiterThatThenHoldsResolves', async () => {
    const { store, tx, rx } = await open();
    await tx.push('x');
    const item = rx.tryReserve()!;
    store.hold = true;
    const acked = item.ack();
    await store.heldCount(1);
    const idle = rx.onIdle();
    const closed = rx.close();
    expect(await settledYet(idle)).toBe(false);
    store.releaseAll();
    await acked;
    await closed;
    await expect(idle).resolves.toBeUndefined();
    // A queue closed idle stays idle.
    await expect(rx.onIdle()).resolves.toBeUndefined();
    await expect(rx.drained()).resolves.toBeUndefined();
  });

  it('aFailedQueueRejectsPendingAndLaterWaitersWithErrStoreFailed', async () => {
    const { store, tx, rx } = await open();
    await tx.push('x');
    const idle = rx.onIdle();
    store.failNextAck = new Error('EIO');
    await expect(rx.tryReserve()!.ack()).rejects.toSatisfy(code('ERR_STORE_FAILED'));
    await expect(idle).rejects.toSatisfy(code('ERR_STORE_FAILED'));
    await expect(rx.drained()).rejects.toSatisfy(code('ERR_STORE_FAILED'));
    await rx.close();
  });

  it('aReadThatMetDamageRejectsThemWithErrCorruptSinceTheItemCanNeverBeHandedOut', async () => {
    const { store, tx, rx } = await open();
    await tx.push('a');
    const drained = rx.drained();
    const damage = new QueueError('ERR_CORRUPT', 'damaged', { file: 'seg', offset: 42 });
    store.read = () => {
      throw damage;
    };
    expect(() => rx.tryReserve()).toThrow(damage);
    await expect(drained).rejects.toBe(damage);
    await expect(rx.onIdle()).rejects.toBe(damage);
    await rx.close();
  });

  it('aSignalStopsTheWaitAndNoListenerStaysOnIt', async () => {
    const { tx, rx } = await open();
    await tx.push('x');
    const stop = new AbortController();
    const idle = rx.onIdle({ signal: stop.signal });
    const drained = rx.drained({ signal: stop.signal });
    expect(getEventListeners(stop.signal, 'abort')).toHaveLength(2);
    const keep = new AbortController();
    const kept = rx.drained({ signal: keep.signal });
    stop.abort(new Error('enough'));
    await expect(idle).rejects.toThrow('enough');
    await expect(drained).rejects.toThrow('enough');
    expect(getEventListeners(stop.signal, 'abort')).toHaveLength(0);
    await rx.tryReserve()!.ack();
    await kept;
    expect(getEventListeners(keep.signal, 'abort'), 'removed once the wait resolved').toHaveLength(0);
    await expect(rx.onIdle({ signal: AbortSignal.abort('before') })).rejects.toBe('before');
    await rx.close();
  });

  it('badOptionsRejectWithTypeErrorAndChangeNothing', async () => {
    const { tx, rx } = await open();
    await expect(rx.drained('soon' as never)).rejects.toThrow(TypeError);
    await expect(rx.onIdle({ signal: 1 } as never)).rejects.toThrow(TypeError);
    await expect(tx.onIdle(null as never)).rejects.toThrow(TypeError);
    await expect(rx.onIdle()).resolves.toBeUndefined();
    await rx.close();
  });
});
