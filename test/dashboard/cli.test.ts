/**
 * `pq ui` as a command: what it prints, how it refuses a path or a port, that it stops on SIGINT,
 * that it writes nothing to a store nobody serves, and that an owner starting while it runs is
 * found. The built binary in spawned processes; its API asked over HTTP.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, expect, test } from 'vitest';
import { type Child, WORKER, runModule, startUi } from '../../scripts/dashboard-fixture.mjs';
import { bin, pq, pushStored } from '../support/pq-cli.js';

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function work(): string {
  const d = mkdtempSync(join(tmpdir(), 'pq-ui-cli-'));
  cleanups.push(() => rmSync(d, { recursive: true, force: true }));
  return d;
}

function child<T extends Child>(c: T): T {
  cleanups.push(() => c.stop());
  return c;
}

async function get(base: string, token: string, path: string): Promise<any> {
  const r = await fetch(`${base}/api/${path}`, { headers: { 'x-pq-token': token } });
  return r.json();
}

/** Every file of `dir` with its size and modification time. */
function snapshot(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .sort()
    .map((name) => {
      const st = statSync(join(dir, name));
      return `${name} ${st.isDirectory() ? 'dir' : st.size} ${st.mtimeMs}`;
    });
}

test('pqUiRefusesAPathThatHoldsNoStoreAndABadPort', () => {
  const w = work();
  const missing = pq(['ui', join(w, 'nope')]);
  expect(missing.code).toBe(1);
  expect(missing.stderr).toMatch(/^pq: ERR_NOT_FOUND: No store at /);
  expect(readdirSync(w)).toEqual([]);
  const port = pq(['ui', w, '--port', '70000', '--json']);
  expect(port.code).toBe(2);
  expect(JSON.parse(port.stderr)).toMatchObject({ code: 'ERR_USAGE', help: 'pq ui --help' });
  expect(pq(['ui']).code).toBe(2);
});

test('pqUiReportsAPortInUseAsErrListen', async () => {
  const w = work();
  const dir = join(w, 'q');
  pushStored(dir, ['--create', 'a']);
  const taken = createServer();
  await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
  cleanups.push(() => new Promise<void>((resolve) => taken.close(() => resolve())));
  const port = (taken.address() as { port: number }).port;
  const r = pq(['ui', dir, '--port', String(port), '--json']);
  expect(r.code).toBe(1);
  expect(JSON.parse(r.stderr)).toMatchObject({ code: 'ERR_LISTEN' });
});

test('pqUiPrintsItsUrlAsJsonAndStopsOnSigint', async () => {
  const w = work();
  const dir = join(w, 'q');
  pushStored(dir, ['--create', 'a']);
  const ui = spawn(process.execPath, [bin, 'ui', dir, '--json'], { stdio: ['ignore', 'pipe', 'pipe'] });
  const line = await new Promise<string>((resolve) => {
    let out = '';
    ui.stdout.on('data', (c: Buffer) => {
      out += c.toString();
      if (out.includes('\n')) resolve(out.split('\n')[0]!);
    });
  });
  const printed = JSON.parse(line) as { url: string; port: number; allowActions: boolean };
  expect(printed.allowActions).toBe(false);
  expect(printed.url).toMatch(new RegExp(`^http://127\\.0\\.0\\.1:${printed.port}/\\?token=[A-Za-z0-9_-]{32}$`));
  const exited = new Promise<number | null>((resolve) => ui.once('exit', (code) => resolve(code)));
  ui.kill('SIGINT');
  expect(await exited).toBe(0);
});

test('aDashboardOfAStoreNobodyServesWritesNothingAndFindsAnOwnerThatStarts', async () => {
  const w = work();
  const dir = join(w, 'q');
  pushStored(dir, ['--create', 'a', 'b', 'c']);
  const before = snapshot(dir);
  const ui = await startUi(dir, ['--allow-actions']);
  cleanups.push(() => ui.child.stop());
  expect(await get(ui.base, ui.token, 'overview')).toMatchObject({ view: 'read-only', figures: { unacked: 3 } });
  expect((await get(ui.base, ui.token, 'items')).items.map((i: { seq: number }) => i.seq)).toEqual([1, 2, 3]);
  expect(await get(ui.base, ui.token, 'health')).toMatchObject({ view: 'read-only', count: 3 });
  expect(await get(ui.base, ui.token, 'dead-letters')).toMatchObject({ view: 'read-only', letters: [] });
  // Read without a lock and without a write: not a byte, name or time changed.
  expect(snapshot(dir)).toEqual(before);
  // The dashboard holds no lock: an owner starts beside it, and the dashboard goes through it.
  const owner = child(runModule(w, 'worker.mjs', WORKER, [dir, '0']));
  await owner.line((l) => l === 'ready');
  const live = await (async () => {
    for (let i = 0; i < 100; i++) {
      const o = await get(ui.base, ui.token, 'overview');
      if (o.view === 'live') return o;
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error('the dashboard never found the owner');
  })();
  expect(live.pid).toBe(owner.child.pid);
  // The owner goes away: the dashboard reads the files again.
  await owner.stop('SIGKILL');
  for (let i = 0; i < 100; i++) {
    if ((await get(ui.base, ui.token, 'overview')).view === 'read-only') return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error('the dashboard never noticed the owner was gone');
});

test('aSpoolOnlyDirectoryShowsItsBacklog', async () => {
  const w = work();
  const dir = join(w, 'q');
  expect(pq(['push', dir, '--create', 'a', 'b']).code).toBe(0);
  const ui = await startUi(dir);
  cleanups.push(() => ui.child.stop());
  expect(await get(ui.base, ui.token, 'overview')).toMatchObject({
    view: 'read-only',
    spoolOnly: true,
    figures: { spoolPending: 2, spoolFiles: 1 },
  });
  expect(await get(ui.base, ui.token, 'items')).toMatchObject({ items: [], end: true });
});
