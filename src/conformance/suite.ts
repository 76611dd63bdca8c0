/** runStoreConformance(): the Store conformance suite, with its own tests and the groups of tests the other files of this folder hold. */
import assert from 'node:assert/strict';
import { QueueError } from '../contract/errors.js';
import { type AckDurability, Builder, type Consumer, type Durability, type Producer } from '../core/builder.js';
import { type DeadLetter, type DeliveryMark, type StoredItem, type Store, STORE_ID_PATTERN, keepsDeliveries } from '../contract/store.js';
import { expectation, nonEmptyString, optionsObject } from '../lib/validate.js';
import { schedulingTests } from './scheduling.js';
import { idempotencyTests } from './idempotency.js';
import { groupTests } from './groups.js';
import { scheduleTests } from './schedules.js';
import { bytesOf, drain, readAll, skipped, textOf } from './support.js';

/** The test registration function of any runner: `test(name, fn)`; `fn` gets the runner's test context, if any. */
export type TestFunction = (name: string, fn: (context?: unknown) => Promise<void>) => unknown;

export interface ConformanceOptions<S extends Store = Store> {
  /** Shown in every test name. */
  name: string;
  /** Make a fresh, empty store (not yet opened). */
  create(): S | Promise<S>;
  /** Make a store over the same data as `previous`, which has been closed. Needed for reopen tests. */
  reopen?(previous: S): S | Promise<S>;
  /**
   * Simulate a power loss of `previous` (open or not) and return a store over what survived.
   * Needed for the crash tests; a store whose tests cannot simulate one leaves it out.
   */
  crash?(previous: S): S | Promise<S>;
  /** Release whatever `create` made (temporary directories). Called once per store made. */
  destroy?(store: S): void | Promise<void>;
}

function items(first: number, texts: string[]): StoredItem[] {
  return texts.map((t, i) => ({ seq: first + i, bytes: bytesOf(t) }));
}

/** What every group of conformance tests is registered with. */
interface Suite<S extends Store> {
  name: string;
  /** Register one test; every store it made is destroyed when it ends, passed or failed. */
  test(name: string, fn: (context: unknown) => Promise<void>): void;
  /** A fresh store, destroyed after the test. */
  make(): Promise<S>;
  /** The store over the same data after a close (`reopen`) or a simulated power loss (`crash`). */
  again(previous: S, how: 'reopen' | 'crash'): Promise<S>;
  /** Open a queue over the store; acks follow `durability` unless `acks` says otherwise. */
  open(store: S, durability?: Durability, capacity?: number, acks?: AckDurability): Promise<[Producer, Consumer]>;
}

/** Register the conformance tests for a Store implementation. */
export function runStoreConformance<S extends Store>(test: TestFunction, options: ConformanceOptions<S>): void {
  if (typeof test !== 'function') throw new TypeError(expectation('test', 'a test registration function', test));
  const o = optionsObject('options', options);
  nonEmptyString('options.name', o.name);
  if (typeof o.create !== 'function') throw new TypeError(expectation('options.create', 'a function', o.create));
  for (const hook of ['reopen', 'crash', 'destroy'] as const) {
    if (o[hook] !== undefined && typeof o[hook] !== 'function') {
      throw new TypeError(expectation(`options.${hook}`, 'a function', o[hook]));
    }
  }
  const suite = makeSuite(test, options);
  storeMethodTests(suite);
  payloadTests(suite);
  queueTests(suite);
  deliveryTests(suite);
  if (options.reopen) reopenTests(suite);
  if (options.reopen) deliveryReopenTests(suite, 'reopen');
  if (options.crash) deliveryReopenTests(suite, 'crash');
  if (options.crash) crashTests(suite);
  schedulingTests(suite, { reopen: options.reopen !== undefined, crash: options.crash !== undefined });
  idempotencyTests(suite, { reopen: options.reopen !== undefined, crash: options.crash !== undefined });
  groupTests(suite, { reopen: options.reopen !== undefined, crash: options.crash !== undefined });
  scheduleTests(suite, { reopen: options.reopen !== undefined, crash: options.crash !== undefined });
}

function makeSuite<S extends Store>(test: TestFunction, options: ConformanceOptions<S>): Suite<S> {
  const made: S[] = [];
  const remember = (s: S): S => {
    made.push(s);
    return s;
  };
  return {
    name: options.name,
    test(name, fn) {
      test(`${options.name} conformance: ${name}`, async (context?: unknown) => {
        try {
          await fn(context);
        } finally {
          for (const s of made.splice(0)) await options.destroy?.(s);
        }
      });
    },
    make: async () => remember(await options.create()),
    again: async (previous, how) => remember(await options[how]!(previous)),
    open: async (store, durability = 'group', capacity = Infinity, acks = durability === 'none' ? 'lazy' : durability) =>
      new Builder(store).durability(durability).ackDurability(acks).capacity(capacity).open(),
  };
}

/** The Store methods called directly: open, append, read, ack. */
function storeMethodTests<S extends Store>(suite: Suite<S>): void {
  suite.test('declares maxItemBytes and features', async () => {
    const store = await suite.make();
    assert.ok(Number.isSafeInteger(store.maxItemBytes) && store.maxItemBytes > 0, 'maxItemBytes is a positive integer');
    assert.equal(typeof store.features.reopen, 'boolean');
    assert.equal(typeof store.features.crashSafe, 'boolean');
  });

  suite.test('a store with done returns it only for a call already finished', async (context) => {
    const store = await suite.make();
    if (store.done === undefined) {
      skipped(context, `${suite.name} has no done`);
      return;
    }
    assert.ok(store.done instanceof Promise, 'done is a promise');
    assert.equal(await store.done, undefined, 'done is fulfilled');
    const { nextSeq: s } = await store.open();
    const range = { after: s - 1, before: Number.MAX_SAFE_INTEGER, limit: 10 };
    const appended = store.append(items(s, ['a', 'b']), false);
    if (appended === store.done) {
      // Finished before returning: a read asked for now, before anything else runs, sees the batch.
      const seen = await store.read(range);
      assert.deepEqual(
        seen.map((i) => i.seq),
        [s, s + 1],
        'a read right after an append that returned done',
      );
    }
    await appended;
    const acked = store.ack([s], false);
    if (acked === store.done) {
      const seen = await store.read(range);
      assert.deepEqual(
        seen.map((i) => i.seq),
        [s + 1],
        'a read right after an ack that returned done',
      );
    }
    await acked;
    await store.close();
  });

  suite.test('an empty store opens with nextSeq >= 1 and count 0', async () => {
    const store = await suite.make();
    const r = await store.open();
    assert.ok(Number.isSafeInteger(r.nextSeq) && r.nextSeq >= 1);
    assert.equal(r.count, 0);
    assert.deepEqual(await readAll(store), []);
    await store.close();
  });

  suite.test('read returns appended items exactly, in seq order, within the range and limit', async () => {
    const store = await suite.make();
    const { nextSeq: s } = await store.open();
    const batch = items(s, ['a', '', 'ccc', 'dddd', 'e']);
    await store.append(batch.slice(0, 2), true);
    await store.append(batch.slice(2), false);
    const all = await readAll(store);
    assert.deepEqual(
      all.map((i) => i.seq),
      [s, s + 1, s + 2, s + 3, s + 4],
    );
    assert.deepEqual(
      all.map((i) => textOf(i.bytes)),
      ['a', '', 'ccc', 'dddd', 'e'],
    );
    assert.deepEqual(
      (await readAll(store, s + 1, s + 4)).map((i) => i.seq),
      [s + 2, s + 3],
    );
    assert.deepEqual(
      (await readAll(store, s - 1, Number.MAX_SAFE_INTEGER, 2)).map((i) => i.seq),
      [s, s + 1],
    );
    await store.close();
  });

  suite.test('acks in any order remove exactly the acked items', async () => {
    const store = await suite.make();
    const { nextSeq: s } = await store.open();
    await store.append(items(s, ['1', '2', '3', '4', '5']), true);
    await store.ack([s + 4, s + 2], true);
    assert.deepEqual(
      (await readAll(store)).map((i) => textOf(i.bytes)),
      ['1', '2', '4'],
    );
    await store.ack([s], false);
    assert.deepEqual(
      (await readAll(store)).map((i) => textOf(i.bytes)),
      ['2', '4'],
    );
    await store.close();
  });
}

/** Payload bytes of every value and size, and a backlog read back in pages. */
function payloadTests<S extends Store>(suite: Suite<S>): void {
  suite.test('binary payloads of every byte value and size up to 64 KiB round-trip', async () => {
    const store = await suite.make();
    const { nextSeq: s } = await store.open();
    const sizes = [0, 1, 255, 256, 4096, Math.min(65536, store.maxItemBytes)];
    const batch = sizes.map((n, i) => {
      const b = new Uint8Array(n);
      for (let j = 0; j < n; j++) b[j] = (j * 31 + i) & 0xff;
      return { seq: s + i, bytes: b };
    });
    await store.append(batch, true);
    const got = await readAll(store);
    assert.equal(got.length, batch.length);
    for (let i = 0; i < batch.length; i++) assert.deepEqual(Buffer.from(got[i]!.bytes), Buffer.from(batch[i]!.bytes));
    await store.close();
  });

  suite.test('sync(), when the store has it, keeps what was stored and stores nothing new', async () => {
    const store = await suite.make();
    if (store.sync === undefined) {
      assert.equal(store.sync, undefined);
      return;
    }
    assert.equal(typeof store.sync, 'function');
    const { nextSeq: s } = await store.open();
    await store.append(items(s, ['1', '2', '3']), true);
    await store.ack([s + 1], false);
    await store.sync();
    await store.sync();
    assert.deepEqual(
      (await readAll(store)).map((i) => textOf(i.bytes)),
      ['1', '3'],
    );
    await store.append(items(s + 3, ['4']), false);
    await store.sync();
    assert.deepEqual(
      (await readAll(store)).map((i) => i.seq),
      [s, s + 2, s + 3],
    );
    await store.close();
  });

  suite.test('many items read back page by page', async () => {
    const store = await suite.make();
    const { nextSeq: s } = await store.open();
    const count = 5000;
    for (let b = 0; b < count; b += 500) {
      await store.append(
        items(
          s + b,
          Array.from({ length: 500 }, (_, i) => `item-${b + i}`),
        ),
        false,
      );
    }
    let after = s - 1;
    let seen = 0;
    for (;;) {
      const page = await readAll(store, after, Number.MAX_SAFE_INTEGER, 128);
      if (page.length === 0) break;
      for (const item of page) {
        assert.equal(item.seq, s + seen);
        assert.equal(textOf(item.bytes), `item-${seen}`);
        seen++;
      }
      after = page[page.length - 1]!.seq;
    }
    assert.equal(seen, count);
    await store.close();
  });
}

/** A queue over the store: delivery order, nack, the size limit, one open queue at a time. */
function queueTests<S extends Store>(suite: Suite<S>): void {
  for (const durability of ['sync', 'group', 'none'] as const) {
    suite.test(`queue round trip under '${durability}': FIFO, nack redelivers first, ack removes`, async () => {
      const store = await suite.make();
      const [tx, rx] = await suite.open(store, durability);
      const seqs = await Promise.all(['a', 'b', 'c'].map((p) => tx.push(p)));
      assert.deepEqual(
        [...seqs].sort((x, y) => x - y),
        seqs,
      );
      const a = (await rx.reserve())!;
      const b = (await rx.reserve())!;
      assert.deepEqual([textOf(a.bytes), textOf(b.bytes)], ['a', 'b']);
      await b.nack();
      await a.ack();
      const again = (await rx.reserve())!;
      assert.equal(textOf(again.bytes), 'b');
      assert.equal(again.deliveries, 2);
      await again.ack();
      assert.deepEqual(await drain(rx), ['c']);
      assert.equal(rx.stats().ready, 0);
      await tx.close();
    });
  }

  suite.test('usage(), when the store has it, answers synchronously with non-negative integers, and stats() passes it on', async () => {
    const store = await suite.make();
    const [tx, rx] = await suite.open(store);
    await tx.pushMany(['a', 'b']);
    const stats = rx.stats();
    if (store.usage === undefined) {
      // The queue reports no figure the store did not give.
      assert.equal(stats.bytesOnDisk, undefined);
      assert.equal(stats.segments, undefined);
    } else {
      assert.equal(typeof store.usage, 'function');
      const usage = store.usage();
      assert.ok(Number.isSafeInteger(usage.bytesOnDisk) && usage.bytesOnDisk >= 0, 'bytesOnDisk is a non-negative integer');
      assert.ok(Number.isSafeInteger(usage.segments) && usage.segments >= 0, 'segments is a non-negative integer');
      assert.equal(stats.bytesOnDisk, usage.bytesOnDisk);
      assert.equal(stats.segments, usage.segments);
    }
    await rx.close();
  });

  suite.test('payloadBytes(), when the store has it, is never below the unacked payload bytes', async () => {
    const store = await suite.make();
    if (store.payloadBytes === undefined) {
      // A queue with a byte capacity cannot count what it holds there: it refuses to open.
      await assert.rejects(
        new Builder(store).capacityBytes(1024).open(),
        (e: unknown) => e instanceof QueueError && e.code === 'ERR_UNSUPPORTED',
      );
      return;
    }
    await store.open();
    const sizes = [0, 1, 17, 300, 4096, 9, 65_536];
    await store.append(
      sizes.map((n, i) => ({ seq: i + 1, bytes: new Uint8Array(n).fill(i + 1) })),
      true,
    );
    await store.ack([2, 5], true);
    const unacked = sizes.reduce((sum, n, i) => (i === 1 || i === 4 ? sum : sum + n), 0);
    const first = await store.payloadBytes();
    assert.ok(Number.isSafeInteger(first) && first >= unacked, `payloadBytes() ${first} is below the ${unacked} unacked payload bytes`);
    await store.close();
  });

  suite.test('a payload over maxItemBytes rejects with ERR_TOO_LARGE and stores nothing', async () => {
    const store = await suite.make();
    const [tx, rx] = await suite.open(store);
    if (store.maxItemBytes < 256 * 1024 * 1024) {
      const big = new Uint8Array(store.maxItemBytes + 1);
      await assert.rejects(tx.push(big), (e: unknown) => e instanceof QueueError && e.code === 'ERR_TOO_LARGE');
    }
    assert.equal(rx.stats().ready, 0);
    await tx.push('after');
    assert.deepEqual(await drain(rx), ['after']);
    await tx.close();
  });

  suite.test('a store backs one open queue at a time', async () => {
    const store = await suite.make();
    const [tx] = await suite.open(store);
    await assert.rejects(new Builder(store).open(), (e: unknown) => e instanceof QueueError && e.code === 'ERR_LOCKED');
    await tx.close();
  });
}

/** What survives a close and a reopen (needs the `reopen` hook). */
function reopenTests<S extends Store>(suite: Suite<S>): void {
  suite.test('a sync() overlapping an append never lets a seq be used again after reopen', async (context) => {
    let store = await suite.make();
    if (!store.features.reopen && skipped(context, `${suite.name} does not declare features.reopen`)) return;
    if (store.sync === undefined && skipped(context, `${suite.name} has no sync()`)) return;
    const { nextSeq: s } = await store.open();
    // The contract lets a sync overlap an append: started together, then everything acked.
    await Promise.all([store.append(items(s, ['a', 'b']), true), store.sync!()]);
    await store.ack([s, s + 1], false);
    await store.close();
    store = await suite.again(store, 'reopen');
    const { nextSeq } = await store.open();
    assert.ok(nextSeq >= s + 2, `nextSeq ${nextSeq} after reopen reuses seqs ${s}..${s + 1}`);
    await store.close();
  });

  suite.test('items and out-of-order acks survive close and reopen; seqs are never reused', async (context) => {
    let store = await suite.make();
    if (!store.features.reopen && skipped(context, `${suite.name} does not declare features.reopen`)) return;
    let [tx, rx] = await suite.open(store, 'sync');
    const seqs = await tx.pushMany(['1', '2', '3', '4', '5']);
    const got = [];
    for (let i = 0; i < 5; i++) got.push((await rx.reserve())!);
    await got[4]!.ack();
    await got[2]!.ack();
    await tx.close();
    store = await suite.again(store, 'reopen');
    [tx, rx] = await suite.open(store, 'sync');
    assert.equal(rx.stats().ready, 3);
    assert.deepEqual(await drain(rx), ['1', '2', '4']);
    const next = await tx.push('6');
    assert.ok(next > seqs[4]!, `seq ${next} after reopen must exceed ${seqs[4]}`);
    await tx.close();
    store = await suite.again(store, 'reopen');
    [tx, rx] = await suite.open(store, 'group');
    const last = await tx.push('7');
    assert.ok(last > next, 'seqs keep increasing even when everything was acked');
    assert.deepEqual(await drain(rx), ['6', '7']);
    await tx.close();
  });

  suite.test('payloadBytes(), when the store has it, is never below the unacked payload bytes after a reopen', async (context) => {
    let store = await suite.make();
    if (!store.features.reopen && skipped(context, `${suite.name} does not declare features.reopen`)) return;
    if (store.payloadBytes === undefined && skipped(context, `${suite.name} has no payloadBytes()`)) return;
    const [tx, rx] = await suite.open(store, 'sync');
    const seqs = await tx.pushMany(['one', 'two', 'three', 'x'.repeat(5000)]);
    await rx.close();
    store = await suite.again(store, 'reopen');
    await store.open();
    await store.ack([seqs[1]!], true);
    const unacked = 3 + 5 + 5000;
    const bytes = await store.payloadBytes!();
    assert.ok(
      Number.isSafeInteger(bytes) && bytes >= unacked,
      `payloadBytes() ${bytes} after reopen is below the ${unacked} unacked payload bytes`,
    );
    await store.close();
  });

  suite.test('a store identity, when the store reports one, is well formed and survives close and reopen', async (context) => {
    let store = await suite.make();
    if (!store.features.reopen && skipped(context, `${suite.name} does not declare features.reopen`)) return;
    const first = (await store.open()).storeId;
    await store.close();
    // A store without one reports none at every open; one with one reports the same one.
    if (first !== undefined)
      assert.ok(
        typeof first === 'string' && STORE_ID_PATTERN.test(first),
        `storeId ${String(first)} is 1 to 64 characters from [A-Za-z0-9._-]`,
      );
    store = await suite.again(store, 'reopen');
    assert.equal((await store.open()).storeId, first, 'the same store keeps its storeId (or keeps having none)');
    await store.close();
  });

  suite.test('unsettled reservations return to the store at close', async (context) => {
    let store = await suite.make();
    if (!store.features.reopen && skipped(context, `${suite.name} does not declare features.reopen`)) return;
    let [tx, rx] = await suite.open(store, 'group');
    await tx.pushMany(['x', 'y']);
    const x = (await rx.reserve())!;
    assert.equal(textOf(x.bytes), 'x');
    await tx.close();
    await assert.rejects(x.ack(), (e: unknown) => e instanceof QueueError && e.code === 'ERR_CLOSED');
    store = await suite.again(store, 'reopen');
    [tx, rx] = await suite.open(store);
    assert.deepEqual(await drain(rx), ['x', 'y']);
    await tx.close();
  });
}

/** What survives a simulated power loss (needs the `crash` hook). */
function crashTests<S extends Store>(suite: Suite<S>): void {
  for (const durability of ['sync', 'group'] as const) {
    suite.test(`pushes and acks resolved under '${durability}' survive a crash`, async () => {
      let store = await suite.make();
      let [tx, rx] = await suite.open(store, durability);
      await Promise.all(Array.from({ length: 20 }, (_, i) => tx.push(`p${i}`)));
      for (let i = 0; i < 5; i++) await (await rx.reserve())!.ack();
      store = await suite.again(store, 'crash');
      [tx, rx] = await suite.open(store, durability);
      assert.deepEqual(
        await drain(rx),
        Array.from({ length: 15 }, (_, i) => `p${i + 5}`),
      );
      await tx.close();
    });
  }

  suite.test("acks resolved under 'lazy' and not yet synced may be redelivered after a crash, nothing is lost", async () => {
    let store = await suite.make();
    let [tx, rx] = await new Builder(store).ackDurability('lazy', { maxDelayMs: 2 ** 31 - 1, maxPending: 1_000_000 }).open();
    await Promise.all(Array.from({ length: 20 }, (_, i) => tx.push(`p${i}`)));
    for (let i = 0; i < 5; i++) await (await rx.reserve())!.ack();
    store = await suite.again(store, 'crash');
    [tx, rx] = await suite.open(store);
    const got = (await drain(rx)).map((t) => Number(t.slice(1)));
    const redelivered = got.filter((n) => n < 5);
    assert.deepEqual(
      got,
      [...redelivered, ...Array.from({ length: 15 }, (_, i) => i + 5)],
      'every unacked item is there, after the redelivered ones',
    );
    assert.ok(
      redelivered.every((n, i) => i === 0 || n > redelivered[i - 1]!),
      `redelivered items in seq order: ${redelivered.join(', ')}`,
    );
    await tx.close();
  });

  suite.test("acks resolved under 'lazy' survive a crash once their sync completed", async () => {
    let store = await suite.make();
    let synced: Promise<void> | undefined;
    const sync = store.sync?.bind(store);
    // Seen from outside: the sync the queue starts once `maxPending` acks were written.
    if (sync) store.sync = () => (synced = sync());
    let [tx, rx] = await new Builder(store).ackDurability('lazy', { maxDelayMs: 2 ** 31 - 1, maxPending: 5 }).open();
    await Promise.all(Array.from({ length: 20 }, (_, i) => tx.push(`p${i}`)));
    for (let i = 0; i < 5; i++) await (await rx.reserve())!.ack();
    if (sync) {
      assert.ok(synced, 'the fifth ack started a sync');
      await synced;
      assert.equal(rx.stats().unsyncedAcks, 0);
    }
    store = await suite.again(store, 'crash');
    [tx, rx] = await suite.open(store);
    assert.deepEqual(
      await drain(rx),
      Array.from({ length: 15 }, (_, i) => `p${i + 5}`),
    );
    await tx.close();
  });
}

/** A dead letter for `item` with fields that differ from each other, so a swapped field shows. */
function deadLetterOf(item: StoredItem, reason: string): DeadLetter {
  return {
    seq: item.seq,
    bytes: item.bytes,
    deliveries: 3,
    firstDeliveredAt: 1_700_000_000_001,
    lastDeliveredAt: 1_700_000_000_002,
    deadAt: 1_700_000_000_003,
    reason,
  };
}

function markOf(seq: number, deliveries: number, lastError = ''): DeliveryMark {
  return { seq, deliveries, firstDeliveredAt: 1_700_000_000_010 + seq, lastDeliveredAt: 1_700_000_000_020 + seq, lastError };
}

const plain = (d: DeadLetter) => ({ ...d, bytes: textOf(d.bytes) });

async function readDead<S extends Store>(store: S, after = 0, limit = 1_000_000): Promise<DeadLetter[]> {
  return [...(await store.readDeadLetters!({ after, limit }))];
}

/** Skips the test when the store keeps no delivery counts; fails when it declares them half-way. */
function needsDeliveries(store: Store, name: string, context: unknown): boolean {
  if (store.features.deliveries !== true) return skipped(context, `${name} does not declare features.deliveries`);
  assert.ok(keepsDeliveries(store), `${name} declares features.deliveries but lacks one of its methods`);
  return false;
}

/** Delivery marks and the dead-letter queue, through the Store methods (`features.deliveries`). */
function deliveryTests<S extends Store>(suite: Suite<S>): void {
  suite.test('an empty store reports no delivery marks and no dead letters', async (context) => {
    const store = await suite.make();
    if (needsDeliveries(store, suite.name, context)) return;
    const r = await store.open();
    assert.equal(r.deliveredBelow, 1);
    assert.deepEqual(r.marks, []);
    assert.equal(r.deadLetters, 0);
    assert.deepEqual(await readDead(store), []);
    await store.close();
  });

  suite.test('dead-lettered items leave the queue and are read back exactly, in seq order', async (context) => {
    const store = await suite.make();
    if (needsDeliveries(store, suite.name, context)) return;
    const { nextSeq: s } = await store.open();
    const batch = items(s, ['a', 'b', 'c', 'd', 'e']);
    await store.append(batch, true);
    // Moved out of seq order, with a reason of the longest length a store must keep.
    const long = 'é'.repeat(512);
    await store.deadLetter!([deadLetterOf(batch[3]!, long), deadLetterOf(batch[1]!, 'boom')]);
    assert.deepEqual(
      (await readAll(store)).map((i) => textOf(i.bytes)),
      ['a', 'c', 'e'],
    );
    const dead = await readDead(store);
    assert.deepEqual(dead.map(plain), [plain(deadLetterOf(batch[1]!, 'boom')), plain(deadLetterOf(batch[3]!, long))]);
    assert.deepEqual(
      (await readDead(store, s + 1)).map((d) => d.seq),
      [s + 3],
    );
    assert.deepEqual(
      (await readDead(store, 0, 1)).map((d) => d.seq),
      [s + 1],
    );
    // A dead letter's seq is never used again, and the rest of the queue still acks.
    await store.ack([s, s + 2, s + 4], true);
    assert.deepEqual(await readAll(store), []);
    assert.equal((await readDead(store)).length, 2);
    await store.close();
  });

  suite.test('dropped dead letters are gone; the others stay', async (context) => {
    const store = await suite.make();
    if (needsDeliveries(store, suite.name, context)) return;
    const { nextSeq: s } = await store.open();
    const batch = items(s, ['a', 'b', 'c']);
    await store.append(batch, true);
    await store.deadLetter!(batch.map((i) => deadLetterOf(i, `r${i.seq}`)));
    await store.dropDeadLetters!([s + 2, s], false);
    assert.deepEqual(
      (await readDead(store)).map((d) => d.reason),
      [`r${s + 1}`],
    );
    await store.close();
  });

  suite.test('redrive puts dead letters back as new items with the next seqs', async (context) => {
    const store = await suite.make();
    if (needsDeliveries(store, suite.name, context)) return;
    const { nextSeq: s } = await store.open();
    const batch = items(s, ['a', 'b', 'c']);
    await store.append(batch, true);
    await store.deadLetter!([deadLetterOf(batch[0]!, 'x'), deadLetterOf(batch[2]!, 'y')]);
    await store.redrive!([{ from: s, item: { seq: s + 3, bytes: batch[0]!.bytes } }], true);
    assert.deepEqual(
      (await readDead(store)).map((d) => d.seq),
      [s + 2],
    );
    assert.deepEqual(
      (await readAll(store)).map((i) => [i.seq, textOf(i.bytes)]),
      [
        [s + 1, 'b'],
        [s + 3, 'a'],
      ],
    );
    // Appends go on after the redriven seq.
    await store.append(items(s + 4, ['d']), false);
    assert.deepEqual(
      (await readAll(store)).map((i) => i.seq),
      [s + 1, s + 3, s + 4],
    );
    await store.close();
  });
}

/** Delivery marks and dead letters after a close (`reopen`) or a simulated power loss (`crash`). */
function deliveryReopenTests<S extends Store>(suite: Suite<S>, how: 'reopen' | 'crash'): void {
  const after = how === 'reopen' ? 'close and reopen' : 'a crash';
  suite.test(`dead letters, delivery marks and deliveredBelow survive ${after}`, async (context) => {
    let store = await suite.make();
    if (needsDeliveries(store, suite.name, context)) return;
    if (how === 'reopen' && !store.features.reopen && skipped(context, `${suite.name} does not declare features.reopen`)) return;
    const { nextSeq: s } = await store.open();
    const batch = items(s, ['a', 'b', 'c', 'd', 'e', 'f']);
    await store.append(batch, true);
    await store.markDelivered!(s + 4, [markOf(s, 2, 'e1'), markOf(s + 2, 2)], true);
    await store.markDelivered!(s + 5, [markOf(s + 2, 4, 'e3')], true);
    // A dead letter is durable once moved, whatever the sync flags around it.
    await store.deadLetter!([deadLetterOf(batch[1]!, 'poison'), deadLetterOf(batch[3]!, 'explicit')]);
    await store.ack([s + 4], true);
    if (how === 'reopen') await store.close();
    store = await suite.again(store, how);
    const r = await store.open();
    assert.equal(r.count, 3, 'a, c and f are in the queue');
    assert.equal(r.deadLetters, 2);
    assert.equal(r.deliveredBelow, s + 5);
    assert.deepEqual(r.marks, [markOf(s, 2, 'e1'), markOf(s + 2, 4, 'e3')]);
    assert.deepEqual(
      (await readAll(store)).map((i) => textOf(i.bytes)),
      ['a', 'c', 'f'],
    );
    assert.deepEqual((await readDead(store)).map(plain), [
      plain(deadLetterOf(batch[1]!, 'poison')),
      plain(deadLetterOf(batch[3]!, 'explicit')),
    ]);
    assert.ok(r.nextSeq >= s + 6, `nextSeq ${r.nextSeq} would reuse a seq`);
    await store.close();
  });

  suite.test(`a synced redrive and a synced drop survive ${after}; marks of acked items are not reported`, async (context) => {
    let store = await suite.make();
    if (needsDeliveries(store, suite.name, context)) return;
    if (how === 'reopen' && !store.features.reopen && skipped(context, `${suite.name} does not declare features.reopen`)) return;
    const { nextSeq: s } = await store.open();
    const batch = items(s, ['a', 'b', 'c']);
    await store.append(batch, true);
    await store.markDelivered!(s + 3, [markOf(s + 2, 2)], true);
    await store.deadLetter!([deadLetterOf(batch[0]!, 'x'), deadLetterOf(batch[1]!, 'y')]);
    await store.redrive!([{ from: s, item: { seq: s + 3, bytes: batch[0]!.bytes } }], true);
    await store.dropDeadLetters!([s + 1], true);
    await store.ack([s + 2], true);
    if (how === 'reopen') await store.close();
    store = await suite.again(store, how);
    const r = await store.open();
    assert.equal(r.deadLetters, 0);
    assert.deepEqual(r.marks, []);
    assert.deepEqual(
      (await readAll(store)).map((i) => [i.seq, textOf(i.bytes)]),
      [[s + 3, 'a']],
    );
    assert.ok(r.nextSeq >= s + 4, `nextSeq ${r.nextSeq} would reuse the redriven seq`);
    await store.close();
  });
}
