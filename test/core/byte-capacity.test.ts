// Byte capacity (Builder.capacityBytes): a push waits while the unacked payload bytes would pass
// the bound, alongside the item count; every store reports what it holds at open, exactly or as
// an upper bound, and the count becomes exact once the items stored before the open are gone.
import { afterEach, describe, expect, it } from 'vitest';
import { Builder, MemStore, QueueError, type Store } from '../../src/index.js';
import { schedulingStores } from '../support/scheduling-stores.js';

const code = (c: string) => (e: unknown) => e instanceof QueueError && e.code === c;
const bytesOf = (n: number, fill = 1) => new Uint8Array(n).fill(fill);
/** One turn of the event loop: every store call that can finish now has finished. */
const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

/** Tracks whether a promise has settled, without awaiting it. */
function watch<T>(promise: Promise<T>): { settled: () => boolean; promise: Promise<T> } {
  let done = false;
  const tracked = promise.then(
    (v) => {
      done = true;
      return v;
    },
    (e: unknown) => {
      done = true;
      throw e;
    },
  );
  return { settled: () => done, promise: tracked };
}

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0)) c();
});

describe('byte capacity', () => {
  it('aPushWaitsWhileTheUnackedBytesWouldPassTheBoundAndGoesOnWhenAnAckFreesThem', async () => {
    const [tx, rx] = await new Builder(new MemStore()).capacityBytes(100).open();
    await tx.push(bytesOf(60));
    expect(rx.stats()).toMatchObject({ bytes: 60, capacityBytes: 100, bytesExact: true });
    const second = watch(tx.push(bytesOf(50, 2)));
    await turn();
    await turn();
    expect(second.settled()).toBe(false);
    expect(rx.stats().pendingPushes).toBe(1);
    const first = (await rx.reserve())!;
    expect(first.bytes.byteLength).toBe(60);
    await first.ack();
    expect(await second.promise).toBe(2);
    expect(rx.stats()).toMatchObject({ bytes: 50, bytesExact: true, pendingPushes: 0 });
    await rx.close();
  });

  it('eitherBoundHoldsAPushBack', async () => {
    const [tx, rx] = await new Builder(new MemStore()).capacity(2).capacityBytes(1000).open();
    await tx.pushMany([bytesOf(1), bytesOf(1)]);
    const third = watch(tx.push(bytesOf(1)));
    await turn();
    expect(third.settled()).toBe(false);
    await (await rx.reserve())!.ack();
    expect(await third.promise).toBe(3);
    await rx.close();
  });

  it('pushesWaitInOrderAndASmallOneDoesNotOvertakeALargeOne', async () => {
    const [tx, rx] = await new Builder(new MemStore()).capacityBytes(100).open();
    await tx.push(bytesOf(90));
    const large = watch(tx.push(bytesOf(80)));
    const small = watch(tx.push(bytesOf(5)));
    await turn();
    // The small one would fit, but it came after the large one: order of admission is order of calls.
    expect(large.settled()).toBe(false);
    expect(small.settled()).toBe(false);
    await (await rx.reserve())!.ack();
    expect(await large.promise).toBe(2);
    expect(await small.promise).toBe(3);
    expect(rx.stats().bytes).toBe(85);
    await rx.close();
  });

  it('aPushLargerThanTheByteCapacityRejectsWithARangeErrorAndStoresNothing', async () => {
    const [tx, rx] = await new Builder(new MemStore()).capacityBytes(100).open();
    await expect(tx.push(bytesOf(101))).rejects.toBeInstanceOf(RangeError);
    await expect(tx.pushMany([bytesOf(60), bytesOf(41)])).rejects.toBeInstanceOf(RangeError);
    expect(rx.stats()).toMatchObject({ ready: 0, bytes: 0, pushed: 0, pendingPushes: 0 });
    expect(await tx.push(bytesOf(100))).toBe(1);
    await rx.close();
  });

  it('anAbortedWaitingPushGivesItsBytesBack', async () => {
    const [tx, rx] = await new Builder(new MemStore()).capacityBytes(100).open();
    await tx.push(bytesOf(70));
    const controller = new AbortController();
    const aborted = tx.push(bytesOf(50), { signal: controller.signal });
    controller.abort();
    await expect(aborted).rejects.toBeDefined();
    expect(rx.stats()).toMatchObject({ bytes: 70, pendingPushes: 0 });
    expect(await tx.push(bytesOf(30))).toBe(2);
    await rx.close();
  });

  it('aDeadLetterMoveFreesItsBytes', async () => {
    const [tx, rx] = await new Builder(new MemStore()).capacityBytes(100).open();
    await tx.push(bytesOf(80));
    const waiting = watch(tx.push(bytesOf(40)));
    await (await rx.reserve())!.deadLetter('bad');
    expect(await waiting.promise).toBe(2);
    expect(rx.stats()).toMatchObject({ bytes: 40, deadLetters: 1 });
    // A redrive waits for room as a push does, and counts its bytes again.
    const redrive = watch(rx.deadLetters.redrive());
    await turn();
    await turn();
    expect(redrive.settled()).toBe(false);
    await (await rx.reserve())!.ack();
    expect(await redrive.promise).toEqual([3]);
    expect(rx.stats().bytes).toBe(80);
    await rx.close();
  });

  it('badByteCapacitiesAreTypedErrors', () => {
    const builder = new Builder(new MemStore());
    expect(() => builder.capacityBytes(0)).toThrow(RangeError);
    expect(() => builder.capacityBytes(1.5)).toThrow(RangeError);
    expect(() => builder.capacityBytes(-1)).toThrow(RangeError);
    expect(() => builder.capacityBytes('100' as unknown as number)).toThrow(TypeError);
    expect(() => builder.capacityBytes(Infinity)).not.toThrow();
  });

  it('aQueueWithoutAByteCapacityReportsNoBytes', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    await tx.push(bytesOf(10));
    const stats = rx.stats();
    expect(stats.bytes).toBeUndefined();
    expect(stats.capacityBytes).toBeUndefined();
    await rx.close();
  });

  it('aStoreWithoutPayloadBytesIsRefusedBeforeItIsOpened', async () => {
    const inner = new MemStore();
    let opened = 0;
    const store: Store = {
      maxItemBytes: inner.maxItemBytes,
      features: { reopen: true, crashSafe: false },
      open: () => {
        opened++;
        return inner.open();
      },
      append: (items, sync) => inner.append(items, sync),
      ack: (seqs, sync) => inner.ack(seqs, sync),
      read: (range) => inner.read(range),
      close: () => inner.close(),
    };
    await expect(new Builder(store).capacityBytes(10).open()).rejects.toSatisfy(code('ERR_UNSUPPORTED'));
    expect(opened).toBe(0);
    // The same store opens without a byte capacity.
    const [, rx] = await new Builder(store).open();
    await rx.close();
  });

  it('aStoreThatReportsABadByteCountFailsTheOpenAndIsClosed', async () => {
    let closed = 0;
    class MiscountingStore extends MemStore {
      override payloadBytes(): number {
        return -5;
      }
      override close(): Promise<void> {
        closed++;
        return super.close();
      }
    }
    const store = new MiscountingStore();
    await expect(new Builder(store).capacityBytes(10).open()).rejects.toSatisfy(code('ERR_STORE'));
    expect(closed).toBe(1);
    // Closed again: the store backs no queue and opens once more without a byte capacity.
    const [, rx] = await new Builder(store).open();
    await rx.close();
  });

  for (const [name, make] of schedulingStores()) {
    it(`${name}: items stored before the open count at no less than their bytes, and exactly once they are gone`, async () => {
      const { store, reopen } = await make(cleanups);
      const [tx, rx] = await new Builder(store).open();
      for (let i = 0; i < 10; i++) await tx.push(bytesOf(100, i));
      await rx.close();

      const [tx2, rx2] = await new Builder(await reopen()).capacityBytes(1_500).open();
      const at = rx2.stats();
      expect(at.bytesExact).toBe(false);
      expect(at.bytes).toBeGreaterThanOrEqual(1_000);
      // 1000 bytes held; room for 500 more at most, whatever the bound says.
      const late = watch(tx2.push(bytesOf(600)));
      await turn();
      await turn();
      expect(late.settled()).toBe(false);
      const seen: number[] = [];
      for (let i = 0; i < 10; i++) {
        const item = (await rx2.reserve())!;
        seen.push(item.bytes[0]!);
        await item.ack();
      }
      expect(seen).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
      expect(await late.promise).toBe(11);
      expect(rx2.stats()).toMatchObject({ bytes: 600, bytesExact: true });
      await rx2.close();
    });
  }
});
