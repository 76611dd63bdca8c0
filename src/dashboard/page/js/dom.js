// @ts-check
// The dashboard page's helpers: building elements, talking to the API, formatting, and showing
// payloads. Every text that comes from the queue (payloads, reasons, keys) goes into the page as a
// text node or an attribute value, never as markup: nothing here ever sets innerHTML.
'use strict';

/** @typedef {string | number | Node | null | undefined | false} Child */
/** @typedef {Record<string, string | number | boolean | null | undefined | ((event: Event) => void)>} Attrs */

/**
 * @param {Element} el
 * @param {Attrs | null} attrs
 */
function setAttrs(el, attrs) {
  if (attrs === null) return;
  for (const [name, value] of Object.entries(attrs)) {
    if (typeof value === 'function') el.addEventListener(name.slice(2), value);
    else if (value === true) el.setAttribute(name, '');
    else if (value !== false && value !== null && value !== undefined) el.setAttribute(name, String(value));
  }
}

/**
 * @param {Node} el
 * @param {Child[]} children
 */
function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    el.appendChild(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
  }
}

/**
 * An HTML element; strings among the children become text nodes.
 * @param {string} tag
 * @param {Attrs | null} [attrs]
 * @param {...Child} children
 * @returns {HTMLElement}
 */
function h(tag, attrs = null, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

const SVG_NS = 'http://www.w3.org/2000/svg';

/**
 * An SVG element.
 * @param {string} tag
 * @param {Attrs | null} [attrs]
 * @param {...Child} children
 * @returns {SVGElement}
 */
function s(tag, attrs = null, ...children) {
  const el = /** @type {SVGElement} */ (document.createElementNS(SVG_NS, tag));
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

/**
 * Replace the children of `el`.
 * @param {Element} el
 * @param {...Child} children
 */
function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
}

// ---- Talking to the dashboard's API ----

/** The token of the URL the page was opened with: every request carries it. */
const TOKEN = new URLSearchParams(location.search).get('token') ?? '';

/** The session: CSRF token for actions, whether actions are allowed. */
const session = { csrf: '', allowActions: false, dir: '', seqsPerActionMax: 4096 };

class ApiError extends Error {
  /**
   * @param {number} status
   * @param {string} code
   * @param {string} message
   */
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/**
 * @param {Response} response
 * @returns {Promise<any>}
 */
async function answer(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    // Not JSON: said below.
  }
  if (!response.ok) {
    const error = body?.error ? body.error : { code: `HTTP_${response.status}`, message: response.statusText };
    throw new ApiError(response.status, String(error.code), String(error.message));
  }
  return body;
}

/**
 * GET `./api/<path>` with `params`.
 * @param {string} path
 * @param {Record<string, string | number | null | undefined>} [params]
 * @returns {Promise<any>}
 */
async function getJson(path, params = {}) {
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined && v !== '') query.set(k, String(v));
  const q = query.toString();
  const response = await fetch(`./api/${path}${q === '' ? '' : `?${q}`}`, {
    headers: { 'x-pq-token': TOKEN },
    cache: 'no-store',
    credentials: 'omit',
  });
  return answer(response);
}

/**
 * POST an action to `./api/<path>`.
 * @param {string} path
 * @param {unknown} body
 * @returns {Promise<any>}
 */
async function postJson(path, body) {
  const response = await fetch(`./api/${path}`, {
    method: 'POST',
    headers: { 'x-pq-token': TOKEN, 'x-pq-csrf': session.csrf, 'content-type': 'application/json' },
    body: JSON.stringify(body),
    cache: 'no-store',
    credentials: 'omit',
  });
  return answer(response);
}

// ---- Status line and confirmation ----

/**
 * Say `text` in the status line (an error in red).
 * @param {string} text
 * @param {boolean} [isError]
 */
function say(text, isError = false) {
  const el = /** @type {HTMLElement} */ (document.getElementById('status'));
  el.textContent = text;
  el.classList.toggle('error', isError);
}

/** @param {unknown} error */
function sayError(error) {
  if (error instanceof ApiError) say(`${error.code}: ${error.message}`, true);
  else say(String(error instanceof Error ? error.message : error), true);
}

/**
 * Ask the user to confirm `text`; resolves with the answer.
 * @param {string} text
 * @param {string} okLabel
 * @returns {Promise<boolean>}
 */
function confirmAction(text, okLabel) {
  const dialog = /** @type {HTMLDialogElement} */ (document.getElementById('confirm'));
  const ok = /** @type {HTMLButtonElement} */ (document.getElementById('confirm-ok'));
  const cancel = /** @type {HTMLButtonElement} */ (document.getElementById('confirm-cancel'));
  /** @type {HTMLElement} */ (document.getElementById('confirm-text')).textContent = text;
  ok.textContent = okLabel;
  return new Promise((resolve) => {
    /** @param {boolean} yes */
    const done = (yes) => {
      ok.onclick = null;
      cancel.onclick = null;
      dialog.onclose = null;
      if (dialog.open) dialog.close();
      resolve(yes);
    };
    ok.onclick = () => done(true);
    cancel.onclick = () => done(false);
    dialog.onclose = () => done(false);
    dialog.showModal();
    cancel.focus();
  });
}

/**
 * Show `body` in the detail dialog under `title`.
 * @param {string} title
 * @param {Node} body
 */
function showDetail(title, body) {
  const dialog = /** @type {HTMLDialogElement} */ (document.getElementById('detail'));
  /** @type {HTMLElement} */ (document.getElementById('detail-title')).textContent = title;
  fill(/** @type {HTMLElement} */ (document.getElementById('detail-body')), body);
  /** @type {HTMLButtonElement} */ (document.getElementById('detail-close')).onclick = () => dialog.close();
  if (!dialog.open) dialog.showModal();
}

// ---- Formatting ----

/** @param {number | null | undefined} n */
function fmtInt(n) {
  return n === null || n === undefined ? '—' : Math.round(n).toLocaleString('en-US');
}

/** @param {number | null | undefined} n */
function fmtBytes(n) {
  if (n === null || n === undefined) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return u === 0 ? `${v} B` : `${v.toFixed(1)} ${units[u]}`;
}

/** @param {number} n */
function fmtRate(n) {
  return n >= 100 ? fmtInt(n) : n >= 10 ? n.toFixed(1) : n.toFixed(2);
}

/** A duration in milliseconds, in the unit that reads best. @param {number} ms */
function fmtMs(ms) {
  if (ms < 1) return `${(ms * 1000).toFixed(0)} µs`;
  if (ms < 1000) return `${ms < 10 ? ms.toFixed(1) : ms.toFixed(0)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  return `${(ms / 60_000).toFixed(1)} min`;
}

/** A time, ms since the epoch, as ISO 8601 in UTC; a dash for none. @param {number | null | undefined} ms */
function fmtTime(ms) {
  return ms === null || ms === undefined
    ? '—'
    : new Date(ms)
        .toISOString()
        .replace('T', ' ')
        .replace(/\.\d+Z$/, 'Z');
}

// ---- Payloads: text, JSON or hex; never markup ----

/** @param {string} b64 @returns {Uint8Array} */
function fromBase64(b64) {
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/**
 * The payload as text, and whether it is valid UTF-8 (a cut at the preview's end aside).
 * @param {Uint8Array} bytes
 * @returns {{ text: string, utf8: boolean }}
 */
function asText(bytes) {
  try {
    return { text: new TextDecoder('utf-8', { fatal: true }).decode(bytes), utf8: true };
  } catch {
    return { text: new TextDecoder('utf-8').decode(bytes), utf8: false };
  }
}

/** One line for a table cell: control characters shown as symbols, cut at `max` characters. @param {string} text @param {number} max */
function oneLine(text, max) {
  // eslint-disable-next-line no-control-regex
  const shown = text.replace(/[\u0000-\u001f\u007f]/g, (c) =>
    c === '\n' ? '⏎' : c === '\t' ? '⇥' : String.fromCharCode(0x2400 + (c === '\u007f' ? 0x21 : c.charCodeAt(0))),
  );
  return shown.length > max ? `${shown.slice(0, max)}…` : shown;
}

/** @param {Uint8Array} bytes */
function asHex(bytes) {
  const lines = [];
  const limit = Math.min(bytes.length, 64 * 1024);
  for (let at = 0; at < limit; at += 16) {
    const row = bytes.subarray(at, Math.min(at + 16, limit));
    const hex = Array.from(row, (b) => b.toString(16).padStart(2, '0')).join(' ');
    const ascii = Array.from(row, (b) => (b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : '.')).join('');
    lines.push(`${at.toString(16).padStart(8, '0')}  ${hex.padEnd(47)}  |${ascii}|`);
  }
  if (bytes.length > limit) lines.push(`… ${fmtInt(bytes.length - limit)} more byte(s) not shown`);
  return lines.join('\n');
}

/**
 * A short preview of a payload for a table cell.
 * @param {string} b64
 */
function payloadPreview(b64) {
  const bytes = fromBase64(b64);
  const { text, utf8 } = asText(bytes.subarray(0, 256));
  return utf8 || bytes.length === 0
    ? oneLine(text, 120)
    : `hex ${Array.from(bytes.subarray(0, 24), (b) => b.toString(16).padStart(2, '0')).join('')}${bytes.length > 24 ? '…' : ''}`;
}

/**
 * A payload viewer: Text, JSON and Hex tabs over the bytes in `b64` (`size` in all).
 * @param {string} b64
 * @param {number} size
 * @param {boolean} truncated
 * @returns {HTMLElement}
 */
function payloadView(b64, size, truncated) {
  const bytes = fromBase64(b64);
  const { text, utf8 } = asText(bytes);
  /** @type {string | null} */
  let pretty = null;
  let jsonError = '';
  if (!truncated) {
    try {
      pretty = JSON.stringify(JSON.parse(text), null, 2);
    } catch (error) {
      jsonError = error instanceof Error ? error.message : String(error);
    }
  } else jsonError = 'only the start of the payload is shown';
  const pre = h('pre', { class: 'payload', 'data-payload': '' });
  const note = h('p', { class: 'note' });
  /** @type {Record<string, () => void>} */
  const views = {
    text: () => {
      pre.textContent = text;
      note.textContent = utf8 ? '' : 'Not valid UTF-8: undecodable bytes are shown as �.';
    },
    json: () => {
      pre.textContent = pretty ?? '';
      note.textContent = pretty === null ? `Not JSON: ${jsonError}.` : '';
    },
    hex: () => {
      pre.textContent = asHex(bytes);
      note.textContent = '';
    },
  };
  const tabs = h('div', { class: 'tabs', role: 'tablist' });
  /** @param {string} name */
  const show = (name) => {
    for (const b of tabs.querySelectorAll('button')) b.classList.toggle('active', b.getAttribute('data-view') === name);
    views[name]?.();
  };
  for (const [name, label] of [
    ['text', 'Text'],
    ['json', 'JSON'],
    ['hex', 'Hex'],
  ]) {
    tabs.appendChild(h('button', { type: 'button', 'data-view': name, onclick: () => show(name) }, label));
  }
  show(pretty !== null ? 'json' : utf8 ? 'text' : 'hex');
  return h(
    'div',
    null,
    h('p', { class: 'note' }, `${fmtInt(size)} byte(s)${truncated ? `; the first ${fmtInt(bytes.length)} shown` : ''}`),
    tabs,
    pre,
    note,
  );
}

/**
 * A table: `head` labels (a label starting with '#' is a numeric column), then rows of cells.
 * @param {string[]} head
 * @param {Child[][]} rows
 * @param {Attrs | null} [attrs]
 */
function table(head, rows, attrs = null) {
  return h(
    'table',
    attrs,
    h(
      'thead',
      null,
      h('tr', null, ...head.map((label) => h('th', label.startsWith('#') ? { class: 'num' } : null, label.replace(/^#/, '')))),
    ),
    h(
      'tbody',
      null,
      ...rows.map((cells) => h('tr', null, ...cells.map((c, i) => h('td', head[i]?.startsWith('#') ? { class: 'num' } : null, c)))),
    ),
  );
}

/**
 * Facts as a definition list.
 * @param {[string, Child][]} pairs
 */
function facts(pairs) {
  const dl = h('dl', { class: 'facts' });
  for (const [k, v] of pairs) dl.append(h('dt', null, k), h('dd', null, v));
  return dl;
}
