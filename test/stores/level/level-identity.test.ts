/** LevelStore's identity (FORMAT.md §11.6): the key `m:storeId`, created with the store, kept across reopens. */
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { expect, test } from 'vitest';
import { LevelStore } from '../../../src/stores/level/index.js';
import { Builder } from '../../../src/core/builder.js';
import { freshDir } from '../../support/backend-suite.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const KEY = Buffer.from('m:storeId');

async function idOf(path: string): Promise<string | undefined> {
  const [tx] = await new Builder(await LevelStore.open(path)).open();
  const id = tx.stats().storeId;
  await tx.close();
  return id;
}

async function raw<T>(
  path: string,
  fn: (db: {
    get(k: Buffer): Promise<Buffer | undefined>;
    put(k: Buffer, v: Buffer): Promise<void>;
    del(k: Buffer): Promise<void>;
  }) => Promise<T>,
): Promise<T> {
  const { ClassicLevel } = await import('classic-level');
  const db = new ClassicLevel<Buffer, Buffer>(path, { keyEncoding: 'buffer', valueEncoding: 'buffer', createIfMissing: false });
  await db.open();
  try {
    return await fn(db);
  } finally {
    await db.close();
  }
}

async function withPath(fn: (path: string) => Promise<void>): Promise<void> {
  const dir = freshDir('pq-level-id-');
  try {
    await fn(join(dir, 'queue'));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test('LevelStore: a new store gets a random identity under m:storeId, kept across reopens, new when the directory is created again', () =>
  withPath(async (path) => {
    const id = await idOf(path);
    expect(id).toMatch(UUID);
    expect(await idOf(path)).toBe(id);
    expect((await raw(path, (db) => db.get(KEY)))?.toString('utf8')).toBe(id);
    rmSync(path, { recursive: true });
    const again = await idOf(path);
    expect(again).toMatch(UUID);
    expect(again).not.toBe(id);
  }));

test('LevelStore: a store written before identities gets one at its next open and keeps it', () =>
  withPath(async (path) => {
    await idOf(path);
    await raw(path, (db) => db.del(KEY));
    const id = await idOf(path);
    expect(id).toMatch(UUID);
    expect(await idOf(path)).toBe(id);
  }));

test('LevelStore: a malformed identity is not one: none is reported and the value is left as it is', () =>
  withPath(async (path) => {
    await idOf(path);
    await raw(path, (db) => db.put(KEY, Buffer.from('not an id!')));
    expect(await idOf(path)).toBeUndefined();
    expect((await raw(path, (db) => db.get(KEY)))?.toString('utf8')).toBe('not an id!');
  }));
