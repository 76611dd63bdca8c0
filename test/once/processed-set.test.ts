/**
 * Processed sets with real queues: the wrapper over MemStore, LogStore and SqliteStore, with an
 * in-memory set, LogProcessedSet and SqliteProcessedSet; forgetting only once acks are durable;
 * the guard against a set of another queue; a lease that runs out while the handler works; bad
 * input. The redelivery after a SIGKILL is in processed-set-kill.test.ts, the crash model in
 * crash/processed-set-model.test.ts.
 */
import { createRequire } from 'node:module';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { type QueueError, isQueueError } from '../../src/contract/errors.js';
import { LogStore } from '../../src/stores/log/log-store.js';
import { MemStore } from '../../src/stores/mem/mem-store.js';
import { type ProcessedSet, effectivelyOnce } from '../../src/once/processed-set.js';
import { LogProcessedSet } from '../../src/once/log-processed-set.js';
import { SET_HEADER_V1_BYTES, SET_MAGIC, SET_MAGIC_BYTES, encodeEntry, encodeHeader } from '../../src/once/format.js';
import { json } from '../../src/lib/codec.js';
import { Builder } from '../../src/core/builder.js';
import type { Consumer, Reserved } from '../../src/core/handles.js';
import { SqliteProcessedSet } from '../../src/stores/sqlite/processed-set.js';
import { SqliteStore } from '../../src/stores/sqlite/index.js';
import type { Store } from '../../src/contract/store.js';
import { ManualClock } from '../../src/testing/manual-clock.js';
import { deferred } from '../support/stores.js';

interface Db {
  exec(sql: string): void;
  prepare(sql: string): { run(...p: unknown[]): unknown; get(...p: unknown[]): unknown; all(...p: unknown[]): unknown[] };
  close(): void;
}
const Database = createRequire(import.meta.url)('better-sqlite3') as new (path: string) => Db;

const dirs: string[] = [];
function freshDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'pq-processed-'));
  dirs.push(dir);
  return dir;
}
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** A processed set in memory that logs what the wrapper asks of it. */
class MemorySet implements ProcessedSet {
  readonly seqs = new Set<number>();
  readonly forgotten: number[][] = [];
  constructor(readonly top = 0) {}
  has(seq: number): boolean {
    return this.seqs.has(seq);
  }
  async record(seq: number): Promise<void> {
    this.seqs.add(seq);
  }
  forget(seqs: readonly number[]): void {
    this.forgotten.push([...seqs]);
    for (const s of seqs) this.seqs.delete(s);
  }
  highest(): number {
    return Math.max(this.top, ...this.seqs);
  }
}

const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes);

/**
 * Handle `item` under `set` with the wrapper, whose record then stands while its ack is lost: the
 * handler nacks the item, so the wrapper's ack finds it settled and the item is delivered again.
 */
async function loseAck(
  rx: Consumer<Uint8Array>,
  set: ProcessedSet,
  item: Reserved<Uint8Array>,
  effect: (item: Reserved<Uint8Array>) => void = () => {},
): Promise<void> {
  const lost = effectivelyOnce(rx, set, async (it) => {
    effect(it);
    await it.nack();
  });
  await expect(lost(item)).rejects.toMatchObject({ code: 'ERR_ALREADY_SETTLED' });
}

const stores: [string, () => Promise<Store>][] = [
  ['MemStore', async () => new MemStore()],
  ['LogStore', async () => LogStore.open(join(freshDir(), 'q'))],
  ['SqliteStore', async () => SqliteStore.open(join(freshDir(), 'q.db'), { driver: 'better-sqlite3' })],
];

describe.each(stores)('over %s', (_name, makeStore) => {
  it('aHandlerThatFailsAfterItsSideEffectIsNotRunAgainOnTheRedelivery', async () => {
    const [tx, rx] = await new Builder(await makeStore()).retry({ kind: 'fixed', delayMs: 0 }).open();
    const set = new MemorySet();
    const effects: string[] = [];
    const once = effectivelyOnce(rx, set, async (item) => {
      effects.push(text(item.bytes));
    });
    await tx.pushMany(['a', 'b', 'c']);
    // The first run records its side effect, then loses its ack: a nack stands in for it.
    await loseAck(rx, set, (await rx.reserve())!, (item) => void effects.push(text(item.bytes)));
    const stop = new AbortController();
    void rx.onIdle().then(() => stop.abort());
    await rx.process(once, { signal: stop.signal });
    expect(effects).toEqual(['a', 'b', 'c']);
    expect(once.skipped).toBe(1);
    expect(rx.stats().acked).toBe(3);
    await once.flush();
    expect(set.seqs.size, 'every seq forgotten once its ack is durable').toBe(0);
    await rx.close();
  });

  it('aThrowingHandlerIsRetriedAndRecordsNothingUntilItSucceeds', async () => {
    const [tx, rx] = await new Builder(await makeStore()).retry({ kind: 'fixed', delayMs: 0 }).open();
    const set = new MemorySet();
    let calls = 0;
    const once = effectivelyOnce(rx, set, (item) => {
      calls++;
      if (item.deliveries === 1) throw new Error('downstream busy');
    });
    await tx.push('x');
    const stop = new AbortController();
    void rx.onIdle().then(() => stop.abort());
    await rx.process(once, { signal: stop.signal, onError: () => {} });
    expect(calls).toBe(2);
    expect(once.skipped).toBe(0);
    expect(once.unforgotten).toBe(1);
    await rx.close();
  });

  it('aForAwaitLoopGetsTheSameWrapperAndItAcksEachItem', async () => {
    const [tx, rx] = await new Builder(await makeStore()).open();
    const set = new MemorySet();
    const seen: string[] = [];
    const once = effectivelyOnce(rx, set, (item) => void seen.push(text(item.value)));
    await tx.pushMany(['p', 'q']);
    const p = (await rx.reserve())!;
    await loseAck(rx, set, (await rx.reserve())!); // q was processed, its ack lost
    await p.nack();
    const results = new Map<string, boolean>();
    for await (const item of rx) {
      try {
        results.set(text(item.value), await once(item));
      } finally {
        if (!item.settled) await item.nack();
      }
      if (results.size === 2) break;
    }
    expect(Object.fromEntries(results)).toEqual({ p: true, q: false });
    expect(seen).toEqual(['p']);
    expect(rx.stats().acked).toBe(2);
    await rx.close();
  });
});

describe('forgetting', () => {
  it('waitsForTheLazySyncThatCoversTheAcksBeforeForgettingTheirSeqs', async () => {
    const gate = deferred();
    let syncs = 0;
    class SlowSync extends MemStore {
      override async sync(): Promise<void> {
        syncs++;
        await gate.promise;
      }
    }
    const [tx, rx] = await new Builder(new SlowSync()).ackDurability('lazy', { maxPending: 2 }).open();
    const set = new MemorySet();
    const once = effectivelyOnce(rx, set, () => {}, { forgetBatch: 2 });
    await tx.pushMany(['a', 'b']);
    await once((await rx.reserve())!);
    await once((await rx.reserve())!);
    // The second ack reached maxPending: a sync started, and is held.
    expect(syncs).toBe(1);
    expect(rx.stats().unsyncedAcks).toBe(2);
    const flushed = once.flush();
    await new Promise((resolve) => setImmediate(resolve));
    expect(set.forgotten, 'nothing forgotten while the sync runs').toEqual([]);
    expect(set.seqs.size).toBe(2);
    gate.resolve();
    await flushed;
    expect(set.forgotten).toEqual([[1, 2]]);
    await rx.close();
  });

  it('anAckWrittenWhileASyncRunsIsDurableOnlyAfterTheNextSync', async () => {
    const held: ReturnType<typeof deferred>[] = [];
    class HeldSync extends MemStore {
      override async sync(): Promise<void> {
        const gate = deferred();
        held.push(gate);
        await gate.promise;
      }
    }
    const [tx, rx] = await new Builder(new HeldSync()).ackDurability('lazy', { maxDelayMs: 2 ** 31 - 1, maxPending: 2 }).open();
    await tx.pushMany(['a', 'b', 'c']);
    await (await rx.reserve())!.ack();
    await (await rx.reserve())!.ack();
    expect(held).toHaveLength(1); // the bound started a sync, covering a and b
    const beforeC = rx.acksDurable();
    await (await rx.reserve())!.ack(); // written while that sync runs: not covered by it
    let coveredC = false;
    const afterC = rx.acksDurable().then(() => void (coveredC = true));
    held[0]!.resolve();
    await beforeC;
    await new Promise((resolve) => setImmediate(resolve));
    expect(coveredC, 'c needs a sync that started after it was written').toBe(false);
    const now = rx.acksDurable(true); // starts that sync
    expect(held).toHaveLength(2);
    held[1]!.resolve();
    await Promise.all([afterC, now]);
    expect(coveredC).toBe(true);
    expect(rx.stats().unsyncedAcks).toBe(0);
    await rx.close();
  });

  it('flushStartsTheSyncItWaitsForInsteadOfWaitingForTheBound', async () => {
    let syncs = 0;
    class CountingSync extends MemStore {
      override async sync(): Promise<void> {
        syncs++;
      }
    }
    // A bound that never fires by itself: only the flush can start the sync.
    const [tx, rx] = await new Builder(new CountingSync()).ackDurability('lazy', { maxDelayMs: 2 ** 31 - 1, maxPending: 1000 }).open();
    const set = new MemorySet();
    const once = effectivelyOnce(rx, set, () => {}, { forgetBatch: 1 });
    await tx.push('a');
    await once((await rx.reserve())!);
    expect(rx.stats().unsyncedAcks).toBe(1);
    expect(syncs).toBe(0);
    await once.flush();
    expect(syncs).toBe(1);
    expect(set.forgotten).toEqual([[1]]);
    await rx.close();
  });

  it('forgetsUnderGroupAcksAsSoonAsABatchIsAcked', async () => {
    const [tx, rx] = await new Builder(new MemStore()).ackDurability('group').open();
    const set = new MemorySet();
    const once = effectivelyOnce(rx, set, () => {}, { forgetBatch: 3 });
    await tx.pushMany(['a', 'b', 'c', 'd']);
    for (let i = 0; i < 4; i++) await once((await rx.reserve())!);
    await once.flush();
    expect(set.forgotten).toEqual([[1, 2, 3], [4]]);
    await rx.close();
  });

  it('aFailedQueueFailsTheForgetAndTheWrapperReportsIt', async () => {
    class FailingSync extends MemStore {
      override async sync(): Promise<void> {
        throw new Error('EIO on sync');
      }
    }
    const [tx, rx] = await new Builder(new FailingSync()).ackDurability('lazy', { maxPending: 1 }).open();
    const set = new MemorySet();
    const once = effectivelyOnce(rx, set, () => {});
    await tx.push('a');
    await once((await rx.reserve())!);
    await expect(once.flush()).rejects.toMatchObject({ code: 'ERR_STORE_FAILED' });
    expect(set.seqs.has(1), 'kept: its ack may not be durable').toBe(true);
    await rx.close().catch(() => {});
  });
});

describe('the guard against a set of another queue', () => {
  it('refusesASetHoldingASeqTheQueueNeverStoredAndRunsNothing', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    await tx.pushMany(['a', 'b']);
    let ran = 0;
    // Seqs 1 and 2 are stored; a set that holds 3 knows a seq this queue never handed out.
    const once = effectivelyOnce(rx, new MemorySet(3), () => void ran++);
    const item = (await rx.reserve())!;
    await expect(once(item)).rejects.toSatisfy((e) => isQueueError(e, 'ERR_SET_MISMATCH'));
    expect(ran).toBe(0);
    expect(item.settled).toBe(false);
    await rx.close();
  });

  it('acceptsASetWhoseHighestSeqTheQueueStoredBeforeItOpened', async () => {
    const dir = freshDir();
    {
      const [tx, rx] = await new Builder(await LogStore.open(join(dir, 'q'))).open();
      await tx.pushMany(['a', 'b', 'c']);
      await rx.close();
    }
    const [, rx] = await new Builder(await LogStore.open(join(dir, 'q'))).open();
    const once = effectivelyOnce(rx, new MemorySet(2), () => {});
    expect(await once((await rx.reserve())!)).toBe(true);
    await rx.close();
  });

  it('refusesASetHoldingSeqsTheQueueStoredOnlyAfterItOpened', async () => {
    // A MemStore queue starts at seq 1 in every process: items pushed before the first item is
    // handled must not make the seqs of a set kept from an earlier process look like this queue's.
    const [tx, rx] = await new Builder(new MemStore()).open();
    await tx.pushMany(['a', 'b', 'c']);
    let ran = 0;
    const once = effectivelyOnce(rx, new MemorySet(2), () => void ran++);
    const item = (await rx.reserve())!;
    await expect(once(item)).rejects.toMatchObject({ code: 'ERR_SET_MISMATCH' });
    expect([ran, item.settled]).toEqual([0, false]);
    await rx.close();
  });

  it('theReadmeSqliteExampleWithAFileDatabaseRunTwiceRefusesTheSecondRunsItems', async () => {
    const path = join(freshDir(), 'app.db');
    const run = async () => {
      const db = new Database(path);
      db.exec('CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, total INTEGER)');
      const insert = db.prepare('INSERT INTO orders (id, total) VALUES (?, ?)');
      const [tx, rx] = await new Builder(new MemStore()).codec(json<{ id: string; total: number }>()).open();
      // Each run takes new orders; the MemStore gives them seqs 1 and 2 again.
      const n = (db.prepare('SELECT count(*) AS n FROM orders').get() as { n: number }).n;
      await tx.pushMany([
        { id: `A${n + 1}`, total: 30 },
        { id: `A${n + 2}`, total: 12 },
      ]);
      const once = effectivelyOnce(rx, new SqliteProcessedSet(db), (item) => void insert.run(item.value.id, item.value.total));
      const results: unknown[] = [];
      for (let i = 0; i < 2; i++) {
        const item = (await rx.reserve())!;
        results.push(await once(item).catch((e: QueueError) => e.code));
        if (!item.settled) await item.nack();
      }
      await rx.close();
      const ids = (db.prepare('SELECT id FROM orders ORDER BY id').all() as { id: string }[]).map((r) => r.id);
      db.close();
      return { results, ids };
    };
    expect(await run()).toEqual({ results: [true, true], ids: ['A1', 'A2'] });
    // Skipping seqs 1 and 2 would ack A3 and A4 without inserting them.
    expect(await run()).toEqual({ results: ['ERR_SET_MISMATCH', 'ERR_SET_MISMATCH'], ids: ['A1', 'A2'] });
  });

  it('twoWrappersOverOneSetAndOneQueueInOneProcessAreBothAccepted', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    const set = new MemorySet();
    await tx.pushMany(['a', 'b']);
    expect(await effectivelyOnce(rx, set, () => {})((await rx.reserve())!)).toBe(true);
    // The set now holds seq 1, stored after the queue opened, recorded for this very queue.
    expect(await effectivelyOnce(rx.fork(), set, () => {})((await rx.reserve())!)).toBe(true);
    await rx.close();
  });

  it('catchesARecreatedLogStoreWhoseSeqsStartedAgain', async () => {
    const dir = freshDir();
    const set = await LogProcessedSet.open(join(dir, 'set'));
    {
      const [tx, rx] = await new Builder(await LogStore.open(join(dir, 'q'))).open();
      await tx.pushMany(['a', 'b', 'c']);
      await rx.reserve();
      await rx.reserve();
      const item = (await rx.reserve())!;
      await set.record(item.seq); // seq 3 recorded, then the process died before the ack
      await rx.close();
    }
    rmSync(join(dir, 'q'), { recursive: true }); // the queue is recreated, the set is not
    const [tx, rx] = await new Builder(await LogStore.open(join(dir, 'q'))).open();
    await tx.push('new');
    const once = effectivelyOnce(rx, set, () => {});
    await expect(once((await rx.reserve())!)).rejects.toMatchObject({ code: 'ERR_SET_MISMATCH' });
    await rx.close();
    await set.close();
  });
});

describe('the store identity a set keeps', () => {
  /** A queue whose store is recreated under the same path and refilled past the set's seqs, then reopened. */
  async function recreatedQueue(dir: string, first: (rx: Consumer<Uint8Array>) => Promise<void>) {
    {
      const [tx, rx] = await new Builder(await LogStore.open(join(dir, 'q'))).open();
      await tx.pushMany(['a', 'b', 'c']);
      await first(rx);
      await rx.close();
    }
    rmSync(join(dir, 'q'), { recursive: true });
    {
      const [tx, rx] = await new Builder(await LogStore.open(join(dir, 'q'))).open();
      await tx.pushMany(['n1', 'n2', 'n3', 'n4', 'n5']);
      await rx.close();
    }
    return new Builder(await LogStore.open(join(dir, 'q'))).open();
  }

  const sets: [string, (dir: string) => Promise<ProcessedSet & { storeId: string | null }>][] = [
    ['LogProcessedSet', (dir) => LogProcessedSet.open(join(dir, 'set'))],
    ['SqliteProcessedSet', async (dir) => new SqliteProcessedSet(new Database(join(dir, 'app.db')))],
  ];

  it.each(sets)('%s refusesTheQueueOfARecreatedStoreRefilledPastItsSeqs', async (_name, openSet) => {
    const dir = freshDir();
    const set = await openSet(dir);
    const effects: string[] = [];
    let firstId = '';
    const [, rx] = await recreatedQueue(dir, async (rx) => {
      firstId = rx.stats().storeId!;
      const once = effectivelyOnce(rx, set, (item) => void effects.push(text(item.bytes)));
      expect(await once((await rx.reserve())!)).toBe(true); // seq 1 recorded, not forgotten yet
    });
    expect(set.storeId).toBe(firstId);
    // The new store holds seqs 1 to 5, above the set's 1: only the identity tells them apart.
    const once = effectivelyOnce(rx, set, (item) => void effects.push(text(item.bytes)));
    const item = (await rx.reserve())!;
    const error = await once(item).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'ERR_SET_MISMATCH', message: expect.stringMatching(/clear the set or delete it/) });
    expect([effects, item.settled, rx.stats().acked]).toEqual([['a'], false, 0]);
    await rx.close();
    expect(set.storeId).toBe(firstId);
    if (set instanceof LogProcessedSet) await set.close();
  });

  it('aLogProcessedSetWritesItsHeaderWithTheIdentityWithItsFirstRecordAndKeepsIt', async () => {
    const dir = freshDir();
    const setDir = join(dir, 'set');
    const unused = await LogProcessedSet.open(setDir);
    unused.bind('a-store-that-never-handled-anything');
    await unused.close();
    const inspect = async () => {
      const store = (await LogStore.open(setDir, { readOnly: true })) as LogStore;
      const next = store.inspect().nextSeq;
      await store.close();
      return next;
    };
    expect(await inspect(), 'a set that recorded nothing wrote nothing').toBe(1);
    const set = await LogProcessedSet.open(setDir);
    expect(set.storeId).toBe(null);
    const [tx, rx] = await new Builder(await LogStore.open(join(dir, 'q'))).open();
    await tx.push('a');
    expect(await effectivelyOnce(rx, set, () => {})((await rx.reserve())!)).toBe(true);
    const id = rx.stats().storeId!;
    await rx.close();
    await set.close();
    expect(await inspect()).toBe(3); // the header and one entry
    const again = await LogProcessedSet.open(setDir);
    expect([again.storeId, again.bind('another-store'), again.storeId]).toEqual([id, id, id]);
    await again.close();
  });

  it('aVersion1LogProcessedSetStillOpensAndServesWithTheSeqCheckOnly', async () => {
    const dir = freshDir();
    const store = await LogStore.open(join(dir, 'set'));
    await store.open();
    const v1 = new Uint8Array(SET_HEADER_V1_BYTES);
    v1.set(new TextEncoder().encode(SET_MAGIC));
    new DataView(v1.buffer).setUint32(SET_MAGIC_BYTES, 1, true);
    await store.append(
      [
        { seq: 1, bytes: v1 },
        { seq: 2, bytes: encodeEntry(2) },
      ],
      true,
    );
    await store.close();
    {
      const [tx, rx] = await new Builder(await LogStore.open(join(dir, 'q'))).open();
      await tx.pushMany(['a', 'b', 'c']);
      await rx.close();
    }
    const set = await LogProcessedSet.open(join(dir, 'set'));
    expect([set.storeId, set.has(2), set.bind('some-store')]).toEqual([null, true, null]);
    const [, rx] = await new Builder(await LogStore.open(join(dir, 'q'))).open();
    const once = effectivelyOnce(rx, set, () => {});
    const results = [];
    for (let i = 0; i < 3; i++) results.push(await once((await rx.reserve())!));
    expect(results).toEqual([true, false, true]);
    await rx.close();
    await set.close();
  });

  it('aSqliteProcessedSetRecordedBeforeItWasBoundStaysUnboundAndAnEmptyOneBindsWithItsFirstRecord', async () => {
    const db = new Database(join(freshDir(), 'app.db'));
    const early = new SqliteProcessedSet(db, { table: 'early' });
    early.record(4);
    expect([early.bind('store-a'), early.storeId]).toEqual([null, null]);
    const set = new SqliteProcessedSet(db);
    expect([set.bind('store-a'), set.bind('store-b'), set.storeId]).toEqual(['store-a', 'store-a', null]);
    // A record in a transaction of the caller's that rolls back takes the identity with it.
    db.exec('BEGIN');
    set.record(1);
    db.exec('ROLLBACK');
    expect(set.storeId).toBe(null);
    expect(set.runOnce(1, () => {})).toBe(true);
    expect(set.storeId).toBe('store-a');
    set.forget([1]);
    expect([new SqliteProcessedSet(db).bind('store-b'), new SqliteProcessedSet(db).storeId]).toEqual(['store-a', 'store-a']);
    expect(() => set.bind('not an identity')).toThrow(RangeError);
    db.close();
  });
});

describe('a queue under durability none', () => {
  it('isRefusedSinceAPowerLossWouldHandItsSeqsToNewItems', async () => {
    const [tx, rx] = await new Builder(await LogStore.open(join(freshDir(), 'q'))).durability('none').open();
    const set = new MemorySet();
    expect(() => effectivelyOnce(rx, set, () => {})).toThrow(expect.objectContaining({ code: 'ERR_UNSUPPORTED' }));
    await tx.push('a');
    expect([set.seqs.size, rx.stats().ready]).toEqual([0, 1]);
    await rx.close();
  });
});

describe('a lease that runs out while the handler works', () => {
  it('theRedeliveryWaitsForTheFirstRunThenSkipsIt', async () => {
    const clock = new ManualClock();
    const [tx, rx] = await new Builder(new MemStore()).clock(clock).leaseMs(100).open();
    const set = new MemorySet();
    const gate = deferred();
    let runs = 0;
    const once = effectivelyOnce(rx, set, async () => {
      runs++;
      await gate.promise;
    });
    await tx.push('slow');
    const first = (await rx.reserve())!;
    const firstRun = once(first);
    await new Promise((resolve) => setImmediate(resolve));
    clock.advance(100);
    const again = (await rx.reserve())!;
    expect(again.seq).toBe(first.seq);
    expect(again.deliveries).toBe(2);
    const secondRun = once(again);
    await new Promise((resolve) => setImmediate(resolve));
    expect(runs, 'the second delivery waits for the first run').toBe(1);
    gate.resolve();
    await expect(firstRun).rejects.toMatchObject({ code: 'ERR_LEASE_EXPIRED' });
    expect(await secondRun).toBe(false);
    expect(runs).toBe(1);
    expect(rx.stats().acked).toBe(1);
    await rx.close();
  });
});

describe('bad input', () => {
  it('refusesWhatIsNotAConsumerASetAHandlerOrAnOption', async () => {
    const [, rx] = await new Builder(new MemStore()).open();
    const set = new MemorySet();
    expect(() => effectivelyOnce({} as never, set, () => {})).toThrow(TypeError);
    expect(() => effectivelyOnce(rx, { has() {} } as never, () => {})).toThrow(/Expected `set` to be a ProcessedSet/);
    expect(() => effectivelyOnce(rx, set, 'run' as never)).toThrow(TypeError);
    expect(() => effectivelyOnce(rx, set, () => {}, { forgetBatch: 0 })).toThrow(RangeError);
    expect(() => effectivelyOnce(rx, set, () => {}, { forgetBatch: '1' as never })).toThrow(TypeError);
    expect(() => effectivelyOnce(rx, set, () => {}, { forgetbatch: 1 } as never)).toThrow(/Unknown option/);
    await rx.close();
  });

  it('refusesAnythingButAnUnsettledReservationAndChangesNothing', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    const set = new MemorySet();
    let ran = 0;
    const once = effectivelyOnce(rx, set, () => void ran++);
    await expect(once({ seq: 1 } as never)).rejects.toThrow(TypeError);
    await tx.push('a');
    const item = (await rx.reserve())!;
    await item.nack();
    await expect(once(item)).rejects.toMatchObject({ code: 'ERR_ALREADY_SETTLED' });
    expect(ran).toBe(0);
    expect(set.seqs.size).toBe(0);
    expect(rx.stats().ready).toBe(1);
    await rx.close();
  });
});

describe('LogProcessedSet', () => {
  it('keepsRecordsAcrossReopenAndDropsForgottenOnes', async () => {
    const dir = join(freshDir(), 'set');
    const set = await LogProcessedSet.open(dir);
    await Promise.all([set.record(5), set.record(7), set.record(9)]);
    await set.record(7); // held already
    await set.forget([5, 42]);
    expect([set.has(5), set.has(7), set.has(9), set.size, set.highest()]).toEqual([false, true, true, 2, 9]);
    await set.close();
    const again = await LogProcessedSet.open(dir);
    expect([again.has(5), again.has(7), again.has(9), again.size, again.highest()]).toEqual([false, true, true, 2, 9]);
    await expect(again.record(1)).resolves.toBeUndefined();
    await again.close();
    await expect(again.record(2)).rejects.toMatchObject({ code: 'ERR_CLOSED' });
  });

  it('recordsMadeWhileAnAppendRunsShareTheNextOne', async () => {
    const dir = join(freshDir(), 'set');
    const set = await LogProcessedSet.open(dir);
    await Promise.all(Array.from({ length: 50 }, (_, i) => set.record(i + 1)));
    const store = (await LogStore.open(join(dir), { readOnly: true })) as LogStore;
    const info = store.inspect();
    await store.close();
    expect(set.size).toBe(50);
    // Header and 50 entries; the first record went alone, the other 49 in one batch.
    expect(info.nextSeq).toBe(52);
    await set.close();
  });

  it('refusesADirectoryHoldingAQueueAndANewerFormatAndTouchesNeither', async () => {
    const base = freshDir();
    const [tx, rx] = await new Builder(await LogStore.open(join(base, 'q'))).open();
    await tx.push('an item of a queue');
    await rx.close();
    await expect(LogProcessedSet.open(join(base, 'q'))).rejects.toMatchObject({ code: 'ERR_STORE' });
    const store = await LogStore.open(join(base, 'newer'));
    await store.open();
    const header = encodeHeader(null);
    new DataView(header.buffer).setUint32(SET_MAGIC_BYTES, 3, true);
    await store.append([{ seq: 1, bytes: header }], true);
    await store.close();
    await expect(LogProcessedSet.open(join(base, 'newer'))).rejects.toMatchObject({ code: 'ERR_UNSUPPORTED_VERSION' });
    // The queue still opens as it was.
    const [, rx2] = await new Builder(await LogStore.open(join(base, 'q'))).open();
    expect(text((await rx2.reserve())!.bytes)).toBe('an item of a queue');
    await rx2.close();
  });

  it('aSealedSegmentWhoseEntriesWereAllForgottenIsNotDeletedSinceTheHeaderHoldsTheLowWaterMark', async () => {
    const dir = join(freshDir(), 'set');
    const set = await LogProcessedSet.open(dir, { segmentBytes: 256, preallocate: false });
    const seqs = Array.from({ length: 40 }, (_, i) => i + 1);
    for (const seq of seqs) await set.record(seq);
    await set.forget(seqs);
    await set.close();
    const { readdirSync } = await import('node:fs');
    const segments = readdirSync(dir).filter((f) => f.startsWith('seg-'));
    expect(segments.length, 'the records rolled over several segments').toBeGreaterThan(1);
    expect(segments).toContain('seg-00000000000000000001.log');
    const store = (await LogStore.open(dir, { readOnly: true })) as LogStore;
    const info = store.inspect();
    await store.close();
    expect(info.lowWaterMark).toBe(1);
    const again = await LogProcessedSet.open(dir);
    expect(again.size).toBe(0);
    await again.close();
  });

  it('refusesBadArgumentsWithoutWritingAnything', async () => {
    await expect(LogProcessedSet.open('')).rejects.toThrow(TypeError);
    await expect(LogProcessedSet.open(join(freshDir(), 's'), { durability: 'sync' as never })).rejects.toThrow(RangeError);
    await expect(LogProcessedSet.open(join(freshDir(), 's'), { segmentbytes: 1 } as never)).rejects.toThrow(/Unknown option/);
    const set = await LogProcessedSet.open(join(freshDir(), 's'));
    await expect(set.record(0)).rejects.toThrow(RangeError);
    await expect(set.record(1.5)).rejects.toThrow(RangeError);
    await expect(set.record('1' as never)).rejects.toThrow(TypeError);
    await expect(set.forget([1, -1])).rejects.toThrow(RangeError);
    await expect(set.forget(7 as never)).rejects.toThrow(TypeError);
    expect(() => set.has(Number.NaN)).toThrow(RangeError);
    expect(set.size).toBe(0);
    await set.close();
  });

  it('drivesTheWrapperOverALogStoreQueue', async () => {
    const base = freshDir();
    const set = await LogProcessedSet.open(join(base, 'set'));
    {
      const [tx, rx] = await new Builder(await LogStore.open(join(base, 'q'))).open();
      await tx.pushMany(['a', 'b', 'c']);
      await rx.close();
    }
    const [, rx] = await new Builder(await LogStore.open(join(base, 'q'))).open();
    const effects: string[] = [];
    const once = effectivelyOnce(rx, set, (item) => void effects.push(text(item.bytes)));
    await set.record(2); // b was processed before a crash
    const stop = new AbortController();
    void rx.onIdle().then(() => stop.abort());
    await rx.process(once, { signal: stop.signal, concurrency: 2 });
    expect(effects).toEqual(['a', 'c']);
    await once.flush();
    expect(set.size).toBe(0);
    await rx.close();
    await set.close();
  });
});

describe('SqliteProcessedSet', () => {
  function openDb(): Db {
    const db = new Database(join(freshDir(), 'app.db'));
    db.exec('PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; CREATE TABLE orders (id TEXT PRIMARY KEY)');
    return db;
  }
  const orders = (db: Db) => (db.prepare('SELECT id FROM orders ORDER BY id').all() as { id: string }[]).map((r) => r.id);

  it('commitsTheSideEffectAndTheRecordTogetherAndSkipsTheRedelivery', async () => {
    const db = openDb();
    const set = new SqliteProcessedSet(db);
    const queuePath = join(freshDir(), 'q.db');
    const insert = db.prepare('INSERT INTO orders (id) VALUES (?)');
    {
      const [tx, rx] = await new Builder(await SqliteStore.open(queuePath, { driver: 'better-sqlite3' })).open();
      await tx.pushMany(['o1', 'o2']);
      const first = (await rx.reserve())!;
      // The transaction committed, then the process died before the ack: run the effect under the set by hand.
      expect(set.runOnce(first.seq, () => void insert.run('o1'))).toBe(true);
      await rx.close();
    }
    const [, rx] = await new Builder(await SqliteStore.open(queuePath, { driver: 'better-sqlite3' })).open();
    const once = effectivelyOnce(rx, set, (item) => {
      insert.run(text(item.bytes));
    });
    const stop = new AbortController();
    void rx.onIdle().then(() => stop.abort());
    await rx.process(once, { signal: stop.signal });
    expect(orders(db)).toEqual(['o1', 'o2']);
    expect(once.skipped).toBe(1);
    await once.flush();
    expect(set.highest()).toBe(0);
    await rx.close();
    db.close();
  });

  it('aThrowingHandlerRollsBackItsWritesWithTheRecord', async () => {
    const db = openDb();
    const set = new SqliteProcessedSet(db, { table: 'done_seqs' });
    const [tx, rx] = await new Builder(new MemStore()).retry({ kind: 'fixed', delayMs: 0 }).open();
    const insert = db.prepare('INSERT INTO orders (id) VALUES (?)');
    const once = effectivelyOnce(rx, set, (item) => {
      insert.run(`${text(item.bytes)}-${item.deliveries}`);
      if (item.deliveries === 1) throw new Error('fails after its write');
    });
    await tx.push('o');
    const stop = new AbortController();
    void rx.onIdle().then(() => stop.abort());
    await rx.process(once, { signal: stop.signal, onError: () => {} });
    expect(orders(db)).toEqual(['o-2']);
    await rx.close();
    db.close();
  });

  it('anAsynchronousHandlerIsATypeErrorWhoseWritesBeforeItsFirstAwaitRollBackAndLaterOnesStay', async () => {
    const db = openDb();
    const set = new SqliteProcessedSet(db);
    const [tx, rx] = await new Builder(new MemStore()).open();
    const insert = db.prepare('INSERT INTO orders (id) VALUES (?)');
    const gate = deferred();
    const finished = deferred();
    // @ts-expect-error the handler of a transactional set must be synchronous
    const once = effectivelyOnce(rx, set, async (item) => {
      insert.run(`before-${item.deliveries}`);
      await gate.promise;
      insert.run(`after-${item.deliveries}`); // the transaction is gone: this commits on its own
      finished.resolve();
      if (item.deliveries === 2) throw new Error('rejects later: dropped, not left unhandled');
    });
    await tx.push('o');
    const item = (await rx.reserve())!;
    await expect(once(item)).rejects.toThrow(TypeError);
    expect(orders(db)).toEqual([]);
    expect(set.has(item.seq)).toBe(false);
    expect(item.settled).toBe(false);
    gate.resolve();
    await finished.promise;
    expect(orders(db)).toEqual(['after-1']);
    expect(set.has(item.seq)).toBe(false);
    await item.nack();
    await expect(once((await rx.reserve())!)).rejects.toThrow(TypeError);
    await new Promise((resolve) => setImmediate(resolve));
    expect(orders(db)).toEqual(['after-1', 'after-2']);
    await rx.close();
    db.close();
  });

  it('refusesABadDatabaseTableNameOrSeq', () => {
    const db = openDb();
    expect(() => new SqliteProcessedSet({} as never)).toThrow(TypeError);
    expect(() => new SqliteProcessedSet(db, { table: 'x"; DROP TABLE orders; --' })).toThrow(RangeError);
    const set = new SqliteProcessedSet(db);
    expect(() => set.record(0)).toThrow(RangeError);
    expect(() => set.forget([1, 2.5])).toThrow(RangeError);
    expect(() => set.runOnce(1, 'x' as never)).toThrow(TypeError);
    expect(set.highest()).toBe(0);
    db.close();
  });
});

describe('FORMAT.md §12', () => {
  it('theHexExamplesAreTheBytesTheSetWrites', async () => {
    const { readFileSync } = await import('node:fs');
    const format = readFileSync(join(import.meta.dirname, '..', '..', 'FORMAT.md'), 'utf8');
    const section = format.slice(format.indexOf('## 12. LogProcessedSet'), format.indexOf('## 13. '));
    const hexBlocks = [...section.matchAll(/```hex\n([\s\S]*?)```/g)].map((m) =>
      Uint8Array.from(
        m[1]!
          .split('\n')
          .filter(Boolean)
          .flatMap((line) => line.split('|')[0]!.trim().split(/\s+/).slice(1))
          .map((h) => Number.parseInt(h, 16)),
      ),
    );
    expect(hexBlocks).toHaveLength(2);
    const { decodeEntry, decodeHeader } = await import('../../src/once/format.js');
    const storeId = '00112233-4455-4677-8899-aabbccddeeff';
    expect(hexBlocks[0]).toEqual(encodeHeader(storeId));
    expect(decodeHeader(hexBlocks[0]!, 'doc')).toEqual({ version: 2, storeId });
    expect(hexBlocks[1]).toEqual(encodeEntry(300));
    expect(decodeEntry(hexBlocks[1]!, 2, 'doc')).toBe(300);
    // And a set bound to that store holds exactly these payloads on disk.
    const dir = join(freshDir(), 'set');
    const set = await LogProcessedSet.open(dir);
    expect(set.bind(storeId)).toBe(storeId);
    await set.record(300);
    await set.close();
    const store = await LogStore.open(dir);
    await store.open();
    expect(store.read({ after: 0, before: Infinity, limit: 10 }).map((i) => [...i.bytes])).toEqual([
      [...hexBlocks[0]!],
      [...hexBlocks[1]!],
    ]);
    await store.close();
  });

  it('aHeaderOfAnotherLengthOrVersionZeroIsCorruptAndANewerLongerOneUnsupported', async () => {
    const { decodeHeader } = await import('../../src/once/format.js');
    const corrupt = expect.objectContaining({ code: 'ERR_CORRUPT' });
    const header = encodeHeader('store-a');
    const version = (bytes: Uint8Array, v: number) => {
      new DataView(bytes.buffer, bytes.byteOffset).setUint32(SET_MAGIC_BYTES, v, true);
      return bytes;
    };
    expect(() => decodeHeader(header.subarray(0, 19), 'd')).toThrow(corrupt);
    expect(() => decodeHeader(header.subarray(0, 21), 'd')).toThrow(corrupt);
    expect(() => decodeHeader(header.subarray(0, header.length - 1), 'd')).toThrow(corrupt);
    const longer = new Uint8Array(header.length + 4);
    longer.set(header);
    expect(() => decodeHeader(longer, 'd')).toThrow(corrupt);
    expect(() => decodeHeader(version(longer, 3), 'd')).toThrow(expect.objectContaining({ code: 'ERR_UNSUPPORTED_VERSION' }));
    expect(() => decodeHeader(version(encodeHeader(null), 0), 'd')).toThrow(corrupt);
    // Version 1 is exactly 20 bytes and holds no identity.
    expect(decodeHeader(version(encodeHeader(null).subarray(0, SET_HEADER_V1_BYTES), 1), 'd')).toEqual({ version: 1, storeId: null });
    expect(() => decodeHeader(version(encodeHeader(null), 1), 'd')).toThrow(corrupt);
    expect(decodeHeader(encodeHeader(null), 'd')).toEqual({ version: 2, storeId: null });
    const badId = encodeHeader('store-a');
    badId[badId.length - 1] = 0x20;
    expect(() => decodeHeader(badId, 'd')).toThrow(corrupt);
    const tooLong = new Uint8Array(22 + 65);
    tooLong.set(encodeHeader(null).subarray(0, 20));
    new DataView(tooLong.buffer).setUint16(20, 65, true);
    tooLong.fill(0x61, 22);
    expect(() => decodeHeader(tooLong, 'd')).toThrow(corrupt);
  });
});
