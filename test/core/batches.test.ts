// Batches: reserveMany, ackMany / nackMany, and process(handler, { batch }) with partial success,
// retries of what the handler left unsettled, timeouts, typed values, and refusals.
import { describe, expect, it } from 'vitest';
import { Builder, MemStore, QueueError, type Reserved, type StandardSchemaV1, json } from '../../src/index.js';
import { ManualClock } from '../../src/testing/index.js';

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

  it('aWaitForMoreItemsEndsAtAnAbortAStopOrACloseAndHandsOutNoReturnedItem', async () => {
    const clock = new ManualClock();
    const [tx, rx] = await new Builder(new MemStore()).clock(clock).open();
    await tx.push('a');
    const stop = new AbortController();
    const got = rx.reserveMany(5, { waitMs: 60_000, signal: stop.signal });
    await turn();
    stop.abort();
    expect(texts(await got)).toEqual(['a']);
    // A process() stop withdraws its batch workers' waits: it resolves without the clock moving.
    await tx.push('b');
    const halt = new AbortController();
    let batches = 0;
    const running = rx.process(async () => void batches++, { batch: { size: 5, waitMs: 60_000 }, signal: halt.signal });
    while (rx.stats().inFlight < 2) await turn();
    halt.abort();
    await running;
    expect(batches).toBe(1);
    // A close during the wait: the item it held went back to the store, so nothing is handed out.
    await tx.push('c');
    const closing = rx.reserveMany(5, { waitMs: 60_000 });
    await turn();
    await tx.close();
    expect(await closing).toEqual([]);
    expect(clock.pendingTimers).toBe(0);
  });

  it('aCodecThatCannotWorkMidBatchPutsTheItemsInHandBack', async () => {
    const store = new MemStore();
    const [btx] = await new Builder(store).open();
    await btx.pushMany(['"a"', '"b"', '"later"']);
    await btx.close();
    const schema: StandardSchemaV1<unknown, string> = {
      '~standard': {
        version: 1,
        vendor: 'mixed',
        validate: (v) => (v === 'later' ? Promise.resolve({ value: v as string }) : { value: v as string }),
      },
    };
    const [tx, rx] = await new Builder(store).codec(json(schema)).open();
    await expect(rx.reserveMany(5)).rejects.toThrow(/answered asynchronously/);
    expect(rx.stats()).toMatchObject({ inFlight: 0, ready: 3, deadLetters: 0 });
    await tx.close();
  });

  it('ackManyAndNackManyRefuseWhatIsNotAReservationAndSettleNothing', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    await tx.push('a');
    const a = rx.tryReserve()!;
    await expect(rx.nackMany([a, { ack() {}, nack() {} } as never])).rejects.toThrow(TypeError);
    await expect(rx.ackMany(Object.create(null) as never)).rejects.toThrow(TypeError);
    expect(a.settled).toBe(false);
    await rx.ackMany([a]);
    await tx.close();
  });
});
