/**
 * Store-and-forward under faults, against a real nats-server of the test's own:
 * - the forwarder starts with no server on its port (an edge device that boots offline): pushes
 *   resolve at once into the local queue, and everything is forwarded once a server starts there;
 * - the server is SIGKILLed mid-forward and started again: the publishes in flight are failed at
 *   the disconnect and the backoff ends at the reconnect, so forwarding resumes without waiting
 *   out a publish timeout or a backoff (both set far beyond the test's own timeout);
 * - the server is SIGKILLed mid-forward and started again on the same store directory: the local
 *   queue absorbs pushes meanwhile, the forwarder backs off and resumes by itself, and the stream
 *   ends up holding every item exactly once;
 * - the forwarder (a child process) is SIGKILLed mid-forward and a second forwarder opens the same
 *   store: nothing is lost, and the stream holds no duplicate (the duplicate window drops the
 *   items the first one published but did not ack locally).
 * Every wait is on an event (a server's "ready" line, a connection's status report, a message on
 * the subject, the queue's onIdle()), never on a fixed time.
 */
import { dirname } from 'node:path';
import type { JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { forward } from '../../../src/engines/jetstream/forward.js';
import { Builder, LogStore } from '../../../src/index.js';
import { cleanupDirs, freshDir } from '../../stores/log/helpers.js';
import { distUrl, runModule } from '../../support/child-process.js';
import { NatsServer, natsServerBinary } from '../../support/nats-restartable.js';
import { connect } from '@nats-io/transport-node';
import { freePort } from '../../support/nats-server.js';
import { WatchedClock, connectTo, differences, freshStream, managerOf, nextStatus, readStream } from './support.js';

const binary = natsServerBinary();
if (binary === null) console.log('skipped: no nats-server binary (set NATS_SERVER, or install nats-server)');

const text = (seq: number): string => `payload of item ${seq}`;

/** Resolves once `count` messages were published on `subject` (a plain subscription sees every one the stream takes). */
function messagesSeen(nc: NatsConnection, subject: string, count: number): Promise<void> {
  return new Promise((resolve) => {
    let seen = 0;
    const sub = nc.subscribe(subject, {
      callback: () => {
        if (++seen === count) {
          sub.unsubscribe();
          resolve();
        }
      },
    });
  });
}

/** `readStream`, tried again while the manager's own connection is still coming back (a request timeout). */
async function readStreamOnceReachable(jsm: JetStreamManager, stream: string): ReturnType<typeof readStream> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await readStream(jsm, stream);
    } catch (e) {
      if (attempt >= 5 || (e as Error)?.name !== 'TimeoutError') throw e;
    }
  }
}

describe.skipIf(binary === null)('forward() under faults', () => {
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

  test('aServerKilledMidForwardLosesNothingAndTheStreamHoldsEveryItemOnce', async () => {
    const { stream, subject } = await freshStream(jsm);
    const store = await LogStore.open(freshDir());
    const [tx, rx] = await new Builder(store).open();
    const before = 3000;
    const during = 500;
    await tx.pushMany(Array.from({ length: before }, (_, i) => text(i + 1)));
    // The test's connection is the forwarder's: its reports say when the server went and came back.
    const fwd = await connectTo(server.url);
    let backoffs = 0;
    let firstBackoff!: () => void;
    const backedOff = new Promise<void>((r) => (firstBackoff = r));
    const clock = {
      now: () => Date.now(),
      setTimeout: (fn: () => void, ms: number) => {
        if (++backoffs === 1) firstBackoff();
        return setTimeout(fn, ms);
      },
      clearTimeout: (h: unknown) => clearTimeout(h as ReturnType<typeof setTimeout>),
    };
    const stop = new AbortController();
    const midway = messagesSeen(nc, subject, 600);
    const f = forward(
      rx,
      { connection: fwd, subject, stream },
      { batch: 64, concurrency: 2, publishTimeoutMs: 500, backoffMs: 10, backoffMaxMs: 200, clock, signal: stop.signal },
    );
    await midway;
    const gone = nextStatus(fwd, 'disconnect');
    await server.kill();
    await gone;
    // Offline: the local queue goes on taking pushes, and the forwarder backs off.
    const seqs = await tx.pushMany(Array.from({ length: during }, (_, i) => text(before + i + 1)));
    expect(seqs[during - 1]).toBe(before + during);
    await backedOff;
    expect(f.stats().connected).toBe(false);
    expect(f.stats().backlog).toBeGreaterThan(during);
    const back = nextStatus(fwd, 'reconnect');
    await server.restart();
    await back;
    await rx.onIdle();
    // Its counters are final once it has stopped (an ack resolves before the forwarder counts it).
    stop.abort();
    await f.done;
    const s = f.stats();
    expect(s).toMatchObject({ backlog: 0, inHand: 0, inFlight: 0, connected: true, stopped: true });
    expect(s.failedPublishes).toBeGreaterThan(0);
    expect(s.lastError).not.toBeNull();
    expect(s.forwarded).toBeGreaterThanOrEqual(before + during);
    expect(differences(await readStream(jsm, stream), store.storeId!, before + during, text)).toEqual([]);
    console.log(`server kill: ${s.failedPublishes} failed publishes retried, ${s.duplicates} published again and dropped as duplicates`);
    await fwd.close();
    await tx.close();
  });

  test('forwardingResumesAtTheReconnectWithoutWaitingOutAPublishTimeoutOrABackoff', async () => {
    const { stream, subject } = await freshStream(jsm);
    const store = await LogStore.open(freshDir());
    const [tx, rx] = await new Builder(store).open();
    const before = 3000;
    const during = 200;
    await tx.pushMany(Array.from({ length: before }, (_, i) => text(i + 1)));
    const fwd = await connectTo(server.url);
    // A clock nobody moves: a backoff on it ends only by a stop or a reconnect. And a publish
    // timeout of ten minutes: a publish lost with the server would hold its lane that long.
    const clock = new WatchedClock();
    const stop = new AbortController();
    // One batch of everything, so that the kill finds publishes in flight.
    const tenth = messagesSeen(nc, subject, 10);
    const f = forward(rx, { connection: fwd, subject, stream }, { batch: before, publishTimeoutMs: 600_000, clock, signal: stop.signal });
    await tenth;
    const gone = nextStatus(fwd, 'disconnect');
    await server.kill();
    await gone;
    await tx.pushMany(Array.from({ length: during }, (_, i) => text(before + i + 1)));
    const back = nextStatus(fwd, 'reconnect');
    await server.restart();
    await back;
    await rx.onIdle();
    stop.abort();
    await f.done;
    const s = f.stats();
    // The publishes in flight at the kill failed at the disconnect, not after their timeout.
    expect(s.failedPublishes).toBeGreaterThan(0);
    expect(s).toMatchObject({ backlog: 0, inHand: 0, inFlight: 0, stopped: true });
    // The test's own connection reconnects on its own schedule: its first request after the
    // restart may time out on a loaded machine, which says nothing of the forwarder.
    expect(differences(await readStreamOnceReachable(jsm, stream), store.storeId!, before + during, text)).toEqual([]);
    await fwd.close();
    await tx.close();
  });

  test('aForwarderKilledMidForwardThenASecondOneLosesNothingAndDuplicatesNothing', async () => {
    const { stream, subject } = await freshStream(jsm);
    const dir = freshDir();
    const total = 20_000;
    {
      const store = await LogStore.open(dir);
      const [tx] = await new Builder(store).open();
      for (let at = 0; at < total; at += 1000) await tx.pushMany(Array.from({ length: 1000 }, (_, i) => text(at + i + 1)));
      await tx.close();
    }
    const child = runModule(
      dirname(freshDir()),
      'forwarder.mjs',
      `
import { Builder, LogStore } from ${JSON.stringify(distUrl('index.js'))};
import { forward } from ${JSON.stringify(distUrl('engines/jetstream/forward.js'))};
import { connect } from ${JSON.stringify(import.meta.resolve('@nats-io/transport-node'))};
const [dir, url, subject] = process.argv.slice(2);
const store = await LogStore.open(dir);
const [, rx] = await new Builder(store).open();
const nc = await connect({ servers: url, maxReconnectAttempts: -1 });
forward(rx, { connection: nc, subject }, { batch: 64, concurrency: 4 });
console.log('forwarding ' + store.storeId);
`,
      [dir, server.url, subject],
    );
    const midway = messagesSeen(nc, subject, 1000);
    await child.until((lines) => lines.some((l) => l.startsWith('forwarding ')));
    const origin = child.lines.find((l) => l.startsWith('forwarding '))!.slice('forwarding '.length);
    await midway;
    await child.kill();

    const store = await LogStore.open(dir);
    const [tx, rx] = await new Builder(store).open();
    expect(store.storeId).toBe(origin);
    // The precondition of the test: the first forwarder died with items left to forward.
    expect(rx.stats().ready, 'the first forwarder finished before it was killed: raise `total`').toBeGreaterThan(0);
    const stop = new AbortController();
    const f = forward(rx, { connection: nc, subject }, { signal: stop.signal });
    await rx.onIdle();
    stop.abort();
    await f.done;
    const messages = await readStream(jsm, stream);
    expect(differences(messages, origin, total, text)).toEqual([]);
    const { forwarded, duplicates } = f.stats();
    console.log(
      `forwarder crash: ${total - forwarded + duplicates} items forwarded by the first forwarder, ${duplicates} published again by the second and dropped as duplicates`,
    );
    await tx.close();
  });
});

describe.skipIf(binary === null)('forward() from a device that boots offline', () => {
  afterAll(() => cleanupDirs());

  test('aForwarderStartedWithNoServerBuffersLocallyAndForwardsOnceTheServerAppears', async () => {
    const port = await freePort();
    const store = await LogStore.open(freshDir());
    const [tx, rx] = await new Builder(store).open();
    const stream = `PQ_FWD_BOOT_${process.pid}`;
    const subject = `pq.fwd.boot.${process.pid}`;
    // Not awaited: nothing listens on the port yet, and the connection is made when a server does.
    const connection = connect({
      servers: `127.0.0.1:${port}`,
      waitOnFirstConnect: true,
      maxReconnectAttempts: -1,
      reconnectTimeWait: 50,
      reconnectJitter: 0,
    });
    const stop = new AbortController();
    const f = forward(rx, { connection, subject, stream: { name: stream, duplicate_window: 120e9 } }, { signal: stop.signal });
    // No server exists yet: the pushes resolve into the local queue.
    const seqs = await tx.pushMany(Array.from({ length: 200 }, (_, i) => text(i + 1)));
    expect(seqs).toEqual(Array.from({ length: 200 }, (_, i) => i + 1));
    expect(f.stats()).toMatchObject({ connected: false, forwarded: 0, backlog: 200, durability: null, stopped: false });
    const server = await NatsServer.start(binary!, { port });
    try {
      await rx.onIdle();
      stop.abort();
      await f.done;
      expect(f.stats()).toMatchObject({ connected: true, forwarded: 200, backlog: 0, inHand: 0 });
      // The stream was created by the forwarder, once the server answered, before its first publish.
      const nc = await connectTo(server.url);
      expect(differences(await readStream(await managerOf(nc), stream), store.storeId!, 200, text)).toEqual([]);
      await nc.close();
      await (await connection).close();
      await tx.close();
    } finally {
      await server.stop();
    }
  });
});
