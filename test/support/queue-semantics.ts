/**
 * The queue-level behaviour every backend of the queue promises, written once and run against
 * the embedded queue (MemStore, LogStore) and the JetStream queue. The Store conformance suite
 * checks stores under the one core; this one checks the handles users hold, whoever keeps the
 * items. Where the backends differ, the backend declares it (`QueueCapabilities`) and the tests
 * read that, as the Store suite reads `features`.
 *
 * It lives under test/ and is not shipped: nobody outside writes a queue backend (a backend author
 * writes a Store, and has the Store suite for it).
 */
import { expect, type TestAPI } from 'vitest';
import { isQueueError } from '../../src/contract/errors.js';
import { type Codec, json } from '../../src/lib/codec.js';
import type { QueueConsumer, QueueItem, QueueProducer } from '../../src/api/handles.js';
import type { ManualClock } from '../../src/testing/manual-clock.js';

/**
 * What the suite holds: the API both engines implement (src/api/handles.ts). Each backend's
 * classes declare it, so the suite's calls are checked against both by the compiler; where the
 * engines differ (`tryReserve()`, `stats()`, `deadLetters.count()` answer at once on the embedded
 * queue and in a promise on JetStream), the type is an `Answer` and the suite awaits it.
 */
export type AnyReserved = QueueItem<unknown>;
export type AnyProducer = QueueProducer<unknown>;
export type AnyConsumer = QueueConsumer<unknown>;

export interface OpenOptions {
  codec?: Codec<unknown>;
  maxDeliveries?: number;
  leaseMs?: number;
  /** The retry policy of process(); `{ kind: 'fixed', delayMs: 0 }` unless given. */
  retry?: unknown;
  /** Use the manual clock (leases, timeouts); false: the system's. @default true */
  manualClock?: boolean;
}

export interface OpenQueue {
  tx: AnyProducer;
  rx: AnyConsumer;
  clock: ManualClock;
  /**
   * Do the first step of a move of `item` into the dead letters, as a process that died before
   * the second would have; only for a backend whose move takes two steps (`duplicateWindowMs`).
   */
  interruptedMove?: (item: AnyReserved) => Promise<void>;
}

/** Where the backends differ, declared. */
export interface QueueCapabilities {
  /**
   * `tryReserve()` answers synchronously (the embedded queue holds its ready items); false: it
   * returns a promise of the server's answer (JetStream: a pull that does not wait).
   */
  readonly syncTryReserve: boolean;
  /**
   * Nack delays run on the queue's clock, which a test moves; false: on the server's clock
   * (JetStream), and a test waits for the redelivery instead.
   */
  readonly nackDelayOnQueueClock: boolean;
  /**
   * Competing consumers are handed items in seq order between them (one queue in memory);
   * false: each consumer gets what its own pulls bring (JetStream), in no order between them.
   */
  readonly orderAcrossConsumers: boolean;
  /** What `seq` is: the queue's own counter ('queue'), or the stream sequence ('stream'). */
  readonly seq: 'queue' | 'stream';
  /**
   * How long the server keeps publish ids to drop duplicates, in ms: a move into the dead letters
   * repeated within it leaves one dead letter. 0 when the backend has no such window (the
   * embedded queue: a move is one atomic store call, never repeated).
   */
  readonly duplicateWindowMs: number;
  /**
   * Delays (`delayMs`, `notBefore`) run on the queue's clock, which a test moves; false: on the
   * wall clock and the server's timers (JetStream), and a test waits for the item instead.
   */
  readonly delaysOnQueueClock: boolean;
  /** Pushes keep a priority; false: a push with one other than 0 is `ERR_UNSUPPORTED` and stores nothing. */
  readonly priorities: boolean;
}

export interface QueueBackend {
  name: string;
  capabilities: QueueCapabilities;
  open(options?: OpenOptions): Promise<OpenQueue>;
}

const text = (b: Uint8Array): string => new TextDecoder().decode(b);

async function rejectsWith(promise: Promise<unknown> | (() => unknown), check: (error: unknown) => boolean, what: string): Promise<void> {
  let error: unknown;
  try {
    await (typeof promise === 'function' ? promise() : promise);
  } catch (e) {
    error = e;
  }
  expect(error, `${what}: expected a rejection`).toBeDefined();
  expect(check(error), `${what}: got ${String(error)}`).toBe(true);
}

const code = (c: string) => (e: unknown) => isQueueError(e) && e.code === c;
const typeError = (e: unknown) => e instanceof TypeError;
const rangeError = (e: unknown) => e instanceof RangeError;

/** Register the suite's tests with `test`, for `backend`. */
export function runQueueSemantics(test: TestAPI, backend: QueueBackend): void {
  const caps = backend.capabilities;
  const t = (name: string, fn: (q: OpenQueue) => Promise<void>, options?: OpenOptions): void => {
    test(`${backend.name}: ${name}`, async () => {
      const q = await backend.open(options);
      try {
        await fn(q);
      } finally {
        await q.tx.close();
      }
    });
  };

  t('pushResolvesWithRisingSeqsAndOneConsumerGetsTheItemsInPushOrder', async ({ tx, rx }) => {
    const first = await tx.push('a');
    const rest = await tx.pushMany(['b', 'c']);
    const seqs = [first, ...rest];
    expect(seqs[1]! > seqs[0]! && seqs[2]! > seqs[1]!).toBe(true);
    if (caps.seq === 'queue') expect(seqs).toEqual([1, 2, 3]);
    const got: AnyReserved[] = [];
    for (let i = 0; i < 3; i++) got.push((await rx.reserve())!);
    expect(got.map((r) => text(r.bytes))).toEqual(['a', 'b', 'c']);
    expect(got.map((r) => r.seq)).toEqual(seqs);
    expect(got.map((r) => r.deliveries)).toEqual([1, 1, 1]);
    for (const r of got) await r.ack();
    expect(got.every((r) => r.settled)).toBe(true);
    expect(await rx.tryReserve()).toBeNull();
  });

  t('tryReserveAnswersAsTheBackendDeclares', async ({ tx, rx }) => {
    await tx.push('x');
    const answer = rx.tryReserve();
    expect(answer instanceof Promise).toBe(!caps.syncTryReserve);
    const item = await answer;
    expect(item && text(item.bytes)).toBe('x');
    await item!.ack();
  });

  t('nackRedeliversTheSameSeqWithTheDeliveryCountRaisedAndFencesTheOldHandle', async ({ tx, rx }) => {
    const seq = await tx.push('x');
    const first = (await rx.reserve())!;
    await first.nack();
    expect(first.settled).toBe(true);
    const again = (await rx.reserve())!;
    expect([again.seq, again.deliveries, text(again.bytes)]).toEqual([seq, 2, 'x']);
    await rejectsWith(first.ack(), code('ERR_ALREADY_SETTLED'), 'ack of a nacked handle');
    await again.ack();
    expect(await rx.tryReserve()).toBeNull();
  });

  t('aNackedItemIsDeliveredAgainAheadOfNewerItems', async ({ tx, rx }) => {
    await tx.pushMany(['first', 'second']);
    const first = (await rx.reserve())!;
    await first.nack();
    const next = (await rx.reserve())!;
    expect([text(next.bytes), next.deliveries]).toEqual(['first', 2]);
    const last = (await rx.reserve())!;
    expect([text(last.bytes), last.deliveries]).toEqual(['second', 1]);
    await next.ack();
    await last.ack();
  });

  t('nackWithADelayHoldsTheItemBackWhileNewerItemsAreDelivered', async ({ tx, rx, clock }) => {
    await tx.pushMany(['old', 'new']);
    const old = (await rx.reserve())!;
    await old.nack({ delayMs: 1500 });
    const next = (await rx.reserve())!;
    expect(text(next.bytes)).toBe('new');
    await next.ack();
    if (caps.nackDelayOnQueueClock) {
      expect(await rx.tryReserve()).toBeNull();
      clock.advance(1500);
    }
    // On the server's clock: the reserve waits for the redelivery, however long the delay.
    const back = (await rx.reserve())!;
    expect([text(back.bytes), back.deliveries]).toEqual(['old', 2]);
    await back.ack();
  });

  t(
    'aLeaseThatRunsOutReturnsTheItemAndTheStaleHolderIsRefused',
    async ({ tx, rx, clock }) => {
      const seq = await tx.push('x');
      const held = (await rx.reserve())!;
      clock.advance(1000);
      expect(held.settled).toBe(true);
      const again = (await rx.reserve())!;
      expect([again.seq, again.deliveries]).toEqual([seq, 2]);
      await rejectsWith(held.ack(), code('ERR_LEASE_EXPIRED'), 'ack after the lease ran out');
      await again.ack();
    },
    { leaseMs: 1000 },
  );

  t(
    'extendRenewsTheLeaseAndTheItemStaysWithItsHolder',
    async ({ tx, rx, clock }) => {
      await tx.push('x');
      const held = (await rx.reserve())!;
      clock.advance(600);
      await held.extend();
      clock.advance(600);
      expect(held.settled).toBe(false);
      expect(await rx.tryReserve()).toBeNull();
      await held.extend(5000);
      clock.advance(4000);
      expect(held.settled).toBe(false);
      await held.ack();
      await rejectsWith(held.extend(), code('ERR_ALREADY_SETTLED'), 'extend after ack');
    },
    { leaseMs: 1000 },
  );

  t(
    'maxDeliveriesMovesAnItemIntoTheDeadLettersInsteadOfHandingItOutAgain',
    async ({ tx, rx }) => {
      const bad = await tx.push('bad');
      const first = (await rx.reserve())!;
      await first.nack();
      const good = await tx.push('good');
      const next = (await rx.reserve())!;
      expect([next.seq, text(next.bytes)]).toEqual([good, 'good']);
      await next.ack();
      const letters = await rx.deadLetters.list();
      expect(letters.map((l) => [l.seq, text(l.bytes), l.deliveries, l.reason])).toEqual([
        [bad, 'bad', 1, 'handed out 1 times (maxDeliveries 1)'],
      ]);
      expect(letters[0]!.deadAt).toBeGreaterThan(0);
    },
    { maxDeliveries: 1 },
  );

  t('deadLetterMovesTheItemInHandWithItsReasonAndDeliveryHistory', async ({ tx, rx }) => {
    const seq = await tx.push('poison');
    const item = (await rx.reserve())!;
    await item.deadLetter('cannot parse');
    expect(item.settled).toBe(true);
    expect(await rx.tryReserve()).toBeNull();
    const [letter, ...more] = await rx.deadLetters.list();
    expect(more).toEqual([]);
    expect([letter!.seq, text(letter!.bytes), letter!.deliveries, letter!.reason]).toEqual([seq, 'poison', 1, 'cannot parse']);
    expect(letter!.firstDeliveredAt).toBeGreaterThan(0);
    expect(letter!.lastDeliveredAt).toBeGreaterThanOrEqual(letter!.firstDeliveredAt);
    expect(letter!.deadAt).toBeGreaterThanOrEqual(letter!.lastDeliveredAt);
  });

  t(
    'processRetriesAFailingHandlerReportsItAndAcksWhenItSucceeds',
    async ({ tx, rx }) => {
      await tx.pushMany(['flaky', 'fine']);
      const reports: [string, number][] = [];
      const seen: string[] = [];
      const stop = new AbortController();
      let failed = false;
      await rx.process(
        async (item: AnyReserved) => {
          const t = text(item.bytes);
          seen.push(`${t}#${item.deliveries}`);
          if (t === 'flaky' && !failed) {
            failed = true;
            throw new Error('upstream busy');
          }
          if (seen.includes('fine#1') && seen.includes('flaky#2')) stop.abort();
        },
        {
          signal: stop.signal,
          onError: (error: unknown, info: { seq: number; deliveries: number }) => reports.push([(error as Error).message, info.deliveries]),
        },
      );
      expect(seen.sort()).toEqual(['fine#1', 'flaky#1', 'flaky#2']);
      expect(reports).toEqual([['upstream busy', 1]]);
      expect(await rx.tryReserve()).toBeNull();
    },
    { manualClock: false },
  );

  t(
    'processAbortsAHandlerPastItsTimeoutAndRetriesTheItem',
    async ({ tx, rx }) => {
      const seq = await tx.push('slow');
      const stop = new AbortController();
      const reasons: string[] = [];
      const reports: [string, number, number][] = [];
      await rx.process(
        async (item: AnyReserved, context: { signal: AbortSignal }) => {
          if (item.deliveries === 1) {
            // Runs until the timeout aborts it: the test waits on the signal, not on a clock.
            await new Promise((resolve) => context.signal.addEventListener('abort', resolve, { once: true }));
            reasons.push((context.signal.reason as Error).name);
            return;
          }
          stop.abort();
        },
        {
          signal: stop.signal,
          timeoutMs: 20,
          onError: (error: unknown, info: { seq: number; deliveries: number }) =>
            reports.push([(error as Error).name, info.seq, info.deliveries]),
        },
      );
      expect(reasons).toEqual(['TimeoutError']);
      expect(reports).toEqual([['TimeoutError', seq, 1]]);
      expect(await rx.tryReserve()).toBeNull();
    },
    { manualClock: false },
  );

  t(
    'processMovesAnItemWhoseHandlerFailsOnItsLastDeliveryWithTheErrorAsReason',
    async ({ tx, rx }) => {
      const bad = await tx.push('bad');
      const stop = new AbortController();
      const deliveries: number[] = [];
      await rx.process(
        async (item: AnyReserved) => {
          deliveries.push(item.deliveries);
          if (item.deliveries === 2) stop.abort();
          throw new Error('broken');
        },
        { signal: stop.signal },
      );
      expect(deliveries).toEqual([1, 2]);
      const letters = await rx.deadLetters.list();
      expect(letters.map((l) => [l.seq, l.deliveries])).toEqual([[bad, 2]]);
      expect(letters[0]!.reason).toMatch(/broken/);
    },
    { maxDeliveries: 2, manualClock: false },
  );

  t(
    'typedJsonValuesGoThroughAndAValueThatCannotEncodeRejectsAndStoresNothing',
    async ({ tx, rx }) => {
      await tx.push({ id: 7, tags: ['a'] });
      await rejectsWith(tx.push(undefined), code('ERR_ENCODE'), 'push of undefined');
      const item = (await rx.reserve())!;
      expect(item.value).toEqual({ id: 7, tags: ['a'] });
      await item.ack();
      expect(await rx.tryReserve()).toBeNull();
    },
    { codec: json() },
  );

  t('reserveManyTakesWhatIsReadyAndTheManyCallsSettleAllOrNone', async ({ tx, rx }) => {
    const seqs = await tx.pushMany(['a', 'b', 'c']);
    const batch = await rx.reserveMany(5);
    expect(batch.map((r) => r.seq)).toEqual(seqs);
    // One settled item refuses the whole call, and nothing else is settled by it.
    await batch[0]!.ack();
    await rejectsWith(rx.ackMany(batch), code('ERR_ALREADY_SETTLED'), 'ackMany with a settled item');
    expect(batch.slice(1).map((r) => r.settled)).toEqual([false, false]);
    await rejectsWith(rx.ackMany([batch[1], batch[1]]), typeError, 'ackMany with an item twice');
    await rejectsWith(rx.ackMany('x' as never), typeError, 'ackMany("x")');
    await rx.nackMany(batch.slice(1));
    const again = await rx.reserveMany(2);
    expect(again.map((r) => [r.seq, r.deliveries])).toEqual([
      [seqs[1], 2],
      [seqs[2], 2],
    ]);
    await rx.ackMany(again);
    await rejectsWith(rx.reserveMany(0), rangeError, 'reserveMany(0)');
    // With waitMs, a batch waits for items pushed meanwhile, up to the time.
    const waiting = rx.reserveMany(2, { waitMs: 60_000 });
    const late = await tx.pushMany(['d', 'e']);
    const filled = await waiting;
    expect(filled.map((r) => r.seq)).toEqual(late);
    await rx.ackMany(filled);
  });

  t('forAwaitHandsOutItemsUntilTheLoopBreaks', async ({ tx, rx }) => {
    await tx.pushMany(['1', '2']);
    const got: string[] = [];
    for await (const item of { [Symbol.asyncIterator]: () => rx[Symbol.asyncIterator]() }) {
      got.push(text(item.bytes));
      await item.ack();
      if (got.length === 2) break;
    }
    expect(got).toEqual(['1', '2']);
  });

  t('competingConsumersNeverHoldTheSameItemAtOnce', async ({ tx, rx }) => {
    const seqs = await tx.pushMany(['a', 'b', 'c', 'd']);
    const other = rx.fork();
    const held = [(await rx.reserve())!, (await other.reserve())!, (await rx.reserve())!, (await other.reserve())!];
    const heldSeqs = held.map((r) => r.seq);
    expect(new Set(heldSeqs).size).toBe(4);
    if (caps.orderAcrossConsumers) expect(heldSeqs).toEqual(seqs);
    else expect([...heldSeqs].sort((a, b) => a - b)).toEqual(seqs);
    for (const r of held) await r.ack();
    await other.close();
  });

  t('equalPayloadsPushedTwiceAreTwoItems', async ({ tx, rx }) => {
    // No backend dedupes pushes: a push carries no id of its own.
    const seqs = [await tx.push('same'), await tx.push('same')];
    const items = [(await rx.reserve())!, (await rx.reserve())!];
    expect(items.map((r) => r.seq)).toEqual(seqs);
    expect(seqs[0]).not.toBe(seqs[1]);
    for (const r of items) await r.ack();
  });

  /** Wait for a delay of `ms` to pass, on the clock the backend's delays run on. */
  const passDelay = (clock: ManualClock, ms: number): void => {
    if (caps.delaysOnQueueClock) clock.advance(ms);
  };
  const DELAY_MS = 1500;

  t('aDelayedItemIsHandedOutOnceItsTimeHasComeNewerItemsGoFirstAndItKeepsItsSeq', async ({ tx, rx, clock }) => {
    const pushedAt = Date.now();
    const later = await tx.push('later', { delayMs: DELAY_MS });
    const now = await tx.push('now');
    const first = (await rx.reserve())!;
    expect([first.seq, text(first.bytes)]).toEqual([now, 'now']);
    await first.ack();
    expect(await rx.tryReserve()).toBeNull();
    expect((await rx.stats()).delayed).toBe(1);
    passDelay(clock, DELAY_MS);
    // On the server's timers: the reserve waits for it.
    const due = (await rx.reserve())!;
    if (!caps.delaysOnQueueClock) expect(Date.now()).toBeGreaterThanOrEqual(pushedAt + DELAY_MS);
    expect([due.seq, text(due.bytes), due.deliveries]).toEqual([later, 'later', 1]);
    // Once due it is an item like any other: redelivered under the same seq, dead-lettered with it.
    await due.nack();
    const again = (await rx.reserve())!;
    expect([again.seq, again.deliveries]).toEqual([later, 2]);
    await again.deadLetter('done with it');
    expect((await rx.deadLetters.list()).map((l) => [l.seq, text(l.bytes), l.deliveries])).toEqual([[later, 'later', 2]]);
    expect(await rx.tryReserve()).toBeNull();
  });

  t('aTimeAlreadyComeIsNoDelay', async ({ tx, rx }) => {
    const seqs = [await tx.push('a', { notBefore: 0 }), await tx.push('b', { delayMs: 0 }), await tx.push('c', { notBefore: new Date(0) })];
    expect((await rx.stats()).delayed).toBe(0);
    const got: [number, string][] = [];
    for (let i = 0; i < 3; i++) {
      const item = (await rx.reserve())!;
      got.push([item.seq, text(item.bytes)]);
      await item.ack();
    }
    expect(await rx.tryReserve()).toBeNull();
    expect(got).toEqual([
      [seqs[0], 'a'],
      [seqs[1], 'b'],
      [seqs[2], 'c'],
    ]);
  });

  t('aKeyPushedWithADelayIsRememberedByAPlainPushAndTheOtherWayRound', async ({ tx, rx, clock }) => {
    const delayed = await tx.push('delayed', { key: 'k1', delayMs: DELAY_MS });
    expect(await tx.push('again, plain', { key: 'k1' })).toBe(delayed);
    const plain = await tx.push('plain', { key: 'k2' });
    expect(await tx.push('again, delayed', { key: 'k2', delayMs: DELAY_MS })).toBe(plain);
    const first = (await rx.reserve())!;
    expect([first.seq, text(first.bytes)]).toEqual([plain, 'plain']);
    await first.ack();
    passDelay(clock, DELAY_MS);
    const second = (await rx.reserve())!;
    expect([second.seq, text(second.bytes)]).toEqual([delayed, 'delayed']);
    await second.ack();
    // Acked, still remembered.
    expect(await tx.push('once more', { key: 'k1', delayMs: DELAY_MS })).toBe(delayed);
    expect(await rx.tryReserve()).toBeNull();
  });

  t('badScheduleOptionsAreTypedErrorsAndStoreNothing', async ({ tx, rx }) => {
    await rejectsWith(tx.push('x', { delayMs: 1, notBefore: 1 }), typeError, 'delayMs and notBefore');
    await rejectsWith(tx.push('x', { delayMs: -1 }), rangeError, 'delayMs -1');
    await rejectsWith(tx.push('x', { delayMs: 1e16 }), rangeError, 'delayMs 1e16');
    await rejectsWith(tx.push('x', { notBefore: 'soon' as never }), typeError, 'notBefore "soon"');
    await rejectsWith(tx.push('x', { notBefore: 1.5 }), rangeError, 'notBefore 1.5');
    await rejectsWith(tx.push('x', { priority: 1.5 }), rangeError, 'priority 1.5');
    await rejectsWith(tx.push('x', { priority: 128 }), rangeError, 'priority 128');
    await rejectsWith(tx.push('x', { priority: '1' as never }), typeError, 'priority "1"');
    expect(await rx.tryReserve()).toBeNull();
    expect((await rx.stats()).delayed).toBe(0);
  });

  t('priorityIsKeptOrRefusedAsTheBackendDeclares', async ({ tx, rx }) => {
    if (!caps.priorities) {
      await rejectsWith(tx.push('urgent', { priority: 10 }), code('ERR_UNSUPPORTED'), 'a push with a priority');
      await rejectsWith(tx.pushMany(['a', 'b'], { priority: -5 }), code('ERR_UNSUPPORTED'), 'a pushMany with a priority');
      // Priority 0 is no priority.
      const seq = await tx.push('routine', { priority: 0 });
      const item = (await rx.reserve())!;
      expect([item.seq, text(item.bytes)]).toEqual([seq, 'routine']);
      await item.ack();
      expect(await rx.tryReserve()).toBeNull();
      return;
    }
    await tx.push('routine');
    await tx.push('urgent', { priority: 10 });
    await tx.push('background', { priority: -5 });
    const got: string[] = [];
    for (let i = 0; i < 3; i++) {
      const item = (await rx.reserve())!;
      got.push(text(item.bytes));
      await item.ack();
    }
    expect(got).toEqual(['urgent', 'routine', 'background']);
  });

  const windowed = test.skipIf(caps.duplicateWindowMs === 0);
  windowed(`${backend.name}: aMoveRepeatedWithinTheDuplicateWindowLeavesOneDeadLetter`, async () => {
    const q = await backend.open();
    try {
      expect(q.interruptedMove, 'a backend with a duplicate window gives interruptedMove').toBeDefined();
      const seq = await q.tx.push('poison');
      const item = (await q.rx.reserve())!;
      await q.interruptedMove!(item);
      await item.deadLetter('second try');
      const letters = await q.rx.deadLetters.list();
      expect(letters.map((l) => [l.seq, text(l.bytes)])).toEqual([[seq, 'poison']]);
      expect(await q.rx.tryReserve()).toBeNull();
    } finally {
      await q.tx.close();
    }
  });

  t('closeEndsWaitsFencesHeldItemsAndRefusesNewCalls', async ({ tx, rx }) => {
    await tx.push('x');
    const held = (await rx.reserve())!;
    const waiting = rx.reserve();
    await tx.close();
    expect(await waiting).toBeNull();
    expect(held.settled).toBe(true);
    await rejectsWith(held.ack(), code('ERR_CLOSED'), 'ack after close');
    await rejectsWith(tx.push('y'), code('ERR_CLOSED'), 'push after close');
    expect(await rx.reserve()).toBeNull();
    await tx.close(); // idempotent
  });

  t('badInputIsRefusedWithTypedErrorsAndChangesNothing', async ({ tx, rx }) => {
    await rejectsWith(tx.push(42), typeError, 'push(42)');
    await rejectsWith(tx.push('x', { bogus: 1 } as never), typeError, 'unknown push option');
    await rejectsWith(tx.pushMany(5 as never), typeError, 'pushMany(5)');
    await rejectsWith(tx.pushMany(['ok', 42]), typeError, 'pushMany with one bad item');
    await rejectsWith(rx.reserve({ leaseMs: 0 }), rangeError, 'reserve({ leaseMs: 0 })');
    await rejectsWith(rx.reserve({ signal: 'no' as never }), typeError, 'reserve({ signal: "no" })');
    await rejectsWith(rx.process('handler' as never), typeError, 'process("handler")');
    await rejectsWith(
      rx.process(() => {}, { concurrency: 0 }),
      rangeError,
      'process concurrency 0',
    );
    await rejectsWith(
      rx.process(() => {}, { timeoutMs: -1 }),
      rangeError,
      'process timeoutMs -1',
    );
    // Nothing was stored by the refused pushes: the one good push is the only item.
    const seq = await tx.push('only');
    const item = (await rx.reserve())!;
    expect([item.seq, text(item.bytes)]).toEqual([seq, 'only']);
    await rejectsWith(item.nack({ delayMs: -1 }), rangeError, 'nack({ delayMs: -1 })');
    await rejectsWith(item.extend(0), rangeError, 'extend(0)');
    await rejectsWith(item.deadLetter(5 as never), typeError, 'deadLetter(5)');
    // The refused calls left the reservation as it was.
    expect(item.settled).toBe(false);
    await item.ack();
    expect(await rx.tryReserve()).toBeNull();
  });
}
