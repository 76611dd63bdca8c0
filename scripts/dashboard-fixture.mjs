// What the dashboard's browser tests and `npm run screenshots` share: headless Chromium, `pq ui`
// in a child process, a worker daemon that owns a queue, and the outline of a page (its headings,
// labels, columns and buttons: what the screenshots show, without the figures that change from run
// to run). Everything runs the BUILT package (dist/), as a user would.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const dist = (file) => pathToFileURL(join(root, 'dist', file)).href;
export const pqBin = join(root, 'dist', 'cli', 'pq.js');

/** Debian's Chromium, which `.ci/run` installs when missing. */
export const CHROMIUM = process.env.PQ_CHROMIUM ?? '/usr/bin/chromium';

/** The flags the machine needs: no sandbox (containers), and no network the browser would open on its own. */
const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

export function chromiumMissing() {
  return existsSync(CHROMIUM) ? null : `no Chromium at ${CHROMIUM} (.ci/run installs Debian's chromium)`;
}

/** A browser with a fresh profile of its own; `close()` ends it and removes the profile. */
export async function launchBrowser(viewport = { width: 1280, height: 900 }) {
  const { chromium } = await import('playwright-core');
  const profile = mkdtempSync(join(tmpdir(), 'pq-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    args: CHROMIUM_ARGS,
    viewport,
    deviceScaleFactor: 1,
  });
  return {
    context,
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/** Lines a child prints, with a wait for a condition on them. */
export class Child {
  constructor(child) {
    this.child = child;
    this.lines = [];
    this.stderr = '';
    this.waiters = [];
    let partial = '';
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (chunk) => {
      const parts = (partial + chunk).split('\n');
      partial = parts.pop();
      this.lines.push(...parts);
      this.wake();
    });
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk) => (this.stderr += chunk));
    child.on('close', () => {
      this.ended = true;
      this.wake();
    });
  }

  wake() {
    for (const w of this.waiters.splice(0)) w();
  }

  /** Resolves with the first line `predicate` holds for (now or later); rejects if the child ends first. */
  async line(predicate) {
    for (;;) {
      const found = this.lines.find(predicate);
      if (found !== undefined) return found;
      if (this.ended) throw new Error(`child ended (code ${this.child.exitCode}) before the line awaited: ${this.stderr}`);
      await new Promise((resolve) => this.waiters.push(resolve));
    }
  }

  send(line) {
    this.child.stdin.write(`${line}\n`);
  }

  /** End the child by its pid (SIGTERM, then SIGKILL) and wait until it is gone. */
  async stop(signal = 'SIGTERM') {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const gone = new Promise((resolve) => this.child.once('exit', resolve));
    this.child.kill(signal);
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 5000);
    await gone;
    clearTimeout(timer);
  }
}

/** Run ES module `source` (written into `work`) in a fresh node with `args`. */
export function runModule(work, name, source, args = []) {
  const file = join(work, name);
  writeFileSync(file, source);
  return new Child(spawn(process.execPath, [file, ...args], { stdio: ['pipe', 'pipe', 'pipe'] }));
}

/**
 * `pq ui <dir> ...args`, started; resolves once it printed its URL. `url` is what it printed,
 * `base` the origin without the token.
 */
export async function startUi(dir, args = []) {
  const child = new Child(
    spawn(process.execPath, [pqBin, 'ui', dir, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NO_COLOR: '1' } }),
  );
  const url = await child.line((l) => l.startsWith('http://'));
  return { child, url, base: new URL(url).origin, token: new URL(url).searchParams.get('token') };
}

/**
 * A worker daemon that owns the queue in argv[2]: `process()` with `concurrency` 4 and a
 * `maxDeliveries` of 3. Its handler takes `handleMs` per item (argv[3]); an item whose payload starts
 * with `bad` is dead-lettered with the reason `bad input: <payload>`; one starting with `flaky` is
 * dead-lettered the first time this process sees it and acked the next (printing `did <payload>`);
 * one ending in `#retry` fails its first delivery (process() retries it).
 * Lines on stdin: `push <payload>` pushes one item; `pause` / `resume` stop and start the handler;
 * `stop` closes the queue and exits. Prints `ready` once it serves.
 */
export const WORKER = `
import { createInterface } from 'node:readline';
import { Builder, LogStore } from ${JSON.stringify(dist('index.js'))};
const handleMs = Number(process.argv[3] ?? 0);
const [tx, rx] = await new Builder(await LogStore.open(process.argv[2])).maxDeliveries(3).open();
const seen = new Set();
let paused = null;
let resume = () => {};
const done = rx.process(async (item) => {
  if (paused) await paused;
  const text = new TextDecoder().decode(item.bytes);
  if (text.startsWith('bad')) {
    await item.deadLetter('bad input: ' + text);
    return;
  }
  if (text.startsWith('flaky') && !seen.has(text)) {
    seen.add(text);
    await item.deadLetter('flaky: first attempt of ' + text);
    return;
  }
  if (text.endsWith('#retry') && !seen.has(text)) {
    seen.add(text);
    throw new Error('upstream busy');
  }
  if (handleMs > 0) await new Promise((r) => setTimeout(r, handleMs));
  await item.ack();
  if (text.startsWith('flaky')) console.log('did ' + text);
}, { concurrency: 4 });
createInterface({ input: process.stdin }).on('line', async (line) => {
  if (line.startsWith('push ')) console.log('pushed ' + (await tx.push(line.slice(5))));
  if (line === 'pause') paused = new Promise((r) => (resume = r));
  if (line === 'resume') { paused = null; resume(); }
  if (line === 'stop') {
    await rx.close();
    await done;
    process.exit(0);
  }
});
console.log('ready');
`;

/**
 * A producer in a process of its own: pushes `<prefix>-<n>` through connect() every argv[4] ms until
 * killed; with argv[5], every argv[5]-th item ends in ` #retry`.
 */
export const PRODUCER = `
import { connect } from ${JSON.stringify(dist('index.js'))};
const producer = await connect(process.argv[2]);
const prefix = process.argv[3];
const everyMs = Number(process.argv[4]);
const retryEvery = Number(process.argv[5] ?? 0);
console.log('producing ' + producer.mode);
for (let n = 1; ; n++) {
  await producer.push(prefix + '-' + n + (retryEvery > 0 && n % retryEvery === 0 ? ' #retry' : ''));
  await new Promise((r) => setTimeout(r, everyMs));
}
`;

/**
 * An owner that is its own producer of grouped items (a push from another process cannot carry a
 * group): it opens the queue in argv[2] and runs `process()` with `concurrency` 8 and
 * `groupConcurrency` 1, whose handler holds each item until told. Lines on stdin: `push <json>`
 * pushes `{ group, payload }` and prints `pushed <seq>`; `release` lets every held item be acked.
 * Prints `handling <payload>` as each item is handed out, and `ready` once it serves.
 */
export const GROUP_WORKER = `
import { createInterface } from 'node:readline';
import { Builder, LogStore } from ${JSON.stringify(dist('index.js'))};
const [tx, rx] = await new Builder(await LogStore.open(process.argv[2])).open();
const held = [];
rx.process(async (item) => {
  console.log('handling ' + new TextDecoder().decode(item.bytes));
  await new Promise((resolve) => held.push(resolve));
}, { concurrency: 8, groupConcurrency: 1 });
createInterface({ input: process.stdin }).on('line', async (line) => {
  if (line.startsWith('push ')) {
    const { group, payload } = JSON.parse(line.slice(5));
    console.log('pushed ' + (await tx.push(payload, { group })));
  }
  if (line === 'release') for (const resolve of held.splice(0)) resolve();
});
console.log('ready');
`;

/** The pages an outline covers, by their hash. */
export const OUTLINED_PAGES = ['overview', 'items', 'dead-letters', 'groups', 'schedules', 'health'];

/**
 * The outline of the page shown now: its visible headings, card labels, table columns, chart
 * legends and buttons, in document order, one per line, without figures or times.
 */
export async function pageOutline(page) {
  return page.evaluate(() => {
    const lines = [];
    const nodes = document.querySelectorAll(
      'nav a, main h2, main h3, main .card .label, main th, main .legend > span, main button, main label',
    );
    for (const el of nodes) {
      if (el.closest('[hidden]') !== null) continue;
      let text = '';
      if (el.tagName === 'LABEL')
        text = [...el.childNodes]
          .filter((n) => n.nodeType === 3)
          .map((n) => n.textContent)
          .join('');
      else text = el.textContent ?? '';
      text = text
        .replace(/\d[\d,.]*/g, 'N')
        .replace(/\s+/g, ' ')
        .trim();
      lines.push(`${el.tagName.toLowerCase()}${el.closest('nav') ? ' (nav)' : ''}: ${text}`);
    }
    return lines.join('\n');
  });
}

/**
 * Open each outlined page of the dashboard at `url` in `page`, wait until it shows what the
 * screenshots show, and return the outlines (`# <page>` and its lines). `onPage(name)` is called
 * on each page once it is ready (the screenshots are taken there). The store's path, which differs
 * from run to run, is shown as `/srv/orders`.
 */
export async function walkPages(page, url, onPage = async () => {}) {
  const outlines = [];
  for (const name of OUTLINED_PAGES) {
    await page.goto(`${url}#${name}`);
    await page.waitForSelector(name === 'overview' ? '[data-chart=latency]' : 'main h2');
    if (name === 'dead-letters') await page.waitForSelector('[data-table=dead-letters] tbody tr');
    if (name === 'items') await page.waitForSelector('[data-table=items]');
    if (name === 'health') await page.waitForSelector('[data-table=segments]');
    if (name === 'groups') await page.waitForSelector('[data-groups-body] .cards');
    if (name === 'schedules') await page.waitForSelector('[data-table=schedules]');
    await page.evaluate(() => {
      const dir = document.getElementById('dir');
      if (dir) dir.textContent = '/srv/orders';
    });
    outlines.push(`# ${name}\n${await pageOutline(page)}`);
    await onPage(name);
  }
  return `${outlines.join('\n\n')}\n`;
}

/**
 * A queue as the screenshots show it, owned by a worker daemon: two schedules, orders pushed as
 * JSON, a few with a priority and one delayed, two dead letters, and a producer pushing in the
 * background while `warmupMs` passes (the charts fill meanwhile). `pq ui --allow-actions` serves it.
 */
export async function startFixture({ warmupMs = 0, handleMs = 40 } = {}) {
  const work = mkdtempSync(join(tmpdir(), 'pq-ui-fixture-'));
  const dir = join(work, 'orders');
  // The schedules are declared by a process that opens the queue before the worker does.
  const declare = `
import { Builder, LogStore } from ${JSON.stringify(dist('index.js'))};
const [tx] = await new Builder(await LogStore.open(process.argv[2])).open();
await tx.schedule('nightly-report', { cron: '0 3 * * *', tz: 'Europe/Berlin' }, 'build the report', { catchUp: 'all', maxCatchUp: 7 });
await tx.schedule('stock-sync', { everyMs: 3_600_000 }, 'sync the stock', { priority: 2 });
await tx.close();
console.log('declared');
`;
  await runModule(work, 'declare.mjs', declare, [dir]).line((l) => l === 'declared');
  const worker = runModule(work, 'worker.mjs', WORKER, [dir, String(handleMs)]);
  await worker.line((l) => l === 'ready');
  const seed = `
import { connect } from ${JSON.stringify(dist('index.js'))};
const p = await connect(process.argv[2]);
const orders = Array.from({ length: 40 }, (_, i) => JSON.stringify({ order: 1000 + i, sku: 'SKU-' + (i % 7), qty: 1 + (i % 3) }));
await p.pushMany(orders.slice(0, 30));
await p.pushMany(orders.slice(30), { priority: 5 });
await p.push(JSON.stringify({ order: 2000, note: 'ship after the weekend' }), { delayMs: 3 * 24 * 3600 * 1000, priority: -1 });
await p.push('bad order: ' + JSON.stringify({ order: 1042, sku: null }));
await p.push('bad order: <not json>');
await p.close();
console.log('seeded');
`;
  const seeder = runModule(work, 'seed.mjs', seed, [dir]);
  await seeder.line((l) => l === 'seeded');
  const producer = runModule(work, 'producer.mjs', PRODUCER, [dir, 'event', '8', '40']);
  await producer.line((l) => l.startsWith('producing'));
  const ui = await startUi(dir, ['--allow-actions']);
  if (warmupMs > 0) await new Promise((r) => setTimeout(r, warmupMs));
  return {
    work,
    dir,
    ui,
    worker,
    producer,
    async stop() {
      await producer.stop();
      await ui.child.stop();
      await worker.stop();
      rmSync(work, { recursive: true, force: true });
    },
  };
}
