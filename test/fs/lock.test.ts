/**
 * The process lock of a LogStore on node:fs, run under both kinds: the kernel lock (`fs-ext`, a
 * devDependency) and the pid lock file. Holders are real child processes importing the built
 * package (`npm test` builds it first), each told its kind by PERSISTENT_QUEUE_LOCK; this process
 * opens through `createNodeFileSystem(kind)`. Which lock a holder took is checked from outside:
 * the text of LOCK, and a flock probe on it. Then the wait for the lock (`lockTimeoutMs`,
 * `signal`) against those holders and against a second open in this process.
 */
import { createHash } from 'node:crypto';
import {
  closeSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { OpenError } from '../../src/contract/errors.js';
import { createNodeFileSystem, type LockKind } from '../../src/fs/node-fs.js';
import { LogStore, type LogStoreOptions } from '../../src/stores/log/log-store.js';
import { distUrl, type Lines, runModule } from '../support/child-process.js';

const made: string[] = [];
afterAll(() => {
  for (const d of made.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** A fresh temp dir (for child scripts) and the store path inside it. */
function fresh(): { tmp: string; dir: string } {
  const tmp = mkdtempSync(join(tmpdir(), 'pq-lock-'));
  made.push(tmp);
  return { tmp, dir: join(tmp, 'store') };
}

const decode = (b: Uint8Array): string => new TextDecoder().decode(b);

/**
 * A child that opens the store at argv[2], pushes `a`, `b`, `c` under `sync`, prints `ready`, and
 * closes the store when a line arrives on its stdin (printing `closed`); killed otherwise.
 */
const HOLDER = `
import { LogStore } from ${JSON.stringify(distUrl('stores/log/log-store.js'))};
import { Builder } from ${JSON.stringify(distUrl('index.js'))};
try {
  const store = await LogStore.open(process.argv[2]);
  const [tx] = await new Builder(store).durability('sync').open();
  for (const p of ['a', 'b', 'c']) await tx.push(p);
  console.log('ready');
  process.stdin.once('data', async () => {
    await tx.close();
    console.log('closed');
    process.exit(0);
  });
} catch (e) {
  console.log('failed ' + e.code + ' ' + e.message);
}
`;

/** Start a holder of `dir` under `kind`; resolves once it holds the store. */
async function holder(tmp: string, dir: string, kind: LockKind, nodeArgs: string[] = []): Promise<Lines> {
  const child = runModule(tmp, `holder-${kind}.mjs`, HOLDER, [dir], nodeArgs, { PERSISTENT_QUEUE_LOCK: kind });
  await child.until((lines) => lines.some((l) => l === 'ready' || l.startsWith('failed')));
  return child;
}

/** The unacked payloads of the store in `dir`, read through a fresh open that is closed again. */
async function payloads(dir: string, options: LogStoreOptions): Promise<string[]> {
  const store = await LogStore.open(dir, options);
  await store.open();
  const got = store.read({ after: 0, before: Number.MAX_SAFE_INTEGER, limit: 1000 }).map((i) => decode(i.bytes));
  await store.close();
  return got;
}

/** Names and contents of every entry of `dir` (a socket, the holder's endpoint, by name and kind): what "leaves nothing behind" compares. */
function hashDir(dir: string): string {
  const h = createHash('sha256');
  for (const name of readdirSync(dir).sort()) {
    const path = join(dir, name);
    h.update(name)
      .update('\0')
      .update(lstatSync(path).isSocket() ? 'socket' : readFileSync(path))
      .update('\0');
  }
  return h.digest('hex');
}

interface FsExtProbe {
  flockSync(fd: number, flags: 'exnb' | 'un'): void;
}
const fsExt = createRequire(import.meta.url)('fs-ext') as FsExtProbe;

/** Whether some process holds a kernel flock on `path` (taking and dropping one if nobody does). */
function flockHeld(path: string): boolean {
  const fd = openSync(path, 'r');
  try {
    fsExt.flockSync(fd, 'exnb');
    fsExt.flockSync(fd, 'un');
    return false;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EAGAIN' || (e as NodeJS.ErrnoException).code === 'EWOULDBLOCK') return true;
    throw e;
  } finally {
    closeSync(fd);
  }
}

/** Resolves after a few turns of the event loop, which a waiting open spends polling. */
async function turns(n: number): Promise<void> {
  for (let i = 0; i < n; i++) await new Promise((r) => setTimeout(r, 0));
}

/** Whether `p` has settled by now. */
async function settled(p: Promise<unknown>): Promise<boolean> {
  let done = false;
  void p.then(
    () => (done = true),
    () => (done = true),
  );
  await turns(1);
  return done;
}

const KINDS = ['flock', 'pidfile'] as const;
const LOCK_TEXT: Record<(typeof KINDS)[number], RegExp> = { flock: /^(\d+) flock start=[ts]\d+\n$/, pidfile: /^(\d+) start=[ts]\d+\n$/ };

describe.each(KINDS)('the %s lock', (kind) => {
  const fs = createNodeFileSystem(kind);
  const other = kind === 'flock' ? 'pidfile' : 'flock';

  test('anotherProcessIsRefusedWithErrLockedNamingItsPid', async () => {
    const { tmp, dir } = fresh();
    const child = await holder(tmp, dir, kind);
    try {
      expect(child.lines).toEqual(['ready']);
      // The holder took the lock it was told to: its text, and a kernel flock only for `flock`.
      const text = readFileSync(join(dir, 'LOCK'), 'utf8');
      expect(text).toMatch(LOCK_TEXT[kind]);
      expect(Number(LOCK_TEXT[kind].exec(text)![1])).toBe(child.child.pid);
      expect(flockHeld(join(dir, 'LOCK'))).toBe(kind === 'flock');
      const e = await LogStore.open(dir, { fs }).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(OpenError);
      expect(e).toMatchObject({ code: 'ERR_LOCKED', message: new RegExp(`pid ${child.child.pid}\\b`) });
      expect(readFileSync(join(dir, 'LOCK'), 'utf8')).toBe(text); // the refused open changed nothing
    } finally {
      await child.kill();
    }
  });

  test('aSigkilledHoldersLockIsTakenOverAndItsPushesAreThere', async () => {
    const { tmp, dir } = fresh();
    const child = await holder(tmp, dir, kind);
    await child.kill();
    expect(existsSync(join(dir, 'LOCK'))).toBe(true); // a killed holder cannot remove it
    expect(await payloads(dir, { fs })).toEqual(['a', 'b', 'c']);
    expect(readdirSync(dir).filter((n) => n.startsWith('LOCK'))).toEqual([]); // released at close
  });

  test('lockHolderNamesALiveHolderWithoutTouchingItsLockAndForgetsADeadOne', async () => {
    const { tmp, dir } = fresh();
    const lockPath = join(dir, 'LOCK');
    const child = await holder(tmp, dir, kind);
    try {
      const text = readFileSync(lockPath, 'utf8');
      // Either kind's lockHolder reads either kind's LOCK.
      expect(fs.lockHolder!(lockPath)).toEqual({ pid: child.child.pid });
      expect(createNodeFileSystem(other).lockHolder!(lockPath)).toEqual({ pid: child.child.pid });
      expect(readFileSync(lockPath, 'utf8')).toBe(text);
      expect(flockHeld(lockPath)).toBe(kind === 'flock');
    } finally {
      await child.kill();
    }
    expect(existsSync(lockPath)).toBe(true);
    expect(fs.lockHolder!(lockPath)).toBeNull();
    // A live pid that did not write the LOCK (its start differs: a pid used again) holds nothing.
    writeFileSync(lockPath, `${process.ppid} start=t1\n`);
    expect(fs.lockHolder!(lockPath)).toEqual(existsSync(`/proc/${process.ppid}/stat`) ? null : { pid: process.ppid });
    rmSync(lockPath);
    expect(fs.lockHolder!(lockPath)).toBeNull();
  });

  test(`aHolderOfTheOtherKindIsRespected`, async () => {
    const { tmp, dir } = fresh();
    const child = await holder(tmp, dir, other);
    try {
      expect(child.lines).toEqual(['ready']);
      await expect(LogStore.open(dir, { fs })).rejects.toMatchObject({
        code: 'ERR_LOCKED',
        message: new RegExp(`pid ${child.child.pid}\\b`),
      });
    } finally {
      await child.kill();
    }
    expect(await payloads(dir, { fs })).toEqual(['a', 'b', 'c']);
  });

  test('anotherOpenersLockTmpFileIsLeftAloneAndADeadOnesIsRemoved', async () => {
    const { dir } = fresh();
    await (await LogStore.open(dir, { fs })).close();
    // process.ppid is alive and not us: an opener in the middle of its lock attempt, as far as
    // the store can tell. 4000000 is above any pid in use here: an opener that died in its attempt.
    const live = `LOCK.tmp-${process.ppid}`;
    writeFileSync(join(dir, live), `${process.ppid}\n`);
    writeFileSync(join(dir, 'LOCK.tmp-4000000'), '4000000\n');
    const store = await LogStore.open(dir, { fs });
    expect(store.recovery.strayFilesDeleted).toEqual([]);
    expect(readdirSync(dir).filter((n) => n.startsWith('LOCK.tmp'))).toEqual([live]);
    await store.close();
    expect(readdirSync(dir).filter((n) => n.startsWith('LOCK'))).toEqual([live]);
  });

  test('aSecondOpenInThisProcessIsRefusedOrWaitsForTheFirstToClose', async () => {
    const { dir } = fresh();
    const first = await LogStore.open(dir, { fs });
    await expect(LogStore.open(dir, { fs })).rejects.toMatchObject({ code: 'ERR_LOCKED', message: /already open in this process/ });
    // The default file system shares the registry: refused through it too.
    await expect(LogStore.open(dir)).rejects.toMatchObject({ code: 'ERR_LOCKED' });
    await expect(LogStore.open(dir, { fs, lockTimeoutMs: 20 })).rejects.toMatchObject({
      code: 'ERR_LOCKED',
      message: /gave up after waiting \d+ ms/,
    });
    const second = LogStore.open(dir, { fs, lockTimeoutMs: 60_000 });
    await turns(3);
    expect(await settled(second)).toBe(false);
    await first.close();
    const store = await second;
    await store.open();
    await store.close();
  });

  test('anotherProcessThatLetsGoWhileWeWaitIsFollowedByUs', async () => {
    const { tmp, dir } = fresh();
    const child = await holder(tmp, dir, kind);
    try {
      const waiting = payloads(dir, { fs, lockTimeoutMs: 60_000 });
      await turns(3);
      expect(await settled(waiting)).toBe(false);
      child.child.stdin!.write('close\n');
      expect(await waiting).toEqual(['a', 'b', 'c']);
      await child.until((lines) => lines.includes('closed'));
    } finally {
      await child.kill();
    }
  });

  test('aWaitThatTimesOutIsErrLockedNamingTheHolder', async () => {
    const { tmp, dir } = fresh();
    const child = await holder(tmp, dir, kind);
    try {
      const e = await LogStore.open(dir, { fs, lockTimeoutMs: 50 }).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(OpenError);
      expect(e).toMatchObject({ code: 'ERR_LOCKED', message: new RegExp(`pid ${child.child.pid}\\b.*gave up after waiting \\d+ ms`) });
      expect((e as OpenError).cause).toMatchObject({ pid: child.child.pid });
    } finally {
      await child.kill();
    }
  });

  test('anAbortedWaitRejectsWithTheReasonAndLeavesNothingBehind', async () => {
    const { tmp, dir } = fresh();
    const child = await holder(tmp, dir, kind);
    try {
      const before = hashDir(dir);
      const controller = new AbortController();
      const waiting = LogStore.open(dir, { fs, lockTimeoutMs: Infinity, signal: controller.signal });
      await turns(3);
      expect(await settled(waiting)).toBe(false);
      const reason = new Error('stop waiting');
      controller.abort(reason);
      await expect(waiting).rejects.toBe(reason);
      expect(hashDir(dir)).toBe(before);
      // Nothing is held in this process either: the store opens here once the holder is gone.
      child.child.stdin!.write('close\n');
      await child.until((lines) => lines.includes('closed'));
      expect(await payloads(dir, { fs })).toEqual(['a', 'b', 'c']);
    } finally {
      await child.kill();
    }
  });
});

describe('lockTimeoutMs and signal', () => {
  test('badValuesAreTypeOrRangeErrorsAndCreateNothing', async () => {
    const { dir } = fresh();
    await expect(LogStore.open(dir, { lockTimeoutMs: -1 })).rejects.toThrow(RangeError);
    await expect(LogStore.open(dir, { lockTimeoutMs: 1.5 })).rejects.toThrow(RangeError);
    await expect(LogStore.open(dir, { lockTimeoutMs: Number.NaN })).rejects.toThrow(RangeError);
    await expect(LogStore.open(dir, { lockTimeoutMs: '100' as never })).rejects.toThrow(
      new TypeError('Expected `lockTimeoutMs` to be a non-negative integer or Infinity, got `"100"` (string)'),
    );
    await expect(LogStore.open(dir, { signal: {} as never })).rejects.toThrow(TypeError);
    await expect(LogStore.open(dir, { signal: null as never })).rejects.toThrow(/`signal` to be an AbortSignal/);
    expect(existsSync(dir)).toBe(false);
  });

  test('anAlreadyAbortedSignalRejectsBeforeAnythingIsCreated', async () => {
    const { dir } = fresh();
    const controller = new AbortController();
    controller.abort();
    await expect(LogStore.open(dir, { signal: controller.signal })).rejects.toMatchObject({ name: 'AbortError' });
    expect(existsSync(dir)).toBe(false);
  });

  test('aWaitIsFreeWhenTheStoreIsNotHeld', async () => {
    const { dir } = fresh();
    const store = await LogStore.open(dir, { lockTimeoutMs: Infinity, signal: new AbortController().signal });
    await store.open();
    await store.close();
  });
});

describe('choosing the lock', () => {
  /** Hides `fs-ext` from require(), as when it is not installed. */
  const HIDE_FS_EXT = `const Module = require('node:module');
const resolve = Module._resolveFilename;
Module._resolveFilename = function (request, ...rest) {
  if (request === 'fs-ext') throw Object.assign(new Error("Cannot find module 'fs-ext' (hidden by the test)"), { code: 'MODULE_NOT_FOUND' });
  return resolve.call(this, request, ...rest);
};
`;

  for (const [env, expected] of [
    ['auto', /^ready$/],
    ['flock', /^failed ERR_STORE .*npm install fs-ext/],
    ['pidfile', /^ready$/],
    ['fcntl', /^failed ERR_STORE .*PERSISTENT_QUEUE_LOCK must be auto, flock or pidfile, got 'fcntl'/],
  ] as const) {
    test(`withoutFsExtPERSISTENT_QUEUE_LOCK=${env}`, async () => {
      const { tmp, dir } = fresh();
      mkdirSync(dir);
      const hide = join(tmp, 'hide.cjs');
      writeFileSync(hide, HIDE_FS_EXT);
      const child = runModule(tmp, 'holder.mjs', HOLDER, [dir], ['--require', hide], { PERSISTENT_QUEUE_LOCK: env });
      try {
        await child.until((lines) => lines.length > 0);
        expect(child.lines[0]).toMatch(expected);
        const lock = join(dir, 'LOCK');
        if (child.lines[0] === 'ready') {
          expect(readFileSync(lock, 'utf8')).toMatch(LOCK_TEXT.pidfile); // fell back to the pid lock
          expect(flockHeld(lock)).toBe(false);
        } else {
          expect(readdirSync(dir)).toEqual([]); // a refused open leaves nothing
        }
      } finally {
        await child.kill();
      }
    });
  }

  test('withFsExtTheDefaultIsTheKernelLock', async () => {
    const { tmp, dir } = fresh();
    const child = runModule(tmp, 'holder.mjs', HOLDER, [dir], [], { PERSISTENT_QUEUE_LOCK: '' });
    try {
      await child.until((lines) => lines.length > 0);
      expect(child.lines[0]).toBe('ready');
      expect(readFileSync(join(dir, 'LOCK'), 'utf8')).toMatch(LOCK_TEXT.flock);
      expect(flockHeld(join(dir, 'LOCK'))).toBe(true);
    } finally {
      await child.kill();
    }
  });
});
