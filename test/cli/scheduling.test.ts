/** `pq push --priority/--delay/--not-before`, and what `pq dump`, `pq pop` and `pq stats` show of them. */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { closeQueue, pushStored, serveQueue } from '../support/pq-cli.js';

const root = resolve(import.meta.dirname, '../..');
const bin = join(root, 'dist', 'cli', 'pq.js');

let work: string;
let dir: string;
beforeEach(() => {
  work = mkdtempSync(join(tmpdir(), 'pq-cli-sched-'));
  dir = join(work, 'queue');
});
afterEach(() => rmSync(work, { recursive: true, force: true }));

function pq(args: string[]) {
  const r = spawnSync(process.execPath, [bin, ...args], { encoding: 'utf8', env: { ...process.env, NO_COLOR: '1' } });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

const HOUR_MS = 3_600_000;

describe('pq and scheduled items', () => {
  it('pushWithPriorityDelayAndNotBeforeShowsInDumpPopAndStats', async () => {
    // Through the process that has the queue open: the options cross its endpoint with each push.
    const owner = await serveQueue(work, dir);
    try {
      expect(pq(['push', dir, 'plain']).stdout).toBe('1\n');
      expect(pq(['push', dir, '--priority', '5', 'urgent']).stdout).toBe('2\n');
      expect(pq(['push', dir, '--delay', String(HOUR_MS), 'later']).stdout).toBe('3\n');
      expect(pq(['push', dir, '--not-before', '2001-01-01T00:00:00Z', 'past']).stdout).toBe('4\n');
      expect(pq(['push', dir, '--priority', '-3', '--not-before', '4102444800000', 'far']).stdout).toBe('5\n');
      // Its live figures count the one not yet due.
      expect(JSON.parse(pq(['stats', dir, '--json']).stdout)).toMatchObject({ view: 'live', unacked: 5, ready: 3, delayed: 2 });
    } finally {
      await closeQueue(owner);
    }

    const rows = pq(['dump', dir])
      .stdout.trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(rows.map((r) => [r.seq, r.text, r.priority])).toEqual([
      [1, 'plain', 0],
      [2, 'urgent', 5],
      [3, 'later', 0],
      [4, 'past', 0],
      [5, 'far', -3],
    ]);
    expect(rows[0].notBefore).toBeNull();
    // A time already past is no delay: stored as a plain item.
    expect(rows[3].notBefore).toBeNull();
    expect(rows[4].notBefore).toBe('2100-01-01T00:00:00.000Z');
    const laterAt = Date.parse(rows[2].notBefore);
    expect(laterAt - Date.now()).toBeGreaterThan(HOUR_MS / 2);

    const stats = JSON.parse(pq(['stats', dir, '--json']).stdout);
    expect(stats).toMatchObject({ unacked: 5, delayed: 2, prioritized: 2, leased: null, nextDueAt: rows[2].notBefore });
    expect(pq(['stats', dir]).stdout).toMatch(/delayed\s+2 not yet due, the next at /);

    // Only what is due comes out, highest priority first.
    const popped = pq(['pop', dir, '--count', '10', '--format', 'jsonl'])
      .stdout.trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(popped.map((r) => r.text)).toEqual(['urgent', 'plain', 'past']);
    expect(JSON.parse(pq(['stats', dir, '--json']).stdout)).toMatchObject({ unacked: 2, delayed: 2, prioritized: 1 });
  });

  it('badSchedulingOptionsAreUsageErrorsThatCreateAndStoreNothing', () => {
    const cases: [string[], RegExp][] = [
      [['--priority', '200'], /--priority must be an integer from -128 to 127, got '200'/],
      [['--priority', 'x'], /--priority must be an integer from -128 to 127/],
      [['--priority', '1.5'], /--priority must be an integer/],
      [['--delay', '-1'], /--delay must be an integer >= 0/],
      [['--delay', '5', '--not-before', '2030-01-01'], /--delay and --not-before exclude each other/],
      [['--not-before', 'soon'], /--not-before must be an ISO 8601 time or ms since the epoch, got 'soon'/],
    ];
    for (const [options, message] of cases) {
      const r = pq(['push', dir, '--create', ...options, 'a']);
      expect(r.code, options.join(' ')).toBe(2);
      expect(r.stderr).toMatch(message);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(existsSync(dir), `${options.join(' ')} created nothing`).toBe(false);
    }
    pushStored(dir, ['--create', 'kept']);
    expect(pq(['push', dir, '--priority', '999', 'refused']).code).toBe(2);
    expect(pq(['dump', dir, '--format', 'text']).stdout).toBe('kept\n');
  });
});
