// Batches: reserveMany, ackMany / nackMany, and process(handler, { batch }) with partial success,
// retries of what the handler left unsettled, timeouts, typed values, and refusals.
import { describe, expect, it } from 'vitest';
import { Builder, MemStore, QueueError, type Reserved, json } from '../src/index.js';
import { ManualClock } from '../src/testing/index.js';

const dec = (b: Uint8Array) => new TextDecoder().decode(b);
const texts = (items: Reserved[]) => items.map((i) => dec(i.bytes));
const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('batches', () => {
  it('reserveManyTakesWhatIsReadyUpToNAndWaitsForTheFirst', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    await tx.pushMany(['a', 'b', 'c']);
    expect(texts(await rx.reserveMany(2))).toEqual(['a', 'b']);
    expect(texts(await rx.reserveMany(5))).toEqual(['c']);
    const later = rx.reserveMany(3);
    await turn();
    await tx.push('d');
    expect(texts(await later)).toEqual(['d']);
    expect(rx.stats().inFlight).toBe(4);
    await tx.close();
    expect(await rx.reserveMany(3)).toEqual([]);
  });

  it('reserveManyWaitsUpToWaitMsOnTheQueueClockForMore', async () => {
    const clock = new ManualClock();
    const [tx, rx] = await new Builder(new MemStore()).clock(clock).open();
    await tx.push('a');
    const batch = rx.reserveMany(3, { waitMs: 100 });
    await turn();
    await tx.push('b');
    await turn();
    clock.advance(100);
    expect(texts(await batch)).toEqual(['a', 'b']);
    // Nothing is left waiting: the next push is ready for anyone.
    await tx.push('c');
    expect(dec(rx.tryReserve()!.bytes)).toBe('c');
    await tx.close();
  });

  it('ackManyAndNackManySettleAllOrNone', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    await tx.pushMany(['a', 'b', 'c', 'd']);
    const [a, b, c, d] = await rx.reserveMany(4);
    await a!.ack();
    await expect(rx.ackMany([b!, a!, c!])).rejects.toSatisfy((e) => e instanceof QueueError && e.code === 'ERR_ALREADY_SETTLED');
    expect(b!.settled || c!.settled).toBe(false);
    await expect(rx.ackMany([b!, b!])).rejects.toThrow(TypeError);
    await expect(rx.ackMany('x' as never)).rejects.toThrow(TypeError);
    await rx.ackMany([b!, c!]);
    await rx.nackMany([d!]);
    expect(dec(rx.tryReserve()!.bytes)).toBe('d');
    expect(rx.stats()).toMatchObject({ acked: 3, nacked: 1 });
    await tx.close();
  });

  it('processWithBatchesAcksWhatTheHandlerLeftAndRetriesOnlyTheUnsettledAfterAThrow', async () => {
    const [tx, rx] = await new Builder(new MemStore()).retry({ kind: 'fixed', delayMs: 0 }).open();
    await tx.pushMany(['1', '2', '3', '4', '5']);
    const batches: string[][] = [];
    const errors: number[] = [];
    const stop = new AbortController();
    await rx.process(
      async (items) => {
        batches.push(texts(items));
        if (batches.length === 1) {
          // Partial success: two written, then the bulk write fails for the rest.
          await items[0]!.ack();
          await items[1]!.ack();
          throw new Error('bulk write failed');
        }
        if (batches.length === 2) stop.abort();
      },
      { batch: { size: 4 }, signal: stop.signal, onError: (_e, info) => errors.push(info.seq) },
    );
    expect(batches).toEqual([
      ['1', '2', '3', '4'],
      ['3', '4', '5'],
    ]);
    expect(errors).toEqual([3, 4]);
    await rx.onIdle();
    expect(rx.stats()).toMatchObject({ acked: 5, retried: 2 });
    await tx.close();
  });

  it('aBatchHandlerPastTimeoutMsHasItsItemsRetried', async () => {
    const clock = new ManualClock();
    const [tx, rx] = await new Builder(new MemStore()).clock(clock).retry({ kind: 'fixed', delayMs: 0 }).open();
    await tx.pushMany(['a', 'b']);
    const seen: string[][] = [];
    const stop = new AbortController();
    let aborted: unknown;
    const running = rx.process(
      async (items, { signal }) => {
        seen.push(texts(items));
        if (seen.length === 1) {
          await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve()));
          aborted = signal.reason;
          return;
        }
        stop.abort();
      },
      { batch: { size: 8 }, timeoutMs: 1000, signal: stop.signal },
    );
    while (seen.length === 0) await turn();
    clock.advance(1000);
    await running;
    expect((aborted as DOMException).name).toBe('TimeoutError');
    expect(seen).toEqual([
      ['a', 'b'],
      ['a', 'b'],
    ]);
    await tx.close();
  });

  it('batchesOfATypedQueueCarryDecodedValuesAndLeaveBadPayloadsInTheDeadLetters', async () => {
    const store = new MemStore();
    const [btx] = await new Builder(store).open();
    await btx.pushMany(['{"n":1}', 'oops', '{"n":2}']);
    await btx.close();
    const [tx, rx] = await new Builder(store).codec(json<{ n: number }>()).open();
    const got = await rx.reserveMany(10);
    expect(got.map((i) => i.value.n)).toEqual([1, 2]);
    await rx.ackMany(got);
    expect(await rx.deadLetters.count()).toBe(1);
    await tx.close();
  });

  it('badBatchOptionsAreTypedErrorsAndTakeNothing', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    await tx.push('a');
    await expect(rx.reserveMany(0)).rejects.toThrow(RangeError);
    await expect(rx.reserveMany(2, { waitMs: -1 })).rejects.toThrow(RangeError);
    await expect(rx.reserveMany(2, { wait: 1 } as never)).rejects.toThrow(TypeError);
    await expect(rx.process(async () => {}, { batch: { size: 0 } })).rejects.toThrow(RangeError);
    await expect(rx.process(async () => {}, { batch: { size: 2 }, heartbeat: true })).rejects.toThrow(TypeError);
    expect(rx.stats()).toMatchObject({ inFlight: 0, ready: 1 });
    await tx.close();
  });
});
