/**
 * `pq pop|compact|dlq --wait MS`: several pq runs at once (cron, hooks, shell loops) take turns
 * instead of failing with ERR_LOCKED, and `pq push` takes no lock at all. The built binary in
 * spawned processes, on a real directory.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { distUrl, runModule } from '../support/child-process.js';
import { pushStored } from '../support/pq-cli.js';

const root = resolve(import.meta.dirname, '../..');
const bin = join(root, 'dist', 'cli', 'pq.js');

let dir: string;
let work: string;
beforeEach(() => {
  work = mkdtempSync(join(tmpdir(), 'pq-cli-wait-'));
  dir = join(work, 'queue');
});
afterEach(() => rmSync(work, { recursive: true, force: true }));

const env = { ...process.env, NO_COLOR: '1' };

function pq(args: string[]): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [bin, ...args], { encoding: 'utf8', env });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** pq run in the background; resolves with its exit status and output. */
function pqLater(
  args: string[],
  extraEnv: Record<string, string> = {},
): { done: Promise<{ code: number | null; stdout: string; stderr: string }>; exited: () => boolean } {
  const child = spawn(process.execPath, [bin, ...args], { env: { ...env, ...extraEnv }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  let exited = false;
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const done = new Promise<{ code: number | null; stdout: string; stderr: string }>((res) =>
    child.once('close', (code) => {
      exited = true;
      res({ code, stdout, stderr });
    }),
  );
  return { done, exited: () => exited };
}

/** A process that holds the store until a line arrives on its stdin, then closes it and exits. */
function holdStore() {
  return runModule(
    work,
    'holder.mjs',
    `import { LogStore } from ${JSON.stringify(distUrl('index.js'))};
const store = await LogStore.open(process.argv[2]);
console.log('held');
process.stdin.once('data', async () => { await store.close(); process.exit(0); });
`,
    [dir],
  );
}

describe('pq --wait', () => {
  it('aPushBesideAHolderIsSpooledAtOnceWhileAPopWaitsForTheHolder', async () => {
    pushStored(dir, ['--create', 'first']);
    const holder = holdStore();
    try {
      await holder.until((lines) => lines.includes('held'));
      // A push takes no lock: with nobody serving the queue it is spooled, and pq exits at once.
      expect(pq(['push', dir, 'second', '--wait', '60000'])).toMatchObject({ code: 0, stdout: expect.stringMatching(/^spooled 1 item/) });
      const pop = pqLater(['pop', dir, '--count', '5', '--wait', '60000', '--format', 'text']);
      // The pop cannot finish while the store is held; it is still waiting once pq refused
      // without --wait (a spawned pq is far slower than one poll).
      const refused = pq(['pop', dir]);
      expect(refused.code).toBe(1);
      expect(refused.stderr).toMatch(new RegExp(`^pq: ERR_LOCKED: .*pid ${holder.child.pid}\\b`));
      expect(pop.exited()).toBe(false);
      holder.child.stdin!.write('go\n');
      // Its open took the spooled push in.
      expect(await pop.done).toMatchObject({ code: 0, stdout: 'first\nsecond\n' });
    } finally {
      await holder.kill();
    }
  });

  it('aWaitThatRunsOutIsErrLockedNamingTheHolder', async () => {
    pushStored(dir, ['--create', 'x']);
    const holder = holdStore();
    try {
      await holder.until((lines) => lines.includes('held'));
      for (const args of [
        ['pop', dir],
        ['compact', dir],
        ['dlq', 'redrive', dir],
        ['dlq', 'purge', dir, '--yes'],
      ]) {
        const r = pq([...args, '--wait', '30']);
        expect(r.code, args.join(' ')).toBe(1);
        expect(r.stderr, args.join(' ')).toMatch(
          new RegExp(`^pq: ERR_LOCKED: .*pid ${holder.child.pid}\\b.*gave up after waiting \\d+ ms`),
        );
      }
      const json = pq(['pop', dir, '--wait', '30', '--json']);
      expect(JSON.parse(json.stderr)).toMatchObject({ code: 'ERR_LOCKED', pid: holder.child.pid });
    } finally {
      await holder.kill();
    }
  });

  // Under both locks. Each opener's own LOCK.tmp-<pid> used to be deleted as a stray by the
  // recovery of whichever opener got the lock, failing an open now and then (ENOENT).
  // Each pop closes while the pass of its open may still be ingesting the other pops' files: a
  // push the closing queue refused must leave its file for the next pop, whole
  // (test/stores/log/spool-ingest.test.ts holds that case alone).
  it.each(['flock', 'pidfile'])('popsStartedTogetherTakeTurnsAndPushesStartedTogetherAllLand (%s lock)', async (kind) => {
    const names = Array.from({ length: 4 }, (_, i) => `run-${i}`);
    // Pushes take no lock: started together, each spools a file of its own.
    const pushes = await Promise.all(names.map((name) => pqLater(['push', dir, '--create', name], { PERSISTENT_QUEUE_LOCK: kind }).done));
    for (const r of pushes) expect(r).toMatchObject({ code: 0, stderr: '', stdout: expect.stringMatching(/^spooled 1 item/) });
    // Pops take the lock one after the other; each takes one item, a different one.
    const pops = await Promise.all(
      names.map(() => pqLater(['pop', dir, '--wait', '60000', '--format', 'text'], { PERSISTENT_QUEUE_LOCK: kind }).done),
    );
    for (const r of pops) expect(r).toMatchObject({ code: 0, stderr: '' });
    expect(pops.map((r) => r.stdout.trim()).sort()).toEqual(names);
    expect(pq(['stats', dir, '--json']).stdout).toMatch(/"unacked": 0,/);
    expect(readdirSync(dir).filter((n) => n.startsWith('LOCK'))).toEqual([]);
  });

  it('aBadWaitIsAUsageErrorThatTouchesNothing', () => {
    for (const [cmd, value] of [
      ['push', '-1'],
      ['pop', 'soon'],
      ['compact', '1.5'],
    ] as const) {
      const r = pq([cmd, dir, '--wait', value]);
      expect(r.code).toBe(2);
      expect(r.stderr).toBe(`pq: --wait must be an integer >= 0, got '${value}' (see pq ${cmd} --help)\n`);
    }
    expect(pq(['stats', dir, '--wait', '5'])).toMatchObject({
      code: 2,
      stderr: "pq: unknown option --wait for 'stats' (see pq stats --help)\n",
    });
    expect(spawnSync('test', ['-e', dir]).status).toBe(1); // nothing was created
  });
});
