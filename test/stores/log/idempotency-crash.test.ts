/**
 * Crashes of the fault model (F1–F4, the simulated crash disk) while a LogStore holds idempotency
 * keys. Two kinds of run:
 *
 * - fixed Store-level workloads at every crash point of their trace (any write-back order): keyed
 *   appends, acks, segment deletion and compaction, keepKeysFrom. After each recovery the checker
 *   asserts that every key reported names an item that was appended with exactly that key and is
 *   still there or was acked (a key never points at a lost item), that every item read that was
 *   appended with a key has it reported (an item never stands without its key), and that every key
 *   of a durable append, at or after the keepKeysFrom bound, is reported.
 * - seeded queue-level workloads over a ManualClock: keyed pushes, retries of the same keys (some
 *   concurrent), acks, compaction, clean reopens and power losses. A model holds every key whose
 *   push resolved, with its seq and time; a push of a key the model holds within the window must
 *   resolve with that seq (the key is never stored twice), and every resolved push not acked must
 *   be readable after any crash (no acknowledged push is lost). A canary store that forgets the
 *   keys of acked items must be caught.
 *
 * A failure prints `reproduce: ...`; replay a seed with `SEED=<seed> npx vitest run test/stores/log/idempotency-crash`.
 */
import { describe, expect, test } from 'vitest';
import { LogStore, type LogStoreOptions } from '../../../src/stores/log/log-store.js';
import { Builder, type Consumer, type Producer } from '../../../src/core/builder.js';
import type { StoredItem, StoredKey, StoreRecovery } from '../../../src/contract/store.js';
import {
  CrashFileSystem,
  ManualClock,
  Prng,
  formatCrashPoint,
  formatSeed,
  seedFromEnv,
  withReproduction,
  type CrashPoint,
} from '../../../src/testing/index.js';

const DIR = '/q';
const RUNS = Number(process.env.FUZZ_RUNS ?? 16);
const OPS = 160;
const ALL = { after: 0, before: Number.MAX_SAFE_INTEGER, limit: 1e9 };
const T0 = 1_700_000_000_000;

function itemFor(seq: number, size: number, key?: string, keyedAt = T0): StoredItem {
  const bytes = new Uint8Array(size);
  for (let i = 0; i < size; i++) bytes[i] = (seq * 31 + i * 7) & 0xff;
  return key === undefined ? { seq, bytes } : { seq, bytes, key, keyedAt };
}

// ---- Every crash point of fixed Store-level workloads ----

interface Recorded {
  fs: CrashFileSystem;
  from: number;
  options: LogStoreOptions;
  appended: Map<number, StoredItem>;
  appendResolvedAt: Map<number, number>;
  ackIssuedAt: Map<number, number>;
  /** Trace position and value of each keepKeysFrom call. */
  keptFrom: { at: number; from: number }[];
}

interface Ops {
  store: LogStore;
  append(items: StoredItem[]): Promise<void>;
  ack(seqs: number[]): Promise<void>;
  keepKeysFrom(at: number): void;
}

async function record(options: LogStoreOptions, body: (ops: Ops) => Promise<void>): Promise<Recorded> {
  const fs = new CrashFileSystem({ seed: 1 });
  const store = await LogStore.open(DIR, { ...options, fs });
  await store.open();
  const rec: Recorded = {
    fs,
    from: fs.traceLength,
    options,
    appended: new Map(),
    appendResolvedAt: new Map(),
    ackIssuedAt: new Map(),
    keptFrom: [],
  };
  await body({
    store,
    append: async (items) => {
      for (const it of items) rec.appended.set(it.seq, it);
      await store.append(items, true);
      for (const it of items) rec.appendResolvedAt.set(it.seq, fs.traceLength);
    },
    ack: async (seqs) => {
      for (const s of seqs) rec.ackIssuedAt.set(s, fs.traceLength);
      await store.ack(seqs, true);
    },
    keepKeysFrom: (at) => {
      rec.keptFrom.push({ at: fs.traceLength, from: at });
      store.keepKeysFrom(at);
    },
  });
  await store.settled();
  await store.close();
  return rec;
}

/** The atomicity checks of one recovery, shared by both kinds of run. Returns the seqs read. */
function checkKeys(
  where: string,
  store: LogStore,
  r: StoreRecovery,
  appended: ReadonlyMap<number, StoredItem>,
  acked: (seq: number) => boolean,
): Set<number> {
  const present = new Set(store.read(ALL).map((i) => i.seq));
  const keys = r.keys ?? [];
  const bySeq = new Map<number, StoredKey>();
  for (const k of keys) {
    const want = appended.get(k.seq);
    expect(want?.key, `${where}: key ${JSON.stringify(k.key)} names seq ${k.seq}, which was not appended with it`).toBe(k.key);
    expect(k.keyedAt, `${where}: keyedAt of seq ${k.seq}`).toBe(want!.keyedAt);
    expect(present.has(k.seq) || acked(k.seq), `${where}: key ${JSON.stringify(k.key)} points at seq ${k.seq}, which is lost`).toBe(true);
    bySeq.set(k.seq, k);
  }
  for (const seq of present) {
    const want = appended.get(seq);
    if (want?.key !== undefined) expect(bySeq.get(seq)?.key, `${where}: seq ${seq} is stored without its key`).toBe(want.key);
  }
  return present;
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
  const ackedBefore = (seq: number) => (rec.ackIssuedAt.get(seq) ?? Infinity) < point.at;
  const present = checkKeys(where, store, r, rec.appended, ackedBefore);
  // Only a bound handed over before the crash may have let keys go.
  const bound = rec.keptFrom.filter((k) => k.at < point.at).reduce((m, k) => Math.max(m, k.from), 0);
  const reported = new Set((r.keys ?? []).map((k) => k.seq));
  for (const [seq, at] of rec.appendResolvedAt) {
    if (at > point.at) continue;
    const item = rec.appended.get(seq)!;
    if (!present.has(seq)) expect(ackedBefore(seq), `${where}: seq ${seq} was appended durably and not acked, but is missing`).toBe(true);
    if (item.key !== undefined && item.keyedAt! >= bound)
      expect(reported.has(seq), `${where}: the key of seq ${seq}, appended durably, is gone`).toBe(true);
  }
  // The recovered store takes one more keyed item, and a reopen reports its key.
  const extra = itemFor(r.nextSeq, 9, 'after-recovery', T0 + 99);
  await store.append([extra], true);
  await store.close();
  const again = await LogStore.open(DIR, { ...rec.options, fs });
  const r2 = await again.open();
  checkKeys(`${where}, reopened`, again, r2, new Map([...rec.appended, [extra.seq, extra]]), ackedBefore);
  expect(
    r2.keys?.some((k) => k.seq === extra.seq && k.key === 'after-recovery'),
    `${where}: the key appended after recovery`,
  ).toBe(true);
  await again.close();
}

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
  test('theFirstKeyedItemOfANewStoreReplacesItsEmptySegment', async () => {
    const rec = await record({ segmentBytes: 256, preallocate: false, autoCompact: false }, async ({ append }) => {
      await append([itemFor(1, 12, 'a', T0)]);
      await append([itemFor(2, 12), itemFor(3, 12, 'b', T0 + 1)]);
    });
    await explore(rec);
  });

  test('keysOfAckedItemsOutliveTheDeletionAndCompactionOfTheirSegments', async () => {
    const rec = await record(
      { segmentBytes: 256, cursorCheckpointBytes: 4096, preallocate: false, autoCompact: false },
      async ({ append, ack, store, keepKeysFrom }) => {
        await append([itemFor(1, 30), itemFor(2, 30)]);
        await append([itemFor(3, 20, 'k3', T0 + 3), itemFor(4, 20, 'k4', T0 + 4)]); // rolls to a version-3 segment
        for (let seq = 5; seq <= 12; seq++) await append([itemFor(seq, 30, seq % 3 === 0 ? undefined : `k${seq}`, T0 + seq)]);
        await ack([1, 2, 3, 4, 5, 6, 7]); // the two first segments, one of them keyed, are deleted in the background
        await ack([9, 11]);
        const result = await store.compact();
        expect(result.segmentsRewritten).toBeGreaterThan(0);
        keepKeysFrom(T0 + 6);
        await append([itemFor(13, 10, 'k13', T0 + 13)]);
        await store.compact();
      },
    );
    expect(rec.fs.trace().some((e) => e.kind === 'unlink')).toBe(true);
    await explore(rec);
  });
});

// ---- Seeded queue-level workloads with random crashes ----

interface Known {
  seq: number;
  keyedAt: number;
}

/**
 * One run. With `forgetAcked` (the canary), the store hands the queue only the keys of the items
 * it still holds, as a store that dropped a key with its item's ack would.
 */
async function run(seed: number, forgetAcked = false): Promise<void> {
  const rnd = new Prng(seed);
  let fs = new CrashFileSystem({ seed });
  const clock = new ManualClock(T0);
  const windowMs = 500 + rnd.int(2000);
  const durability = rnd.bool() ? 'sync' : 'group';
  const options: LogStoreOptions = {
    segmentBytes: 256 + rnd.int(1024),
    // Some runs checkpoint rarely, so that keyed segments are deleted long after the last checkpoint.
    cursorCheckpointBytes: rnd.bool() ? 64 + rnd.int(512) : 8192 + rnd.int(8192),
    readAheadBytes: 64 + rnd.int(1024),
    autoCompact: rnd.bool(0.7),
    preallocate: rnd.bool(),
  };
  /** Keys whose push resolved, with the seq they resolved with and when the key was stored. */
  const model = new Map<string, Known>();
  /** The key of each seq whose keyed push resolved. */
  const keyOf = new Map<number, string>();
  /** Resolved pushes not acked: they must survive any crash. */
  const durable = new Set<number>();
  const acked = new Set<number>();
  const keyPool = Array.from({ length: 12 + rnd.int(40) }, (_, i) => `key-${seed}-${i}`);
  let recoveries = 0;

  let store!: LogStore;
  let tx!: Producer;
  let rx!: Consumer;
  const open = async (): Promise<void> => {
    store = await LogStore.open(DIR, { ...options, fs });
    const own = store.open.bind(store);
    let recovery: StoreRecovery | undefined;
    store.open = async () => {
      recovery = await own();
      if (forgetAcked) {
        const held = new Set(store.read(ALL).map((i) => i.seq));
        recovery = { ...recovery, keys: recovery.keys!.filter((k) => held.has(k.seq)) };
      }
      return recovery;
    };
    [tx, rx] = await new Builder(store).clock(clock).durability(durability).ackDurability('sync').idempotency({ windowMs }).open();
    const where = `recovery ${++recoveries} (${fs.reproLine()})`;
    const present = new Set(store.read(ALL).map((i) => i.seq));
    for (const s of durable) expect(present.has(s), `${where}: seq ${s} was pushed, resolved and never acked, but is missing`).toBe(true);
    for (const k of recovery!.keys ?? []) {
      expect(keyOf.get(k.seq), `${where}: key ${k.key} names seq ${k.seq}, pushed with another key or none`).toBe(k.key);
      expect(present.has(k.seq) || acked.has(k.seq), `${where}: key ${k.key} points at lost seq ${k.seq}`).toBe(true);
    }
    const reported = new Set((recovery!.keys ?? []).map((k) => `${k.key} ${k.seq}`));
    for (const [key, known] of model) {
      if (clock.now() - known.keyedAt >= windowMs) continue;
      expect(reported.has(`${key} ${known.seq}`), `${where}: key ${key} of seq ${known.seq}, pushed within the window, is gone`).toBe(true);
    }
  };

  const push = async (key: string): Promise<void> => {
    const known = model.get(key);
    const fresh = known !== undefined && clock.now() - known.keyedAt < windowMs;
    const at = clock.now();
    const seq = await tx.push(`${key}@${at}`, { key });
    if (fresh) {
      expect(seq, `push of ${key}, stored as seq ${known!.seq} at ${known!.keyedAt}, at ${at}: stored twice`).toBe(known!.seq);
      return;
    }
    if (known !== undefined && known.seq === seq) return; // a forgotten key may still be remembered
    expect(keyOf.has(seq) && keyOf.get(seq) !== key, `seq ${seq} resolved for two keys`).toBe(false);
    model.set(key, { seq, keyedAt: at });
    keyOf.set(seq, key);
    durable.add(seq);
  };

  await open();
  for (let op = 0; op < OPS; op++) {
    const dice = rnd.int(100);
    if (dice < 27) {
      await push(keyPool[rnd.int(keyPool.length)]!);
    } else if (dice < 34) {
      // A batch of keys, some remembered, some twice.
      const keys = Array.from({ length: 1 + rnd.int(4) }, () => keyPool[rnd.int(keyPool.length)]!);
      const at = clock.now();
      const before = new Map(keys.map((k) => [k, model.get(k)]));
      const seqs = await tx.pushMany(
        keys.map((k) => `${k}@${at} in a batch`),
        { keys },
      );
      keys.forEach((key, i) => {
        const known = before.get(key);
        if (known !== undefined && at - known.keyedAt < windowMs) {
          expect(seqs[i], `pushMany of ${key}, stored as seq ${known.seq} at ${known.keyedAt}, at ${at}: stored twice`).toBe(known.seq);
          return;
        }
        const first = keys.indexOf(key);
        if (first < i) {
          expect(seqs[i], `pushMany of ${key} twice in one batch: stored twice`).toBe(seqs[first]);
          return;
        }
        if (known?.seq === seqs[i]) return;
        model.set(key, { seq: seqs[i]!, keyedAt: at });
        keyOf.set(seqs[i]!, key);
        durable.add(seqs[i]!);
      });
    } else if (dice < 38) {
      // Two pushes of one key at once (a producer retrying before its first push resolved).
      const key = keyPool[rnd.int(keyPool.length)]!;
      const known = model.get(key);
      const fresh = known !== undefined && clock.now() - known.keyedAt < windowMs;
      const at = clock.now();
      const [a, b] = await Promise.all([tx.push(`${key}@${at}`, { key }), tx.push(`${key}@${at} again`, { key })]);
      expect(a, `concurrent pushes of ${key}`).toBe(b);
      if (fresh) expect(a, `concurrent pushes of ${key}: stored twice`).toBe(known!.seq);
      else if (known?.seq !== a) {
        model.set(key, { seq: a, keyedAt: at });
        keyOf.set(a, key);
        durable.add(a);
      }
    } else if (dice < 66) {
      for (let k = 1 + rnd.int(3); k > 0; k--) {
        const item = rx.tryReserve();
        if (item === null) break;
        await item.ack();
        durable.delete(item.seq);
        acked.add(item.seq);
      }
    } else if (dice < 74) {
      clock.advance(rnd.int(windowMs >> 1));
    } else if (dice < 80) {
      await store.compact();
    } else if (dice < 86) {
      await tx.close();
      await open();
    } else if (dice < 95) {
      fs = fs.crash();
      await open();
    } else {
      await tx.push(`plain ${op}`).then((seq) => durable.add(seq));
    }
  }
  await tx.close();
}

describe('seeded crashes through a queue', () => {
  test('canary: a store that forgets the keys of acked items is caught', async () => {
    let caught = 0;
    for (let seed = 1; seed <= 10; seed++) {
      try {
        await run(seed, true);
      } catch (e) {
        if ((e as Error).name === 'AssertionError' && /stored twice|within the window, is gone/.test((e as Error).message)) caught++;
        else throw e;
      }
    }
    expect(caught).toBeGreaterThan(0);
  });

  const first = seedFromEnv(0x1de0b000);
  const single = process.env.SEED !== undefined;
  for (let i = 0; i < (single ? 1 : RUNS); i++) {
    const seed = (first + i) >>> 0;
    test(`seed ${formatSeed(seed)}`, async () => {
      await withReproduction(
        () => `SEED=${formatSeed(seed)} npx vitest run test/stores/log/idempotency-crash`,
        () => run(seed),
      );
    });
  }
});
