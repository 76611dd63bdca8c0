/**
 * The dashboard over HTTP (docs/internals/dashboard.md, "The dashboard"): a `node:http` request
 * handler that serves the page (built into ./page-assets.ts from ./page/) and its JSON API
 * (./api.ts).
 *
 * Every request is hostile until proven otherwise:
 * - its Host must name this machine's loopback (or a host the embedder allowed), so a page of
 *   another site that rebinds its DNS name to 127.0.0.1 is refused (DNS rebinding);
 * - it must carry the token, in the URL (`?token=`, as the printed URL has it) or the `x-pq-token`
 *   header; compared in constant time;
 * - an action is a POST with a JSON body of at most {@link BODY_BYTES_MAX} bytes, from this very
 *   origin (Origin, and Sec-Fetch-Site when the browser sends it), with the CSRF header the page
 *   got from the session; and only with `allowActions`;
 * - every answer forbids inline script, framing and sniffing, and is never cached.
 * A refused request changes nothing: refusals are decided before anything is asked of the queue.
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { QueueError } from '../contract/errors.js';
import { DashboardApi, DashboardError, LETTERS_PAGE_MAX, SEQS_PER_ACTION_MAX, statusOf, type SelectionBody } from './api.js';
import { PAGE_ITEMS_MAX, type ItemQuery, type ItemState } from './items.js';
import { PAGE_ASSETS } from './page-assets.js';
import { GROUPS_LIMIT_MAX, SCHEDULES_LIMIT_MAX } from '../remote/client.js';
import { MAX_KEY_BYTES, MAX_SCHEDULE_NAME_BYTES, PRIORITY_MAX, PRIORITY_MIN } from '../contract/store.js';

/** The largest request body taken (an action names at most {@link SEQS_PER_ACTION_MAX} seqs). */
export const BODY_BYTES_MAX = 64 * 1024;

/** Groups the groups page lists, and schedules a page of them, unless asked otherwise. */
const GROUPS_PAGE_DEFAULT = 50;
const SCHEDULES_PAGE_DEFAULT = 50;

/** What a token may be made of: URL-safe, long enough not to be guessed. */
const TOKEN_RE = /^[A-Za-z0-9_-]{32,256}$/;

const CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self'",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

const SECURITY_HEADERS: Readonly<Record<string, string>> = {
  'content-security-policy': CSP,
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-store',
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-resource-policy': 'same-origin',
};

const LOOPBACK_NAMES = ['127.0.0.1', 'localhost', '[::1]'];

export interface HandlerOptions {
  /** The token every request must carry; a new random one when not given. */
  readonly token?: string;
  /** Let the page redrive and purge dead letters (through the owner). @default false */
  readonly allowActions?: boolean;
  /** Host names besides the loopback ones that requests may be addressed to (the service's own). */
  readonly allowedHosts?: readonly string[];
  /** Only requests addressed to this port (the port `pq ui` listens on); any when not given. */
  readonly port?: number;
  /** Where the dashboard is mounted, starting and ending with `/`. @default '/' */
  readonly basePath?: string;
}

/** A fresh random token: 32 URL-safe characters, 192 bits. */
export function newToken(): string {
  return randomBytes(24).toString('base64url');
}

const digest = (s: string): Buffer => createHash('sha256').update(s).digest();

/** Equal, in a time that does not depend on where they differ (both hashed to one length first). */
function sameSecret(given: string, expected: Buffer): boolean {
  return timingSafeEqual(digest(given), expected);
}

export class DashboardHandler {
  readonly api: DashboardApi;
  readonly token: string;
  readonly csrf: string;
  readonly basePath: string;
  readonly #tokenDigest: Buffer;
  readonly #csrfDigest: Buffer;
  readonly #hosts: ReadonlySet<string>;
  #port: number | undefined;

  constructor(dir: string, options: HandlerOptions = {}) {
    const token = options.token ?? newToken();
    if (typeof token !== 'string' || !TOKEN_RE.test(token))
      throw new TypeError(
        `Expected \`token\` to be 32 to 256 characters of A-Z, a-z, 0-9, _ and -, got ${typeof token === 'string' ? `${token.length} characters` : typeof token}`,
      );
    const basePath = options.basePath ?? '/';
    if (typeof basePath !== 'string' || !/^\/([A-Za-z0-9._~-]+\/)*$/.test(basePath))
      throw new TypeError(`Expected \`basePath\` to be a path that starts and ends with /, got ${JSON.stringify(basePath)}`);
    const hosts = options.allowedHosts ?? [];
    if (!Array.isArray(hosts) || hosts.some((h) => typeof h !== 'string' || !/^[A-Za-z0-9.-]+$/.test(h)))
      throw new TypeError('Expected `allowedHosts` to be an array of host names');
    this.token = token;
    this.csrf = createHmac('sha256', token).update('persistent-queue dashboard csrf').digest('base64url');
    this.#tokenDigest = digest(token);
    this.#csrfDigest = digest(this.csrf);
    this.basePath = basePath;
    this.#hosts = new Set([...LOOPBACK_NAMES, ...hosts.map((h) => h.toLowerCase())]);
    this.#port = options.port;
    this.api = new DashboardApi(dir, { allowActions: options.allowActions === true });
  }

  /** Accept only requests addressed to `port` from now on (once the server listens). */
  set port(port: number) {
    this.#port = port;
  }

  /** The request handler, for `http.createServer(handler)` or a service's own routing. */
  readonly handle = (req: IncomingMessage, res: ServerResponse): void => {
    this.#serve(req, res).catch((error: unknown) => this.#fail(res, true, error));
  };

  async #serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let url: URL;
    try {
      url = new URL(req.url ?? '/', 'http://dashboard.invalid');
    } catch {
      throw new DashboardError(400, 'ERR_BAD_REQUEST', 'The request URL cannot be read');
    }
    const path = `/${url.pathname.slice(this.basePath.length)}`;
    const isApi = path.startsWith('/api/');
    try {
      this.#checkHost(req);
      this.#checkToken(req, url);
      if (!url.pathname.startsWith(this.basePath)) throw new DashboardError(404, 'ERR_NOT_FOUND', 'Not a page of this dashboard');
      if (isApi) await this.#api(req, res, path, url);
      else this.#asset(req, res, path);
    } catch (error) {
      this.#fail(res, isApi, error);
      // A body nobody will read is not waited for.
      if (!req.complete) req.resume();
    }
  }

  // ---- Checks ----

  #checkHost(req: IncomingMessage): void {
    const host = req.headers.host;
    const m = typeof host === 'string' ? /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+)(?::(\d{1,5}))?$/.exec(host) : null;
    if (m === null || !this.#hosts.has(m[1]!.toLowerCase()) || (this.#port !== undefined && Number(m[2] ?? 80) !== this.#port)) {
      throw new DashboardError(
        403,
        'ERR_FORBIDDEN_HOST',
        'The request is addressed to a host this dashboard does not serve (open the URL it printed)',
      );
    }
  }

  #checkToken(req: IncomingMessage, url: URL): void {
    const header = req.headers['x-pq-token'];
    const given = typeof header === 'string' ? header : url.searchParams.get('token');
    if (given === null || given.length > 256 || !sameSecret(given, this.#tokenDigest)) {
      throw new DashboardError(401, 'ERR_TOKEN', 'This dashboard needs the token of the URL it printed at start (…/?token=…)');
    }
  }

  /** An action: POST, JSON, from this origin, with the CSRF header. */
  #checkAction(req: IncomingMessage): void {
    if (req.method !== 'POST') throw new DashboardError(405, 'ERR_METHOD', 'Actions are POST requests');
    const origin = req.headers.origin;
    const host = req.headers.host!;
    if (typeof origin !== 'string' || (origin !== `http://${host}` && origin !== `https://${host}`)) {
      throw new DashboardError(403, 'ERR_CSRF', "An action must come from the dashboard's own page (Origin)");
    }
    const site = req.headers['sec-fetch-site'];
    if (site !== undefined && site !== 'same-origin')
      throw new DashboardError(403, 'ERR_CSRF', "An action must come from the dashboard's own page (Sec-Fetch-Site)");
    const csrf = req.headers['x-pq-csrf'];
    if (typeof csrf !== 'string' || csrf.length > 256 || !sameSecret(csrf, this.#csrfDigest))
      throw new DashboardError(403, 'ERR_CSRF', "An action needs the CSRF token of the dashboard's session");
    const type = req.headers['content-type'];
    if (typeof type !== 'string' || !/^application\/json\s*(;|$)/i.test(type))
      throw new DashboardError(415, 'ERR_BAD_REQUEST', "An action's body is JSON (Content-Type: application/json)");
  }

  // ---- The page ----

  #asset(req: IncomingMessage, res: ServerResponse, path: string): void {
    if (req.method !== 'GET' && req.method !== 'HEAD') throw new DashboardError(405, 'ERR_METHOD', 'The page is read with GET');
    const asset = PAGE_ASSETS[path === '/' ? '/index.html' : path];
    if (asset === undefined || path === '/index.html') throw new DashboardError(404, 'ERR_NOT_FOUND', 'Not a page of this dashboard');
    // The token is URL-safe by construction (TOKEN_RE): it needs no escaping in an attribute.
    const body = path === '/' ? asset.body.replaceAll('__TOKEN__', this.token) : asset.body;
    res.writeHead(200, { ...SECURITY_HEADERS, 'content-type': asset.type, 'content-length': Buffer.byteLength(body) });
    res.end(req.method === 'HEAD' ? undefined : body);
  }

  // ---- The API ----

  async #api(req: IncomingMessage, res: ServerResponse, path: string, url: URL): Promise<void> {
    const api = this.api;
    const q = new Query(url);
    if (req.method === 'POST') {
      this.#checkAction(req);
      const body = await readBody(req);
      switch (path) {
        case '/api/dead-letters/redrive':
          q.done();
          return json(res, await api.redrive(selection(body)));
        case '/api/dead-letters/purge':
          q.done();
          return json(res, await api.purge(selection(body)));
        case '/api/verify':
          q.done();
          empty(body);
          return json(res, api.verify());
        default:
          throw new DashboardError(404, 'ERR_NOT_FOUND', `No action ${path}`);
      }
    }
    if (req.method !== 'GET') throw new DashboardError(405, 'ERR_METHOD', 'The API is read with GET and acted on with POST');
    switch (path) {
      case '/api/session':
        q.done();
        return json(res, { ...api.session(), csrf: this.csrf });
      case '/api/overview':
        q.done();
        return json(res, await api.overview());
      case '/api/items':
        return json(res, await api.items(itemQuery(q)));
      case '/api/item': {
        const seq = q.int('seq', 1, Number.MAX_SAFE_INTEGER, null);
        q.done();
        return json(res, await api.item(seq));
      }
      case '/api/dead-letters': {
        const after = q.int('after', 0, Number.MAX_SAFE_INTEGER, 0);
        const limit = q.int('limit', 1, LETTERS_PAGE_MAX, 50);
        q.done();
        return json(res, await api.deadLetters(after, limit));
      }
      case '/api/dead-letter': {
        const seq = q.int('seq', 1, Number.MAX_SAFE_INTEGER, null);
        q.done();
        return json(res, await api.deadLetter(seq));
      }
      case '/api/health':
        q.done();
        return json(res, await api.health());
      case '/api/groups': {
        const limit = q.int('limit', 1, GROUPS_LIMIT_MAX, GROUPS_PAGE_DEFAULT);
        q.done();
        return json(res, await api.groups(limit));
      }
      case '/api/schedules': {
        const after = q.string('after', MAX_SCHEDULE_NAME_BYTES) ?? '';
        const limit = q.int('limit', 1, SCHEDULES_LIMIT_MAX, SCHEDULES_PAGE_DEFAULT);
        q.done();
        return json(res, await api.schedules(after, limit));
      }
      default:
        throw new DashboardError(404, 'ERR_NOT_FOUND', `No API ${path}`);
    }
  }

  #fail(res: ServerResponse, isApi: boolean, error: unknown): void {
    let status = 500;
    let code = 'ERR_INTERNAL';
    let message = error instanceof Error ? error.message : String(error);
    if (error instanceof DashboardError) ({ status, code } = error);
    else if (error instanceof QueueError) {
      status = statusOf(error);
      code = error.code;
    } else if (error instanceof TypeError || error instanceof RangeError) {
      // What the owner refused as bad input (a redrive of more than a frame holds): the page's mistake.
      status = 400;
      code = 'ERR_BAD_REQUEST';
    } else message = `The dashboard failed: ${message}`;
    if (res.headersSent) {
      res.destroy();
      return;
    }
    const headers: Record<string, string> = { ...SECURITY_HEADERS };
    if (status === 401) headers['www-authenticate'] = 'Token realm="pq ui"';
    if (status === 413) headers.connection = 'close';
    const body = isApi ? jsonText({ error: { code, message } }) : `${message}\n`;
    res.writeHead(status, {
      ...headers,
      'content-type': isApi ? 'application/json; charset=utf-8' : 'text/plain; charset=utf-8',
      'content-length': Buffer.byteLength(body),
    });
    res.end(body);
  }

  async close(): Promise<void> {
    await this.api.close();
  }
}

/** JSON whose text holds no `<`, so that no sniffing reader could take it for markup. */
function jsonText(value: unknown): string {
  return JSON.stringify(value).replace(/</g, '\\u003c');
}

function json(res: ServerResponse, value: unknown): void {
  const body = jsonText(value);
  res.writeHead(200, { ...SECURITY_HEADERS, 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

/** The request body as JSON, refused past {@link BODY_BYTES_MAX} bytes before more is read. */
function readBody(req: IncomingMessage): Promise<unknown> {
  const declared = Number(req.headers['content-length'] ?? NaN);
  if (declared > BODY_BYTES_MAX)
    return Promise.reject(new DashboardError(413, 'ERR_TOO_LARGE', `A request body holds at most ${BODY_BYTES_MAX} bytes`));
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let bytes = 0;
    let refused = false;
    req.on('data', (chunk: Buffer) => {
      if (refused) return;
      bytes += chunk.length;
      if (bytes > BODY_BYTES_MAX) {
        refused = true;
        chunks.length = 0;
        reject(new DashboardError(413, 'ERR_TOO_LARGE', `A request body holds at most ${BODY_BYTES_MAX} bytes`));
        return;
      }
      chunks.push(chunk);
    });
    req.on('error', (error) => reject(error));
    req.on('end', () => {
      if (refused) return;
      const text = Buffer.concat(chunks).toString('utf8');
      try {
        resolve(text === '' ? null : (JSON.parse(text) as unknown));
      } catch {
        reject(new DashboardError(400, 'ERR_BAD_REQUEST', 'The request body is not JSON'));
      }
    });
  });
}

/** `{ "seqs": [3, 5] }` or `{ "all": true }`, nothing else. */
function selection(body: unknown): SelectionBody {
  if (body === null || typeof body !== 'object' || Array.isArray(body))
    throw new DashboardError(400, 'ERR_BAD_REQUEST', 'Expected a JSON object: {"seqs": [...]} or {"all": true}');
  const b = body as Record<string, unknown>;
  const keys = Object.keys(b);
  if (keys.length !== 1 || (keys[0] !== 'seqs' && keys[0] !== 'all'))
    throw new DashboardError(400, 'ERR_BAD_REQUEST', 'Expected exactly one of "seqs" and "all"');
  if (keys[0] === 'all') {
    if (b.all !== true) throw new DashboardError(400, 'ERR_BAD_REQUEST', '"all" must be true');
    return { seqs: null, all: true };
  }
  const seqs = b.seqs;
  if (!Array.isArray(seqs) || seqs.length === 0 || seqs.length > SEQS_PER_ACTION_MAX)
    throw new DashboardError(400, 'ERR_BAD_REQUEST', `"seqs" must be an array of 1 to ${SEQS_PER_ACTION_MAX} seqs`);
  const seen = new Set<number>();
  for (const seq of seqs) {
    if (typeof seq !== 'number' || !Number.isSafeInteger(seq) || seq < 1)
      throw new DashboardError(400, 'ERR_BAD_REQUEST', `Every seq must be a positive integer, got ${JSON.stringify(seq)}`);
    if (seen.has(seq)) throw new DashboardError(400, 'ERR_BAD_REQUEST', `Seq ${seq} is named twice`);
    seen.add(seq);
  }
  return { seqs: [...seqs] as number[], all: false };
}

function empty(body: unknown): void {
  if (body !== null && (typeof body !== 'object' || Array.isArray(body) || Object.keys(body as object).length > 0))
    throw new DashboardError(400, 'ERR_BAD_REQUEST', 'This action takes no arguments');
}

/** The query string of an API request: each parameter read once, checked; any other is refused. */
class Query {
  readonly #params: URLSearchParams;
  readonly #read = new Set<string>(['token']);

  constructor(url: URL) {
    this.#params = url.searchParams;
    for (const name of new Set(this.#params.keys())) {
      if (this.#params.getAll(name).length > 1) throw new DashboardError(400, 'ERR_BAD_REQUEST', `Parameter ${name} is given twice`);
    }
  }

  string(name: string, maxBytes: number): string | null {
    this.#read.add(name);
    const v = this.#params.get(name);
    if (v === null || v === '') return null;
    if (Buffer.byteLength(v) > maxBytes)
      throw new DashboardError(400, 'ERR_BAD_REQUEST', `Parameter ${name} is longer than ${maxBytes} bytes`);
    return v;
  }

  /** An integer from `min` to `max`; `fallback` when absent (null: required). */
  int(name: string, min: number, max: number, fallback: number | null): number {
    const v = this.string(name, 32);
    if (v === null) {
      if (fallback === null) throw new DashboardError(400, 'ERR_BAD_REQUEST', `Parameter ${name} is required`);
      return fallback;
    }
    const n = Number(v);
    if (!/^-?\d+$/.test(v) || !Number.isSafeInteger(n) || n < min || n > max)
      throw new DashboardError(
        400,
        'ERR_BAD_REQUEST',
        `Parameter ${name} must be an integer from ${min} to ${max}, got ${JSON.stringify(v)}`,
      );
    return n;
  }

  /** Refuse a parameter nobody read. */
  done(): void {
    for (const name of this.#params.keys())
      if (!this.#read.has(name)) throw new DashboardError(400, 'ERR_BAD_REQUEST', `Unknown parameter ${name}`);
  }
}

function itemQuery(q: Query): ItemQuery {
  const after = q.int('after', 0, Number.MAX_SAFE_INTEGER, 0);
  const limit = q.int('limit', 1, PAGE_ITEMS_MAX, 50);
  const state = q.string('state', 16);
  if (state !== null && state !== 'due' && state !== 'delayed')
    throw new DashboardError(400, 'ERR_BAD_REQUEST', `Parameter state must be due or delayed, got ${JSON.stringify(state)}`);
  const priority = q.string('priority', 8) === null ? null : q.int('priority', PRIORITY_MIN, PRIORITY_MAX, 0);
  const keyPrefix = q.string('key', MAX_KEY_BYTES);
  const group = q.string('group', 1024);
  q.done();
  return { after, limit, state: state as ItemState | null, priority, keyPrefix, group };
}
