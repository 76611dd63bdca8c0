import { mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, test } from 'vitest';
import { isQueueError } from '../src/errors.js';
import { Builder } from '../src/queue.js';
import { LevelStore } from '../src/level-store.js';
import { freshDir, runBackendSuite } from './support/backend-suite.js';

runBackendSuite({
  name: 'LevelStore',
  distModule: 'level-store.js',
  className: 'LevelStore',
  peer: 'classic-level',
  peerOptions: 'undefined',
  open: (path, options) => LevelStore.open(path, options),
  pathIn: (dir) => join(dir, 'queue'),
});

async function withDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = freshDir('pq-level-');
  try {
    await fn(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Keys and values of a closed LevelDB directory, read with classic-level directly. */
async function dump(path: string): Promise<[string, string][]> {
  const { ClassicLevel } = await import('classic-level');
  const db = new ClassicLevel<Buffer, Buffer>(path, { keyEncoding: 'buffer', valueEncoding: 'buffer', createIfMissing: false });
  await db.open();
  try {
    return (await db.iterator().all()).map(([k, v]) => [k.toString('hex'), v.toString('hex')]);
  } finally {
    await db.close();
  }
}

test('LevelStore: keys are `i` + big-endian seq, `m:nextSeq` holds the next seq, the directory is 0o700', () =>
  withDir(async (dir) => {
    const path = join(dir, 'queue');
    const store = await LevelStore.open(path);
    const [tx, rx] = await new Builder(store).open();
    await tx.pushMany(['a', 'b', 'c']);
    await (await rx.reserve())!.ack();
    await tx.close();
    if (process.platform !== 'win32') expect(statSync(path).mode & 0o777).toBe(0o700);
    expect(await dump(path)).toEqual([
      ['690000000000000002', Buffer.from('b').toString('hex')],
      ['690000000000000003', Buffer.from('c').toString('hex')],
      [Buffer.from('m:format').toString('hex'), '0000000000000001'],
      [Buffer.from('m:nextSeq').toString('hex'), '0000000000000004'],
    ]);
  }));

test('LevelStore: a non-empty directory that is not LevelDB is refused with ERR_STORE and left unchanged', () =>
  withDir(async (dir) => {
    const path = join(dir, 'photos');
    mkdirSync(path);
    writeFileSync(join(path, 'cat.jpg'), 'meow');
    await expect(LevelStore.open(path)).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_STORE'));
    expect(readdirSync(path)).toEqual(['cat.jpg']);
    expect(readFileSync(join(path, 'cat.jpg'), 'utf8')).toBe('meow');
  }));

test('LevelStore: a path that is a file is refused with ERR_STORE', () =>
  withDir(async (dir) => {
    writeFileSync(join(dir, 'file'), 'x');
    await expect(LevelStore.open(join(dir, 'file'))).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_STORE'));
  }));

test('LevelStore: a LevelDB database that is not a queue is refused with ERR_STORE and left unchanged', () =>
  withDir(async (dir) => {
    const path = join(dir, 'other');
    const { ClassicLevel } = await import('classic-level');
    const db = new ClassicLevel(path);
    await db.put('name', 'someone else');
    await db.close();
    const before = await dump(path);
    await expect(LevelStore.open(path)).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_STORE'));
    expect(await dump(path)).toEqual(before);
  }));

test('LevelStore: a store written by a newer format is refused with ERR_UNSUPPORTED_VERSION and left unchanged', () =>
  withDir(async (dir) => {
    const path = join(dir, 'queue');
    await (await LevelStore.open(path)).close();
    const { ClassicLevel } = await import('classic-level');
    const db = new ClassicLevel<Buffer, Buffer>(path, { keyEncoding: 'buffer', valueEncoding: 'buffer' });
    await db.put(Buffer.from('m:format'), Buffer.from('0000000000000002', 'hex'));
    await db.close();
    const before = await dump(path);
    await expect(LevelStore.open(path)).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_UNSUPPORTED_VERSION'));
    expect(await dump(path)).toEqual(before);
  }));

test('LevelStore: read is asynchronous and returns at most `limit` items', () =>
  withDir(async (dir) => {
    const store = await LevelStore.open(join(dir, 'queue'));
    const { nextSeq: s } = await store.open();
    await store.append(Array.from({ length: 10 }, (_, i) => ({ seq: s + i, bytes: new Uint8Array([i]) })), false);
    const pending = store.read({ after: s, before: s + 8, limit: 3 });
    expect(pending).toBeInstanceOf(Promise);
    expect((await pending).map((i) => i.seq)).toEqual([s + 1, s + 2, s + 3]);
    await store.close();
  }));
