// Leases (visibility timeouts): Builder.leaseMs, reserve({ leaseMs }), item.extend(), expiry and
// its fencing of stale holders, and process() with leases and heartbeat.
// Time is faked (setTimeout and performance.now); setImmediate stays real, so the workers' turns run.
import diagnosticsChannel from 'node:diagnostics_channel';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Builder, LogStore, MemStore, QueueError, type Store, channels } from '../../src/index.js';

const dec = (b: Uint8Array) => new TextDecoder().decode(b);
const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

function signalled<T = void>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((res) => (resolve = res));
  return { promise, resolve };
}

const expired = (p: Promise<unknown>) => expect(p).rejects.toSatisfy((e) => e instanceof QueueError && e.code === 'ERR_LEASE_EXPIRED');

let dirs: string[] = [];

/** A fresh store, and how to open it again after a close. */
type Opened = { store: Store; reopen: () => Promise<Store> };

const stores: [string, () => Promise<Opened>][] = [
  [
    'MemStore',
    async () => {
      const store = new MemStore();
      return { store, reopen: async () => store };
    },
  ],
  [
    'LogStore',
    async () => {
      const dir = mkdtempSync(join(tmpdir(), 'pq-leases-'));
      dirs.push(dir);
      return { store: await LogStore.open(dir), reopen: () => LogStore.open(dir) };
    },
  ],
];

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance', 'Date'] });
});

afterEach(() => {
  vi.useRealTimers();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  dirs = [];
});

describe.each(stores)('leases over %s', (_name, makeStore) => {
  it('anExpiredLeaseReturnsTheItemBySeqWithItsDeliveryCounted', async () => {
    const [tx, rx] = await new Builder((await makeStore()).store).leaseMs(1000).open();
    await tx.pushMany(['a', 'b', 'c']);
    const a = rx.tryReserve()!;
    const b = rx.tryReserve()!;
    expect(rx.stats()).toMatchObject({ ready: 1, inFlight: 2, leaseExpired: 0 });
    await b.ack();
    vi.advanceTimersByTime(999);
    expect(rx.stats()).toMatchObject({ ready: 1, inFlight: 1 });
    expect(a.settled).toBe(false);
    vi.advanceTimersByTime(1);
    expect(rx.stats()).toMatchObject({ ready: 2, inFlight: 0, leaseExpired: 1, redelivered: 0 });
    expect(a.settled).toBe(true);
    // Ready again by seq: 'a' (seq 1) before 'c'.
    const again = (await rx.reserve())!;
    expect([dec(again.bytes), again.deliveries]).toEqual(['a', 2]);
    expect(rx.stats().redelivered).toBe(1);
    expect(dec(rx.tryReserve()!.bytes)).toBe('c');
    await again.ack();
    await rx.close();
  });

  it('aStaleHolderIsRefusedWithErrLeaseExpiredAndChangesNothing', async () => {
    const [tx, rx] = await new Builder((await makeStore()).store).leaseMs(50).open();
    await tx.pushMany(['a', 'b']);
    const stale = rx.tryReserve()!;
    vi.advanceTimersByTime(50);
    const before = rx.stats();
    await expired(stale.ack());
    await expired(stale.nack());
    await expired(stale.nack({ delayMs: 10 }));
    await expired(stale.deadLetter('no'));
    await expired(stale.extend());
    await expired(stale.extend(1000));
    expect(rx.stats()).toEqual(before);
    // Redelivered to a new holder, which acks it: the stale holder still learns its lease ran out.
    const fresh = (await rx.reserve({ leaseMs: Infinity }))!;
    expect(fresh.seq).toBe(stale.seq);
    await expired(stale.ack());
    expect(rx.stats().inFlight).toBe(1);
    await fresh.ack();
    await expired(stale.ack());
    await expired(stale.nack());
    await expired(stale.extend());
    expect(rx.stats()).toMatchObject({ acked: 1, ready: 1, inFlight: 0, leaseExpired: 1 });
    // A holder whose lease did not run out is told it already settled, as before.
    await expect(fresh.ack()).rejects.toSatisfy((e) => e instanceof QueueError && e.code === 'ERR_ALREADY_SETTLED');
    await rx.close();
  });

  it('extendKeepsAnItemPastItsOriginalExpiry', async () => {
    const [tx, rx] = await new Builder((await makeStore()).store).leaseMs(100).open();
    await tx.push('x');
    const item = rx.tryReserve()!;
    const at = item.leaseExpiresAt;
    expect(at).toBeCloseTo(Date.now() + 100, 0);
    vi.advanceTimersByTime(80);
    await item.extend(); // 100 more from now: runs out at 180
    expect(item.leaseExpiresAt).toBeCloseTo(at + 80, 0);
    vi.advanceTimersByTime(90);
    expect(rx.stats()).toMatchObject({ inFlight: 1, leaseExpired: 0 });
    await item.extend(500); // runs out at 670
    vi.advanceTimersByTime(400);
    expect(item.settled).toBe(false);
    await item.ack();
    vi.advanceTimersByTime(10_000);
    expect(rx.stats()).toMatchObject({ acked: 1, leaseExpired: 0 });
    await expect(item.extend()).rejects.toSatisfy((e) => e instanceof QueueError && e.code === 'ERR_ALREADY_SETTLED');
    await rx.close();
  });

  it('reserveLeaseMsOverridesTheBuildersAndTryReserveUsesTheBuilders', async () => {
    const [tx, rx] = await new Builder((await makeStore()).store).leaseMs(1000).open();
    await tx.pushMany(['short', 'none', 'default']);
    const short = (await rx.reserve({ leaseMs: 10 }))!;
    const none = (await rx.reserve({ leaseMs: Infinity }))!;
    const byDefault = rx.tryReserve()!;
    expect(none.leaseExpiresAt).toBe(Infinity);
    vi.advanceTimersByTime(10);
    expect([short.settled, none.settled, byDefault.settled]).toEqual([true, false, false]);
    vi.advanceTimersByTime(990);
    expect([none.settled, byDefault.settled]).toEqual([false, true]);
    expect(rx.stats()).toMatchObject({ leaseExpired: 2, inFlight: 1, ready: 2 });
    await none.ack();
    await rx.close();
  });

  it('aWaitingReserveGetsItsOwnLease', async () => {
    const [tx, rx] = await new Builder((await makeStore()).store).open();
    const waiting = rx.reserve({ leaseMs: 20 });
    await tx.push('x');
    const item = (await waiting)!;
    vi.advanceTimersByTime(20);
    expect(item.settled).toBe(true);
    expect(rx.stats().leaseExpired).toBe(1);
    await rx.close();
  });

  it('withoutALeaseNothingExpiresAndExtendMsGivesOne', async () => {
    const [tx, rx] = await new Builder((await makeStore()).store).leaseMs(Infinity).open();
    await tx.pushMany(['a', 'b']);
    const a = rx.tryReserve()!;
    const b = rx.tryReserve()!;
    expect(vi.getTimerCount()).toBe(0);
    await a.extend(); // no lease, no length: stays without one
    expect(a.leaseExpiresAt).toBe(Infinity);
    await b.extend(30);
    vi.advanceTimersByTime(365 * 24 * 3600 * 1000);
    expect([a.settled, b.settled]).toEqual([false, true]);
    expect(rx.stats()).toMatchObject({ leaseExpired: 1, inFlight: 1 });
    await a.ack();
    await rx.close();
  });

  it('anItemWhoseLeasesKeepRunningOutReachesTheDeadLettersUnderMaxDeliveries', async () => {
    const [tx, rx] = await new Builder((await makeStore()).store).leaseMs(10).maxDeliveries(2).open();
    await tx.pushMany(['stuck', 'next']);
    // The move is stored asynchronously: wait for its message, not for a number of turns.
    const moved = signalled();
    const onMoved = () => moved.resolve();
    diagnosticsChannel.subscribe(channels.deadLetter, onMoved);
    const first = (await rx.reserve())!;
    vi.advanceTimersByTime(10);
    const second = (await rx.reserve())!;
    expect([first.seq, second.seq, second.deliveries]).toEqual([1, 1, 2]);
    vi.advanceTimersByTime(10);
    // Handed out twice: the next take moves it instead of delivering it a third time.
    const next = (await rx.reserve({ leaseMs: Infinity }))!;
    expect(dec(next.bytes)).toBe('next');
    await moved.promise;
    diagnosticsChannel.unsubscribe(channels.deadLetter, onMoved);
    expect(rx.stats()).toMatchObject({ leaseExpired: 2, deadLettered: 1, deadLetters: 1 });
    await expired(second.ack());
    await next.ack();
    await rx.close();
  });

  it('closeWithLeasedItemsClearsTheTimerAndReturnsThem', async () => {
    const { store, reopen } = await makeStore();
    const [tx, rx] = await new Builder(store).leaseMs(60_000).open();
    await tx.pushMany(['a', 'b']);
    const a = rx.tryReserve()!;
    rx.tryReserve();
    await rx.close();
    expect(vi.getTimerCount()).toBe(0);
    await expect(a.ack()).rejects.toSatisfy((e) => e instanceof QueueError && e.code === 'ERR_CLOSED');
    const [, rx2] = await new Builder(await reopen()).open();
    expect(rx2.stats()).toMatchObject({ ready: 2, leaseExpired: 0 });
    await rx2.close();
  });
});

describe('process() with leases', () => {
  it('abortsTheHandlersSignalAtExpiryReportsItAndDoesNotSettleTheItem', async () => {
    const [tx, rx] = await new Builder(new MemStore()).leaseMs(100).open();
    await tx.push('slow');
    const errors: unknown[] = [];
    const aborted = signalled<unknown>();
    const seen: number[] = [];
    const run = rx.process(
      async (item, { signal }) => {
        seen.push(item.deliveries);
        if (seen.length > 1) return; // the redelivery succeeds at once
        signal.addEventListener('abort', () => aborted.resolve(signal.reason));
        await new Promise(() => {}); // never settles by itself
      },
      { onError: (error) => void errors.push(error) },
    );
    await turn();
    expect(seen).toHaveLength(1);
    vi.advanceTimersByTime(100);
    const reason = await aborted.promise;
    expect(reason).toBeInstanceOf(QueueError);
    expect((reason as QueueError).code).toBe('ERR_LEASE_EXPIRED');
    for (let i = 0; i < 5 && seen.length < 2; i++) await turn();
    expect(errors).toEqual([reason]);
    // Not retried by the worker (no nack, no retry counted): the expiry put it back, and the next
    // worker's turn acked the redelivery.
    expect(seen).toEqual([1, 2]);
    await rx.onIdle();
    expect(rx.stats()).toMatchObject({ leaseExpired: 1, retried: 0, nacked: 0, acked: 1, redelivered: 1 });
    await rx.close();
    await run;
  });

  it('heartbeatKeepsALongHandlersItem', async () => {
    const [tx, rx] = await new Builder(new MemStore()).leaseMs(100).open();
    await tx.push('long');
    const release = signalled();
    const started = signalled();
    const errors: unknown[] = [];
    const run = rx.process(
      async () => {
        started.resolve();
        await release.promise;
      },
      { heartbeat: true, onError: (error) => void errors.push(error) },
    );
    await started.promise;
    for (let i = 0; i < 20; i++) {
      vi.advanceTimersByTime(50);
      await turn();
    }
    expect(rx.stats()).toMatchObject({ leaseExpired: 0, inFlight: 1 });
    release.resolve();
    await rx.onIdle();
    expect(errors).toEqual([]);
    expect(rx.stats()).toMatchObject({ acked: 1, leaseExpired: 0 });
    await rx.close();
    await run;
  });

  it('withoutHeartbeatTheSameHandlerLosesItsItem', async () => {
    const [tx, rx] = await new Builder(new MemStore()).leaseMs(100).open();
    await tx.push('long');
    const started = signalled();
    const errors: unknown[] = [];
    const controller = new AbortController();
    const run = rx.process(
      async (_item, { signal }) => {
        started.resolve();
        await new Promise((resolve) => signal.addEventListener('abort', resolve));
      },
      { signal: controller.signal, onError: (error) => void errors.push(error) },
    );
    await started.promise;
    vi.advanceTimersByTime(100);
    await turn();
    expect(errors).toHaveLength(1);
    expect(rx.stats().leaseExpired).toBeGreaterThanOrEqual(1);
    controller.abort();
    vi.advanceTimersByTime(100);
    await run;
    await rx.close();
  });
});

describe('bad arguments', () => {
  it('areRefusedWithTypedErrorsAndChangeNothing', async () => {
    const b = new Builder(new MemStore());
    for (const bad of [0, -1, Number.NaN, -Infinity]) expect(() => b.leaseMs(bad)).toThrow(RangeError);
    expect(() => b.leaseMs('5' as never)).toThrow(TypeError);
    expect(() => b.leaseMs(undefined as never)).toThrow(TypeError);
    expect(() => b.leaseMs('5' as never)).toThrow(/Expected `leaseMs` to be a positive number of ms or Infinity, got `"5"` \(string\)/);
    const [tx, rx] = await b.open();
    await tx.push('x');
    await expect(rx.reserve({ leaseMs: 0 })).rejects.toBeInstanceOf(RangeError);
    await expect(rx.reserve({ leaseMs: '1' as never })).rejects.toBeInstanceOf(TypeError);
    await expect(rx.reserve({ lease: 1 } as never)).rejects.toBeInstanceOf(TypeError);
    expect(rx.stats()).toMatchObject({ ready: 1, inFlight: 0 });
    const item = rx.tryReserve()!;
    await expect(item.extend(0)).rejects.toBeInstanceOf(RangeError);
    await expect(item.extend(Infinity)).rejects.toBeInstanceOf(RangeError);
    await expect(item.extend(Number.NaN)).rejects.toBeInstanceOf(RangeError);
    await expect(item.extend('1' as never)).rejects.toBeInstanceOf(TypeError);
    expect(item.leaseExpiresAt).toBe(Infinity);
    expect(vi.getTimerCount()).toBe(0);
    await expect(rx.process(() => {}, { heartbeat: 'yes' as never })).rejects.toBeInstanceOf(TypeError);
    expect(item.settled).toBe(false);
    await item.ack();
    await rx.close();
  });
});
