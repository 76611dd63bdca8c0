/**
 * The spool at every crash point, on the simulated crash disk. A producer process spools records
 * (some alone, some in batches, some with a priority or a key), then an owner process opens the
 * queue, ingests them while the producer is still there and closes; a second owner opens, the
 * producer spools more and dies, and the owner ingests the rest and finishes the file. Every crash point of the whole trace
 * (every prefix, every torn length of the last write, F3 zero tails) is recovered by a new owner
 * that ingests what the spool holds, and checked:
 * - every record whose push resolved is in the queue exactly once;
 * - no record is there twice, and nothing that was never pushed is there;
 * - each record's payload, priority and key are as pushed, and each producer batch keeps its order.
 * Deterministic: no randomness beyond the disk's seed, no timers (a manual clock nobody moves).
 */
import { describe, expect, it } from 'vitest';
import { Builder } from '../../src/core/builder.js';
import { LogStore } from '../../src/stores/log/log-store.js';
import { openSpool } from '../../src/stores/log/engine/spool-producer.js';
import { CrashFileSystem, ManualClock, formatCrashPoint } from '../../src/testing/index.js';

const DIR = '/q';
const OPTIONS = { segmentBytes: 1024, preallocate: false, autoCompact: false } as const;
const enc = (s: string) => new TextEncoder().encode(s);
const dec = (b: Uint8Array) => new TextDecoder().decode(b);

interface Recorded {
  fs: CrashFileSystem;
  /** payload -> trace length when its push resolved. */
  resolvedAt: Map<string, number>;
  /** Every payload ever pushed (resolved or not). */
  pushed: Set<string>;
}

async function record(): Promise<Recorded> {
  const fs = new CrashFileSystem({ seed: 21 });
  const clock = new ManualClock();
  const rec: Recorded = { fs, resolvedAt: new Map(), pushed: new Set() };
  const producerFs = fs.newProcess();
  const producer = await openSpool(DIR, { durability: 'group', fs: producerFs, now: () => clock.now() });
  const push = async (texts: string[], options: { priority?: number; keys?: string[] } = {}) => {
    for (const t of texts) rec.pushed.add(t);
    await producer.pushMany(texts.map(enc), options, undefined);
    for (const t of texts) rec.resolvedAt.set(t, fs.traceLength);
  };
  await push(['a1']);
  await Promise.all([push(['a2', 'a3']), push(['a4'], { priority: 3 })]);
  await push(['a5'], { keys: ['k5'] });
  // An owner opens while the producer is alive, ingests what is there and closes: its checkpoint
  // must say how far the producer's file was ingested, since the file is still there.
  {
    const first = await LogStore.open(DIR, { ...OPTIONS, fs, clock });
    const [tx0] = await new Builder(first).open();
    await first.ingestSpool();
    await tx0.close();
  }
  const store = await LogStore.open(DIR, { ...OPTIONS, fs, clock });
  const [tx] = await new Builder(store).open();
  await store.ingestSpool();
  await push(['a6', 'a7']);
  await store.ingestSpool();
  await push(['a8']);
  // The producer dies without closing: the owner finds its lock free and finishes the file.
  producerFs.processCrash();
  await store.ingestSpool();
  await tx.close();
  return rec;
}

describe('the spool at every crash point', () => {
  it('everyResolvedSpoolPushIsInTheQueueExactlyOnceAfterACrashAnywhere', async () => {
    const rec = await record();
    let states = 0;
    for (const point of rec.fs.crashPoints({ zeroTail: true })) {
      states++;
      const where = `crash point ${formatCrashPoint(point)} (${rec.fs.reproLine()})`;
      const fs = rec.fs.crashAt(point);
      let store: LogStore;
      try {
        store = await LogStore.open(DIR, { ...OPTIONS, fs, clock: new ManualClock() });
      } catch (e) {
        // Before the producer's spool directory was durable nothing had resolved: no store is fine.
        expect(
          [...rec.resolvedAt.values()].every((at) => at > point.at),
          `${where}: open failed: ${String(e)}`,
        ).toBe(true);
        continue;
      }
      const [tx, rx] = await new Builder(store).open();
      await store.ingestSpool();
      const got: string[] = [];
      for (let item = rx.tryReserve(); item !== null; item = rx.tryReserve()) got.push(dec(item.bytes));
      for (const t of got) expect(rec.pushed.has(t), `${where}: ${t} was never pushed`).toBe(true);
      expect(new Set(got).size, `${where}: a record ingested twice: ${got.join(',')}`).toBe(got.length);
      for (const [t, at] of rec.resolvedAt) if (at <= point.at) expect(got, `${where}: ${t} resolved but is missing`).toContain(t);
      // Its priority came through the spool: of all the items ready at once, it goes first.
      if (got.includes('a4')) expect(got[0], `${where}: a4 has priority 3`).toBe('a4');
      // The plain records keep the producer's order.
      const plain = got.filter((t) => t !== 'a4');
      expect(plain, `${where}: order`).toEqual([...plain].sort());
      const spool = store.inspect().spool!;
      expect(spool.problems, `${where}: problems`).toEqual([]);
      await tx.close();
    }
    console.log(`[spool] ${states} crash states explored`);
    expect(states).toBeGreaterThan(200);
  });
});
