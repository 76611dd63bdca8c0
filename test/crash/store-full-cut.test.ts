/**
 * A batch rejected with ERR_STORE_FULL never comes back. On a full disk the store lands the bytes
 * that fit, cuts the segment back and rejects; the producer, told its push failed, pushes again.
 * If the cut-back were not durable before the rejection, a power loss could keep the landed
 * frames and lose the cut, and the consumer would get the rejected item as well as its retry,
 * under two seqs. Every crash point after the rejection is checked, with any prefix of the
 * unsynced writes surviving (`writeback: 'any'`), under `sync` and `group`.
 */
import { describe, expect, it } from 'vitest';
import { Builder, type Durability } from '../../src/core/builder.js';
import { LogStore } from '../../src/stores/log/log-store.js';
import { isQueueError } from '../../src/contract/errors.js';
import { CrashFileSystem, formatCrashPoint } from '../../src/testing/index.js';

const DIR = '/q';
const OPTIONS = { segmentBytes: 4096, preallocate: false, autoCompact: false } as const;

async function recoveredPayloads(fs: CrashFileSystem): Promise<string[]> {
  const store = await LogStore.open(DIR, { ...OPTIONS, fs });
  const [tx, rx] = await new Builder(store).open();
  const out: string[] = [];
  for (let it = rx.tryReserve(); it !== null; it = rx.tryReserve()) out.push(Buffer.from(it.bytes).toString());
  await tx.close();
  return out;
}

describe('a batch rejected with ERR_STORE_FULL', () => {
  for (const durability of ['sync', 'group'] as Durability[]) {
    it(`never comes back after a power loss (${durability})`, async () => {
      const fs = new CrashFileSystem({ seed: 7 });
      const store = await LogStore.open(DIR, { ...OPTIONS, fs });
      const [tx] = await new Builder(store).durability(durability).open();
      await tx.push('kept-1');
      await tx.push('kept-2');
      // Room for one more frame header and a few bytes: the rejected batch lands in part.
      fs.setDiskBytesMax(fs.usedBytes() + 40);
      const from = fs.traceLength;
      const rejected = await tx.pushMany(['rejected-a', 'rejected-b']).catch((e: unknown) => e);
      expect(isQueueError(rejected, 'ERR_STORE_FULL'), `push rejected with ${String(rejected)}`).toBe(true);
      const rejectedAt = fs.traceLength;
      fs.setDiskBytesMax(Infinity);
      await tx.push('retried');
      await tx.close();
      let states = 0;
      // The cut may be lost only at crash points before the rejection: until then the push had
      // not resolved, and keeping its items is allowed.
      for (const point of fs.crashPoints({ from, writeback: 'any' })) {
        if (point.at < rejectedAt) continue;
        const got = await recoveredPayloads(fs.crashAt(point));
        const where = `crash point ${formatCrashPoint(point)} (${durability}, ${fs.reproLine()})`;
        expect(got.slice(0, 2), where).toEqual(['kept-1', 'kept-2']);
        expect(
          got.filter((p) => p.startsWith('rejected')),
          where,
        ).toEqual([]);
        states++;
      }
      expect(states).toBeGreaterThan(0);
    });
  }
});
