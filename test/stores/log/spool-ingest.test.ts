/**
 * The owner's ingestion when the queue refuses a pass's records (it began to close, or failed)
 * and another pass runs after it: nothing the store does not hold is taken for ingested.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { QueueError } from '../../../src/contract/errors.js';
import { nodeFileSystem } from '../../../src/fs/node-fs.js';
import { SpoolIngest } from '../../../src/stores/log/engine/spool-ingest.js';
import { openSpool } from '../../../src/stores/log/engine/spool-producer.js';
import { SpoolProgress } from '../../../src/stores/log/engine/spool-progress.js';
import type { SpoolRecord } from '../../../src/stores/log/engine/spool-file.js';
import { cleanupDirs, dec, freshDir } from './helpers.js';

afterAll(cleanupDirs);

const enc = (s: string) => new TextEncoder().encode(s);

it('aPassAfterOneWhosePushWasRefusedReadsTheFileAgainFromWhatTheStoreHolds', async () => {
  const dir = freshDir();
  for (const [i, name] of ['first', 'second'].entries()) {
    const p = await openSpool(dir, { durability: 'none', fs: nodeFileSystem, now: () => 1_700_000_000_000 + i });
    await p.pushMany([enc(`${name}-1`), enc(`${name}-2`)], {}, undefined);
    await p.close();
  }
  const progress = new SpoolProgress();
  const stored: string[] = [];
  let refuse = true;
  const ingest = new SpoolIngest({
    fs: nodeFileSystem,
    dir,
    progress,
    clock: { now: () => Date.now(), setTimeout: (fn, ms) => setTimeout(fn, ms), clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout) },
    pollMs: 60_000,
    chunkBytes: 64 * 1024,
    push: (file: string, records: readonly SpoolRecord[]) => {
      // The queue refuses the first push, as one that began to close does; later ones it stores.
      if (refuse) {
        refuse = false;
        return Promise.reject(new QueueError('ERR_CLOSED', 'closing'));
      }
      for (const r of records) {
        stored.push(dec(r.bytes));
        progress.set(file, r.record);
      }
      return Promise.resolve();
    },
    fail: () => undefined,
    problem: () => undefined,
    pollFailed: () => undefined,
  });
  const first = ingest.poke();
  // Asked for while the first pass runs: it runs once the first one ends.
  const again = ingest.poke();
  await expect(first).rejects.toMatchObject({ code: 'ERR_CLOSED' });
  await again.catch(() => undefined);
  // The pass that ran after it: wait for it to finish.
  await ingest.poke();
  await ingest.stop();
  expect(stored).toEqual(['first-1', 'first-2', 'second-1', 'second-2']);
  expect(readdirSync(join(dir, 'spool')).filter((n) => n.endsWith('.pqs'))).toEqual([]);
});
