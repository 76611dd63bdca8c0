/**
 * Store-and-forward into JetStream (src/engines/jetstream/forward.ts), against a real nats-server of the
 * test's own: message ids from the store's identity, the duplicate window at work, a stop that
 * puts items back, bounded jittered backoff, and the bad-input rules. The fault tests (a server
 * SIGKILLed, a forwarder SIGKILLed) are in forward-faults.test.ts.
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { rmSync } from 'node:fs';
import { type JetStreamManager, jetstream } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { forward, messageId } from '../../../src/engines/jetstream/forward.js';
import { Builder, LogStore, MemStore, type Store, type StoreRecovery, channels } from '../../../src/index.js';
import { freshDir, cleanupDirs } from '../../stores/log/helpers.js';
import { NatsServer, natsServerBinary } from '../../support/nats-restartable.js';
import { WatchedClock, connectTo, differences, freshStream, managerOf, readStream } from './support.js';

const binary = natsServerBinary();
if (binary === null) console.log('skipped: no nats-server binary (set NATS_SERVER, or install nats-server)');

const text = (seq: number): string => `item ${seq}`;

describe.skipIf(binary === null)('forward() into JetStream', () => {
  let server: NatsServer;
  let nc: NatsConnection;
  let jsm: JetStreamManager;

  beforeAll(async () => {
    server = await NatsServer.start(binary!);
    nc = await connectTo(server.url);
    jsm = await managerOf(nc);
  });

  afterAll(async () => {
    await nc?.close();
    await server?.stop();
    cleanupDirs();
  });

  async function logQueue(dir = freshDir()) {
    const store = await LogStore.open(dir);
    const [tx, rx] = await new Builder(store).open();
    return { store, tx, rx, dir };
  }

  test('forwardsEveryItemOnceInSeqOrderUnderTheStoreIdentity', async () => {
    const { stream, subject } = await freshStream(jsm);
    const { store, tx, rx } = await logQueue();
    for (let i = 1; i <= 200; i++) await tx.push(text(i));
    const stop = new AbortController();
    const f = forward(rx, { connection: nc, subject, stream }, { batch: 32, signal: stop.signal });
    await rx.onIdle();
    expect(f.stats()).toMatchObject({
      origin: store.storeId,
      backlog: 0,
      inHand: 0,
      inFlight: 0,
      connected: true,
      lastError: null,
      stopped: false,
    });
    const messages = await readStream(jsm, stream);
    expect(differences(messages, store.storeId!, 200, text)).toEqual([]);
    expect(messages.map((m) => m.id)).toEqual(Array.from({ length: 200 }, (_, i) => messageId(store.storeId!, i + 1)));
    stop.abort();
    await f.done;
    // The counters are final once it has stopped (an ack resolves before the forwarder counts it).
    expect(f.stats()).toMatchObject({ forwarded: 200, duplicates: 0, stopped: true });
    await tx.close();
  });

  test('aRedeliveryWithinTheDuplicateWindowIsDroppedByTheServer', async () => {
    // What a forwarder killed between the server's ack and the local ack leaves behind: items in
    // the stream and still in the queue. The next forwarder publishes them again, under the same ids.
    const { stream, subject } = await freshStream(jsm);
    const { store, tx, rx } = await logQueue();
    for (let i = 1; i <= 10; i++) await tx.push(text(i));
    const js = jetstream(nc);
    for (let seq = 1; seq <= 5; seq++) await js.publish(subject, text(seq), { msgID: messageId(store.storeId!, seq) });
    const stop = new AbortController();
    const f = forward(rx, { connection: nc, subject }, { signal: stop.signal });
    await rx.onIdle();
    stop.abort();
    await f.done;
    expect(differences(await readStream(jsm, stream), store.storeId!, 10, text)).toEqual([]);
    expect(f.stats()).toMatchObject({ forwarded: 10, duplicates: 5 });
    await tx.close();
  });

  test('aStoreDeletedAndCreatedAgainIsNotTakenForTheOldOne', async () => {
    const { stream, subject } = await freshStream(jsm);
    const dir = freshDir();
    const ids: string[] = [];
    for (const round of [1, 2]) {
      const { store, tx, rx } = await logQueue(dir);
      ids.push(store.storeId!);
      for (let i = 1; i <= 3; i++) expect(await tx.push(`round ${round} item ${i}`)).toBe(i);
      const stop = new AbortController();
      const f = forward(rx, { connection: nc, subject }, { signal: stop.signal });
      await rx.onIdle();
      stop.abort();
      await f.done;
      expect(f.stats()).toMatchObject({ forwarded: 3, duplicates: 0 });
      await tx.close();
      rmSync(dir, { recursive: true });
    }
    expect(ids[0]).not.toBe(ids[1]);
    const messages = await readStream(jsm, stream);
    expect(messages.map((m) => m.text)).toEqual([
      'round 1 item 1',
      'round 1 item 2',
      'round 1 item 3',
      'round 2 item 1',
      'round 2 item 2',
      'round 2 item 3',
    ]);
  });

  test('whileNoStreamTakesThemItBacksOffHoldingItsItemsAndAStopPutsThemBack', async () => {
    const subject = `pq.fwd.nostream.${process.pid}`;
    const { store, tx, rx } = await logQueue();
    for (let i = 1; i <= 5; i++) await tx.push(text(i));
    const clock = new WatchedClock();
    const stop = new AbortController();
    const f = forward(rx, { connection: nc, subject }, { batch: 3, concurrency: 1, signal: stop.signal, clock, random: () => 0.5 });
    await clock.timers(1);
    const s = f.stats();
    expect(s).toMatchObject({ inHand: 3, inFlight: 0, forwarded: 0, failedPublishes: 3, backoffMs: 75 });
    expect(s.lastError?.message).toBeTruthy();
    expect(s.lastError?.at).toBe(clock.now());
    expect(rx.stats()).toMatchObject({ ready: 2, inFlight: 3, nacked: 0 });
    // The queue goes on taking pushes meanwhile.
    await tx.push(text(6));
    expect(f.stats().backlog).toBe(6);
    stop.abort();
    await f.done;
    expect(rx.stats()).toMatchObject({ ready: 6, inFlight: 0 });
    // None lost: once a stream takes the subject, a new forwarder delivers all six, once each.
    const stream = `PQ_FWD_LATE_${process.pid}`;
    await jsm.streams.add({ name: stream, subjects: [subject] });
    const again = new AbortController();
    const g = forward(rx, { connection: nc, subject }, { signal: again.signal });
    await rx.onIdle();
    expect(differences(await readStream(jsm, stream), store.storeId!, 6, text)).toEqual([]);
    again.abort();
    await g.done;
    await tx.close();
  });

  test('theBackoffDoublesUpToItsBoundWithJitterOnTheGivenClock', async () => {
    const subject = `pq.fwd.nostream.backoff.${process.pid}`;
    const { tx, rx } = await logQueue();
    await tx.push(text(1));
    const clock = new WatchedClock();
    const draws = [0, 0.5, 0.999, 0, 0.5];
    let d = 0;
    const stop = new AbortController();
    const f = forward(
      rx,
      { connection: nc, subject },
      { signal: stop.signal, clock, random: () => draws[d++ % draws.length]!, backoffMs: 100, backoffMaxMs: 400 },
    );
    for (let n = 1; n <= 5; n++) {
      await clock.timers(n);
      clock.advance(clock.lengths[n - 1]!);
    }
    // Ceilings 100, 200, 400, 400, 400; each wait drawn in [ceiling / 2, ceiling].
    expect(clock.lengths).toEqual([50, 150, 400, 200, 300]);
    stop.abort();
    await f.done;
    expect(rx.stats()).toMatchObject({ ready: 1, inFlight: 0 });
    await tx.close();
  });

  test('aClosedConnectionEndsTheForwarderWithErrClosedAndPutsItsItemsBack', async () => {
    const { subject } = await freshStream(jsm);
    const { tx, rx } = await logQueue();
    const own = await connectTo(server.url);
    const f = forward(rx, { connection: own, subject }, { batch: 4 });
    await own.close();
    await expect(f.done).rejects.toMatchObject({ code: 'ERR_CLOSED' });
    expect(f.stats()).toMatchObject({ connected: false, stopped: true, inHand: 0 });
    await tx.push(text(1));
    expect(rx.stats()).toMatchObject({ ready: 1, inFlight: 0 });
    await tx.close();
  });

  test('theQueueClosingDuringABackoffEndsTheForwarderAndTheItemsStayStored', async () => {
    const subject = `pq.fwd.nostream.close.${process.pid}`;
    const dir = freshDir();
    const { tx, rx } = await logQueue(dir);
    for (let i = 1; i <= 3; i++) await tx.push(text(i));
    const clock = new WatchedClock();
    const f = forward(rx, { connection: nc, subject }, { clock });
    await clock.timers(1);
    expect(f.stats().inHand).toBe(3);
    await tx.close();
    await f.done;
    expect(f.stats()).toMatchObject({ inHand: 0, stopped: true, forwarded: 0 });
    // The backoff's timer never ran: the close ended the wait.
    expect(clock.lengths).toHaveLength(1);
    const again = await logQueue(dir);
    expect(again.rx.stats().ready).toBe(3);
    await again.tx.close();
  });

  test('aConnectionPromiseThatRejectsEndsTheForwarderWithErrClosedAndTheItemsStay', async () => {
    const { tx, rx } = await logQueue();
    await tx.push(text(1));
    let refuse!: (e: Error) => void;
    const connection = new Promise<NatsConnection>((_, reject) => (refuse = reject));
    const f = forward(rx, { connection, subject: 'pq.fwd.never' });
    refuse(new Error('connection refused'));
    await expect(f.done).rejects.toMatchObject({ code: 'ERR_CLOSED', message: expect.stringContaining('connection refused') });
    expect(f.stats()).toMatchObject({ connected: false, stopped: true, inHand: 0, forwarded: 0 });
    expect(rx.stats()).toMatchObject({ ready: 1, inFlight: 0 });
    await tx.close();
  });

  test('aStopWhileTheConnectionIsStillBeingMadePutsTheBatchBack', async () => {
    const { tx, rx } = await logQueue();
    for (let i = 1; i <= 3; i++) await tx.push(text(i));
    const stop = new AbortController();
    // The first batch is taken (delivered to the forwarder) and held for the connection.
    const queueId = rx.stats().queueId;
    const taken = new Promise<void>((resolve) => {
      let n = 0;
      const onDeliver = (m: unknown): void => {
        if ((m as { queueId: number }).queueId !== queueId || ++n < 3) return;
        unsubscribe(channels.deliver, onDeliver);
        resolve();
      };
      subscribe(channels.deliver, onDeliver);
    });
    const f = forward(rx, { connection: new Promise<NatsConnection>(() => {}), subject: 'pq.fwd.never' }, { signal: stop.signal });
    await taken;
    stop.abort();
    await f.done;
    expect(f.stats()).toMatchObject({ stopped: true, inHand: 0, forwarded: 0, connected: false });
    expect(rx.stats()).toMatchObject({ ready: 3, inFlight: 0 });
    await tx.close();
  });

  test('theQueueClosingEndsTheForwarder', async () => {
    const { subject } = await freshStream(jsm);
    const { tx, rx } = await logQueue();
    const f = forward(rx, { connection: nc, subject });
    await tx.close();
    await f.done;
    expect(f.stats().stopped).toBe(true);
  });

  test('anItemTheStreamCanNeverTakeGoesToTheDeadLettersAndTheRestIsForwarded', async () => {
    const stream = `PQ_FWD_SMALL_${process.pid}`;
    const subject = `pq.fwd.small.${process.pid}`;
    await jsm.streams.add({ name: stream, subjects: [subject], max_msg_size: 512 });
    const { store, tx, rx } = await logQueue();
    await tx.push(text(1));
    await tx.push('x'.repeat(600));
    await tx.push(text(3));
    const stop = new AbortController();
    const f = forward(rx, { connection: nc, subject }, { signal: stop.signal });
    await rx.onIdle();
    stop.abort();
    await f.done;
    expect(f.stats()).toMatchObject({ forwarded: 2, deadLettered: 1, failedPublishes: 1 });
    expect(f.stats().lastError?.message).toContain('max_msg_size');
    const [dead] = await rx.deadLetters.list();
    expect(dead).toMatchObject({ seq: 2, reason: 'forward: the payload is larger than the stream takes (max_msg_size)' });
    const messages = await readStream(jsm, stream);
    expect(messages.map((m) => m.id)).toEqual([messageId(store.storeId!, 1), messageId(store.storeId!, 3)]);
    await tx.close();
  });

  test('overAStoreWithoutDeadLettersATooLargeItemStopsTheForwarderAndStaysInTheQueue', async () => {
    const stream = `PQ_FWD_SMALL2_${process.pid}`;
    const subject = `pq.fwd.small2.${process.pid}`;
    await jsm.streams.add({ name: stream, subjects: [subject], max_msg_size: 512 });
    const mem = new MemStore();
    const plain: Store = {
      maxItemBytes: mem.maxItemBytes,
      features: { reopen: true, crashSafe: false },
      open: () => mem.open(),
      append: (items, sync) => mem.append(items, sync),
      ack: (seqs, sync) => mem.ack(seqs, sync),
      read: (range) => mem.read(range),
      close: () => mem.close(),
    };
    const [tx, rx] = await new Builder(plain).open();
    await tx.push('x'.repeat(600));
    const f = forward(rx, { connection: nc, subject });
    await expect(f.done).rejects.toMatchObject({ code: 'ERR_UNSUPPORTED' });
    expect(rx.stats()).toMatchObject({ ready: 1, inFlight: 0 });
    expect(f.stats()).toMatchObject({ inHand: 0, deadLettered: 0, stopped: true });
    await tx.close();
  });

  test('badInputThrowsAndStartsNothing', async () => {
    const { subject } = await freshStream(jsm);
    const { tx, rx } = await logQueue();
    await tx.push(text(1));
    const target = { connection: nc, subject };
    expect(() => forward({} as never, target)).toThrow(TypeError);
    expect(() => forward(rx, undefined as never)).toThrow(TypeError);
    expect(() => forward(rx, { connection: {} as never, subject })).toThrow(TypeError);
    expect(() => forward(rx, { connection: nc, subject: '' })).toThrow(RangeError);
    expect(() => forward(rx, { ...target, subjet: 'x' } as never)).toThrow(/Unknown option in `target`: `subjet`/);
    expect(() => forward(rx, target, { batch: 0 })).toThrow('Expected `options.batch` to be a positive integer, got `0` (number)');
    expect(() => forward(rx, target, { concurrency: 1.5 })).toThrow(RangeError);
    expect(() => forward(rx, target, { backoffMs: 500, backoffMaxMs: 100 })).toThrow(RangeError);
    expect(() => forward(rx, target, { origin: 'has space' })).toThrow(RangeError);
    expect(() => forward(rx, target, { clock: {} as never })).toThrow(TypeError);
    expect(() => forward(rx, target, { batchSize: 3 } as never)).toThrow(TypeError);
    // Nothing was taken from the queue.
    expect(rx.stats()).toMatchObject({ ready: 1, inFlight: 0 });
    await tx.close();
    expect(() => forward(rx, target)).toThrow(expect.objectContaining({ code: 'ERR_CLOSED' }));
  });

  test('aStoreWithoutAnIdentityNeedsAnOrigin', async () => {
    const { stream, subject } = await freshStream(jsm);
    const mem = new MemStore();
    // A store of its own that reports no identity.
    const anonymous: Store = {
      maxItemBytes: mem.maxItemBytes,
      features: { reopen: true, crashSafe: false },
      open: async (): Promise<StoreRecovery> => {
        const { nextSeq, count } = await mem.open();
        return { nextSeq, count };
      },
      append: (items, sync) => mem.append(items, sync),
      ack: (seqs, sync) => mem.ack(seqs, sync),
      read: (range) => mem.read(range),
      close: () => mem.close(),
    };
    const [tx, rx] = await new Builder(anonymous).open();
    expect(rx.stats().storeId).toBeUndefined();
    await tx.push(text(1));
    expect(() => forward(rx, { connection: nc, subject })).toThrow(/options\.origin/);
    expect(rx.stats()).toMatchObject({ ready: 1, inFlight: 0 });
    const stop = new AbortController();
    const f = forward(rx, { connection: nc, subject }, { origin: 'edge-7.queue-a', signal: stop.signal });
    await rx.onIdle();
    expect(differences(await readStream(jsm, stream), 'edge-7.queue-a', 1, text)).toEqual([]);
    stop.abort();
    await f.done;
    await tx.close();
  });
});
