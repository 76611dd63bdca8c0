/**
 * `pq ui` in a real browser: headless Chromium (Debian's, driven by playwright-core) opens the URL
 * the built `pq ui` prints, beside real processes: a worker daemon that owns the queue and a
 * producer that pushes through `connect()`. Each claim is checked on what the page shows and on the
 * queue itself.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BrowserContext, Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { LogStore } from '../../src/stores/log/log-store.js';
import { Builder } from '../../src/core/builder.js';
import {
  type Child,
  type Ui,
  GROUP_WORKER,
  PRODUCER,
  WORKER,
  chromiumMissing,
  launchBrowser,
  runModule,
  startUi,
} from '../../scripts/dashboard-fixture.mjs';

// The callbacks given to page.evaluate run in the page; this file is compiled without the DOM's types.
declare const document: any;
declare const window: any;
declare const location: any;

type ChildLike = Child;

const missing: string | null = chromiumMissing();
const SCRIPT = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">';
/** A group name of markup, within the 64 bytes a group may have. */
const SCRIPT_GROUP = '<script>window.__pwned=3</script>';

/** A time as the page writes it (dom.js, `fmtTime`). */
const pageTime = (ms: number): string =>
  new Date(ms)
    .toISOString()
    .replace('T', ' ')
    .replace(/\.\d+Z$/, 'Z');

let browser: { context: BrowserContext; close(): Promise<void> } | null = null;
const cleanups: (() => Promise<void> | void)[] = [];

beforeAll(async () => {
  if (missing === null) browser = await launchBrowser();
});
afterAll(async () => {
  await browser?.close();
});
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function work(): string {
  const d = mkdtempSync(join(tmpdir(), 'pq-ui-browser-'));
  cleanups.push(() => rmSync(d, { recursive: true, force: true }));
  return d;
}

function child<T extends ChildLike>(c: T): T {
  cleanups.push(() => c.stop());
  return c;
}

async function ui(dir: string, args: string[] = []): Promise<Ui> {
  const u = await startUi(dir, args);
  child(u.child);
  return u;
}

async function worker(w: string, dir: string): Promise<ChildLike> {
  const c = child(runModule(w, 'worker.mjs', WORKER, [dir, '0']));
  await c.line((l) => l === 'ready');
  return c;
}

async function newPage(): Promise<Page> {
  const page = await browser!.context.newPage();
  cleanups.push(() => page.close());
  // A script the page did not mean to run would set this; so would an error it did not catch.
  page.on('pageerror', (e) => {
    throw new Error(`the page threw: ${e.message}`);
  });
  return page;
}

const number = (text: string | null): number => Number((text ?? '').replace(/[^\d]/g, ''));

/** The dashboard's JSON API, asked from this process with the token. */
async function api(u: Ui, path: string): Promise<any> {
  const r = await fetch(`${u.base}/api/${path}`, { headers: { 'x-pq-token': u.token } });
  return r.json();
}

async function until<T>(what: string, probe: () => Promise<T | null | undefined | false>): Promise<T> {
  for (let i = 0; i < 400; i++) {
    const v = await probe();
    if (v !== null && v !== undefined && v !== false) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`gave up waiting for ${what}`);
}

describe.skipIf(missing !== null)(`pq ui in Chromium${missing === null ? '' : ` (skipped: ${missing})`}`, () => {
  test('theOverviewsCountsMoveWhileAProducerProcessPushes', async () => {
    const w = work();
    const dir = join(w, 'q');
    await worker(w, dir);
    const u = await ui(dir);
    const page = await newPage();
    await page.goto(u.url);
    await page.waitForSelector('[data-view=live]');
    expect(await page.textContent('#view')).toMatch(/^live: process \d+$/);
    expect(await page.textContent('[data-figure=pushed]')).toBe('0');
    const producer = child(runModule(w, 'producer.mjs', PRODUCER, [dir, 'job', '20']));
    await producer.line((l) => l === 'producing endpoint');
    // The page polls: the count of pushes goes up, and up again, without a reload.
    await page.waitForFunction(() => Number(document.querySelector('[data-figure=pushed]')?.textContent?.replace(/,/g, '')) >= 5);
    const seen = number(await page.textContent('[data-figure=pushed]'));
    await page.waitForFunction((n) => Number(document.querySelector('[data-figure=pushed]')?.textContent?.replace(/,/g, '')) > n + 5, seen);
    await page.waitForFunction(() => Number(document.querySelector('[data-figure=acked]')?.textContent?.replace(/,/g, '')) >= 5);
    // Both charts draw lines: rates from the sampled counters, latencies from the owner's timings.
    await page.waitForSelector('svg[data-chart=throughput] path.line');
    await page.waitForSelector('svg[data-chart=latency] path.line');
  });

  test('aDeadLetterRedrivenFromThePageIsDeliveredAndOnePurgedIsGone', async () => {
    const w = work();
    const dir = join(w, 'q');
    const owner = await worker(w, dir);
    const u = await ui(dir, ['--allow-actions']);
    owner.send('push flaky-a');
    owner.send('push bad-b');
    const flaky = number(await owner.line((l) => l.startsWith('pushed ')));
    const bad = flaky + 1;
    await until('two dead letters', async () => (await api(u, 'dead-letters')).letters.length === 2);
    const page = await newPage();
    await page.goto(`${u.url}#dead-letters`);
    await page.waitForSelector(`tr[data-seq="${flaky}"]`);
    expect(await page.textContent(`tr[data-seq="${flaky}"] [data-reason]`)).toBe('flaky: first attempt of flaky-a');

    // Redrive one: asked to confirm, then done through the owner, whose worker now handles it.
    await page.click(`tr[data-seq="${flaky}"] button[data-action=redrive]`);
    await page.waitForSelector('#confirm[open]');
    expect(await page.textContent('#confirm-text')).toContain(`Redrive dead letter seq ${flaky}?`);
    await page.click('#confirm-ok');
    await page.waitForFunction(
      (s) =>
        /Redrove 1 dead letter\(s\): seq \d+ → seq \d+/.test(document.getElementById('status')?.textContent ?? '') &&
        !document.querySelector(`tr[data-seq="${s}"]`),
      flaky,
    );
    await owner.line((l) => l === 'did flaky-a');

    // Purge the other: cancelled first (nothing happens), then confirmed.
    await page.click(`tr[data-seq="${bad}"] button[data-action=purge]`);
    await page.waitForSelector('#confirm[open]');
    await page.click('#confirm-cancel');
    await page.waitForFunction(() => !document.getElementById('confirm').open);
    expect((await api(u, 'dead-letters')).letters.map((d: { seq: number }) => d.seq)).toEqual([bad]);
    await page.click(`tr[data-seq="${bad}"] button[data-action=purge]`);
    expect(await page.textContent('#confirm-text')).toContain('cannot be undone');
    await page.click('#confirm-ok');
    await page.waitForFunction(() => document.querySelector('[data-info=dead-letters]')?.textContent === 'No dead letters.');
    expect(await page.textContent('#status')).toBe('Purged 1 dead letter(s).');
    expect((await api(u, 'dead-letters')).letters).toEqual([]);
  });

  test('aPayloadAndAReasonHoldingScriptAreShownAsText', async () => {
    const w = work();
    const dir = join(w, 'q');
    const owner = await worker(w, dir);
    const u = await ui(dir);
    const payload = `bad ${SCRIPT}`;
    owner.send(`push ${payload}`);
    const seq = number(await owner.line((l) => l.startsWith('pushed ')));
    await until('the dead letter', async () => (await api(u, 'dead-letters')).letters.length === 1);
    const page = await newPage();
    await page.goto(`${u.url}#dead-letters`);
    await page.waitForSelector(`tr[data-seq="${seq}"]`);
    expect(await page.textContent(`tr[data-seq="${seq}"] [data-reason]`)).toBe(`bad input: ${payload}`);
    expect(await page.textContent(`tr[data-seq="${seq}"] .preview`)).toBe(payload);
    await page.click(`tr[data-seq="${seq}"]`);
    await page.waitForSelector('#detail[open] pre[data-payload]');
    expect(await page.textContent('pre[data-payload]')).toBe(payload);
    await page.click('#detail button[data-view=hex]');
    expect(await page.textContent('pre[data-payload]')).toMatch(/^00000000 {2}62 61 64 20 3c 73 63 72/);
    // Nothing of it became markup: no script ran, no element was made of it.
    expect(await page.evaluate(() => window.__pwned)).toBeUndefined();
    expect(await page.evaluate(() => document.querySelectorAll('main script, main img, dialog script, dialog img').length)).toBe(0);
  });

  test('pagingThrough100000ItemsOfAStoreNobodyServes', async () => {
    const w = work();
    const dir = join(w, 'q');
    const [tx] = await new Builder(await LogStore.open(dir)).durability('none').open();
    const total = 100_000;
    for (let i = 0; i < total; i += 10_000) {
      await tx.pushMany(Array.from({ length: 10_000 }, (_, j) => JSON.stringify({ n: i + j + 1 })));
    }
    // Every 10,000th item again, with a priority: the filter's needles.
    await tx.pushMany(
      Array.from({ length: 10 }, (_, j) => JSON.stringify({ n: (j + 1) * 10_000, again: true })),
      { priority: 5 },
    );
    await tx.push(SCRIPT);
    await tx.close();
    const u = await ui(dir);
    const page = await newPage();
    await page.goto(`${u.url}#items`);
    await page.waitForSelector('[data-table=items] tbody tr');
    expect(await page.textContent('#view')).toBe('read-only view');
    const firstSeqs = async (): Promise<number[]> =>
      page.$$eval('[data-table=items] tbody tr', (rows) => rows.map((r) => Number(r.getAttribute('data-seq'))));
    expect(await firstSeqs()).toEqual(Array.from({ length: 50 }, (_, i) => i + 1));
    expect(await page.textContent('[data-info=items]')).toContain('of 100,011 unacked');
    for (let n = 1; n <= 3; n++) {
      await page.click('button[data-action=next]');
      await page.waitForFunction(
        (first) => document.querySelector('[data-table=items] tbody tr')?.getAttribute('data-seq') === String(first),
        n * 50 + 1,
      );
    }
    await page.click('button[data-action=previous]');
    await page.waitForFunction(() => document.querySelector('[data-table=items] tbody tr')?.getAttribute('data-seq') === '101');
    // Straight to the end: from a seq, then the last page.
    await page.fill('input[name=from]', '99990');
    await page.click('button[data-action=go]');
    await page.waitForFunction(() => document.querySelector('[data-table=items] tbody tr')?.getAttribute('data-seq') === '99990');
    expect(await firstSeqs()).toEqual(Array.from({ length: 22 }, (_, i) => 99_990 + i));
    expect(await page.isDisabled('button[data-action=next]')).toBe(true);
    // The last item's payload is markup, shown as text.
    expect(await page.textContent('tr[data-seq="100011"] .preview')).toBe(SCRIPT);
    await page.click('button[data-action=last]');
    await page.waitForFunction(
      () => document.querySelector('[data-table=items] tbody tr:last-child')?.getAttribute('data-seq') === '100011',
    );

    // A filter that matches few: each page looks through a bounded stretch and says how far.
    await page.fill('input[name=priority]', '5');
    await page.click('button[data-action=filter]');
    await page.waitForFunction(() => /Looked through seq|Seq 100,001/.test(document.querySelector('[data-info=items]')?.textContent ?? ''));
    const found: number[] = [];
    for (let pages = 0; pages < 10; pages++) {
      found.push(...(await firstSeqs()));
      if (await page.isDisabled('button[data-action=next]')) break;
      const before = await page.textContent('[data-info=items]');
      await page.click('button[data-action=next]');
      await page.waitForFunction((b) => document.querySelector('[data-info=items]')?.textContent !== b, before);
    }
    expect(found).toEqual(Array.from({ length: 10 }, (_, i) => 100_001 + i));

    // An item's payload as JSON.
    await page.click('tr[data-seq="100001"]');
    await page.waitForSelector('#detail[open] pre[data-payload]');
    expect(JSON.parse((await page.textContent('pre[data-payload]'))!)).toEqual({ n: 10_000, again: true });
    await page.click('#detail-close');

    // The overview and the health page read the same files; verify runs on demand.
    await page.goto(`${u.url}#overview`);
    await page.waitForSelector('[data-banner=read-only]');
    expect(await page.textContent('[data-figure=unacked]')).toBe('100,011');
    expect(await page.$$eval('[data-table=by-priority] tbody tr', (rows) => rows.map((r) => r.textContent))).toEqual([
      expect.stringMatching(/^510/),
      expect.stringMatching(/^0100,001/),
    ]);
    await page.click('nav a[data-page=health]');
    await page.click('button[data-action=verify]');
    await page.waitForSelector('[data-verify-verdict]', { timeout: 30_000 });
    expect(await page.textContent('[data-verify-verdict]')).toBe('Sound');
    expect(await page.textContent('[data-verify-state=done]')).toContain('100,011 record(s)');
  });

  test('aReadOnlyDashboardOffersNoActionAndRefusesAForgedOne', async () => {
    const w = work();
    const dir = join(w, 'q');
    const owner = await worker(w, dir);
    const u = await ui(dir);
    owner.send('push bad-x');
    await until('the dead letter', async () => (await api(u, 'dead-letters')).letters.length === 1);
    const page = await newPage();
    await page.goto(`${u.url}#dead-letters`);
    await page.waitForSelector('[data-table=dead-letters] tbody tr');
    expect(await page.textContent('#mode')).toBe('read-only dashboard');
    expect(await page.textContent('[data-note=actions]')).toContain('--allow-actions');
    expect(await page.$$('button[data-action=redrive], button[data-action=purge], button[data-action=purge-all]')).toEqual([]);
    // A request made by hand from the page itself, with its token and CSRF header, is refused too.
    const forged = await page.evaluate(async () => {
      const token = new URLSearchParams(location.search).get('token')!;
      const s = (await (await fetch('./api/session', { headers: { 'x-pq-token': token } })).json()) as { csrf: string };
      const r = await fetch('./api/dead-letters/purge', {
        method: 'POST',
        headers: { 'x-pq-token': token, 'x-pq-csrf': s.csrf, 'content-type': 'application/json' },
        body: '{"all":true}',
      });
      return [r.status, ((await r.json()) as { error: { code: string } }).error.code];
    });
    expect(forged).toEqual([403, 'ERR_READ_ONLY']);
    expect((await api(u, 'dead-letters')).letters).toHaveLength(1);
  });

  test('theGroupsAndSchedulesPagesShowWhatTheOwnerRunsAndWhatTheFilesKeep', async () => {
    const w = work();
    const dir = join(w, 'q');
    // A store with a schedule, declared before the owner opens it.
    const declaredAt = Date.now();
    const [tx] = await new Builder(await LogStore.open(dir)).open();
    await tx.schedule('nightly-report', { everyMs: 86_400_000 }, 'build the report', { catchUp: 'all', maxCatchUp: 3 });
    await tx.close();
    const owner = child(runModule(w, 'group-worker.mjs', GROUP_WORKER, [dir]));
    await owner.line((l) => l === 'ready');
    const pushes: [string, string][] = [
      ['acme', 'acme-1'],
      ['acme', 'acme-2'],
      ['acme', 'acme-3'],
      ['globex', 'globex-1'],
      ['globex', 'globex-2'],
      [SCRIPT_GROUP, 'script-1'],
    ];
    const pushed = (): number => owner.lines.filter((l) => l.startsWith('pushed ')).length;
    for (const [i, [group, payload]] of pushes.entries()) {
      owner.send(`push ${JSON.stringify({ group, payload })}`);
      await owner.line(() => pushed() > i);
    }
    // One item of each group in flight (groupConcurrency 1), the others waiting aside.
    for (const first of ['acme-1', 'globex-1', 'script-1']) await owner.line((l) => l === `handling ${first}`);
    const u = await ui(dir);
    const page = await newPage();

    await page.goto(`${u.url}#groups`);
    await page.waitForSelector('[data-table=groups] tbody tr');
    expect(await page.textContent('#view')).toMatch(/^live: process \d+$/);
    const rows = async (): Promise<string[][]> =>
      page.$$eval('[data-table=groups] tbody tr', (trs) =>
        trs.map((tr) => [...tr.querySelectorAll('td')].slice(0, 4).map((td) => td.textContent ?? '')),
      );
    expect(await rows()).toEqual([
      ['acme', '1', '2', '0'],
      ['globex', '1', '1', '0'],
      [SCRIPT_GROUP, '1', '0', '0'],
    ]);
    expect(await page.textContent('[data-figure=groups]')).toBe('3');
    expect(await page.textContent('[data-figure=groupLimited]')).toBe('3');
    // The group named with markup is text: no script ran, no element was made of it.
    expect(await page.evaluate(() => window.__pwned)).toBeUndefined();
    expect(await page.evaluate(() => document.querySelectorAll('main script, main img').length)).toBe(0);

    // From a group to its items: the filter returns that group's items only.
    await page.click('[data-table=groups] tbody tr:first-child button[data-action=items]');
    await page.waitForFunction(() => location.hash === '#items' && document.querySelectorAll('[data-table=items] tbody tr').length > 0);
    expect(await page.inputValue('input[name=group]')).toBe('acme');
    const listed = async (): Promise<string[][]> =>
      page.$$eval('[data-table=items] tbody tr', (trs) =>
        trs.map((tr) => [tr.querySelector('.preview')?.textContent ?? '', tr.children[5]?.textContent ?? '']),
      );
    expect(await listed()).toEqual([
      ['acme-1', 'acme'],
      ['acme-2', 'acme'],
      ['acme-3', 'acme'],
    ]);
    await page.fill('input[name=group]', SCRIPT_GROUP);
    await page.click('button[data-action=filter]');
    await page.waitForFunction(() => document.querySelector('[data-table=items] tbody tr .preview')?.textContent === 'script-1');
    expect(await listed()).toEqual([['script-1', SCRIPT_GROUP]]);
    expect((await api(u, `items?group=globex`)).items.map((i: { group: string }) => i.group)).toEqual(['globex', 'globex']);

    // The schedule, as the owner runs it: its next fire is the next slot after its declaration.
    await page.goto(`${u.url}#schedules`);
    await page.waitForSelector('tr[data-schedule=nightly-report]');
    const live = (await api(u, 'schedules')).page;
    expect(live.total).toBe(1);
    const nextAt: number = live.schedules[0].nextAt;
    expect(nextAt % 86_400_000).toBe(0);
    expect(nextAt).toBeGreaterThan(declaredAt);
    const cells = await page.$$eval('tr[data-schedule=nightly-report] td', (tds) => tds.map((td) => td.textContent));
    expect(cells).toEqual([
      'nightly-report',
      'every 1 d',
      pageTime(nextAt),
      pageTime(live.schedules[0].firedThrough),
      'all (at most 3)',
      '0',
      '—',
    ]);

    // Without the owner: the schedule as the store keeps it, the groups page says what needs an
    // owner, and the items filter by group reads the files.
    await owner.stop();
    await until('the read-only view', async () => (await api(u, 'overview')).view === 'read-only');
    await page.goto(`${u.url}#groups`);
    await page.waitForSelector('[data-banner=read-only]');
    expect(await page.textContent('#view')).toBe('read-only view');
    expect(await page.textContent('[data-banner=read-only]')).toContain('In-flight figures need an owner');
    await page.goto(`${u.url}#schedules`);
    await page.waitForSelector('tr[data-schedule=nightly-report]');
    expect(await page.textContent('tr[data-schedule=nightly-report] [data-next]')).toBe(pageTime(nextAt));
    expect(await page.textContent('main')).toContain('As the store holds them');
    await page.goto(`${u.url}#groups`);
    await page.waitForSelector('[data-form=group-items]');
    await page.fill('[data-form=group-items] input[name=group]', 'globex');
    await page.click('button[data-action=group-items]');
    await page.waitForFunction(() => document.querySelectorAll('[data-table=items] tbody tr').length === 2);
    expect(await listed()).toEqual([
      ['globex-1', 'globex'],
      ['globex-2', 'globex'],
    ]);
  });

  test('thePageWithoutTheTokenIsRefused', async () => {
    const w = work();
    const dir = join(w, 'q');
    await worker(w, dir);
    const u = await ui(dir);
    const page = await newPage();
    const response = await page.goto(`${u.base}/#overview`);
    expect(response!.status()).toBe(401);
    expect(await page.textContent('body')).toContain('token');
    expect(await page.evaluate(() => document.scripts.length)).toBe(0);
    const wrong = await page.goto(`${u.base}/?token=${'A'.repeat(u.token.length)}`);
    expect(wrong!.status()).toBe(401);
  });
});
