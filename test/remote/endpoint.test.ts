/**
 * The owner's endpoint over a real Unix socket: the owner is this process (a LogStore under the
 * queue), producers are `connect()`ed here or are raw sockets writing frames by hand. What a killed
 * owner leaves behind is made by a real child process (dist/), killed with SIGKILL.
 */
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer, connect as netConnect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, test } from 'vitest';
import { json, validated, type StandardSchemaV1 } from '../../src/lib/codec.js';
import { QueueError } from '../../src/contract/errors.js';
import { LogStore, nodeFileSystem } from '../../src/stores/log/log-store.js';
import { Builder, type Consumer, type Producer } from '../../src/core/builder.js';
import { EndpointClient } from '../../src/remote/client.js';
import { connect } from '../../src/remote/connect.js';
import {
  FRAME_HEADER_BYTES,
  REQ_PUSH,
  encodeHello,
  encodeHelloReply,
  encodePush,
  maxFrameBodyBytes,
  newFrame,
} from '../../src/remote/protocol.js';
import { SOCKET_PATH_BYTES_MAX, withSocketPath } from '../../src/remote/socket-path.js';
import { CrashFileSystem, Prng } from '../../src/testing/index.js';
import { distUrl, runModule } from '../support/child-process.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
function freshDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'pq-ep-'));
  dirs.push(d);
  return d;
}

const utf8 = new TextEncoder();
const text = (b: Uint8Array): string => new TextDecoder().decode(b);
const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

interface Owner {
  dir: string;
  store: LogStore;
  tx: Producer;
  rx: Consumer;
}

async function openOwner(dir: string, setup: (b: Builder) => Builder = (b) => b, storeOptions = {}): Promise<Owner> {
  const store = await LogStore.open(dir, storeOptions);
  const [tx, rx] = await setup(new Builder(store)).open();
  return { dir, store, tx, rx };
}

/** Everything still in the queue, acked as read. */
/**
 * The texts of the next `count` items and of any ready after them, each acked. It waits for each
 * of the `count` with reserve(): a remote push resolves once its item is stored, and the owner's
 * consumer may still be reading it from the store then, when tryReserve() would answer null.
 */
async function drain(rx: Consumer, count: number): Promise<string[]> {
  const out: string[] = [];
  const signal = AbortSignal.timeout(5000);
  while (out.length < count) {
    const item = await rx.reserve({ signal });
    if (item === null) break;
    out.push(text(item.bytes));
    void item.ack();
  }
  for (let item = rx.tryReserve(); item !== null; item = rx.tryReserve()) {
    out.push(text(item.bytes));
    void item.ack();
  }
  return out;
}

/** A raw connection to the owner's socket; `closed` resolves when the owner cuts it. */
function rawSocket(dir: string): Promise<{ socket: Socket; closed: Promise<void>; received: () => Buffer }> {
  return new Promise((resolve, reject) => {
    const socket = netConnect({ path: join(dir, 'pq.sock') });
    const chunks: Buffer[] = [];
    socket.on('data', (c: Buffer) => chunks.push(c));
    const closed = new Promise<void>((r) => socket.on('close', () => r()));
    socket.on('error', () => {});
    socket.once('connect', () => resolve({ socket, closed, received: () => Buffer.concat(chunks) }));
    socket.once('error', reject);
  });
}

async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await turn();
}

describe('the endpoint file', () => {
  test('theSocketIsASocketOfMode0600InTheStoreDirectoryAndIsRemovedAtClose', async () => {
    const dir = freshDir();
    const owner = await openOwner(dir);
    const st = lstatSync(join(dir, 'pq.sock'));
    expect(st.isSocket()).toBe(true);
    expect(st.mode & 0o777).toBe(0o600);
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(readdirSync(dir)).not.toContain('pq.sock.tmp');
    await owner.rx.close();
    expect(existsSync(join(dir, 'pq.sock'))).toBe(false);
  });

  test('aReadOnlyStoreAndAStoreOpenedWithEndpointFalseServeNobody', async () => {
    const dir = freshDir();
    const owner = await openOwner(dir, (b) => b, { endpoint: false });
    expect(existsSync(join(dir, 'pq.sock'))).toBe(false);
    expect(await EndpointClient.reach(dir)).toEqual({ absent: `there is no ${join(dir, 'pq.sock')}` });
    await owner.rx.close();
    const ro = await LogStore.open(dir, { readOnly: true });
    await ro.attach({} as never);
    expect(existsSync(join(dir, 'pq.sock'))).toBe(false);
    await ro.close();
  });

  test('aStoreOverAnotherFileSystemServesOnlyWhenEndpointIsTrue', async () => {
    const dir = freshDir();
    // A FileSystem of its own that writes to the real disk: the socket would land beside the store.
    const wrapped = { ...nodeFileSystem };
    const quiet = await openOwner(dir, (b) => b, { fs: wrapped });
    expect(existsSync(join(dir, 'pq.sock'))).toBe(false);
    await quiet.rx.close();
    const serving = await openOwner(dir, (b) => b, { fs: wrapped, endpoint: true });
    expect(lstatSync(join(dir, 'pq.sock')).isSocket()).toBe(true);
    await serving.rx.close();
    // The crash disk's directories are not on the real disk: a store over it serves nobody.
    const crash = new CrashFileSystem({ seed: 1 });
    const simulated = await openOwner('/q', (b) => b, { fs: crash });
    expect(existsSync('/q/pq.sock')).toBe(false);
    await simulated.rx.close();
  });

  // What connect() does without an owner is the spool's to say; until the spool lands, its
  // producer side refuses (ERR_UNSUPPORTED), and connect() must say why it went there.
  test('withNoOwnerConnectSpoolsAndTheNextOwnerIngestsThePushes', async () => {
    const dir = freshDir();
    const tx = await connect(dir);
    expect(tx.mode).toBe('spool');
    // A spooled push's seq is given when the owner ingests it: it resolves with 0.
    expect(await tx.push('spooled', { priority: 1 })).toBe(0);
    expect(await tx.pushMany(['a', 'b'])).toEqual([0, 0]);
    await tx.close();
    const owner = await openOwner(dir);
    await owner.store.ingestSpool();
    const got: string[] = [];
    for (let it = owner.rx.tryReserve(); it !== null; it = owner.rx.tryReserve()) got.push(new TextDecoder().decode(it.bytes));
    expect(got).toEqual(['spooled', 'a', 'b']);
    await owner.rx.close();
  });

  test('withNoOwnerConnectIntoADirectoryThatIsNotAStoreSaysWhyAndWritesNothing', async () => {
    const dir = freshDir();
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'notes.txt'), 'mine');
    const error = await connect(dir).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(QueueError);
    expect(error).toMatchObject({
      code: 'ERR_STORE',
      message: expect.stringContaining(
        `No process serves the queue in ${dir} (there is no ${join(dir, 'pq.sock')}), and its spool cannot be used`,
      ),
    });
    expect(existsSync(join(dir, 'spool'))).toBe(false);
  });

  test('anEndpointThatCannotBeServedFailsTheOpenAndReleasesTheStore', async () => {
    const dir = freshDir();
    // A directory where the socket is bound first: it cannot be replaced.
    mkdirSync(join(dir, 'pq.sock.tmp'));
    writeFileSync(join(dir, 'pq.sock.tmp', 'x'), 'x');
    const store = await LogStore.open(dir);
    const error = await new Builder(store).open().catch((e: unknown) => e);
    expect(error).toMatchObject({
      name: 'OpenError',
      code: 'ERR_STORE',
      message: expect.stringContaining('failed to serve the queue to other processes'),
    });
    expect(existsSync(join(dir, 'LOCK'))).toBe(false);
    rmSync(join(dir, 'pq.sock.tmp'), { recursive: true });
    const owner = await openOwner(dir);
    expect(await owner.tx.push('served again')).toBe(1);
    await owner.rx.close();
  });

  test('theEndpointOptionIsABoolean', async () => {
    const dir = freshDir();
    await expect(LogStore.open(dir, { endpoint: 'no' as never })).rejects.toThrow(
      new TypeError('Expected `endpoint` to be a boolean, got `"no"` (string)'),
    );
    expect(readdirSync(dir)).toEqual([]);
  });

  test('aStorePathLongerThanASocketPathIsServedThroughAPrivateSymlinkThatIsGoneAfterwards', async () => {
    const base = freshDir();
    const privateTmp = join(base, 't');
    mkdirSync(privateTmp);
    let dir = join(base, 'store');
    while (Buffer.byteLength(join(dir, 'pq.sock')) <= SOCKET_PATH_BYTES_MAX + 20) dir = join(dir, 'a-rather-long-directory-name');
    const saved = process.env.TMPDIR;
    process.env.TMPDIR = privateTmp;
    try {
      const owner = await openOwner(dir);
      expect(lstatSync(join(dir, 'pq.sock')).isSocket()).toBe(true);
      expect(lstatSync(join(dir, 'pq.sock')).mode & 0o777).toBe(0o600);
      const producer = await connect(dir);
      expect(producer.mode).toBe('endpoint');
      expect(await producer.push('through a long path')).toBe(1);
      expect(await drain(owner.rx, 1)).toEqual(['through a long path']);
      // Neither the bind nor the connect left its private directory behind.
      expect(readdirSync(privateTmp)).toEqual([]);
      // No abstract-namespace socket: every Unix socket of this process has a path in the file system.
      const abstract = readFileSync('/proc/net/unix', 'utf8')
        .split('\n')
        .filter((l) => / @\S*pq/.test(l));
      expect(abstract).toEqual([]);
      await producer.close();
      await owner.rx.close();
      expect(existsSync(join(dir, 'pq.sock'))).toBe(false);
    } finally {
      if (saved === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = saved;
    }
  });

  test('theShortPathIsASymlinkInAFreshDirectoryOfMode0700AndRemovingItLeavesTheStoreAlone', async () => {
    const base = freshDir();
    const dir = join(base, 'x'.repeat(SOCKET_PATH_BYTES_MAX));
    mkdirSync(dir);
    writeFileSync(join(dir, 'keep'), 'kept');
    let seen = '';
    await withSocketPath(dir, 'pq.sock', async (path) => {
      seen = path;
      const link = join(path, '..');
      expect(lstatSync(link).isSymbolicLink()).toBe(true);
      expect(lstatSync(join(link, '..')).mode & 0o777).toBe(0o700);
      expect(readFileSync(join(link, 'keep'), 'utf8')).toBe('kept');
      expect(Buffer.byteLength(path)).toBeLessThanOrEqual(SOCKET_PATH_BYTES_MAX);
    });
    expect(existsSync(join(seen, '..', '..'))).toBe(false);
    expect(readFileSync(join(dir, 'keep'), 'utf8')).toBe('kept');
  });

  test('aStaleSocketOfAKilledOwnerIsRefusedByConnectAndReplacedByTheNextOwner', async () => {
    const base = freshDir();
    const dir = join(base, 'store');
    const child = runModule(
      base,
      'owner.mjs',
      `import { Builder, LogStore } from ${JSON.stringify(distUrl('index.js'))};
const [tx, rx] = await new Builder(await LogStore.open(process.argv[2])).open();
await tx.push('before the kill');
console.log('ready');
for await (const item of rx) {}
`,
      [dir],
    );
    await child.until((l) => l.includes('ready'));
    await child.kill();
    expect(lstatSync(join(dir, 'pq.sock')).isSocket()).toBe(true);
    // Nothing listens: no owner is reached (connect() goes to the spool).
    expect(await EndpointClient.reach(dir)).toEqual({
      absent: `nothing listens on ${join(dir, 'pq.sock')}: the process that served it is gone`,
    });
    writeFileSync(join(dir, 'pq.sock.tmp'), 'left by a start cut short');
    const owner = await openOwner(dir);
    expect(readdirSync(dir)).not.toContain('pq.sock.tmp');
    const producer = await connect(dir);
    expect(await producer.push('after the restart')).toBe(2);
    expect(await drain(owner.rx, 2)).toEqual(['before the kill', 'after the restart']);
    await producer.close();
    await owner.rx.close();
  });
});

describe('hostile bytes', () => {
  /** A connected producer pushes before and after `attack`, which must be cut off and store nothing. */
  async function survives(attack: (dir: string) => Promise<void>): Promise<void> {
    const dir = freshDir();
    const owner = await openOwner(dir);
    const producer = await connect(dir);
    expect(await producer.push('before')).toBe(1);
    await attack(dir);
    expect(await producer.push('after')).toBe(2);
    expect(owner.tx.stats().pushed).toBe(2);
    expect(await drain(owner.rx, 2)).toEqual(['before', 'after']);
    await producer.close();
    await owner.rx.close();
  }

  test('randomBytesCloseTheirConnectionAndNoOther', async () => {
    const seed = 0xbad5eed;
    const rnd = new Prng(seed);
    for (let run = 0; run < 20; run++) {
      await survives(async (dir) => {
        const { socket, closed } = await rawSocket(dir);
        // A hello first half the time, so the garbage reaches the decoder of a greeted connection.
        if (rnd.bool()) socket.write(encodeHello(1));
        socket.write(rnd.bytes(FRAME_HEADER_BYTES + rnd.int(200)));
        socket.end();
        await closed;
      }).catch((error: Error) => {
        throw new Error(`seed ${seed} run ${run}: ${error.message}`);
      });
    }
  });

  test('aHeaderClaimingAnOversizedBodyIsCutBeforeTheBodyIsSent', async () => {
    await survives(async (dir) => {
      const { socket, closed } = await rawSocket(dir);
      socket.write(encodeHello(1));
      const header = newFrame(REQ_PUSH, 2, 0);
      new DataView(header.buffer).setUint32(0, 0xffffffff, true);
      socket.write(header); // the socket stays open on this side: only the owner can end it
      await closed;
    });
  });

  test('aFrameTruncatedByTheEndOfTheStreamStoresNothing', async () => {
    await survives(async (dir) => {
      const { socket, closed } = await rawSocket(dir);
      const push = encodePush(2, { payloads: [utf8.encode('never stored')], priority: 0, notBefore: 0, keys: undefined });
      socket.write(encodeHello(1));
      socket.end(push.subarray(0, push.length - 1));
      await closed;
    });
  });

  test('aPushBeforeTheHelloOrAFrameWithTrailingBytesClosesTheConnection', async () => {
    await survives(async (dir) => {
      const first = await rawSocket(dir);
      first.socket.write(encodePush(1, { payloads: [utf8.encode('x')], priority: 0, notBefore: 0, keys: undefined }));
      await first.closed;
      const second = await rawSocket(dir);
      const push = encodePush(2, { payloads: [utf8.encode('x')], priority: 0, notBefore: 0, keys: undefined });
      new DataView(push.buffer).setUint32(FRAME_HEADER_BYTES + 16, 0, true); // payload length 0: one byte left over
      second.socket.write(encodeHello(1));
      second.socket.write(push);
      await second.closed;
    });
  });

  test('aPushOverMaxItemBytesInAWellFormedFrameIsAnsweredWithErrTooLarge', async () => {
    const dir = freshDir();
    const owner = await openOwner(dir, (b) => b, { maxItemBytes: 64 });
    const { socket, received } = await rawSocket(dir);
    socket.write(encodeHello(1));
    socket.write(encodePush(2, { payloads: [new Uint8Array(65)], priority: 0, notBefore: 0, keys: undefined }));
    await until(() => received().length >= 17 + FRAME_HEADER_BYTES + 4);
    const bytes = received();
    const error = bytes.subarray(17);
    expect(error[4]).toBe(0x8f);
    expect(error.subarray(FRAME_HEADER_BYTES + 4, FRAME_HEADER_BYTES + 4 + 13).toString()).toBe('ERR_TOO_LARGE');
    expect(maxFrameBodyBytes(64)).toBeGreaterThan(65);
    socket.destroy();
    expect(owner.tx.stats().pushed).toBe(0);
    await owner.rx.close();
  });
});

describe('protocol versions', () => {
  test('aHelloOfAnotherVersionIsAnsweredWithErrUnsupportedVersionAndTheConnectionEnds', async () => {
    const dir = freshDir();
    const owner = await openOwner(dir);
    const { socket, closed, received } = await rawSocket(dir);
    socket.write(encodeHello(1, 2));
    await closed;
    const reply = received();
    expect(reply[4]).toBe(0x8f);
    expect(reply.subarray(FRAME_HEADER_BYTES + 4, FRAME_HEADER_BYTES + 4 + 23).toString()).toBe('ERR_UNSUPPORTED_VERSION');
    expect(owner.tx.stats().pushed).toBe(0);
    await owner.rx.close();
  });

  test('anOwnerAnsweringWithAnotherVersionIsRefusedByConnect', async () => {
    const dir = freshDir();
    // Not an owner of this build: a server that answers every hello with version 2.
    const server = createServer((s) => s.on('data', () => s.write(encodeHelloReply(1, 1024, 2))));
    await new Promise<void>((resolve) => server.listen(join(dir, 'pq.sock'), resolve));
    try {
      await expect(connect(dir)).rejects.toMatchObject({ code: 'ERR_UNSUPPORTED_VERSION' });
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });
});

describe('pushes through the endpoint', () => {
  test('aPushResolvesWithTheOwnersSeqsAndKeepsPriorityNotBeforeAndKeys', async () => {
    const dir = freshDir();
    const owner = await openOwner(dir);
    const producer = await connect(dir);
    expect(producer.mode).toBe('endpoint');
    expect(await producer.push('plain')).toBe(1);
    expect(await producer.pushMany(['urgent-a', 'urgent-b'], { priority: 9 })).toEqual([2, 3]);
    expect(await producer.push(utf8.encode('later'), { delayMs: 3_600_000 })).toBe(4);
    expect(await producer.push('dated', { notBefore: new Date(Date.now() + 3_600_000) })).toBe(5);
    expect(await producer.push('keyed', { key: 'order-1' })).toBe(6);
    expect(await producer.push('keyed again', { key: 'order-1' })).toBe(6);
    expect(await producer.pushMany(['k2', 'k3', 'k2 again'], { keys: ['order-2', 'order-3', 'order-2'] })).toEqual([7, 8, 7]);
    expect(await producer.pushMany([])).toEqual([]);
    expect(await drain(owner.rx, 6)).toEqual(['urgent-a', 'urgent-b', 'plain', 'keyed', 'k2', 'k3']);
    expect(owner.rx.stats().delayed).toBe(2);
    await producer.close();
    await owner.rx.close();
  });

  test('aBatchLargerThanOneFrameIsSentAsSeveralPushesInOrder', async () => {
    const dir = freshDir();
    const owner = await openOwner(dir, (b) => b, { maxItemBytes: 1024 });
    const producer = await connect(dir);
    const values = Array.from({ length: 200 }, (_, i) => `${i}:${'x'.repeat(1000)}`);
    const seqs = await producer.pushMany(values);
    expect(seqs).toEqual(values.map((_, i) => i + 1));
    expect(await drain(owner.rx, values.length)).toEqual(values);
    await producer.close();
    await owner.rx.close();
  });

  test('aTypedProducerEncodesAndValidatesBeforeSending', async () => {
    const dir = freshDir();
    interface Order {
      id: number;
    }
    const order: StandardSchemaV1<unknown, Order> = {
      '~standard': {
        version: 1,
        vendor: 'test',
        validate: (v) => (typeof (v as Order)?.id === 'number' ? { value: v as Order } : { issues: [{ message: 'id must be a number' }] }),
      },
    };
    const owner = await openOwner(dir, (b) => b.codec(json(order)) as unknown as Builder);
    const producer = await connect(dir, { codec: json(order) });
    expect(await producer.push({ id: 7 })).toBe(1);
    await expect(producer.push({ id: 'x' } as unknown as Order)).rejects.toMatchObject({ code: 'ERR_INVALID' });
    const cyclic: { id: number; self?: unknown } = { id: 1 };
    cyclic.self = cyclic;
    const loose = await connect(dir, { codec: validated(json(), order) });
    await expect(loose.push(cyclic)).rejects.toMatchObject({ code: 'ERR_ENCODE' });
    expect(owner.tx.stats().pushed).toBe(1);
    await producer.close();
    await loose.close();
    await owner.rx.close();
  });

  test('capacityBackpressureKeepsARemotePushPendingUntilAnAckFreesRoom', async () => {
    const dir = freshDir();
    const owner = await openOwner(dir, (b) => b.capacity(1));
    await owner.tx.push('fills the queue');
    const producer = await connect(dir);
    let resolved: number | null = null;
    const remote = producer.push('waits').then((seq) => (resolved = seq));
    await until(() => owner.tx.stats().pendingPushes === 1);
    expect(resolved).toBe(null);
    const first = owner.rx.tryReserve()!;
    await first.ack();
    expect(await remote).toBe(2);
    expect(await drain(owner.rx, 1)).toEqual(['waits']);
    await producer.close();
    await owner.rx.close();
  });

  test('abortingARemotePushThatWaitsForCapacityWithdrawsItWithNoTrace', async () => {
    const dir = freshDir();
    const owner = await openOwner(dir, (b) => b.capacity(2));
    await owner.tx.pushMany(['fills', 'the queue']);
    const producer = await connect(dir);
    const controller = new AbortController();
    const reason = new Error('caller gave up');
    const remote = producer.pushMany(['withdrawn-1', 'withdrawn-2'], { signal: controller.signal, keys: ['w1', 'w2'] });
    await until(() => owner.tx.stats().pendingPushes === 1);
    controller.abort(reason);
    await expect(remote).rejects.toBe(reason);
    expect(owner.tx.stats().pendingPushes).toBe(0);
    // The keys were not stored either: the same keys push anew.
    expect(await drain(owner.rx, 2)).toEqual(['fills', 'the queue']);
    expect(await producer.pushMany(['again-1'], { keys: ['w1'] })).toEqual([3]);
    // Stored when the push resolves; the consumer reads it from the store, which may still be
    // under way when the producer hears back, so it waits for it rather than try once.
    const again = (await owner.rx.reserve())!;
    expect(text(again.bytes)).toBe('again-1');
    await again.ack();
    expect(owner.store.inspect().nextSeq).toBe(4);
    // An already aborted signal sends nothing.
    await expect(producer.push('never', { signal: AbortSignal.abort(reason) })).rejects.toBe(reason);
    expect(owner.tx.stats().pushed).toBe(3);
    await producer.close();
    await owner.rx.close();
  });

  test('closingTheProducerWithdrawsItsWaitingPushesWithErrClosed', async () => {
    const dir = freshDir();
    const owner = await openOwner(dir, (b) => b.capacity(1));
    await owner.tx.push('fills the queue');
    const producer = await connect(dir);
    const remote = producer.push('waits').catch((error: unknown) => error);
    await until(() => owner.tx.stats().pendingPushes === 1);
    await producer.close();
    expect(await remote).toMatchObject({ code: 'ERR_CLOSED' });
    await expect(producer.push('after close')).rejects.toMatchObject({ code: 'ERR_CLOSED' });
    expect(owner.tx.stats().pendingPushes).toBe(0);
    expect(await drain(owner.rx, 1)).toEqual(['fills the queue']);
    await owner.rx.close();
  });
});

describe('typed errors cross the endpoint', () => {
  test('theOwnersQueueErrorsKeepTheirCodeAndItsRangeErrorsStayRangeErrors', async () => {
    const dir = freshDir();
    const owner = await openOwner(dir, (b) => b.capacity(3).capacityBytes(100).idempotency({ maxKeys: 1 }));
    const producer = await connect(dir);
    expect(await producer.push('a', { key: 'only-key' })).toBe(1);
    const full = await producer.push('b', { key: 'second-key' }).catch((e: unknown) => e);
    expect(full).toBeInstanceOf(QueueError);
    expect(full).toMatchObject({ code: 'ERR_KEYS_FULL' });
    await expect(producer.push('x'.repeat(101))).rejects.toBeInstanceOf(RangeError);
    await expect(producer.pushMany(['1', '2', '3', '4'])).rejects.toBeInstanceOf(RangeError);
    expect(owner.tx.stats().pushed).toBe(1);
    await producer.close();
    await owner.rx.close();
  });

  test('aPayloadOverTheOwnersMaxItemBytesIsErrTooLargeBeforeItIsSent', async () => {
    const dir = freshDir();
    const owner = await openOwner(dir, (b) => b, { maxItemBytes: 64 });
    const producer = await connect(dir);
    await expect(producer.push(new Uint8Array(65))).rejects.toMatchObject({ code: 'ERR_TOO_LARGE' });
    await expect(producer.pushMany([new Uint8Array(1), new Uint8Array(65)])).rejects.toMatchObject({ code: 'ERR_TOO_LARGE' });
    expect(await producer.push(new Uint8Array(64))).toBe(1);
    expect(owner.tx.stats().pushed).toBe(1);
    await producer.close();
    await owner.rx.close();
  });

  test('aPushWaitingWhenTheOwnerClosesItsQueueRejectsWithErrClosedAndLaterOnesWithErrOwnerGone', async () => {
    const dir = freshDir();
    const owner = await openOwner(dir, (b) => b.capacity(1));
    await owner.tx.push('fills the queue');
    const producer = await connect(dir);
    const remote = producer.push('waits').catch((error: unknown) => error);
    await until(() => owner.tx.stats().pendingPushes === 1);
    await owner.rx.close();
    expect(await remote).toMatchObject({ code: 'ERR_CLOSED' });
    await expect(producer.push('after')).rejects.toMatchObject({ code: 'ERR_OWNER_GONE' });
    await producer.close();
    const reopened = await openOwner(dir);
    expect(await drain(reopened.rx, 1)).toEqual(['fills the queue']);
    await reopened.rx.close();
  });
});

describe('bad input', () => {
  test('connectRefusesBadArgumentsWithTypedErrors', async () => {
    const dir = freshDir();
    const owner = await openOwner(dir);
    await expect(connect(42 as never)).rejects.toThrow(new TypeError('Expected `dir` to be a non-empty string, got `42` (number)'));
    await expect(connect('')).rejects.toBeInstanceOf(RangeError);
    await expect(connect(dir, null as never)).rejects.toBeInstanceOf(TypeError);
    await expect(connect(dir, { durabilty: 'sync' } as never)).rejects.toThrow(/Unknown option in `options`: `durabilty`/);
    await expect(connect(dir, { durability: 'fast' as never })).rejects.toBeInstanceOf(RangeError);
    await expect(connect(dir, { durability: 1 as never })).rejects.toBeInstanceOf(TypeError);
    await expect(connect(dir, { codec: {} as never })).rejects.toBeInstanceOf(TypeError);
    expect(owner.tx.stats().pushed).toBe(0);
    await owner.rx.close();
  });

  test('theRemoteProducerRefusesBadValuesAndOptionsAndStoresNothing', async () => {
    const dir = freshDir();
    const owner = await openOwner(dir);
    const producer = await connect(dir);
    const bad: [() => Promise<unknown>, ErrorConstructor | RangeErrorConstructor][] = [
      [() => producer.push(42 as never), TypeError],
      [() => producer.push('x', { priority: 128 }), RangeError],
      [() => producer.push('x', { priority: '1' as never }), TypeError],
      [() => producer.push('x', { delayMs: -1 }), RangeError],
      [() => producer.push('x', { delayMs: 1, notBefore: 1 }), TypeError],
      [() => producer.push('x', { notBefore: -5 }), RangeError],
      [() => producer.push('x', { key: '' }), RangeError],
      [() => producer.push('x', { key: 'k'.repeat(256) }), RangeError],
      [() => producer.push('x', { keys: ['a'] }), TypeError],
      [() => producer.push('x', { signal: 'stop' as never }), TypeError],
      [() => producer.push('x', { nope: 1 } as never), TypeError],
      [() => producer.push('x', 'fast' as never), TypeError],
      [() => producer.pushMany('abc' as never), TypeError],
      [() => producer.pushMany([1] as never), TypeError],
      [() => producer.pushMany(['a'], { key: 'k' }), TypeError],
      [() => producer.pushMany(['a'], { keys: ['a', 'b'] }), RangeError],
      [() => producer.pushMany(['a'], { keys: 'a' as never }), TypeError],
    ];
    for (const [call, type] of bad) await expect(call(), String(call)).rejects.toBeInstanceOf(type);
    expect(owner.tx.stats().pushed).toBe(0);
    await producer.close();
    await expect(producer.push('x')).rejects.toMatchObject({ code: 'ERR_CLOSED' });
    await expect(producer.pushMany([])).rejects.toMatchObject({ code: 'ERR_CLOSED' });
    expect(owner.tx.stats().pushed).toBe(0);
    await owner.rx.close();
  });
});

describe('operating a live queue through the endpoint', () => {
  test('statsDeadLettersRedrivePurgeAndCompactAnswerAsTheOwnersOwnCallsWould', async () => {
    const dir = freshDir();
    const owner = await openOwner(dir, (b) => b.maxDeliveries(1));
    await owner.tx.pushMany(['ok', 'bad-1', 'bad-2', 'bad-3']);
    await owner.rx.tryReserve()!.ack();
    for (let i = 0; i < 3; i++) await owner.rx.tryReserve()!.deadLetter(`reason ${i}`);
    const reached = await EndpointClient.reach(dir);
    if (!('client' in reached)) throw new Error(reached.absent);
    const client = reached.client;
    const stats = await client.stats();
    expect(stats).toMatchObject({ deadLetters: 3, consuming: false, store: { dir } });
    const listed = await client.deadLetters(0, 2);
    expect(listed.map((d) => [d.seq, text(d.bytes), d.reason, d.deliveries])).toEqual([
      [2, 'bad-1', 'reason 0', 1],
      [3, 'bad-2', 'reason 1', 1],
    ]);
    expect(await client.redrive({ seqs: [2], limit: undefined })).toEqual([5]);
    expect(await client.purge({ seqs: undefined, limit: 1 })).toBe(1);
    expect((await client.deadLetters(0, 10)).map((d) => d.seq)).toEqual([4]);
    await expect(client.redrive({ seqs: undefined, limit: undefined })).rejects.toBeInstanceOf(RangeError);
    expect(await client.compact()).toMatchObject({});
    const waiting = owner.rx.reserve();
    expect(await client.stats()).toMatchObject({ consuming: true });
    const item = (await waiting)!;
    expect([item.seq, text(item.bytes)]).toEqual([5, 'bad-1']);
    await item.ack();
    await client.close();
    await owner.rx.close();
  });
});
