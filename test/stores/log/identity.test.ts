/**
 * The store's identity (FORMAT.md §13): created once with the store, kept across reopens and
 * crashes, new for a store deleted and created again, never written by a read-only open, and
 * surfaced on the queue as `stats().storeId`.
 */
import * as nodeFs from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { Builder, MemStore } from '../../../src/index.js';
import { IDENTITY_FILE, IDENTITY_FILE_BYTES, ID_OFF_VERSION, writeU16 } from '../../../src/stores/log/engine/format.js';
import { decodeIdentity, encodeIdentity, identityBytes } from '../../../src/stores/log/engine/identity.js';
import { LogStore } from '../../../src/stores/log/log-store.js';
import { CrashFileSystem, formatCrashPoint } from '../../../src/testing/index.js';
import { cleanupDirs, expectOpenError, freshDir, items } from './helpers.js';

afterAll(cleanupDirs);

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const all = { after: 0, before: Number.MAX_SAFE_INTEGER, limit: 1e9 };

async function created(dir: string): Promise<string> {
  const store = await LogStore.open(dir, { preallocate: false });
  await store.open();
  await store.append(items(1, ['a', 'b']), true);
  const id = store.storeId!;
  await store.close();
  return id;
}

describe('store identity (FORMAT.md §13)', () => {
  test('aNewStoreGetsARandomIdentityKeptAcrossReopens', async () => {
    const dir = freshDir();
    const id = await created(dir);
    expect(id).toMatch(UUID);
    expect(nodeFs.statSync(join(dir, IDENTITY_FILE)).size).toBe(IDENTITY_FILE_BYTES);
    const store = await LogStore.open(dir);
    const recovery = await store.open();
    expect(recovery.storeId).toBe(id);
    expect(store.recovery.identityCreated).toBe(false);
    expect(store.inspect().storeId).toBe(id);
    await store.close();
    expect(await created(freshDir())).not.toBe(id);
  });

  test('aStoreDeletedAndCreatedAgainGetsANewIdentity', async () => {
    const dir = freshDir();
    const first = await created(dir);
    nodeFs.rmSync(dir, { recursive: true });
    expect(await created(dir)).not.toBe(first);
  });

  test('aNewStoreBesideAnOldIdentityFileGetsANewOne', async () => {
    // Its seqs start at 1 again: under the old identity they would name the old store's items.
    const dir = freshDir();
    const first = await created(dir);
    for (const name of nodeFs.readdirSync(dir)) if (name !== IDENTITY_FILE) nodeFs.rmSync(join(dir, name));
    const store = await LogStore.open(dir);
    const { nextSeq, storeId } = await store.open();
    expect(nextSeq).toBe(1);
    expect(storeId).toMatch(UUID);
    expect(storeId).not.toBe(first);
    expect(store.recovery.identityCreated).toBe(true);
    await store.close();
  });

  test('aReadOnlyOpenReportsTheIdentityAndWritesNone', async () => {
    const dir = freshDir();
    const id = await created(dir);
    const view = await LogStore.open(dir, { readOnly: true });
    expect(view.storeId).toBe(id);
    await view.close();
    nodeFs.rmSync(join(dir, IDENTITY_FILE));
    const older = await LogStore.open(dir, { readOnly: true });
    expect(older.storeId).toBeNull();
    expect(older.inspect().storeId).toBeNull();
    await older.close();
    expect(nodeFs.existsSync(join(dir, IDENTITY_FILE))).toBe(false);
  });

  test('aNewerIdentityVersionIsUnsupportedAndChangesNothing', async () => {
    const dir = freshDir();
    await created(dir);
    const path = join(dir, IDENTITY_FILE);
    const b = nodeFs.readFileSync(path);
    writeU16(b, ID_OFF_VERSION, 2);
    nodeFs.writeFileSync(path, b);
    const before = nodeFs.readdirSync(dir).sort();
    const e = await expectOpenError(dir, 'ERR_UNSUPPORTED_VERSION');
    expect(e.message).toContain('(file check 2)');
    expect(nodeFs.readdirSync(dir).sort()).toEqual(before);
    expect(nodeFs.readFileSync(path).equals(b)).toBe(true);
  });

  test('aTruncatedOrLongerIdentityFileIsCorruption', async () => {
    for (const edit of [(b: Buffer) => b.subarray(0, 20), (b: Buffer) => Buffer.concat([b, Buffer.alloc(1)])]) {
      const dir = freshDir();
      await created(dir);
      const path = join(dir, IDENTITY_FILE);
      nodeFs.writeFileSync(path, edit(nodeFs.readFileSync(path)));
      const e = await expectOpenError(dir, 'ERR_CORRUPT');
      expect(e.message).toContain('(file check 20)');
    }
  });

  test('encodeAndDecodeRoundTripAndTheTextFormIsTheBytes', () => {
    const id = identityBytes('00112233-4455-4677-8899-aabbccddeeff');
    const file = encodeIdentity(id);
    expect(file.length).toBe(IDENTITY_FILE_BYTES);
    expect(decodeIdentity(file)).toEqual({ id: '00112233-4455-4677-8899-aabbccddeeff' });
  });

  test('theExampleOfFormatMdDecodes', () => {
    const doc = nodeFs.readFileSync(new URL('../../../FORMAT.md', import.meta.url), 'utf8');
    const section = doc.slice(doc.indexOf('### Example identity file'));
    const block = /```hex\n([\s\S]*?)```/.exec(section)![1]!;
    const hex = block
      .split('\n')
      .map((line) =>
        line
          .replace(/^[0-9a-f]{4}\s+/, '')
          .split('|')[0]!
          .replace(/\s+/g, ''),
      )
      .join('');
    const bytes = Uint8Array.from(Buffer.from(hex, 'hex'));
    expect(bytes.length).toBe(IDENTITY_FILE_BYTES);
    expect(decodeIdentity(bytes)).toEqual({ id: '00112233-4455-4677-8899-aabbccddeeff' });
    expect(Buffer.from(encodeIdentity(identityBytes('00112233-4455-4677-8899-aabbccddeeff'))).equals(Buffer.from(bytes))).toBe(true);
  });

  test('aCrashAtAnyPointOfCreationOpensAndNeverChangesAnIdentityAnOpenHandedOut', async () => {
    const fs = new CrashFileSystem({ seed: 7 });
    const options = { fs, preallocate: false };
    const store = await LogStore.open('/q', options);
    const { storeId } = await store.open();
    // From here on the identity was handed out: every crash after it must keep it.
    const handedOut = fs.traceLength;
    await store.append(items(1, ['a']), true);
    const end = fs.traceLength;
    let points = 0;
    for (const point of fs.crashPoints({ writeback: 'any', tornLengths: (n) => [1, n >> 1, n - 1], zeroTail: true, to: end })) {
      points++;
      const repro = `crash point ${formatCrashPoint(point)} (seed 7)`;
      const after = fs.crashAt(point);
      const again = await LogStore.open('/q', { fs: after, preallocate: false });
      const recovery = await again.open();
      expect(recovery.storeId, repro).toMatch(UUID);
      if (point.at >= handedOut) expect(recovery.storeId, repro).toBe(storeId);
      expect(again.read(all).length, repro).toBe(recovery.count);
      await again.close();
      // And what that open handed out survives a reopen.
      const third = await LogStore.open('/q', { fs: after, preallocate: false });
      expect((await third.open()).storeId, repro).toBe(recovery.storeId);
      await third.close();
    }
    expect(points).toBeGreaterThan(10);
    await store.close();
  });

  test('theQueueShowsTheStoreIdentityInStats', async () => {
    const dir = freshDir();
    const store = await LogStore.open(dir);
    const [tx, rx] = await new Builder(store).open();
    expect(rx.stats().storeId).toBe(store.storeId);
    expect(tx.stats().storeId).toMatch(UUID);
    await tx.close();
  });

  test('aMemStoreHasAFreshIdentityPerInstanceKeptAcrossItsReopens', async () => {
    const mem = new MemStore();
    const [tx] = await new Builder(mem).open();
    const id = tx.stats().storeId;
    expect(id).toMatch(UUID);
    await tx.close();
    const [tx2] = await new Builder(mem).open();
    expect(tx2.stats().storeId).toBe(id);
    await tx2.close();
    const [other] = await new Builder(new MemStore()).open();
    expect(other.stats().storeId).not.toBe(id);
    await other.close();
  });
});
