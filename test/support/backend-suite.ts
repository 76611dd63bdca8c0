/**
 * Tests every optional backend (SqliteStore, LevelStore) must pass beyond the conformance suite:
 * kill -9 of a real writer process, locking against another process and within this one, a missing
 * peer dependency, bad arguments.
 */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { expect, test } from 'vitest';
import { runStoreConformance } from '../../src/conformance/index.js';
import { isQueueError, OpenError } from '../../src/contract/errors.js';
import { Builder } from '../../src/core/builder.js';
import type { Store } from '../../src/contract/store.js';
import { distUrl, hideSource, holderSource, printedItems, runModule, writerSource } from './child-process.js';

export interface BackendStore extends Store {
  readonly path: string;
  close(): Promise<void>;
}

export interface Backend<S extends BackendStore> {
  name: string;
  /** File under dist/ that exports the class. */
  distModule: string;
  className: string;
  /** The peer packages whose absence must be reported by name. */
  peer: string;
  /** Options that make the store need the peer (even where Node has a built-in alternative). */
  peerOptions: string;
  open(path: string, options?: object): Promise<S>;
  /** Where the store lives inside a fresh temporary directory. */
  pathIn(dir: string): string;
}

export function freshDir(prefix: string): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

const textOf = (b: Uint8Array): string => new TextDecoder().decode(b);

export function runBackendSuite<S extends BackendStore>(b: Backend<S>): void {
  const prefix = `pq-${b.name.toLowerCase()}-`;

  runStoreConformance(test, {
    name: b.name,
    create: () => b.open(b.pathIn(freshDir(prefix))),
    reopen: (previous) => b.open(previous.path),
    destroy: async (store) => {
      await store.close();
      rmSync(dirname(store.path), { recursive: true, force: true });
    },
  });

  /** Run `fn` with a fresh temp dir that is removed afterwards. */
  const withDir = async (fn: (dir: string) => Promise<void>): Promise<void> => {
    const dir = freshDir(prefix);
    try {
      await fn(dir);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  };

  for (const [durability, producers] of [
    ['sync', 4],
    ['group', 16],
  ] as const) {
    test(`${b.name}: every push that resolved under '${durability}' survives kill -9 of the writer process`, () =>
      withDir(async (dir) => {
        const path = b.pathIn(dir);
        const writer = runModule(dir, 'writer.mjs', writerSource(b.distModule, b.className, durability, producers), [path]);
        try {
          await writer.until((lines) => lines.length >= 400);
        } finally {
          await writer.kill();
        }
        const printed = printedItems(writer.lines);
        expect(printed.size).toBeGreaterThanOrEqual(399);

        const store = await b.open(path);
        const { nextSeq } = await store.open();
        const held = new Map<number, string>();
        for (const item of await store.read({ after: 0, before: Number.MAX_SAFE_INTEGER, limit: 1_000_000 })) {
          held.set(item.seq, textOf(item.bytes));
        }
        const missing = [...printed].filter(([seq, payload]) => held.get(seq) !== payload);
        expect(missing, 'printed items missing or changed after kill -9').toEqual([]);
        expect(nextSeq).toBeGreaterThan(Math.max(...printed.keys()));
        await store.close();
      }));
  }

  test(`${b.name}: a store held by another process is refused with ERR_LOCKED, and freed when that process dies`, () =>
    withDir(async (dir) => {
      const path = b.pathIn(dir);
      const holder = runModule(dir, 'holder.mjs', holderSource(b.distModule, b.className), [path]);
      try {
        await holder.until((lines) => lines.includes('ready'));
        const refused = await b.open(path).then(
          (s) => s.close().then(() => null),
          (e: unknown) => e,
        );
        expect(refused).toBeInstanceOf(OpenError);
        expect((refused as OpenError).code).toBe('ERR_LOCKED');
        expect((refused as OpenError).cause).toBeDefined();
      } finally {
        await holder.kill();
      }
      const store = await b.open(path);
      const [tx, rx] = await new Builder(store).open();
      await tx.push('after the holder died');
      expect(textOf(rx.tryReserve()?.bytes ?? (await rx.reserve())!.bytes)).toBe('after the holder died');
      await tx.close();
    }));

  test(`${b.name}: a second open in the same process is refused with ERR_LOCKED and leaves the first working`, () =>
    withDir(async (dir) => {
      const path = b.pathIn(dir);
      const first = await b.open(path);
      const [tx, rx] = await new Builder(first).durability('sync').open();
      await tx.push('one');
      await expect(b.open(path)).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_LOCKED'));
      await tx.push('two');
      await tx.close();
      expect(rx.stats().closed).toBe(true);
      const again = await b.open(path);
      const [tx2, rx2] = await new Builder(again).open();
      const got: string[] = [];
      for (let i = 0; i < 2; i++) {
        const item = (await rx2.reserve())!;
        got.push(textOf(item.bytes));
        await item.ack();
      }
      expect(got).toEqual(['one', 'two']);
      await tx2.close();
    }));

  test(`${b.name}: a lock is held while the store is open, even across a refused in-process open`, () =>
    withDir(async (dir) => {
      const path = b.pathIn(dir);
      const first = await b.open(path);
      await expect(b.open(path)).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_LOCKED'));
      // Another process must still be refused: the refused open did not drop the OS-level lock.
      const probe = runModule(
        dir,
        'probe.mjs',
        `import { ${b.className} } from ${JSON.stringify(distUrl(b.distModule))};\ntry { const s = await ${b.className}.open(process.argv[2]); await s.close(); console.log('opened'); } catch (e) { console.log(e.code); }\n`,
        [path],
      );
      await probe.until((lines) => lines.length > 0);
      expect(probe.lines[0]).toBe('ERR_LOCKED');
      await probe.kill();
      await first.close();
    }));

  test(`${b.name}: a missing ${b.peer} is an ERR_STORE naming the package to install, and touches nothing`, () =>
    withDir(async (dir) => {
      const path = b.pathIn(dir);
      writeFileSync(join(dir, 'hide.mjs'), hideSource([b.peer]));
      const child = runModule(
        dir,
        'missing.mjs',
        `import { ${b.className} } from ${JSON.stringify(distUrl(b.distModule))};
try { await ${b.className}.open(process.argv[2], ${b.peerOptions}); console.log(JSON.stringify({ opened: true })); }
catch (e) { console.log(JSON.stringify({ name: e.name, code: e.code, message: e.message, cause: e.cause?.code })); }
`,
        [path],
        ['--import', join(dir, 'hide.mjs')],
      );
      await child.until((lines) => lines.length > 0);
      await child.kill();
      const result = JSON.parse(child.lines[0]!) as Record<string, unknown>;
      expect(result).toMatchObject({ name: 'OpenError', code: 'ERR_STORE', cause: 'ERR_MODULE_NOT_FOUND' });
      expect(result.message).toContain(`npm install ${b.peer}`);
      expect(existsSync(path)).toBe(false);
    }));

  test(`${b.name}: bad arguments are TypeError/RangeError and create nothing`, () =>
    withDir(async (dir) => {
      const path = b.pathIn(dir);
      await expect(b.open(undefined as unknown as string)).rejects.toThrow(TypeError);
      await expect(b.open('')).rejects.toThrow(RangeError);
      await expect(b.open(path, null as unknown as object)).rejects.toThrow(TypeError);
      await expect(b.open(path, { maxItemBytes: 0 })).rejects.toThrow(RangeError);
      await expect(b.open(path, { maxItemBytes: '1' })).rejects.toThrow(TypeError);
      await expect(b.open(path, { maxItemBytes: 2 ** 40 })).rejects.toThrow(RangeError);
      await expect(b.open(path, { maxItemBytes: 0 })).rejects.toThrow(
        'Expected `options.maxItemBytes` to be a positive integer, got `0` (number)',
      );
      expect(existsSync(path)).toBe(false);
    }));

  test(`${b.name}: maxItemBytes defaults to 16 MiB and can be set`, () =>
    withDir(async (dir) => {
      const path = b.pathIn(dir);
      let store = await b.open(path);
      expect(store.maxItemBytes).toBe(16 * 1024 * 1024);
      await store.close();
      store = await b.open(path, { maxItemBytes: 1000 });
      expect(store.maxItemBytes).toBe(1000);
      const [tx] = await new Builder(store).open();
      await expect(tx.push(new Uint8Array(1001))).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_TOO_LARGE'));
      await tx.push(new Uint8Array(1000));
      await tx.close();
    }));

  test(`${b.name}: a store keeps a large backlog on disk, reads it back in bounded pages, and counts it at open`, () =>
    withDir(async (dir) => {
      const path = b.pathIn(dir);
      let store = await b.open(path);
      let [tx, rx] = await new Builder(store).durability('none').open();
      const total = 20_000;
      for (let i = 0; i < total; i += 1000) await tx.pushMany(Array.from({ length: 1000 }, (_, j) => `b${i + j}`));
      await tx.close();
      store = await b.open(path);
      const page = await store.read({ after: 0, before: Number.MAX_SAFE_INTEGER, limit: 64 });
      expect(page.length).toBe(64);
      await store.close();
      store = await b.open(path);
      [tx, rx] = await new Builder(store).open();
      expect(rx.stats().ready).toBe(total);
      for (let i = 0; i < 10; i++) {
        const item = (await rx.reserve())!;
        expect(textOf(item.bytes)).toBe(`b${i}`);
        await item.ack();
      }
      await tx.close();
    }));
}
