import { describe, expect, it } from 'vitest';
import { CrashFileSystem, formatCrashPoint, parseCrashPoint, type CrashPoint } from '../../src/testing/index.js';
import { Prng, seedFromEnv, withReproduction } from '../../src/testing/prng.js';

const bytes = (text: string): Uint8Array => new TextEncoder().encode(text);
const text = (data: Uint8Array): string => new TextDecoder().decode(data);

/** Writes `data` at `position` through `fd`. */
function put(fs: CrashFileSystem, fd: number, data: string | Uint8Array, position: number): void {
  const buffer = typeof data === 'string' ? bytes(data) : data;
  fs.write(fd, buffer, 0, buffer.length, position);
}

function get(fs: CrashFileSystem, fd: number, position: number, length: number): string {
  const buffer = new Uint8Array(length);
  const count = fs.read(fd, buffer, 0, length, position);
  return text(buffer.subarray(0, count));
}

/** A durable empty file: create, fsync, fsync the directory. */
async function durableFile(fs: CrashFileSystem, path: string): Promise<number> {
  const fd = fs.open(path, 'create');
  await fs.fsync(fd);
  await fs.fsyncDir(path.slice(0, path.lastIndexOf('/')) || '/');
  return fd;
}

function codeOf(action: () => unknown): string | undefined {
  try {
    action();
  } catch (error) {
    return (error as { code?: string }).code;
  }
  return undefined;
}

async function rejectionOf(promise: Promise<unknown>): Promise<{ code?: string; errno?: number; syscall?: string } | undefined> {
  try {
    await promise;
  } catch (error) {
    return error as { code?: string; errno?: number; syscall?: string };
  }
  return undefined;
}

const tick = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('POSIX-like semantics', () => {
  it('positionalWriteAndReadRoundTrip', () => {
    const fs = new CrashFileSystem();
    const fd = fs.open('/a', 'create');
    put(fs, fd, 'hello world', 0);
    put(fs, fd, 'W', 6);
    expect(get(fs, fd, 0, 100)).toBe('hello World');
    expect(get(fs, fd, 6, 3)).toBe('Wor');
    expect(fs.read(fd, new Uint8Array(4), 0, 4, 11)).toBe(0);
    expect(fs.size(fd)).toBe(11);
  });

  it('writePastEndLeavesAZeroHole', () => {
    const fs = new CrashFileSystem();
    const fd = fs.open('/a', 'create');
    put(fs, fd, 'ab', 4);
    expect([...fs.readFile('/a')]).toEqual([0, 0, 0, 0, 97, 98]);
  });

  it('truncateExtendsWithZerosAndShrinks', () => {
    const fs = new CrashFileSystem();
    const fd = fs.open('/a', 'create');
    put(fs, fd, 'abcdef', 0);
    fs.truncate(fd, 3);
    expect(text(fs.readFile('/a'))).toBe('abc');
    fs.truncate(fd, 6);
    expect([...fs.readFile('/a')]).toEqual([97, 98, 99, 0, 0, 0]);
    expect(fs.stat('/a')).toEqual({ size: 6, isFile: true, isDirectory: false });
  });

  it('renameReplacesAtomicallyAndAnOpenFdKeepsTheOldInode', () => {
    const fs = new CrashFileSystem();
    const old = fs.open('/target', 'create');
    put(fs, old, 'old', 0);
    const tmp = fs.open('/target.tmp', 'create');
    put(fs, tmp, 'new', 0);
    fs.rename('/target.tmp', '/target');
    expect(fs.readdir('/')).toEqual(['target']);
    expect(text(fs.readFile('/target'))).toBe('new');
    expect(get(fs, old, 0, 3)).toBe('old');
  });

  it('unlinkWithAnOpenFdKeepsTheDataReachableThroughTheFd', () => {
    const fs = new CrashFileSystem();
    const fd = fs.open('/a', 'create');
    put(fs, fd, 'still here', 0);
    fs.unlink('/a');
    expect(fs.stat('/a')).toBeNull();
    expect(fs.readdir('/')).toEqual([]);
    put(fs, fd, '!', 10);
    expect(get(fs, fd, 0, 20)).toBe('still here!');
    expect(fs.usedBytes()).toBe(11);
    fs.close(fd);
    expect(fs.usedBytes()).toBe(0);
  });

  it('errorsAreNodeStyleWithCodeErrnoAndSyscall', () => {
    const fs = new CrashFileSystem();
    fs.open('/a', 'create');
    let error: { code?: string; errno?: number; syscall?: string; path?: string } = {};
    try {
      fs.open('/a', 'create');
    } catch (caught) {
      error = caught as typeof error;
    }
    expect(error).toMatchObject({ code: 'EEXIST', errno: -17, syscall: 'open', path: '/a' });
    expect(error).toBeInstanceOf(Error);
    expect(codeOf(() => fs.open('/missing', 'read'))).toBe('ENOENT');
    expect(codeOf(() => fs.open('/no/such/dir', 'create'))).toBe('ENOENT');
    expect(codeOf(() => fs.open('/a/b', 'create'))).toBe('ENOTDIR');
    expect(codeOf(() => fs.unlink('/missing'))).toBe('ENOENT');
    expect(codeOf(() => fs.rename('/missing', '/b'))).toBe('ENOENT');
    expect(codeOf(() => fs.readdir('/missing'))).toBe('ENOENT');
    expect(codeOf(() => fs.close(99))).toBe('EBADF');
    fs.mkdirp('/d', 0o700);
    expect(codeOf(() => fs.open('/d', 'read'))).toBe('EISDIR');
    expect(codeOf(() => fs.unlink('/d'))).toBe('EISDIR');
    const readOnly = fs.open('/a', 'read');
    expect(codeOf(() => put(fs, readOnly, 'x', 0))).toBe('EBADF');
  });

  it('programmerErrorsAreTypeOrRangeErrors', () => {
    const fs = new CrashFileSystem();
    expect(() => fs.open('relative', 'create')).toThrow(TypeError);
    const fd = fs.open('/a', 'create');
    expect(() => fs.write(fd, new Uint8Array(2), 0, 3, 0)).toThrow(RangeError);
    expect(() => fs.flipBit('/a', 0, 0)).toThrow(RangeError);
  });

  it('mkdirpReaddirAndStat', () => {
    const fs = new CrashFileSystem();
    fs.mkdirp('/q/data', 0o700);
    fs.mkdirp('/q/data', 0o700);
    fs.open('/q/data/b', 'create');
    fs.open('/q/data/a', 'create');
    expect(fs.readdir('/q/data')).toEqual(['a', 'b']);
    expect(fs.stat('/q')).toEqual({ size: 0, isFile: false, isDirectory: true });
    expect(fs.stat('/q/data/a/x')).toBeNull();
    expect(fs.listFiles()).toEqual(['/q/data/a', '/q/data/b']);
    expect(codeOf(() => fs.mkdirp('/q/data/a/x', 0o700))).toBe('ENOTDIR');
    expect(fs.realpath('/q//data/./a')).toBe('/q/data/a');
    expect(codeOf(() => fs.realpath('/q/nope'))).toBe('ENOENT');
  });

  it('lockIsExclusiveAcrossProcessesAndReleasedByCrashes', () => {
    const fs = new CrashFileSystem();
    const handle = fs.lock('/q/LOCK');
    expect(codeOf(() => fs.lock('/q/LOCK'))).toBe('ELOCKED');
    const other = fs.newProcess();
    expect(codeOf(() => other.lock('/q/LOCK'))).toBe('ELOCKED');
    handle.release();
    handle.release();
    const held = other.lock('/q/LOCK');
    expect(codeOf(() => fs.lock('/q/LOCK'))).toBe('ELOCKED');
    const restarted = other.processCrash();
    restarted.lock('/q/LOCK');
    expect(held).toBeDefined();
    const afterPowerLoss = restarted.crash();
    afterPowerLoss.lock('/q/LOCK').release();
  });

  it('lockHolderTellsAHeldLockFromAFreeOneWithoutTakingIt', () => {
    const fs = new CrashFileSystem();
    expect(fs.lockHolder('/q/LOCK')).toBeNull();
    const other = fs.newProcess();
    other.lock('/q/LOCK');
    expect(fs.lockHolder('/q/LOCK')).toEqual({ pid: null });
    expect(fs.lockHolder('/q/LOCK')).toEqual({ pid: null });
    expect(codeOf(() => fs.lock('/q/LOCK'))).toBe('ELOCKED');
    other.processCrash();
    expect(fs.lockHolder('/q/LOCK')).toBeNull();
  });
});

describe('power loss (F1–F4)', () => {
  it('unsyncedDataIsLost', async () => {
    const fs = new CrashFileSystem();
    const fd = await durableFile(fs, '/a');
    put(fs, fd, 'unsynced', 0);
    const after = fs.crash({ unsynced: 'lose' });
    expect(text(after.readFile('/a'))).toBe('');
  });

  it('syncedDataIsKeptByEveryRandomCrash', async () => {
    for (let seed = 1; seed <= 50; seed++) {
      const fs = new CrashFileSystem({ seed });
      await withReproduction(
        () => fs.reproLine(),
        async () => {
          const fd = await durableFile(fs, '/a');
          put(fs, fd, 'synced', 0);
          await fs.fdatasync(fd);
          put(fs, fd, '+tail', 6);
          const after = fs.crash();
          expect(text(after.readFile('/a').subarray(0, 6))).toBe('synced');
        },
      );
    }
  });

  it('fsyncOfAFileDoesNotMakeItsDirectoryEntryDurable', async () => {
    const fs = new CrashFileSystem();
    const fd = fs.open('/a', 'create');
    put(fs, fd, 'data', 0);
    await fs.fsync(fd);
    expect(fs.crash({ unsynced: 'lose', kill: false }).listFiles()).toEqual([]);
    await fs.fsyncDir('/');
    expect(text(fs.crash({ unsynced: 'lose' }).readFile('/a'))).toBe('data');
  });

  it('tornWriteKeepsAPrefix', async () => {
    const fs = new CrashFileSystem();
    const fd = await durableFile(fs, '/a');
    put(fs, fd, 'base', 0);
    await fs.fdatasync(fd);
    const write = fs.traceLength;
    put(fs, fd, 'ABCDEF', 4);
    const after = fs.crashAt({ at: fs.traceLength, keep: write, tornBytes: 2 });
    expect(text(after.readFile('/a'))).toBe('baseAB');
  });

  it('zeroTailPadsTheLostPartOfAnExtendingWrite', async () => {
    const fs = new CrashFileSystem();
    const fd = await durableFile(fs, '/a');
    put(fs, fd, 'base', 0);
    await fs.fdatasync(fd);
    const write = fs.traceLength;
    put(fs, fd, 'ABCDEF', 4);
    const after = fs.crashAt({ at: fs.traceLength, keep: write, tornBytes: 1, zeroTail: true });
    expect([...after.readFile('/a')]).toEqual([...bytes('baseA'), 0, 0, 0, 0, 0]);
    const none = fs.crashAt({ at: fs.traceLength, keep: write, tornBytes: 0, zeroTail: true });
    expect([...none.readFile('/a')]).toEqual([...bytes('base'), 0, 0, 0, 0, 0, 0]);
  });

  it('createLostWithoutFsyncDirAndKeptWithIt', async () => {
    const fs = new CrashFileSystem();
    fs.mkdirp('/q', 0o700);
    await fs.fsyncDir('/');
    const fd = fs.open('/q/seg', 'create');
    await fs.fsync(fd);
    expect(fs.crash({ unsynced: 'lose', kill: false }).listFiles()).toEqual([]);
    await fs.fsyncDir('/q');
    expect(fs.crash({ unsynced: 'lose' }).listFiles()).toEqual(['/q/seg']);
  });

  it('renameLostWithoutFsyncDirAndKeptWithIt', async () => {
    const fs = new CrashFileSystem();
    const old = await durableFile(fs, '/cursor');
    put(fs, old, 'v1', 0);
    await fs.fsync(old);
    const tmp = fs.open('/cursor.tmp', 'create');
    put(fs, tmp, 'v2', 0);
    await fs.fsync(tmp);
    fs.rename('/cursor.tmp', '/cursor');
    const lost = fs.crash({ unsynced: 'lose', kill: false });
    expect(lost.listFiles()).toEqual(['/cursor']);
    expect(text(lost.readFile('/cursor'))).toBe('v1');
    await fs.fsyncDir('/');
    expect(text(fs.crash({ unsynced: 'lose' }).readFile('/cursor'))).toBe('v2');
  });

  it('unlinkLostWithoutFsyncDirAndKeptWithIt', async () => {
    const fs = new CrashFileSystem();
    const fd = await durableFile(fs, '/old.seg');
    put(fs, fd, 'x', 0);
    await fs.fsync(fd);
    fs.close(fd);
    fs.unlink('/old.seg');
    expect(fs.crash({ unsynced: 'lose', kill: false }).listFiles()).toEqual(['/old.seg']);
    await fs.fsyncDir('/');
    expect(fs.crash({ unsynced: 'lose' }).listFiles()).toEqual([]);
  });

  it('keepModeKeepsEverythingWritten', () => {
    const fs = new CrashFileSystem();
    const fd = fs.open('/a', 'create');
    put(fs, fd, 'all of it', 0);
    expect(text(fs.crash({ unsynced: 'keep' }).readFile('/a'))).toBe('all of it');
  });

  it('randomCrashesOfAnAppendLogAreAlwaysSyncedPrefixThenWrittenPrefixThenZeros', async () => {
    // Checker: what must hold. Workload: random appends and syncs. Outcomes are counted to prove
    // the random crash reaches every shape (lost, full, torn, zero tail).
    const base = seedFromEnv(1000);
    const shapes = new Set<string>();
    for (let seed = base; seed < base + 200; seed++) {
      const fs = new CrashFileSystem({ seed });
      const prng = new Prng(seed);
      await withReproduction(
        () => fs.reproLine(),
        async () => {
          const fd = await durableFile(fs, '/log');
          const written: number[] = [];
          let synced = 0;
          const steps = 1 + prng.int(8);
          for (let step = 0; step < steps; step++) {
            const chunk = prng.bytes(1 + prng.int(6)).map((b) => b | 1); // never zero, so zeros are padding
            put(fs, fd, chunk, written.length);
            written.push(...chunk);
            if (prng.bool(0.3)) {
              await fs.fdatasync(fd);
              synced = written.length;
            }
          }
          const got = [...fs.crash().readFile('/log')];
          expect(got.length).toBeGreaterThanOrEqual(synced);
          expect(got.length).toBeLessThanOrEqual(written.length);
          let match = 0;
          while (match < got.length && got[match] === written[match]) match++;
          expect(match).toBeGreaterThanOrEqual(synced);
          expect(got.slice(match).every((b) => b === 0)).toBe(true);
          if (synced < written.length) {
            shapes.add(
              got.length === written.length && match === got.length
                ? 'full'
                : match === synced && got.length === synced
                  ? 'lost'
                  : match < got.length
                    ? 'zero-tail'
                    : 'torn-or-prefix',
            );
          }
        },
      );
    }
    expect([...shapes].sort()).toEqual(['full', 'lost', 'torn-or-prefix', 'zero-tail']);
  });
});

describe('failed fsync (F5)', () => {
  it('eioOnTheNthFsyncRejectsWithANodeStyleError', async () => {
    const fs = new CrashFileSystem();
    const fd = await durableFile(fs, '/a');
    const rule = fs.inject({ op: 'fdatasync', code: 'EIO', nth: 2 });
    put(fs, fd, 'one', 0);
    await fs.fdatasync(fd);
    put(fs, fd, 'two', 3);
    expect(await rejectionOf(fs.fdatasync(fd))).toMatchObject({ code: 'EIO', errno: -5, syscall: 'fdatasync' });
    expect(rule.firedCount).toBe(1);
    await fs.fdatasync(fd);
    expect(fs.stats().syncFailureCount).toBe(1);
  });

  it('aSuccessfulFsyncAfterAFailedOneDoesNotMakeTheFailedDataDurable', async () => {
    const fs = new CrashFileSystem();
    const fd = await durableFile(fs, '/a');
    fs.inject({ op: 'fdatasync', code: 'EIO', when: (call) => call.path === '/a' });
    put(fs, fd, 'lost?', 0);
    await rejectionOf(fs.fdatasync(fd));
    await fs.fdatasync(fd);
    expect(text(fs.readFile('/a'))).toBe('lost?'); // the live process still reads it
    expect(fs.trace().find((entry) => entry.kind === 'write')?.durableAt).toBeNull();
    expect(text(fs.crash({ unsynced: 'lose' }).readFile('/a'))).toBe('');
  });

  it('afterAFailedFsyncCrashStatesMixBothVersions', async () => {
    const seen = new Set<string>();
    for (let seed = 1; seed <= 60; seed++) {
      const fs = new CrashFileSystem({ seed });
      await withReproduction(
        () => fs.reproLine(),
        async () => {
          const fd = await durableFile(fs, '/a');
          put(fs, fd, 'aaaa', 0);
          await fs.fdatasync(fd);
          fs.inject({ op: 'fdatasync', code: 'EIO' });
          put(fs, fd, 'BB', 0);
          put(fs, fd, 'CC', 2);
          await rejectionOf(fs.fdatasync(fd));
          const got = text(fs.crash().readFile('/a'));
          expect(got).toMatch(/^[aBC]{4}$/);
          seen.add(got);
        },
      );
    }
    expect(seen).toContain('aaaa');
    expect(seen).toContain('BBCC');
    expect([...seen].some((state) => state !== 'aaaa' && state !== 'BBCC')).toBe(true);
  });

  it('fsyncDirCanFailToo', async () => {
    const fs = new CrashFileSystem();
    fs.inject({ op: 'fsyncDir', code: 'EIO' });
    fs.open('/a', 'create');
    expect((await rejectionOf(fs.fsyncDir('/')))?.code).toBe('EIO');
    expect(fs.crash({ unsynced: 'lose' }).listFiles()).toEqual([]);
  });
});

describe('full disk and transient errors', () => {
  it('enospcLandsWhatFitsThenSpaceReturns', () => {
    const fs = new CrashFileSystem({ diskBytesMax: 10 });
    const fd = fs.open('/a', 'create');
    put(fs, fd, '123456', 0);
    const error = (() => {
      try {
        put(fs, fd, 'abcdef', 6);
      } catch (caught) {
        return caught as { code: string; errno: number; syscall: string };
      }
      return undefined;
    })();
    expect(error).toMatchObject({ code: 'ENOSPC', errno: -28, syscall: 'write' });
    expect(text(fs.readFile('/a'))).toBe('123456abcd');
    // Overwriting inside the file needs no space.
    put(fs, fd, 'X', 0);
    expect(codeOf(() => put(fs, fd, 'more', 10))).toBe('ENOSPC');
    fs.setDiskBytesMax(100);
    put(fs, fd, 'more', 10);
    expect(text(fs.readFile('/a'))).toBe('X23456abcdmore');
  });

  it('emfileOnOpenByPredicateUntilRemoved', () => {
    const fs = new CrashFileSystem();
    const rule = fs.inject({ op: 'open', code: 'EMFILE', times: Infinity, when: (call) => call.path.endsWith('.seg') });
    expect(codeOf(() => fs.open('/1.seg', 'create'))).toBe('EMFILE');
    expect(codeOf(() => fs.open('/2.seg', 'create'))).toBe('EMFILE');
    expect(codeOf(() => fs.open('/cursor', 'create'))).toBeUndefined();
    expect(rule.firedCount).toBe(2);
    rule.remove();
    expect(codeOf(() => fs.open('/1.seg', 'create'))).toBeUndefined();
    expect(fs.listFiles()).toEqual(['/1.seg', '/cursor']);
  });

  it('eagainAndEioOnReadAreTransient', () => {
    const fs = new CrashFileSystem();
    const fd = fs.open('/a', 'create');
    put(fs, fd, 'data', 0);
    fs.inject({ op: 'read', code: 'EAGAIN', nth: 2 });
    fs.inject({ op: 'read', code: 'EIO', when: (call) => call.position === 2 });
    expect(get(fs, fd, 0, 4)).toBe('data');
    expect(codeOf(() => get(fs, fd, 0, 4))).toBe('EAGAIN');
    expect(codeOf(() => get(fs, fd, 2, 2))).toBe('EIO');
    expect(get(fs, fd, 2, 2)).toBe('ta');
  });

  it('faultsCanBeSwitchedOffToReplayThePristineRun', () => {
    const fs = new CrashFileSystem({ diskBytesMax: 2 });
    fs.inject({ op: 'open', code: 'EMFILE' });
    fs.setFaultsEnabled(false);
    const fd = fs.open('/a', 'create');
    put(fs, fd, 'no limit', 0);
    fs.flipBit('/a', 0, 0);
    expect(text(fs.readFile('/a'))).toBe('no limit');
    fs.setFaultsEnabled(true);
    expect(text(fs.readFile('/a'))).toBe('oo limit');
  });
});

describe('bit flips', () => {
  it('flipBitIsAnOverlayThatSurvivesACrashAndIsClearedByAWrite', async () => {
    const fs = new CrashFileSystem();
    const fd = await durableFile(fs, '/a');
    put(fs, fd, 'AAAA', 0);
    await fs.fdatasync(fd);
    fs.flipBit('/a', 1, 1);
    expect(text(fs.readFile('/a'))).toBe('ACAA');
    expect(text(fs.readFile('/a', { pristine: true }))).toBe('AAAA');
    expect(get(fs, fd, 0, 4)).toBe('ACAA');
    const after = fs.crash({ unsynced: 'lose' });
    expect(text(after.readFile('/a'))).toBe('ACAA');
    const fd2 = after.open('/a', 'readWrite');
    put(after, fd2, 'A', 1);
    expect(text(after.readFile('/a'))).toBe('AAAA');
  });
});

describe('process crash', () => {
  it('keepsEverythingWrittenClosesFdsAndKeepsUnsyncedStateForALaterPowerLoss', async () => {
    const fs = new CrashFileSystem();
    const fd = await durableFile(fs, '/a');
    put(fs, fd, 'synced', 0);
    await fs.fdatasync(fd);
    put(fs, fd, '+unsynced', 6);
    fs.lock('/LOCK');
    const next = fs.processCrash();
    expect(fs.alive).toBe(false);
    expect(codeOf(() => fs.size(fd))).toBe('ECRASHED');
    expect(text(next.readFile('/a'))).toBe('synced+unsynced');
    expect(codeOf(() => next.size(fd))).toBe('EBADF');
    next.lock('/LOCK');
    expect(text(next.crash({ unsynced: 'lose' }).readFile('/a'))).toBe('synced');
  });

  it('aPowerLossKillsEveryHandleAndSyncsInFlightNeverSettle', async () => {
    const fs = new CrashFileSystem();
    const fd = fs.open('/a', 'create');
    fs.pauseSyncs();
    let settled = false;
    void fs.fdatasync(fd).then(() => (settled = true));
    fs.crash();
    fs.resumeSyncs();
    await tick();
    await tick();
    expect(settled).toBe(false);
    expect(codeOf(() => fs.open('/b', 'create'))).toBe('ECRASHED');
    expect((await rejectionOf(fs.fsyncDir('/')))?.code).toBe('ECRASHED');
  });

  it('pausedSyncsSettleInOrderOnResume', async () => {
    const fs = new CrashFileSystem();
    const fd = fs.open('/a', 'create');
    fs.pauseSyncs();
    const order: string[] = [];
    const first = fs.fdatasync(fd).then(() => order.push('first'));
    const second = fs.fsyncDir('/').then(() => order.push('second'));
    await tick();
    expect(fs.pausedSyncCount).toBe(2);
    expect(order).toEqual([]);
    fs.resumeSyncs();
    await Promise.all([first, second]);
    expect(order).toEqual(['first', 'second']);
  });
});

describe('determinism and reproduction', () => {
  async function run(seed: number): Promise<{ files: [string, number[]][]; line: string }> {
    const fs = new CrashFileSystem({ seed });
    const prng = new Prng(seed);
    fs.mkdirp('/q', 0o700);
    await fs.fsyncDir('/');
    for (let file = 0; file < 3; file++) {
      const fd = fs.open(`/q/${file}`, 'create');
      if (prng.bool()) await fs.fsyncDir('/q');
      for (let step = 0; step < 4; step++) {
        put(fs, fd, prng.bytes(1 + prng.int(8)), fs.size(fd));
        if (prng.bool(0.3)) await fs.fdatasync(fd);
      }
    }
    const first = fs.crash();
    const after = first.crash();
    return { files: [...after.snapshot()].map(([path, data]) => [path, [...data]]), line: after.reproLine() };
  }

  it('sameSeedGivesTheSameCrashState', async () => {
    for (let seed = 1; seed <= 20; seed++) {
      const [a, b] = [await run(seed), await run(seed)];
      expect(a).toEqual(b);
      expect(a.line).toBe(`seed=0x${seed.toString(16).padStart(8, '0')} crash=r1>r2`);
    }
  });

  it('differentSeedsGiveDifferentCrashStates', async () => {
    const states = new Set<string>();
    for (let seed = 1; seed <= 20; seed++) states.add(JSON.stringify((await run(seed)).files));
    expect(states.size).toBeGreaterThan(10);
  });

  it('crashPointsPrintAndParse', () => {
    const point: CrashPoint = { at: 12, keep: 11, tornBytes: 5, zeroTail: true };
    expect(formatCrashPoint(point)).toBe('12/11/5z');
    expect(parseCrashPoint('12/11/5z')).toEqual(point);
    const fs = new CrashFileSystem({ seed: 42 });
    const fd = fs.open('/a', 'create');
    put(fs, fd, 'abc', 0);
    expect(fs.crashAt({ at: 2, keep: 1, tornBytes: 1 }).reproLine()).toBe('seed=0x0000002a crash=2/1/1');
  });
});

describe('exhaustive enumeration', () => {
  /** create /f (0), write 4 bytes (1), fdatasync (2), write 3 bytes (3). */
  function smallTrace(): CrashFileSystem {
    const fs = new CrashFileSystem();
    const fd = fs.open('/f', 'create');
    put(fs, fd, 'abcd', 0);
    void fs.fdatasync(fd);
    put(fs, fd, 'efg', 4);
    return fs;
  }

  it('traceRecordsEveryMutatingCallWithItsDurability', () => {
    const fs = smallTrace();
    expect(fs.trace()).toEqual([
      { index: 0, kind: 'create', path: '/f', durableAt: null },
      { index: 1, kind: 'write', path: '/f', position: 0, length: 4, durableAt: 2 },
      { index: 2, kind: 'fdatasync', path: '/f', ok: true, durableAt: null },
      { index: 3, kind: 'write', path: '/f', position: 4, length: 3, durableAt: null },
    ]);
  });

  it('lastWriteEnumerationCountsEveryCrashPointAndTornLength', () => {
    // 5 crash points (at = 0..4) + torn lengths 1..3 of write 1 at at=2 + 1..2 of write 3 at at=4.
    expect([...smallTrace().crashPoints()]).toHaveLength(5 + 3 + 2);
    // The zero-tail variants add torn lengths 0..3 and 0..2.
    expect([...smallTrace().crashPoints({ zeroTail: true })]).toHaveLength(10 + 4 + 3);
  });

  it('anyWritebackEnumerationCutsAtEveryUnsyncedEntry', () => {
    // at=0: 1; at=1: 1 + cut create; at=2: 1 + create + (drop + 3 torn) of write 1;
    // at=3: 1 + create (write 1 is durable); at=4: 1 + create + (drop + 2 torn) of write 3.
    expect([...smallTrace().crashPoints({ writeback: 'any' })]).toHaveLength(1 + 2 + 6 + 2 + 5);
  });

  it('everyEnumeratedStateIsALegalCrashStateAndTheyAreDistinct', () => {
    const fs = smallTrace();
    const states = new Map<string, string>();
    for (const point of fs.crashPoints({ writeback: 'any', zeroTail: true })) {
      const after = fs.crashAt(point);
      const files = after.listFiles();
      const state = files.length === 0 ? '<none>' : JSON.stringify([...after.readFile('/f')]);
      if (files.length > 0 && point.at >= 3) {
        // write 1 was fdatasynced at index 2: if the file exists, its bytes survive.
        expect(text(after.readFile('/f').subarray(0, 4)), formatCrashPoint(point)).toBe('abcd');
      }
      if (!states.has(state)) states.set(state, formatCrashPoint(point));
    }
    expect(fs.alive).toBe(true);
    // none, '', a, ab, abc, abcd, abcde, abcdef, abcdefg and their zero tails.
    expect(states.size).toBeGreaterThanOrEqual(9);
  });

  it('fromSkipsTheSetupCrashPoints', () => {
    const fs = smallTrace();
    const points = [...fs.crashPoints({ from: 3 })];
    expect(points.map(formatCrashPoint)).toEqual(['3/3/0', '4/4/0', '4/3/1', '4/3/2']);
    expect(text(fs.crashAt(parseCrashPoint('4/3/1')).readFile('/f'))).toBe('abcde');
  });

  it('crashAtRejectsPointsOutsideTheTrace', () => {
    const fs = smallTrace();
    expect(() => fs.crashAt({ at: 5, keep: 0 })).toThrow(RangeError);
    expect(() => fs.crashAt({ at: 4, keep: 1, tornBytes: 1 })).toThrow(RangeError);
    expect(() => fs.crashAt({ at: 4, keep: 3, tornBytes: 3 })).toThrow(RangeError);
  });
});
