/**
 * The store's own tools know the spool: a read-only open and `pq stats` report its backlog,
 * `verify` checks its files (damage followed by valid records is a problem), salvage copies it so
 * the new store's owner ingests exactly what the source had not, and `pq stats` keeps refusing
 * anything foreign.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Builder } from '../../../src/core/builder.js';
import { LogStore, salvageStore, verifyStore } from '../../../src/stores/log/log-store.js';
import { nodeFileSystem } from '../../../src/fs/node-fs.js';
import { openSpool } from '../../../src/stores/log/engine/spool-producer.js';
import { FRAME_HEADER_BYTES, SPOOL_HEADER_BYTES } from '../../../src/stores/log/engine/format.js';
import { root } from '../../support/child-process.js';
import { cleanupDirs, dec, freshDir } from './helpers.js';

afterAll(cleanupDirs);
const enc = (s: string) => new TextEncoder().encode(s);

async function spool(dir: string, texts: string[], close = true): Promise<void> {
  const p = await openSpool(dir, { durability: 'group', fs: nodeFileSystem });
  await p.pushMany(texts.map(enc), {}, undefined);
  if (close) await p.close();
}

async function taken(dir: string): Promise<string[]> {
  const store = await LogStore.open(dir);
  const [tx, rx] = await new Builder(store).open();
  await store.ingestSpool();
  const out: string[] = [];
  for (let it = rx.tryReserve(); it !== null; it = rx.tryReserve()) out.push(dec(it.bytes));
  await tx.close();
  return out;
}

function spoolFile(dir: string): string {
  return join(dir, 'spool', readdirSync(join(dir, 'spool')).find((n) => n.endsWith('.pqs'))!);
}

describe('the tools and the spool', () => {
  it('aReadOnlyOpenAndPqStatsReportTheSpoolBacklog', async () => {
    const dir = freshDir();
    await (await LogStore.open(dir)).close();
    await spool(dir, ['a', 'b', 'c']);
    const ro = await LogStore.open(dir, { readOnly: true });
    expect(ro.inspect().spool).toMatchObject({ files: 1, pendingRecords: 3 });
    await ro.close();
    const run = spawnSync(process.execPath, [join(root, 'dist', 'cli', 'pq.js'), 'stats', '--json', dir], { encoding: 'utf8' });
    expect(run.status, run.stderr).toBe(0);
    expect(JSON.parse(run.stdout).spool).toEqual({ files: 1, pendingRecords: 3 });
    const text = spawnSync(process.execPath, [join(root, 'dist', 'cli', 'pq.js'), 'stats', dir], {
      encoding: 'utf8',
      env: { ...process.env, NO_COLOR: '1' },
    });
    expect(text.stdout).toMatch(/spool\s+3 spooled push\(es\) in 1 file\(s\)/);
    // A foreign file is still refused.
    writeFileSync(join(dir, 'notes.txt'), 'x');
    expect(spawnSync(process.execPath, [join(root, 'dist', 'cli', 'pq.js'), 'stats', dir], { encoding: 'utf8' }).status).not.toBe(0);
  });

  it('verifyReportsDamageInASpoolFileFollowedByValidRecordsAndNotesATornTail', async () => {
    const dir = freshDir();
    await (await LogStore.open(dir)).close();
    await spool(dir, ['first', 'second', 'third']);
    expect(verifyStore(dir).problems).toEqual([]);
    const path = spoolFile(dir);
    const bytes = readFileSync(path);
    // A byte of the first record's payload flipped: the records after it are valid, so it is damage.
    bytes[SPOOL_HEADER_BYTES + FRAME_HEADER_BYTES] ^= 0xff;
    writeFileSync(path, bytes);
    const v = verifyStore(dir);
    expect(v.problems).toEqual([expect.objectContaining({ file: path, offset: SPOOL_HEADER_BYTES })]);
    // A torn last record is a note, never a problem.
    const torn = freshDir();
    await (await LogStore.open(torn)).close();
    await spool(torn, ['one'], false);
    const tp = spoolFile(torn);
    writeFileSync(tp, Buffer.concat([readFileSync(tp), Buffer.from([1, 2, 3])]));
    const t = verifyStore(torn);
    expect(t.problems).toEqual([]);
    expect(t.notes.join('\n')).toMatch(/3 byte\(s\) past its last whole record/);
  });

  it('salvageCopiesTheSpoolAndTheNewOwnerIngestsExactlyWhatTheSourceHadNot', async () => {
    const src = freshDir();
    // A live producer's file, half ingested by an owner that closed: records 1-2 are items, 3-4 are not.
    const p = await openSpool(src, { durability: 'group', fs: nodeFileSystem });
    await p.pushMany([enc('s1'), enc('s2')], {}, undefined);
    expect(await taken(src)).toEqual(['s1', 's2']);
    await p.pushMany([enc('s3'), enc('s4')], {}, undefined);
    await p.close();
    const dst = join(freshDir(), 'saved');
    mkdirSync(join(dst, '..'), { recursive: true });
    const r = await salvageStore(src, dst);
    expect(r.copied).toBe(2);
    expect(r.notes.join('\n')).toMatch(/1 spool file\(s\) copied/);
    expect(await taken(dst)).toEqual(['s1', 's2', 's3', 's4']);
    expect(await taken(dst), 'nothing twice').toEqual(['s1', 's2', 's3', 's4']);
  });
});
