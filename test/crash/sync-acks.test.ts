/**
 * `durability('sync')` syncs acks too, with no `ackDurability()` call: a resolved ack is never
 * undone by a power loss. One workload runs through the queue (Builder + LogStore on the simulated
 * crash disk): pushes, then reserve + ack one at a time; the trace length is noted when each push
 * and each ack resolved. Then every crash point of the trace (every prefix, every torn length of
 * the last write, F3 zero tails) is recovered and checked:
 * - an item whose ack resolved before the point never comes back;
 * - no pushed-and-resolved item whose ack had not been issued is lost;
 * - every recovered item was pushed, with its bytes, in seq order.
 * Under the `lazy` policy the same workload redelivers resolved acks at some points (checked
 * below), so the check can fail. Deterministic: no randomness, no timers.
 */
import { describe, expect, it } from 'vitest';
import { Builder } from '../../src/core/builder.js';
import { LogStore } from '../../src/stores/log/log-store.js';
import { CrashFileSystem, formatCrashPoint } from '../../src/testing/index.js';
import { readAll } from '../../harness/crash-model.js';

const DIR = '/q';
const OPTIONS = { segmentBytes: 512, preallocate: false, autoCompact: false } as const;
const PUSHES = 6;
const ACKS = 4;

interface Recorded {
  fs: CrashFileSystem;
  from: number;
  policy: string;
  pushed: Map<number, string>;
  pushResolvedAt: Map<number, number>;
  ackIssuedAt: Map<number, number>;
  ackResolvedAt: Map<number, number>;
}

async function record(lazy: boolean): Promise<Recorded> {
  const fs = new CrashFileSystem({ seed: 11 });
  const store = await LogStore.open(DIR, { ...OPTIONS, fs });
  const builder = new Builder(store).durability('sync');
  // The lazy bound never fires here: only the close would sync.
  if (lazy) builder.ackDurability('lazy', { maxDelayMs: 2 ** 31 - 1, maxPending: 1_000_000 });
  const [tx, rx] = await builder.open();
  const rec: Recorded = {
    fs,
    from: fs.traceLength,
    policy: tx.stats().ackDurability,
    pushed: new Map(),
    pushResolvedAt: new Map(),
    ackIssuedAt: new Map(),
    ackResolvedAt: new Map(),
  };
  for (let i = 0; i < PUSHES; i++) {
    const seq = await tx.push(`item-${i}`);
    rec.pushed.set(seq, `item-${i}`);
    rec.pushResolvedAt.set(seq, fs.traceLength);
  }
  for (let i = 0; i < ACKS; i++) {
    const item = (await rx.reserve())!;
    rec.ackIssuedAt.set(item.seq, fs.traceLength);
    await item.ack();
    rec.ackResolvedAt.set(item.seq, fs.traceLength);
  }
  // No close: the workload ends as a power loss would end it.
  return rec;
}

/** Every crash point: the seqs whose resolved ack came back, after checking nothing was lost. */
async function undoneAcks(rec: Recorded): Promise<{ states: number; undone: number }> {
  let states = 0;
  let undone = 0;
  for (const point of rec.fs.crashPoints({ from: rec.from, zeroTail: true })) {
    states++;
    const where = `crash point ${formatCrashPoint(point)} (${rec.fs.reproLine()})`;
    const store = await LogStore.open(DIR, { ...OPTIONS, fs: rec.fs.crashAt(point) });
    await store.open();
    const present = new Set<number>();
    let prev = 0;
    for (const it of readAll(store)) {
      expect(it.seq, `${where}: seq order`).toBeGreaterThan(prev);
      prev = it.seq;
      expect(new TextDecoder().decode(it.bytes), `${where}: seq ${it.seq}`).toBe(rec.pushed.get(it.seq));
      const resolvedAt = rec.ackResolvedAt.get(it.seq);
      if (resolvedAt !== undefined && resolvedAt <= point.at) undone++;
      present.add(it.seq);
    }
    for (const [seq, at] of rec.pushResolvedAt) {
      if (at > point.at || present.has(seq)) continue;
      const issuedAt = rec.ackIssuedAt.get(seq);
      expect(issuedAt !== undefined && issuedAt < point.at, `${where}: seq ${seq} was pushed and resolved, not acked, but is missing`).toBe(
        true,
      );
    }
    await store.close();
  }
  return { states, undone };
}

describe('acks under durability sync at every crash point', () => {
  it('aResolvedAckUnderSyncIsNeverUndoneByAPowerLoss', async () => {
    const rec = await record(false);
    expect(rec.policy, 'the ack policy follows the push policy').toBe('sync');
    const { states, undone } = await undoneAcks(rec);
    expect(states).toBeGreaterThan(100);
    expect(undone, 'resolved acks that a power loss undid').toBe(0);
  });

  it('theSameWorkloadWithLazyAcksUndoesSomeResolvedAcks', async () => {
    const rec = await record(true);
    expect(rec.policy).toBe('lazy');
    const { undone } = await undoneAcks(rec);
    expect(undone, 'the check above can fail: lazy acks come back at some crash points').toBeGreaterThan(0);
  });
});
