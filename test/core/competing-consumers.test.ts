// Competing consumers in one process: Consumer.fork(), each fork with its own reservations,
// process() loops and leases; an item held by at most one at a time; closing a fork returns what
// it holds and leaves the queue open.
import { describe, expect, it } from 'vitest';
import { Builder, MemStore, QueueError } from '../../src/index.js';
import { ManualClock } from '../../src/testing/index.js';

const dec = (b: Uint8Array) => new TextDecoder().decode(b);
const turn = () => new Promise<void>((resolve) => setImmediate(resolve));
const closedCode = (p: Promise<unknown>) => expect(p).rejects.toSatisfy((e) => e instanceof QueueError && e.code === 'ERR_CLOSED');

describe('competing consumers', () => {
  it('twoForksShareTheItemsEachHeldByOneOfThem', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    const a = rx.fork();
    const b = rx.fork();
    await tx.pushMany(['1', '2', '3', '4']);
    const x = a.tryReserve()!;
    const y = b.tryReserve()!;
    const z = rx.tryReserve()!;
    expect([x, y, z].map((i) => dec(i.bytes))).toEqual(['1', '2', '3']);
    expect(tx.stats().inFlight).toBe(3);
    await Promise.all([x.ack(), y.ack(), z.ack()]);
    expect(dec(b.tryReserve()!.bytes)).toBe('4');
    await tx.close();
  });

  it('closingAForkReturnsItsItemsFirstInLineAndItsLateAckRejects', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    const fork = rx.fork();
    await tx.pushMany(['a', 'b', 'c']);
    const held = fork.tryReserve()!;
    const kept = rx.tryReserve()!;
    await fork.close();
    expect(fork.closed).toBe(true);
    expect(rx.closed).toBe(false);
    expect(held.settled).toBe(true);
    await closedCode(held.ack());
    expect(fork.tryReserve()).toBeNull();
    expect(await fork.reserve()).toBeNull();
    const again = rx.tryReserve()!;
    expect(dec(again.bytes)).toBe('a');
    expect(again.deliveries).toBe(2);
    await Promise.all([again.ack(), kept.ack()]);
    expect(dec(rx.tryReserve()!.bytes)).toBe('c');
    await tx.close();
  });

  it('closingAForkEndsItsWaitingReservesAndProcessLoopsOnly', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    const fork = rx.fork();
    const seen: string[] = [];
    const forkLoop = fork.process(
      async (item) => {
        seen.push(`fork:${dec(item.bytes)}`);
      },
      { concurrency: 2 },
    );
    const waiting = fork.reserve();
    await fork.close();
    await forkLoop;
    expect(await waiting).toBeNull();
    await tx.push('after');
    await turn();
    expect(seen).toEqual([]);
    const item = await rx.reserve();
    expect(dec(item!.bytes)).toBe('after');
    await tx.close();
  });

  it('processLoopsOnTwoForksNeverRunOneItemTwice', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    const forks = [rx.fork(), rx.fork()];
    const running = new Set<number>();
    const handledBy = new Map<number, number>();
    const stop = new AbortController();
    const violations: string[] = [];
    let done = 0;
    const loops = forks.map((fork, f) =>
      fork.process(
        async (item) => {
          // Recorded, not thrown: a throw would only make process() retry the item.
          if (running.has(item.seq)) violations.push(`${item.seq} run by two handlers at once`);
          running.add(item.seq);
          await turn();
          running.delete(item.seq);
          if (handledBy.has(item.seq)) violations.push(`${item.seq} handled twice`);
          handledBy.set(item.seq, f);
          if (++done === 200) stop.abort();
        },
        { concurrency: 4, signal: stop.signal },
      ),
    );
    for (let i = 0; i < 200; i++) await tx.push(`item-${i}`);
    await Promise.all(loops);
    expect(violations).toEqual([]);
    expect(handledBy.size).toBe(200);
    // Both took a share: with two loops waiting, deliveries alternate between their waiters.
    const counts = [0, 0];
    for (const f of handledBy.values()) counts[f]!++;
    expect(counts[0]).toBeGreaterThan(0);
    expect(counts[1]).toBeGreaterThan(0);
    await tx.onIdle();
    await tx.close();
  });

  it('eachForkHasItsOwnLeasesAndAnExpiredOneGoesToTheOther', async () => {
    const clock = new ManualClock();
    const [tx, rx] = await new Builder(new MemStore()).clock(clock).open();
    const slow = rx.fork();
    const quick = rx.fork();
    await tx.push('job');
    const stale = (await slow.reserve({ leaseMs: 100 }))!;
    expect(quick.tryReserve()).toBeNull();
    clock.advance(100);
    const fresh = quick.tryReserve()!;
    expect(fresh.seq).toBe(stale.seq);
    await expect(stale.ack()).rejects.toSatisfy((e) => e instanceof QueueError && e.code === 'ERR_LEASE_EXPIRED');
    await fresh.ack();
    expect(tx.stats()).toMatchObject({ acked: 1, inFlight: 0 });
    await tx.close();
  });

  it('closingTheQueueClosesEveryFork', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    const fork = rx.fork();
    await tx.push('a');
    const item = fork.tryReserve()!;
    const waiting = rx.fork().reserve();
    await rx.close();
    expect(fork.closed).toBe(true);
    expect(await waiting).toBeNull();
    await closedCode(item.ack());
    expect(() => rx.fork()).toThrow(QueueError);
  });
});
