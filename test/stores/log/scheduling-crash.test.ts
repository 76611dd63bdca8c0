/**
 * Crashes of the fault model (F1–F4, the simulated crash disk) while a LogStore holds items with
 * priorities and not-before times. After every recovery the checker asserts that:
 * - every item read has exactly the bytes, priority and not-before time it was appended with;
 * - `scheduledFrom` is at most the lowest seq of an unacked scheduled item, and at most `nextSeq`;
 * - every append that resolved with `sync` is there unless an ack of it was issued;
 * - the store opens (a tolerated crash is never ERR_CORRUPT).
 * Two workloads: fixed ones at every crash point of their trace (deterministic), and seeded random
 * ones with random crashes. A canary that reports `nextSeq` as `scheduledFrom` must be caught.
 * A failure prints `reproduce: ...`; replay a seed with `SEED=<seed> npx vitest run test/stores/log/scheduling-crash`.
 */
import { describe, expect, test } from 'vitest';
import { LogStore, type LogStoreOptions } from '../../../src/stores/log/log-store.js';
import { isScheduled, type StoredItem, type StoreRecovery } from '../../../src/contract/store.js';
import {
  CrashFileSystem,
  Prng,
  formatCrashPoint,
  formatSeed,
  seedFromEnv,
  withReproduction,
  type CrashPoint,
} from '../../../src/testing/index.js';

const DIR = '/q';
const RUNS = Number(process.env.FUZZ_RUNS ?? 24);
const OPS = 120;
const ALL = { after: 0, before: Number.MAX_SAFE_INTEGER, limit: 1e9 };
/** Some not-before time, in ms since the epoch. */
const EPOCH_MS = 1_700_000_000_000;

function itemFor(seq: number, size: number, priority: number, notBefore: number): StoredItem {
  const bytes = new Uint8Array(size);
  for (let i = 0; i < size; i++) bytes[i] = (seq * 31 + i * 7) & 0xff;
  return { seq, bytes, ...(priority !== 0 ? { priority } : {}), ...(notBefore !== 0 ? { notBefore } : {}) };
}

/**
 * The checks of every recovery: what `read` returns against what was appended, and `scheduledFrom`.
 * `lie` replaces the reported `scheduledFrom` by `nextSeq` (the canary). Returns the seqs read.
 */
function checkRecovered(
  where: string,
  store: LogStore,
  r: StoreRecovery,
  appended: ReadonlyMap<number, StoredItem>,
  lie = false,
): Set<number> {
  const got = store.read(ALL);
  expect(r.count, `${where}: count`).toBe(got.length);
  let prev = 0;
  let lowestScheduled = Infinity;
  for (const it of got) {
    expect(it.seq, `${where}: order`).toBeGreaterThan(prev);
    prev = it.seq;
    const want = appended.get(it.seq);
    expect(want, `${where}: seq ${it.seq} was never appended`).toBeDefined();
    expect(Buffer.from(it.bytes).equals(Buffer.from(want!.bytes)), `${where}: bytes of seq ${it.seq}`).toBe(true);
    expect([it.priority ?? 0, it.notBefore ?? 0], `${where}: scheduling fields of seq ${it.seq}`).toEqual([
      want!.priority ?? 0,
      want!.notBefore ?? 0,
    ]);
    if (isScheduled(it) && it.seq < lowestScheduled) lowestScheduled = it.seq;
  }
  const scheduledFrom = lie ? r.nextSeq : r.scheduledFrom;
  expect(scheduledFrom, `${where}: scheduledFrom`).toBeDefined();
  expect(scheduledFrom!, `${where}: scheduledFrom above the lowest unacked scheduled seq`).toBeLessThanOrEqual(lowestScheduled);
  expect(scheduledFrom!, `${where}: scheduledFrom above nextSeq`).toBeLessThanOrEqual(r.nextSeq);
  return new Set(got.map((i) => i.seq));
}

// ---- Every crash point of fixed workloads ----

interface Recorded {
  fs: CrashFileSystem;
  from: number;
  options: LogStoreOptions;
  appended: Map<number, StoredItem>;
  appendResolvedAt: Map<number, number>;
  ackIssuedAt: Map<number, number>;
}

type Spec = readonly [size: number, priority: number, notBefore: number];

async function record(
  options: LogStoreOptions,
  body: (ops: {
    append(first: number, specs: readonly Spec[]): Promise<void>;
    ack(seqs: number[]): Promise<void>;
    store: LogStore;
  }) => Promise<void>,
): Promise<Recorded> {
  const fs = new CrashFileSystem({ seed: 1 });
  const store = await LogStore.open(DIR, { ...options, fs });
  await store.open();
  const rec: Recorded = { fs, from: fs.traceLength, options, appended: new Map(), appendResolvedAt: new Map(), ackIssuedAt: new Map() };
  await body({
    store,
    append: async (first, specs) => {
      const items = specs.map(([size, p, t], i) => itemFor(first + i, size, p, t));
      for (const it of items) rec.appended.set(it.seq, it);
      await store.append(items, true);
      for (const it of items) rec.appendResolvedAt.set(it.seq, fs.traceLength);
    },
    ack: async (seqs) => {
      for (const s of seqs) rec.ackIssuedAt.set(s, fs.traceLength);
      await store.ack(seqs, true);
    },
  });
  await store.settled();
  await store.close();
  return rec;
}

async function checkPoint(rec: Recorded, point: CrashPoint): Promise<void> {
  const fs = rec.fs.crashAt(point);
  const where = `crash point ${formatCrashPoint(point)} (${rec.fs.reproLine()})`;
  let store: LogStore;
  try {
    store = await LogStore.open(DIR, { ...rec.options, fs });
  } catch (e) {
    throw new Error(`${where}: open failed: ${(e as { code?: string }).code}: ${(e as Error).message}`);
  }
  const r = await store.open();
  const present = checkRecovered(where, store, r, rec.appended);
  for (const [seq, at] of rec.appendResolvedAt) {
    if (at > point.at || present.has(seq)) continue;
    const ackIssued = rec.ackIssuedAt.get(seq);
    expect(ackIssued !== undefined && ackIssued < point.at, `${where}: seq ${seq} was appended durably and not acked, but is missing`).toBe(
      true,
    );
  }
  // The recovered store takes one more scheduled item, and a reopen still reports it.
  const extra = itemFor(r.nextSeq, 9, -3, EPOCH_MS);
  await store.append([extra], true);
  await store.close();
  const again = await LogStore.open(DIR, { ...rec.options, fs });
  const r2 = await again.open();
  checkRecovered(`${where}, reopened`, again, r2, new Map([...rec.appended, [extra.seq, extra]]));
  expect(again.read(ALL).at(-1)?.seq, `${where}: the item appended after recovery`).toBe(extra.seq);
  await again.close();
}

/**
 * Every crash point, with `writeback: 'any'`: any prefix of the unsynced writes and directory
 * changes may have reached the disk (F1, F2, F4), the one at the cut torn at a few lengths, with
 * and without a zero tail (F3).
 */
async function explore(rec: Recorded): Promise<number> {
  let states = 0;
  const tornLengths = (n: number): number[] => [1, n >> 1, n - 1];
  for (const point of rec.fs.crashPoints({ from: rec.from, zeroTail: true, writeback: 'any', tornLengths })) {
    await checkPoint(rec, point);
    states++;
  }
  expect(states).toBeGreaterThan(0);
  return states;
}

describe('every crash point', () => {
  test('theFirstScheduledItemOfANewStoreReplacesItsEmptySegment', async () => {
    const rec = await record({ segmentBytes: 256, preallocate: false, autoCompact: false }, async ({ append }) => {
      await append(1, [[12, 5, EPOCH_MS]]);
      await append(2, [
        [12, 0, 0],
        [12, -128, 0],
      ]);
    });
    await explore(rec);
  });

  test('scheduledItemsAfterAPlainBacklogRollAcrossSegmentsAndACompaction', async () => {
    const rec = await record(
      { segmentBytes: 256, cursorCheckpointBytes: 4096, preallocate: false, autoCompact: false },
      async ({ append, ack, store }) => {
        await append(1, [
          [30, 0, 0],
          [30, 0, 0],
        ]);
        await append(3, [
          [20, 0, 0],
          [20, 127, 0],
        ]); // rolls to a version-2 segment
        await append(5, [[30, 0, EPOCH_MS + 5]]);
        for (let seq = 6; seq <= 11; seq++) await append(seq, [[30, seq % 2 === 0 ? 1 : 0, 0]]);
        await ack([1, 2, 3, 5, 7, 9]);
        const result = await store.compact();
        expect(result.segmentsRewritten + result.segmentsDeleted).toBeGreaterThan(0);
      },
    );
    expect(rec.fs.trace().some((e) => e.kind === 'rename')).toBe(true);
    await explore(rec);
  });
});

// ---- Seeded random workloads with random crashes ----

async function run(seed: number, lie = false): Promise<void> {
  const rnd = new Prng(seed);
  let fs = new CrashFileSystem({ seed });
  const options: LogStoreOptions = {
    segmentBytes: 256 + rnd.int(2048),
    cursorCheckpointBytes: 64 + rnd.int(512),
    tailCacheBytes: rnd.bool() ? 0 : rnd.int(4096),
    readAheadBytes: 64 + rnd.int(1024),
    autoCompact: rnd.bool(0.7),
  };
  /** How often an appended item is scheduled, per run: some runs schedule rarely, some mostly. */
  const scheduledShare = rnd.int(100) / 100;
  const open = async (): Promise<{ store: LogStore; r: StoreRecovery }> => {
    const store = await LogStore.open(DIR, { ...options, fs });
    return { store, r: await store.open() };
  };
  const appended = new Map<number, StoredItem>();
  /** Seqs appended with a resolved sync, and not acked since. */
  const durable = new Set<number>();
  let live = new Set<number>();
  let nextSeq = 1;
  let { store, r } = await open();
  let recoveries = 0;
  const recovered = (): void => {
    const present = checkRecovered(`recovery ${++recoveries} (${fs.reproLine()})`, store, r, appended, lie);
    for (const s of durable) expect(present.has(s), `seq ${s} was appended durably and never acked, but is missing`).toBe(true);
    for (const s of [...appended.keys()]) if (s >= r.nextSeq) appended.delete(s);
    live = present;
    // Recovery makes what it found durable before serving it.
    durable.clear();
    for (const s of present) durable.add(s);
    nextSeq = r.nextSeq;
  };
  for (let op = 0; op < OPS; op++) {
    const dice = rnd.int(100);
    if (dice < 45) {
      const batch: StoredItem[] = [];
      for (let i = 0, k = 1 + rnd.int(5); i < k; i++) {
        const scheduled = rnd.bool(scheduledShare);
        const priority = scheduled && rnd.bool() ? rnd.int(256) - 128 : 0;
        const notBefore = scheduled && (priority === 0 || rnd.bool()) ? EPOCH_MS + rnd.int(1e6) : 0;
        batch.push(itemFor(nextSeq + i, rnd.int(120), priority, notBefore));
      }
      const sync = rnd.bool();
      for (const it of batch) appended.set(it.seq, it);
      nextSeq += batch.length;
      await store.append(batch, sync);
      for (const it of batch) {
        live.add(it.seq);
        if (sync) durable.add(it.seq);
      }
      // A synced append makes every earlier item of this session durable too.
      if (sync) for (const s of live) durable.add(s);
    } else if (dice < 70 && live.size > 0) {
      const all = [...live];
      const chosen = new Set<number>();
      for (let k = 1 + rnd.int(Math.min(5, all.length)); chosen.size < k; ) chosen.add(all[rnd.int(all.length)]!);
      for (const s of chosen) {
        live.delete(s);
        durable.delete(s);
      }
      await store.ack([...chosen], rnd.bool());
    } else if (dice < 80) {
      for (const it of store.read({ after: rnd.int(nextSeq), before: Number.MAX_SAFE_INTEGER, limit: 1 + rnd.int(20) })) {
        const want = appended.get(it.seq)!;
        expect([it.priority ?? 0, it.notBefore ?? 0], `live read of seq ${it.seq}`).toEqual([want.priority ?? 0, want.notBefore ?? 0]);
      }
    } else if (dice < 85) {
      await store.compact();
    } else if (dice < 90) {
      await store.close();
      ({ store, r } = await open());
      recovered();
    } else {
      fs = fs.crash();
      ({ store, r } = await open());
      recovered();
    }
  }
  await store.close();
}

describe('seeded crashes', () => {
  test('canary: a store reporting nextSeq as scheduledFrom is caught', async () => {
    let caught = 0;
    for (let seed = 1; seed <= 10; seed++) {
      try {
        await run(seed, true);
      } catch (e) {
        if ((e as Error).name === 'AssertionError' && /scheduledFrom above the lowest/.test((e as Error).message)) caught++;
        else throw e;
      }
    }
    expect(caught).toBeGreaterThan(0);
  });

  const first = seedFromEnv(0x5c4ed000);
  const single = process.env.SEED !== undefined;
  for (let i = 0; i < (single ? 1 : RUNS); i++) {
    const seed = (first + i) >>> 0;
    test(`seed ${formatSeed(seed)}`, async () => {
      await withReproduction(
        () => `SEED=${formatSeed(seed)} npx vitest run test/stores/log/scheduling-crash`,
        () => run(seed),
      );
    });
  }
});
