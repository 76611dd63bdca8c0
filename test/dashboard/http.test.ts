/**
 * The dashboard's HTTP side, requests made by hand: the token, the Host check, the action checks
 * (POST, Origin, CSRF, JSON, bounded bodies), read-only mode, typed errors for every malformed
 * request, and that a refused request changes nothing. The owner is this process (a LogStore under
 * the queue, serving its endpoint); the dashboard reaches it through that endpoint as `pq ui` does.
 */
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { request as httpRequest, createServer, type IncomingHttpHeaders } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, test } from 'vitest';
import { dashboard, serveDashboard, type ServedDashboard } from '../../src/dashboard/index.js';
import { SCAN_ITEMS_MAX, listItems } from '../../src/dashboard/items.js';
import { PAGE_ASSETS } from '../../src/dashboard/page-assets.js';
import { LogStore, MIN_SEGMENT_BYTES } from '../../src/stores/log/log-store.js';
import { Builder, type Consumer, type Producer } from '../../src/core/builder.js';

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function freshDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'pq-ui-http-'));
  cleanups.push(() => rmSync(d, { recursive: true, force: true }));
  return join(d, 'q');
}

interface Owner {
  dir: string;
  tx: Producer;
  rx: Consumer;
  /** Seqs of the dead letters made at open. */
  dead: number[];
}

/** A queue owned by this process with `letters` dead letters (reasons hold markup). */
async function owner(letters = 2): Promise<Owner> {
  const dir = freshDir();
  const [tx, rx] = await new Builder(await LogStore.open(dir)).open();
  cleanups.push(() => tx.close());
  const seqs = await tx.pushMany(Array.from({ length: letters }, (_, i) => `<script>alert(${i})</script>`));
  for (let i = 0; i < letters; i++) await rx.tryReserve()!.deadLetter(`bad <b>${i}</b>`);
  return { dir, tx, rx, dead: seqs };
}

async function serve(dir: string, allowActions = true): Promise<ServedDashboard> {
  const served = await serveDashboard(dir, { allowActions });
  cleanups.push(() => served.close());
  return served;
}

interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  text: string;
  json: any;
}

interface Req {
  method?: string;
  path: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
  /** Send the body in chunks, without a content-length. */
  chunked?: boolean;
}

function ask(port: number, r: Req): Promise<Answer> {
  return new Promise((resolve, reject) => {
    // `host: ''` sends no Host header at all.
    const noHost = r.headers?.host === '';
    const headers = { host: `127.0.0.1:${port}`, ...r.headers };
    if (noHost) delete (headers as { host?: string }).host;
    const req = httpRequest({ host: '127.0.0.1', port, method: r.method ?? 'GET', path: r.path, headers, setHost: !noHost }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let json: unknown = null;
        try {
          json = JSON.parse(text);
        } catch {
          // not JSON
        }
        resolve({ status: res.statusCode!, headers: res.headers, text, json });
      });
    });
    req.on('error', reject);
    if (r.body !== undefined && r.chunked === true) {
      const body = Buffer.from(r.body);
      for (let at = 0; at < body.length; at += 8192) req.write(body.subarray(at, at + 8192));
      req.end();
    } else req.end(r.body);
  });
}

/** A valid action request of the page at `d`: POST, this origin, the CSRF header, JSON. */
async function actionHeaders(d: ServedDashboard): Promise<Record<string, string>> {
  const session = await ask(d.port, { path: `/api/session?token=${d.token}` });
  return {
    origin: `http://127.0.0.1:${d.port}`,
    'x-pq-token': d.token,
    'x-pq-csrf': session.json.csrf,
    'content-type': 'application/json',
  };
}

async function deadSeqs(rx: Consumer): Promise<number[]> {
  return (await rx.deadLetters.list({ limit: 100 })).map((d) => d.seq);
}

describe('who may ask', () => {
  test('aRequestWithoutTheTokenIsRefusedAndShowsNothing', async () => {
    const o = await owner();
    const d = await serve(o.dir);
    const wrong = 'x'.repeat(d.token.length);
    for (const path of [
      '/',
      '/api/overview',
      '/api/dead-letters',
      `/api/overview?token=${wrong}`,
      `/api/overview?token=${d.token}x`,
      '/api/overview?token=',
      '/app.css',
      '/js/app.js',
    ]) {
      const a = await ask(d.port, { path });
      expect(a.status, path).toBe(401);
      expect(a.text, path).not.toContain(o.dir);
      expect(a.text, path).not.toContain('alert');
    }
    const header = await ask(d.port, { path: '/api/overview', headers: { 'x-pq-token': wrong } });
    expect(header.status).toBe(401);
    expect(header.json.error.code).toBe('ERR_TOKEN');
    // The token in the URL or in the header, either works.
    expect((await ask(d.port, { path: `/api/overview?token=${d.token}` })).status).toBe(200);
    expect((await ask(d.port, { path: '/api/overview', headers: { 'x-pq-token': d.token } })).status).toBe(200);
  });

  test('aRequestAddressedToAnotherHostIsRefused', async () => {
    const o = await owner();
    const d = await serve(o.dir);
    // A page of another site whose DNS name was rebound to 127.0.0.1 sends its own name as Host.
    for (const host of [
      'evil.example',
      `evil.example:${d.port}`,
      `127.0.0.1:${d.port + 1}`,
      `127.0.0.1.evil.example:${d.port}`,
      '127.0.0.1:x',
      '[::1]evil',
    ]) {
      const a = await ask(d.port, { path: `/api/overview?token=${d.token}`, headers: { host } });
      expect({ host, status: a.status }).toEqual({ host, status: 403 });
      expect(a.json.error.code, host).toBe('ERR_FORBIDDEN_HOST');
    }
    // Without a Host header at all, Node's server itself refuses an HTTP/1.1 request.
    const none = await ask(d.port, { path: `/api/overview?token=${d.token}`, headers: { host: '' } });
    expect([400, 403]).toContain(none.status);
    for (const host of [`localhost:${d.port}`, `127.0.0.1:${d.port}`, `[::1]:${d.port}`]) {
      expect((await ask(d.port, { path: `/api/overview?token=${d.token}`, headers: { host } })).status, host).toBe(200);
    }
  });

  test('everyAnswerForbidsInlineScriptFramingAndCaching', async () => {
    const o = await owner();
    const d = await serve(o.dir);
    const answers = [
      await ask(d.port, { path: `/?token=${d.token}` }),
      await ask(d.port, { path: `/api/overview?token=${d.token}` }),
      await ask(d.port, { path: '/api/overview' }),
      await ask(d.port, { path: `/nothing?token=${d.token}` }),
      await ask(d.port, { path: `/api/items?token=${d.token}&limit=0` }),
    ];
    expect(answers.map((a) => a.status)).toEqual([200, 200, 401, 404, 400]);
    for (const a of answers) {
      expect(a.headers['content-security-policy']).toContain("script-src 'self'");
      expect(a.headers['content-security-policy']).toContain("default-src 'none'");
      expect(a.headers['content-security-policy']).toContain("frame-ancestors 'none'");
      expect(a.headers['content-security-policy']).not.toContain('unsafe');
      expect(a.headers['x-content-type-options']).toBe('nosniff');
      expect(a.headers['cache-control']).toBe('no-store');
      expect(a.headers['referrer-policy']).toBe('no-referrer');
    }
  });

  test('thePageHasNoInlineScriptAndLoadsEachAssetWithTheToken', async () => {
    const o = await owner();
    const d = await serve(o.dir);
    const page = await ask(d.port, { path: `/?token=${d.token}` });
    expect(page.headers['content-type']).toBe('text/html; charset=utf-8');
    expect(page.text).not.toMatch(/<script(?![^>]*\ssrc=)[^>]*>/);
    expect(page.text).not.toMatch(/\son[a-z]+=/i);
    expect(page.text).not.toMatch(/\sstyle=/i);
    const refs = [...page.text.matchAll(/(?:src|href)="\.\/([^"]+)"/g)].map((m) => m[1]!);
    expect(refs.length).toBe(Object.keys(PAGE_ASSETS).length - 1);
    for (const ref of refs) {
      expect(ref).toContain(`token=${d.token}`);
      const a = await ask(d.port, { path: `/${ref}` });
      expect(a.status, ref).toBe(200);
      expect(a.headers['content-type'], ref).toBe(PAGE_ASSETS[`/${ref.split('?')[0]}`]!.type);
    }
  });

  test('theApiAnswersJsonWithoutMarkupCharacters', async () => {
    const o = await owner();
    const d = await serve(o.dir);
    const a = await ask(d.port, { path: `/api/dead-letters?token=${d.token}` });
    expect(a.status).toBe(200);
    expect(a.text).not.toContain('<');
    expect(a.json.letters.map((l: { reason: string }) => l.reason)).toEqual(['bad <b>0</b>', 'bad <b>1</b>']);
    expect(Buffer.from(a.json.letters[0].payload, 'base64').toString()).toBe('<script>alert(0)</script>');
  });
});

describe('actions', () => {
  test('anActionWithoutPostOriginCsrfOrJsonIsRefusedAndChangesNothing', async () => {
    const o = await owner();
    const d = await serve(o.dir);
    const good = await actionHeaders(d);
    const body = JSON.stringify({ seqs: [o.dead[0]] });
    const without = (name: string): Record<string, string> => Object.fromEntries(Object.entries(good).filter(([k]) => k !== name));
    const cases: [string, Req, number, string][] = [
      ['GET', { method: 'GET', path: '/api/dead-letters/purge', headers: good }, 404, 'ERR_NOT_FOUND'],
      ['PUT', { method: 'PUT', path: '/api/dead-letters/purge', headers: good, body }, 405, 'ERR_METHOD'],
      ['no origin', { method: 'POST', path: '/api/dead-letters/purge', headers: without('origin'), body }, 403, 'ERR_CSRF'],
      [
        'another origin',
        { method: 'POST', path: '/api/dead-letters/purge', headers: { ...good, origin: 'http://evil.example' }, body },
        403,
        'ERR_CSRF',
      ],
      [
        'another port',
        { method: 'POST', path: '/api/dead-letters/purge', headers: { ...good, origin: `http://127.0.0.1:${d.port + 1}` }, body },
        403,
        'ERR_CSRF',
      ],
      [
        'cross-site fetch',
        { method: 'POST', path: '/api/dead-letters/purge', headers: { ...good, 'sec-fetch-site': 'cross-site' }, body },
        403,
        'ERR_CSRF',
      ],
      ['no csrf', { method: 'POST', path: '/api/dead-letters/purge', headers: without('x-pq-csrf'), body }, 403, 'ERR_CSRF'],
      [
        'wrong csrf',
        { method: 'POST', path: '/api/dead-letters/purge', headers: { ...good, 'x-pq-csrf': d.token }, body },
        403,
        'ERR_CSRF',
      ],
      [
        'form post',
        {
          method: 'POST',
          path: '/api/dead-letters/purge',
          headers: { ...good, 'content-type': 'application/x-www-form-urlencoded' },
          body: 'seqs=1',
        },
        415,
        'ERR_BAD_REQUEST',
      ],
      ['no token', { method: 'POST', path: '/api/dead-letters/purge', headers: without('x-pq-token'), body }, 401, 'ERR_TOKEN'],
    ];
    for (const [name, req, status, code] of cases) {
      const a = await ask(d.port, req);
      expect({ name, status: a.status, code: a.json?.error?.code }).toEqual({ name, status, code });
    }
    expect(await deadSeqs(o.rx)).toEqual(o.dead);
  });

  test('malformedActionsAreTypedErrorsAndChangeNothing', async () => {
    const o = await owner();
    const d = await serve(o.dir);
    const headers = await actionHeaders(d);
    const bodies = [
      'not json',
      '[]',
      'null',
      '{}',
      '{"seqs":[]}',
      '{"seqs":[0]}',
      '{"seqs":[-1]}',
      '{"seqs":[1.5]}',
      '{"seqs":["1"]}',
      '{"seqs":[9007199254740993]}',
      `{"seqs":[${o.dead[0]},${o.dead[0]}]}`,
      `{"seqs":[${o.dead[0]}],"all":true}`,
      '{"all":false}',
      '{"all":"yes"}',
      '{"purge":true}',
      JSON.stringify({ seqs: Array.from({ length: 4097 }, (_, i) => i + 1) }),
    ];
    for (const body of bodies) {
      for (const action of ['redrive', 'purge']) {
        const a = await ask(d.port, { method: 'POST', path: `/api/dead-letters/${action}`, headers, body });
        expect({ body: body.slice(0, 40), action, status: a.status, code: a.json?.error?.code }).toEqual({
          body: body.slice(0, 40),
          action,
          status: 400,
          code: 'ERR_BAD_REQUEST',
        });
      }
    }
    const verifyWithArgs = await ask(d.port, { method: 'POST', path: '/api/verify', headers, body: '{"dir":"/etc"}' });
    expect(verifyWithArgs.status).toBe(400);
    expect(await deadSeqs(o.rx)).toEqual(o.dead);
  });

  test('aBodyOverTheBoundIsRefusedBeforeItIsRead', async () => {
    const o = await owner();
    const d = await serve(o.dir);
    const headers = await actionHeaders(d);
    const big = JSON.stringify({ seqs: [o.dead[0]], pad: 'x'.repeat(100 * 1024) });
    const declared = await ask(d.port, { method: 'POST', path: '/api/dead-letters/purge', headers, body: big });
    expect([declared.status, declared.json.error.code]).toEqual([413, 'ERR_TOO_LARGE']);
    const chunked = await ask(d.port, { method: 'POST', path: '/api/dead-letters/purge', headers, body: big, chunked: true });
    expect([chunked.status, chunked.json.error.code]).toEqual([413, 'ERR_TOO_LARGE']);
    expect(await deadSeqs(o.rx)).toEqual(o.dead);
  });

  test('aReadOnlyDashboardRefusesEveryAction', async () => {
    const o = await owner();
    const d = await serve(o.dir, false);
    const headers = await actionHeaders(d);
    for (const [action, body] of [
      ['redrive', { seqs: [o.dead[0]] }],
      ['purge', { seqs: [o.dead[0]] }],
      ['redrive', { all: true }],
      ['purge', { all: true }],
    ] as const) {
      const a = await ask(d.port, { method: 'POST', path: `/api/dead-letters/${action}`, headers, body: JSON.stringify(body) });
      expect([a.status, a.json.error.code]).toEqual([403, 'ERR_READ_ONLY']);
    }
    expect((await ask(d.port, { path: `/api/session?token=${d.token}` })).json.allowActions).toBe(false);
    expect(await deadSeqs(o.rx)).toEqual(o.dead);
  });

  test('aRedriveAndAPurgeGoThroughTheOwner', async () => {
    const o = await owner(4);
    const d = await serve(o.dir);
    const headers = await actionHeaders(d);
    const [a, b, c] = o.dead;
    const redrive = await ask(d.port, { method: 'POST', path: '/api/dead-letters/redrive', headers, body: JSON.stringify({ seqs: [a] }) });
    expect(redrive.status).toBe(200);
    expect(redrive.json).toMatchObject({ count: 1, from: [a] });
    const item = o.rx.tryReserve()!;
    expect([item.seq, new TextDecoder().decode(item.bytes)]).toEqual([redrive.json.seqs[0], '<script>alert(0)</script>']);
    await item.ack();
    const purge = await ask(d.port, { method: 'POST', path: '/api/dead-letters/purge', headers, body: JSON.stringify({ seqs: [b, c] }) });
    expect(purge.json).toEqual({ count: 2 });
    expect(await deadSeqs(o.rx)).toEqual([o.dead[3]]);
    // A seq that is no dead letter is skipped: the count says what was done.
    const again = await ask(d.port, { method: 'POST', path: '/api/dead-letters/purge', headers, body: JSON.stringify({ seqs: [b] }) });
    expect(again.json).toEqual({ count: 0 });
    const all = await ask(d.port, { method: 'POST', path: '/api/dead-letters/purge', headers, body: '{"all":true}' });
    expect(all.json).toEqual({ count: 1 });
    expect(await deadSeqs(o.rx)).toEqual([]);
  });

  test('withoutAnOwnerTheFilesAreShownAndActionsAreRefused', async () => {
    const o = await owner();
    const d = await serve(o.dir);
    const headers = await actionHeaders(d);
    await o.tx.close();
    const overview = await ask(d.port, { path: `/api/overview?token=${d.token}` });
    expect(overview.json).toMatchObject({ view: 'read-only', figures: { deadLetters: 2, ready: null, inFlight: null } });
    const letters = await ask(d.port, { path: `/api/dead-letters?token=${d.token}` });
    expect(letters.json.letters.map((l: { seq: number }) => l.seq)).toEqual(o.dead);
    const a = await ask(d.port, { method: 'POST', path: '/api/dead-letters/purge', headers, body: JSON.stringify({ seqs: [o.dead[0]] }) });
    expect([a.status, a.json.error.code]).toEqual([409, 'ERR_NO_OWNER']);
    const store = await LogStore.open(o.dir, { readOnly: true });
    expect(store.inspect().deadLetters).toBe(2);
    await store.close();
  });
});

describe('reading', () => {
  test('aStoreWhoseFilesCannotBeReadHereStillShowsTheOwnersFigures', async () => {
    const dir = freshDir();
    const [tx] = await new Builder(await LogStore.open(dir, { segmentBytes: MIN_SEGMENT_BYTES })).open();
    cleanups.push(() => tx.close());
    for (let i = 0; i < 20; i++) await tx.push(`item ${i}`);
    const segments = readdirSync(dir)
      .filter((f) => f.startsWith('seg-'))
      .sort();
    expect(segments.length).toBeGreaterThan(1);
    // Damage in the seal of a sealed segment: a read-only open of the files refuses them.
    const first = join(dir, segments[0]!);
    const bytes = readFileSync(first);
    bytes[bytes.length - 3]! ^= 0xff;
    writeFileSync(first, bytes);
    const d = await serve(dir);
    const overview = await ask(d.port, { path: `/api/overview?token=${d.token}` });
    expect(overview.status).toBe(200);
    expect(overview.json).toMatchObject({ view: 'live', byPriority: null, figures: { ready: 20 } });
    expect(overview.json.filesError).toMatch(/^ERR_CORRUPT: /);
    // The items, which only the files hold, are refused with the same typed error.
    const items = await ask(d.port, { path: `/api/items?token=${d.token}` });
    expect([items.status, items.json.error.code]).toEqual([500, 'ERR_CORRUPT']);
  });

  test('badQueriesAreTypedErrors', async () => {
    const o = await owner();
    const d = await serve(o.dir);
    for (const q of [
      'limit=0',
      'limit=201',
      'after=-1',
      'after=abc',
      'after=1e3',
      'state=ready',
      'priority=200',
      'priority=x',
      'unknown=1',
      'after=1&after=2',
      `key=${'k'.repeat(300)}`,
    ]) {
      const a = await ask(d.port, { path: `/api/items?token=${d.token}&${q}` });
      expect({ q, status: a.status, code: a.json?.error?.code }).toEqual({ q, status: 400, code: 'ERR_BAD_REQUEST' });
    }
    for (const path of ['/api/item', '/api/item?seq=0', '/api/dead-letter?seq=x', '/api/dead-letters?limit=1000', '/api/overview?x=1']) {
      const a = await ask(d.port, { path: `${path}${path.includes('?') ? '&' : '?'}token=${d.token}` });
      expect({ path, status: a.status }).toEqual({ path, status: 400 });
    }
    for (const path of [
      '/api/groups?limit=0',
      '/api/groups?limit=101',
      '/api/groups?after=a',
      '/api/schedules?limit=0',
      '/api/schedules?limit=x',
      `/api/schedules?after=${'n'.repeat(129)}`,
      '/api/schedules?after=a&after=b',
    ]) {
      const a = await ask(d.port, { path: `${path}&token=${d.token}` });
      expect({ path, status: a.status, code: a.json?.error?.code }).toEqual({ path, status: 400, code: 'ERR_BAD_REQUEST' });
    }
    expect((await ask(d.port, { path: `/api/item?seq=999&token=${d.token}` })).json.error.code).toBe('ERR_NOT_FOUND');
    expect((await ask(d.port, { path: `/api/nothing?token=${d.token}` })).status).toBe(404);
  });

  test('groupsAndSchedulesComeFromTheOwnerAndSchedulesFromTheFilesWithoutOne', async () => {
    const dir = freshDir();
    const [tx, rx] = await new Builder(await LogStore.open(dir)).open();
    let open = true;
    cleanups.push(() => (open ? tx.close() : undefined));
    for (const name of ['c-report', 'a-sync', 'b-<b>bold</b>']) await tx.schedule(name, { everyMs: 3_600_000 }, name, { catchUp: 'none' });
    await tx.pushMany(['1', '2', '3'], { group: 'acme' });
    await tx.push('4', { group: 'globex' });
    const held = [rx.tryReserve({ groupConcurrency: 1 })!, rx.tryReserve({ groupConcurrency: 1 })!];
    expect(rx.tryReserve({ groupConcurrency: 1 })).toBeNull();
    const d = await serve(dir);
    const get = async (path: string): Promise<any> =>
      (await ask(d.port, { path: `${path}${path.includes('?') ? '&' : '?'}token=${d.token}` })).json;
    expect((await get('/api/overview')).extras).toEqual({ groups: true, schedules: true });
    const groups = await get('/api/groups?limit=1');
    expect(groups).toMatchObject({ view: 'live', report: { total: 2, inFlight: 2, groupLimited: 2 } });
    expect(groups.report.groups).toEqual([{ group: 'acme', inFlight: 1, groupLimited: 2, rateLimited: 0, rateWaitMs: 0 }]);
    const names = (page: any): string[] => page.page.schedules.map((s: { name: string }) => s.name);
    const first = await get('/api/schedules?limit=2');
    expect([first.view, first.page.total, first.page.more, names(first)]).toEqual(['live', 3, true, ['a-sync', 'b-<b>bold</b>']]);
    const live = await get(`/api/schedules?after=${encodeURIComponent('b-<b>bold</b>')}`);
    expect([names(live), live.page.more]).toEqual([['c-report'], false]);
    for (const item of held) await item.ack();
    await tx.close();
    open = false;
    // Without an owner: the schedules as the store keeps them, described as `pq schedules` does; no groups.
    const readOnly = await get('/api/schedules?limit=2');
    expect([readOnly.view, readOnly.page.total, readOnly.page.more, names(readOnly)]).toEqual([
      'read-only',
      3,
      true,
      ['a-sync', 'b-<b>bold</b>'],
    ]);
    expect(readOnly.page.schedules[0]).toEqual(first.page.schedules[0]);
    expect(names(await get(`/api/schedules?after=a-sync&limit=5`))).toEqual(['b-<b>bold</b>', 'c-report']);
    expect(await get('/api/groups')).toMatchObject({ view: 'read-only', report: null });
    expect((await get('/api/overview')).extras).toEqual({ groups: true, schedules: true });
    // The items filter by group reads each item's group from the files.
    expect((await get('/api/items?group=acme')).items.map((i: { seq: number; group: string }) => [i.seq, i.group])).toEqual([
      [1, 'acme'],
      [2, 'acme'],
      [3, 'acme'],
    ]);
  });

  test('aPageReadsABoundedNumberOfItemsWhateverTheFilter', async () => {
    const dir = freshDir();
    const [tx] = await new Builder(await LogStore.open(dir)).durability('none').open();
    const total = SCAN_ITEMS_MAX * 2 + 100;
    for (let i = 0; i < total; i += 10_000)
      await tx.pushMany(Array.from({ length: Math.min(10_000, total - i) }, (_, j) => `item ${i + j}`));
    await tx.push('the one', { priority: 7 });
    await tx.close();
    const store = await LogStore.open(dir, { readOnly: true });
    cleanups.push(() => store.close());
    const q = { after: 0, limit: 50, state: null, priority: 7, keyPrefix: null, group: null };
    // A filter matching nothing for a long stretch looks at a bounded stretch per page, and says how far.
    const first = listItems(store, q, Date.now());
    expect(first).toMatchObject({ items: [], end: false, scannedThrough: SCAN_ITEMS_MAX });
    const second = listItems(store, { ...q, after: first.scannedThrough }, Date.now());
    expect(second).toMatchObject({ items: [], end: false, scannedThrough: 2 * SCAN_ITEMS_MAX });
    const third = listItems(store, { ...q, after: second.scannedThrough }, Date.now());
    expect(third.items.map((i) => i.seq)).toEqual([total + 1]);
    expect(third.end).toBe(true);
    // Unfiltered, a page is the limit's worth.
    const plain = listItems(store, { ...q, priority: null, after: 1000 }, Date.now());
    expect(plain.items.map((i) => i.seq)).toEqual(Array.from({ length: 50 }, (_, i) => 1001 + i));
    expect(plain.end).toBe(false);
  });
});

describe('the embeddable handler', () => {
  test('aServiceMountsTheDashboardUnderItsOwnPath', async () => {
    const o = await owner();
    const d = dashboard(o.dir, { basePath: '/ops/queue/', allowedHosts: ['ops.example'] });
    cleanups.push(() => d.close());
    const server = createServer((req, res) => {
      if (req.url?.startsWith('/ops/queue/')) return d.handle(req, res);
      res.writeHead(200).end('the service');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    cleanups.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
    const port = (server.address() as { port: number }).port;
    expect(d.url(`http://127.0.0.1:${port}`)).toBe(`http://127.0.0.1:${port}/ops/queue/?token=${d.token}`);
    const page = await ask(port, { path: `/ops/queue/?token=${d.token}` });
    expect(page.status).toBe(200);
    const overview = await ask(port, { path: `/ops/queue/api/overview?token=${d.token}`, headers: { host: 'ops.example' } });
    expect(overview.json).toMatchObject({ view: 'live', figures: { deadLetters: 2 } });
    expect((await ask(port, { path: `/ops/queue/api/overview?token=${d.token}`, headers: { host: 'other.example' } })).status).toBe(403);
    // Actions are off unless asked for.
    expect((await ask(port, { path: `/ops/queue/api/session?token=${d.token}` })).json.allowActions).toBe(false);
  });

  test('badOptionsAreTypeErrors', () => {
    expect(() => dashboard('')).toThrow(TypeError);
    expect(() => dashboard(null as never)).toThrow(TypeError);
    expect(() => dashboard('/tmp/q', { token: 'short' })).toThrow(TypeError);
    expect(() => dashboard('/tmp/q', { token: `${'a'.repeat(40)}<` })).toThrow(TypeError);
    expect(() => dashboard('/tmp/q', { basePath: 'ops' })).toThrow(TypeError);
    expect(() => dashboard('/tmp/q', { basePath: '/ops' })).toThrow(TypeError);
    expect(() => dashboard('/tmp/q', { allowedHosts: ['evil.example/x'] })).toThrow(TypeError);
    return expect(serveDashboard('/tmp/q', { port: 70000 })).rejects.toThrow(RangeError);
  });
});
