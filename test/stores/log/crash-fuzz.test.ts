/**
 * Seeded crash fuzzing of LogStore on the simulated crash disk (F1–F4 on every crash). The
 * workload appends, acks, reads, compacts, closes and crashes at random; the checker asserts after
 * every recovery that:
 * - every item whose append (or a later one) resolved with `sync` is there, unless its ack resolved;
 * - no ack that resolved with `sync` is undone;
 * - nothing is invented: every item read has exactly the bytes appended with its seq, in seq order;
 * - `count` matches what is read, and `nextSeq` never goes back below a durably used seq.
 * A failure prints `reproduce: seed=... crash=...`; replay with `SEED=<seed> npx vitest run test/stores/log/crash-fuzz`.
 */
import { describe, expect, test } from 'vitest';
import { LogStore, type LogStoreOptions } from '../../../src/stores/log/log-store.js';
import type { StoredItem } from '../../../src/contract/store.js';
import { CrashFileSystem, Prng, formatSeed, seedFromEnv, withReproduction } from '../../../src/testing/index.js';

const RUNS = Number(process.env.FUZZ_RUNS ?? 40);
const OPS = 160;

/** A disk whose file syncs lie (resolve without syncing): the canary the checker must catch. */
function lying(fs: CrashFileSystem): CrashFileSystem {
  return new Proxy(fs, {
    get(target, key) {
      if (key === 'fdatasync' || key === 'fsync') return () => Promise.resolve();
      if (key === 'crash') return () => lying(target.crash());
      const v = Reflect.get(target, key, target) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}

async function run(seed: number, canary = false): Promise<void> {
  const rnd = new Prng(seed);
  let fs = new CrashFileSystem({ seed });
  if (canary) fs = lying(fs);
  const options: LogStoreOptions = {
    segmentBytes: 256 + rnd.int(2048),
    cursorCheckpointBytes: 64 + rnd.int(512),
    tailCacheBytes: rnd.bool() ? 0 : rnd.int(4096),
    readAheadBytes: 64 + rnd.int(1024),
    autoCompact: rnd.bool(0.7),
  };
  const dir = '/q';
  const open = async (): Promise<{ store: LogStore; nextSeq: number; count: number }> => {
    const store = await LogStore.open(dir, { ...options, fs });
    const r = await store.open();
    return { store, ...r };
  };

  /** Everything ever appended in the current seq space: seq -> payload. */
  const appended = new Map<number, Uint8Array>();
  /** Seqs present (unacked) as far as the live store knows. */
  let live = new Set<number>();
  let nextSeq = 1;
  /** Every seq below this was made durable by a resolved sync append. */
  let durableEnd = 1;
  /** Seqs whose ack resolved with sync. */
  const durablyAcked = new Set<number>();
  /** Highest seq the store was ever told about durably (appended or acked with sync). */
  let highestDurable = 0;

  let { store, nextSeq: n0, count: c0 } = await open();
  expect([n0, c0]).toEqual([1, 0]);

  const checkRecovered = (r: { nextSeq: number; count: number }): void => {
    const got = store.read({ after: 0, before: Number.MAX_SAFE_INTEGER, limit: 1e9 });
    const seqs = got.map((i) => i.seq);
    for (let i = 1; i < seqs.length; i++) expect(seqs[i]!).toBeGreaterThan(seqs[i - 1]!);
    for (const it of got) {
      const want = appended.get(it.seq);
      expect(want, `seq ${it.seq} was never appended`).toBeDefined();
      expect(Buffer.from(it.bytes).equals(Buffer.from(want!)), `bytes of seq ${it.seq}`).toBe(true);
      expect(durablyAcked.has(it.seq), `seq ${it.seq} was acked with sync but came back`).toBe(false);
    }
    const present = new Set(seqs);
    for (const s of live) {
      if (s < durableEnd && !present.has(s)) {
        // Only an (unsynced) ack may have removed it.
        expect(live.has(s) && !durablyAcked.has(s), `durable seq ${s} is missing`).toBe(true);
        expect(pendingAcks.has(s), `durable seq ${s} is missing and was never acked`).toBe(true);
      }
    }
    expect(r.count).toBe(got.length);
    expect(r.nextSeq).toBeGreaterThan(Math.max(highestDurable, seqs.length > 0 ? seqs[seqs.length - 1]! : 0));
    // Adopt the recovered state: unsynced items past the data are gone, their seqs may be reused.
    for (const s of [...appended.keys()]) if (s >= r.nextSeq) appended.delete(s);
    live = present;
    nextSeq = r.nextSeq;
    durableEnd = Math.min(durableEnd, nextSeq);
    pendingAcks.clear();
  };
  /** Seqs acked without sync since the last recovery (their acks may or may not survive). */
  const pendingAcks = new Set<number>();

  for (let op = 0; op < OPS; op++) {
    const dice = rnd.int(100);
    if (dice < 40) {
      const k = 1 + rnd.int(6);
      const batch: StoredItem[] = [];
      for (let i = 0; i < k; i++) batch.push({ seq: nextSeq + i, bytes: rnd.bytes(rnd.int(200)) });
      const sync = rnd.bool();
      const ackCandidates = [...live];
      // Sometimes an ack is in flight together with the append (allowed by the contract).
      const withAck = ackCandidates.length > 0 && rnd.bool(0.2);
      const ackSeq = withAck ? ackCandidates[rnd.int(ackCandidates.length)]! : 0;
      const ackSync = rnd.bool();
      const p1 = store.append(batch, sync);
      const p2 = withAck ? store.ack([ackSeq], ackSync) : Promise.resolve();
      for (const it of batch) appended.set(it.seq, it.bytes);
      nextSeq += k;
      await Promise.all([p1, p2]);
      for (const it of batch) live.add(it.seq);
      if (sync) {
        durableEnd = nextSeq;
        highestDurable = Math.max(highestDurable, nextSeq - 1);
      }
      if (withAck) {
        live.delete(ackSeq);
        if (ackSync) durablyAcked.add(ackSeq);
        else pendingAcks.add(ackSeq);
      }
    } else if (dice < 65 && live.size > 0) {
      const all = [...live];
      const k = 1 + rnd.int(Math.min(5, all.length));
      const chosen = new Set<number>();
      while (chosen.size < k) chosen.add(all[rnd.int(all.length)]!);
      const sync = rnd.bool();
      await store.ack([...chosen], sync);
      for (const s of chosen) {
        live.delete(s);
        if (sync) {
          durablyAcked.add(s);
          highestDurable = Math.max(highestDurable, s);
        } else pendingAcks.add(s);
      }
    } else if (dice < 78) {
      const got = store.read({ after: rnd.int(nextSeq), before: Number.MAX_SAFE_INTEGER, limit: 1 + rnd.int(20) });
      for (const it of got) {
        expect(live.has(it.seq)).toBe(true);
        expect(Buffer.from(it.bytes).equals(Buffer.from(appended.get(it.seq)!))).toBe(true);
      }
    } else if (dice < 82) {
      await store.compact();
    } else if (dice < 88) {
      await store.close();
      const r = await open();
      store = r.store;
      // A clean close makes everything durable.
      durableEnd = nextSeq;
      for (const s of pendingAcks) durablyAcked.add(s);
      highestDurable = Math.max(highestDurable, nextSeq - 1);
      checkRecovered(r);
    } else {
      fs = fs.crash();
      const r = await open();
      store = r.store;
      checkRecovered(r);
    }
  }
  await store.close();
}

describe('crash fuzz', () => {
  test('canary: a disk that lies about fsync is caught', async () => {
    let caught = 0;
    for (let seed = 1; seed <= 30; seed++) {
      try {
        await run(seed, true);
      } catch (e) {
        // Caught by the checker, or by recovery refusing the damage; anything else is a harness bug.
        const code = (e as { code?: string }).code;
        if (code === 'ERR_CORRUPT' || (e as Error).name === 'AssertionError') caught++;
        else throw e;
      }
    }
    expect(caught).toBeGreaterThan(0);
  });

  const first = seedFromEnv(0x5eed0000);
  const single = process.env.SEED !== undefined;
  for (let i = 0; i < (single ? 1 : RUNS); i++) {
    const seed = (first + i) >>> 0;
    test(`seed ${formatSeed(seed)}`, async () => {
      let fsLine = `seed=${formatSeed(seed)}`;
      await withReproduction(
        () => `SEED=${formatSeed(seed)} npx vitest run test/stores/log/crash-fuzz (${fsLine})`,
        async () => {
          await run(seed);
          fsLine = 'ok';
        },
      );
    });
  }
});
