/**
 * Interleavings of the lock protocol between real processes, forced by pausing a child at one
 * node:fs call of dist/fs (test/support/pause-fs.mjs, loaded with --import): the child writes
 * <barrier>/<name>.at and waits for <barrier>/<name>.go. Each test ends with two processes that
 * both report holding the store; they must not.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, test } from 'vitest';
import { distUrl, type Lines, root, runModule } from '../support/child-process.js';

const made: string[] = [];
const children: Lines[] = [];
afterEach(async () => {
  for (const c of children.splice(0)) await c.kill();
});
afterAll(() => {
  for (const d of made.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** Opens argv[2], prints `held` and keeps it until a line on stdin; prints `refused <code>` otherwise. */
const OPENER = `
import { LogStore } from ${JSON.stringify(distUrl('stores/log/log-store.js'))};
try {
  const s = await LogStore.open(process.argv[2]);
  console.log('held');
  process.stdin.once('data', async () => { await s.close(); console.log('closed'); process.exit(0); });
} catch (e) {
  console.log('refused ' + e.code);
  process.exit(0);
}
`;

interface Pause {
  fn: string;
  match: string;
  when: 'before' | 'after';
  name: string;
}

const REGISTER = join(root, 'test', 'support', 'pause-fs-register.mjs');

function fresh(): { tmp: string; dir: string } {
  const tmp = mkdtempSync(join(tmpdir(), 'pq-lockil-'));
  made.push(tmp);
  const dir = join(tmp, 'store');
  mkdirSync(dir);
  return { tmp, dir };
}

function opener(tmp: string, dir: string, kind: 'flock' | 'pidfile', pauses: Pause[] = []): Lines {
  const c = runModule(tmp, 'opener.mjs', OPENER, [dir], ['--import', REGISTER], {
    PERSISTENT_QUEUE_LOCK: kind,
    PQ_PAUSE: JSON.stringify(pauses),
    PQ_BARRIER: tmp,
  });
  children.push(c);
  return c;
}

const settledOpen = (c: Lines): Promise<void> => c.until((l) => l.some((x) => x === 'held' || x.startsWith('refused')));

async function atBarrier(tmp: string, name: string): Promise<void> {
  while (!existsSync(join(tmp, `${name}.at`))) await new Promise((r) => setTimeout(r, 5));
}
const go = (tmp: string, name: string): void => writeFileSync(join(tmp, `${name}.go`), '');
const afterLinkingLock = (name: string): Pause[] => [{ fn: 'linkSync', match: '/LOCK', when: 'after', name }];

describe('the lock under forced interleavings', () => {
  test('aKernelLockHoldersLockFileNeverNamesAnotherProcess', async () => {
    const { tmp, dir } = fresh();
    // F1 links LOCK and stops before opening it; F2 takes that LOCK over and lets go (removing it);
    // F3 links a new LOCK and stops before its flock; F1 goes on, flocks F3's file and holds.
    const f1 = opener(tmp, dir, 'flock', afterLinkingLock('f1'));
    await atBarrier(tmp, 'f1');
    const f2 = opener(tmp, dir, 'flock');
    await settledOpen(f2);
    expect(f2.lines).toEqual(['held']);
    f2.child.stdin!.write('\n');
    await f2.until((l) => l.includes('closed'));
    const f3 = opener(tmp, dir, 'flock', afterLinkingLock('f3'));
    await atBarrier(tmp, 'f3');
    go(tmp, 'f1');
    await settledOpen(f1);
    expect(f1.lines).toEqual(['held']);
    go(tmp, 'f3');
    await settledOpen(f3);
    expect(f3.lines).toEqual(['refused ERR_LOCKED']);
    await f3.kill();
    // F1 holds the store, so a pid-lock process must be refused; it is not when LOCK names F3.
    const lockText = readFileSync(join(dir, 'LOCK'), 'utf8');
    const p = opener(tmp, dir, 'pidfile');
    await settledOpen(p);
    expect(p.lines).toEqual(['refused ERR_LOCKED']);
    expect(lockText).toMatch(new RegExp(`^${f1.child.pid} flock start=[ts]\\d+\\n$`));
  });

  test.each(['flock', 'pidfile'] as const)('aLeftoverEmptyTmpFileOfOurPidNeverBecomesAnEmptyLock (%s)', async (kind) => {
    const { tmp, dir } = fresh();
    // A predecessor with the same pid (a restarted container) killed between creating its
    // LOCK.tmp-<pid> and writing it, or a power loss before its fsync, leaves it empty.
    const atFirstLockCall: Pause[] = ['readFileSync', 'openSync'].map((fn) => ({ fn, match: '/LOCK', when: 'before', name: 'a' }));
    const a = opener(tmp, dir, kind, atFirstLockCall);
    await atBarrier(tmp, 'a');
    writeFileSync(join(dir, `LOCK.tmp-${a.child.pid}`), '');
    go(tmp, 'a');
    await settledOpen(a);
    expect(a.lines).toEqual(['held']);
    const b = opener(tmp, dir, 'pidfile');
    await settledOpen(b);
    expect(b.lines).toEqual(['refused ERR_LOCKED']);
  });
});

describe('tidying after the lock is taken', () => {
  test('aDeadOpenersFileThatCannotBeRemovedNeitherFailsTheOpenNorLeaksTheLock', async () => {
    const { LogStore } = await import('../../src/stores/log/log-store.js');
    const tmp = mkdtempSync(join(tmpdir(), 'pq-tidy-'));
    try {
      const dir = join(tmp, 'store');
      const first = await LogStore.open(dir);
      await first.close();
      // A dead opener's tmp name that rmSync cannot remove (a non-empty directory).
      mkdirSync(join(dir, 'LOCK.tmp-999999', 'x'), { recursive: true });
      const store = await LogStore.open(dir);
      await store.close();
      const again = await LogStore.open(dir);
      await again.close();
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });
});
