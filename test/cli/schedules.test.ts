/** `pq schedules`: the schedules a store keeps, with when each fires next, read without a lock. */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Builder, LogStore } from '../../src/index.js';
import { ManualClock } from '../../src/testing/index.js';

const root = resolve(import.meta.dirname, '../..');
const bin = join(root, 'dist', 'cli', 'pq.js');

let work: string;
let dir: string;
beforeEach(() => {
  work = mkdtempSync(join(tmpdir(), 'pq-cli-schedules-'));
  dir = join(work, 'queue');
});
afterEach(() => rmSync(work, { recursive: true, force: true }));

function pq(args: string[]) {
  const r = spawnSync(process.execPath, [bin, ...args], { encoding: 'utf8', env: { ...process.env, NO_COLOR: '1' } });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('pq schedules', () => {
  it('listsEachScheduleWithItsNextFireTimeAndSaysWhenASlotHasPassed', async () => {
    // Declared on a clock at the start of 2026: by now their next slots have passed.
    const clock = new ManualClock(Date.parse('2026-01-01T00:00:30Z'));
    const [tx] = await new Builder(await LogStore.open(dir)).clock(clock).open();
    await tx.schedule('nightly', { cron: '0 3 * * *', tz: 'Europe/Berlin' }, 'n', { catchUp: 'all', maxCatchUp: 100_000 });
    await tx.schedule('minutely', { everyMs: 60_000 }, 'm', { catchUp: 'none', group: 'ops' });
    await tx.close();
    const json = pq(['schedules', dir, '--json']);
    expect(json.code).toBe(0);
    const rows = json.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(rows.map((r) => r.name)).toEqual(['minutely', 'nightly']);
    // Under 'all' the first slot it will fire is the first passed one: 03:00 in Berlin (02:00Z).
    expect(rows[1]).toMatchObject({
      cron: '0 3 * * *',
      tz: 'Europe/Berlin',
      catchUp: 'all',
      nextAt: '2026-01-01T02:00:00.000Z',
      due: true,
      firedThrough: '2026-01-01T00:00:30.000Z',
    });
    // Under 'none' the passed slots are passed over: the next one is still to come.
    expect(rows[0]).toMatchObject({ everyMs: 60_000, catchUp: 'none', group: 'ops', due: false });
    expect(Date.parse(rows[0]!.nextAt as string)).toBeGreaterThan(Date.now() - 1000);
    const text = pq(['schedules', dir]);
    expect(text.stdout).toContain(
      '"nightly"  cron "0 3 * * *" Europe/Berlin  catch-up all  next 2026-01-01T02:00:00.000Z (passed: fires at the next open)',
    );
  });

  it('anEmptyStoreListsNothingAndAPathWithoutAStoreIsErrNotFound', async () => {
    await (await LogStore.open(dir)).close();
    expect(pq(['schedules', dir])).toMatchObject({ code: 0, stdout: '' });
    const missing = pq(['schedules', join(work, 'nothing')]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('ERR_NOT_FOUND');
  });
});
