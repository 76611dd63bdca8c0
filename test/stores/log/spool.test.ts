/**
 * The spool end to end in one process: producers spool while no queue is open, the owner ingests
 * at open, in each producer's order, exactly once, and deletes what it ingested.
 */
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Builder } from '../../../src/core/builder.js';
import { LogStore } from '../../../src/stores/log/log-store.js';
import { nodeFileSystem } from '../../../src/fs/node-fs.js';
import { openSpool } from '../../../src/stores/log/engine/spool-producer.js';
import { cleanupDirs, dec, freshDir } from './helpers.js';

afterAll(cleanupDirs);

const enc = (s: string) => new TextEncoder().encode(s);

async function drainAll(dir: string): Promise<string[]> {
  const store = await LogStore.open(dir);
  const [tx, rx] = await new Builder(store).open();
  await store.ingestSpool();
  const out: string[] = [];
  for (let item = rx.tryReserve(); item !== null; item = rx.tryReserve()) {
    out.push(dec(item.bytes));
    await item.ack();
  }
  await tx.close();
  return out;
}

describe('the spool', () => {
  it('pushesSpooledWhileNoQueueIsOpenAreIngestedAtOpenInOrderAndOnce', async () => {
    const dir = freshDir();
    const a = await openSpool(dir, { durability: 'group', fs: nodeFileSystem });
    const b = await openSpool(dir, { durability: 'group', fs: nodeFileSystem });
    expect(a.mode).toBe('spool');
    const pa = Array.from({ length: 50 }, (_, i) => a.pushMany([enc(`a-${i}`)], {}, undefined));
    const pb = Array.from({ length: 50 }, (_, i) => b.pushMany([enc(`b-${i}`)], {}, undefined));
    expect((await Promise.all([...pa, ...pb])).flat().every((s) => s === 0)).toBe(true);
    await a.close();
    await b.close();
    const got = await drainAll(dir);
    expect(got).toHaveLength(100);
    expect(got.filter((t) => t.startsWith('a-'))).toEqual(Array.from({ length: 50 }, (_, i) => `a-${i}`));
    expect(got.filter((t) => t.startsWith('b-'))).toEqual(Array.from({ length: 50 }, (_, i) => `b-${i}`));
    expect(readdirSync(join(dir, 'spool')).filter((n) => n.endsWith('.pqs'))).toEqual([]);
    expect(await drainAll(dir), 'nothing is ingested twice').toEqual([]);
  });

  it('aLiveProducersRecordsAreIngestedAsTheyComeAndItsFileStaysUntilItCloses', async () => {
    const dir = freshDir();
    const p = await openSpool(dir, { durability: 'group', fs: nodeFileSystem });
    await p.pushMany([enc('1'), enc('2')], {}, undefined);
    const store = await LogStore.open(dir);
    const [tx, rx] = await new Builder(store).open();
    await store.ingestSpool();
    expect([dec(rx.tryReserve()!.bytes), dec(rx.tryReserve()!.bytes)]).toEqual(['1', '2']);
    expect(readdirSync(join(dir, 'spool')).filter((n) => n.endsWith('.pqs'))).toHaveLength(1);
    await p.pushMany([enc('3')], { priority: 2 }, undefined);
    await store.ingestSpool();
    const three = rx.tryReserve()!;
    expect(dec(three.bytes)).toBe('3');
    await p.close();
    await store.ingestSpool();
    expect(readdirSync(join(dir, 'spool')).filter((n) => n.endsWith('.pqs'))).toEqual([]);
    await tx.close();
    // The three were not acked: they come back once each, and nothing else.
    expect(await drainAll(dir)).toEqual(['3', '1', '2']);
  });

  it('spoolFilesAreIngestedInTheOrderTheyWereCreatedNotByTheirRandomIds', async () => {
    const dir = freshDir();
    // Ten producers one after another, each a file of its own (as ten `pq push` runs are): their
    // ids are random, their creation times in order.
    for (let i = 0; i < 10; i++) {
      const p = await openSpool(dir, { durability: 'none', fs: nodeFileSystem, now: () => 1_700_000_000_000 + i });
      await p.pushMany([enc(`run-${i}`)], {}, undefined);
      await p.close();
    }
    expect(await drainAll(dir)).toEqual(Array.from({ length: 10 }, (_, i) => `run-${i}`));
  });

  it('aDirectoryThatIsNotAStoreIsRefusedAndNothingIsWritten', async () => {
    const dir = freshDir();
    await openSpool(dir, { durability: 'none', fs: nodeFileSystem }).then((p) => p.close());
    const { writeFileSync, mkdirSync } = await import('node:fs');
    const other = freshDir();
    mkdirSync(other, { recursive: true });
    writeFileSync(join(other, 'notes.txt'), 'mine');
    await expect(openSpool(other, { durability: 'group', fs: nodeFileSystem })).rejects.toMatchObject({ code: 'ERR_STORE' });
    expect(existsSync(join(other, 'spool'))).toBe(false);
  });

  it('aSpoolDirectoryMadeWhileTheOwnerWritesWithoutPauseIsIngestedWithinAPoll', async () => {
    const dir = freshDir();
    const store = await LogStore.open(dir, { spoolPollMs: 20 });
    const [tx, rx] = await new Builder(store).open();
    // The owner writes all the time: every write of its log is a change in the directory it watches.
    let writing = true;
    const writer = (async () => {
      for (let i = 0; writing; i++) await tx.push(enc(`own-${i}`));
    })();
    try {
      await new Promise((r) => setTimeout(r, 50));
      expect(existsSync(join(dir, 'spool')), 'no spool yet: the producer below makes it').toBe(false);
      const p = await openSpool(dir, { durability: 'group', fs: nodeFileSystem });
      await p.pushMany([enc('spooled')], {}, undefined);
      await p.close();
      for (;;) {
        const item = (await rx.reserve())!;
        await item.ack();
        if (dec(item.bytes) === 'spooled') break;
      }
    } finally {
      writing = false;
      await writer;
      await tx.close();
    }
  });
});
