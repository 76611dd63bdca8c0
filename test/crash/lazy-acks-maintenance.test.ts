/**
 * Lazy acks beside the maintenance that rewrites the cursor and the segments: `group` pushes,
 * out-of-order acks that are not awaited one by one, nacks, 512-byte segments, a cursor
 * checkpointed every 160 bytes and automatic compaction, so that checkpoints start while a lazy
 * sync is in flight and segments roll, are deleted and compacted. At every crash point (each
 * prefix of the trace with only synced data kept, and torn last writes): no pushed-and-resolved
 * item is lost unless its ack was issued, no item whose ack a completed sync covered comes back,
 * and nothing raises the next seq (which only `none` can cause).
 */
import { describe, expect, it } from 'vitest';
import { Builder } from '../../src/core/builder.js';
import { LogStore } from '../../src/stores/log/log-store.js';
import { CrashFileSystem, formatCrashPoint, type CrashPoint } from '../../src/testing/index.js';
import { readAll } from '../../harness/crash-model.js';

const DIR = '/q';
const OPTIONS = { segmentBytes: 512, preallocate: false, autoCompact: true, compactionLiveRatio: 0.9, cursorCheckpointBytes: 160 } as const;

async function record(seed: number) {
  const fs = new CrashFileSystem({ seed });
  const store = await LogStore.open(DIR, { ...OPTIONS, fs });
  const from = fs.traceLength;
  const pushed = new Map<number, string>();
  const pushResolvedAt = new Map<number, number>();
  const ackIssuedAt = new Map<number, number>();
  const ackSyncedAt = new Map<number, number>();
  const written: number[] = [];
  const ack = store.ack.bind(store);
  const sync = store.sync.bind(store);
  let syncs = 0;
  store.ack = (seqs, flag) => ack(seqs, flag).then(() => void written.push(...seqs));
  store.sync = () => {
    const covered = written.splice(0);
    syncs++;
    return sync().then(() => {
      for (const s of covered) ackSyncedAt.set(s, fs.traceLength);
    });
  };
  const [tx, rx] = await new Builder(store)
    .durability('group')
    .ackDurability('lazy', { maxDelayMs: 2 ** 31 - 1, maxPending: 3 })
    .open();
  let n = 0;
  const pushes: Promise<void>[] = [];
  const acks: Promise<void>[] = [];
  for (let round = 0; round < 12; round++) {
    for (let i = 0; i < 5; i++) {
      const body = `item-${n++}-${'x'.repeat(20)}`;
      pushes.push(
        tx.push(body).then((seq) => {
          pushed.set(seq, body);
          pushResolvedAt.set(seq, fs.traceLength);
        }),
      );
    }
    await new Promise((r) => setImmediate(r));
    // Take what is ready; ack it out of order without awaiting each ack, nack every fourth.
    const got = [];
    for (;;) {
      const r = rx.tryReserve();
      if (!r) break;
      got.push(r);
    }
    got.reverse();
    for (let i = 0; i < got.length; i++) {
      if (i % 4 === 3) {
        got[i].nack();
        continue;
      }
      ackIssuedAt.set(got[i].seq, fs.traceLength);
      acks.push(got[i].ack());
    }
    await new Promise((r) => setImmediate(r));
  }
  await Promise.all(pushes);
  await Promise.all(acks);
  await tx.close();
  return { fs, from, pushed, pushResolvedAt, ackIssuedAt, ackSyncedAt, syncs };
}

async function check(rec: Awaited<ReturnType<typeof record>>, point: CrashPoint) {
  const where = `crash point ${formatCrashPoint(point)} (${rec.fs.reproLine()})`;
  const store = await LogStore.open(DIR, { ...OPTIONS, fs: rec.fs.crashAt(point) });
  await store.open();
  expect(store.recovery.nextSeqRaisedFrom, `${where}: raise under group`).toBe(null);
  const got = readAll(store);
  const present = new Set<number>();
  for (const it of got) {
    expect(new TextDecoder().decode(it.bytes), `${where}: seq ${it.seq}`).toBe(rec.pushed.get(it.seq));
    const syncedAt = rec.ackSyncedAt.get(it.seq);
    expect(syncedAt !== undefined && syncedAt <= point.at, `${where}: seq ${it.seq} came back although synced`).toBe(false);
    present.add(it.seq);
  }
  for (const [seq, at] of rec.pushResolvedAt) {
    if (at > point.at || present.has(seq)) continue;
    const issuedAt = rec.ackIssuedAt.get(seq);
    expect(issuedAt !== undefined && issuedAt < point.at, `${where}: seq ${seq} pushed+resolved, not acked, missing`).toBe(true);
  }
  await store.close();
}

describe('lazy acks with checkpoints, rolls, deletion, compaction', () => {
  for (const seed of [1, 2, 3]) {
    it(`seed ${seed}`, async () => {
      const rec = await record(seed);
      // The workload did what it is for: lazy syncs that covered acks.
      expect(rec.syncs).toBeGreaterThan(0);
      expect(rec.ackSyncedAt.size).toBeGreaterThan(0);
      let states = 0;
      for (let at = rec.from; at <= rec.fs.traceLength; at++) {
        await check(rec, { at, keep: rec.from });
        states++;
      }
      for (const point of rec.fs.crashPoints({ from: rec.from, tornLengths: (n) => [1, n >> 1, n - 1] })) {
        await check(rec, point);
        states++;
      }
      expect(states).toBeGreaterThan(100);
    }, 600_000);
  }
});
