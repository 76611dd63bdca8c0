// @ts-check
// The dashboard page: its pages by the URL's hash (#overview, #items, #dead-letters, #groups,
// #schedules, #health), the header, and the overview's poll.
'use strict';

const POLL_MS = 1000;

const app = {
  page: '',
  /** The last overview: whether the view is live, which further pages exist. */
  /** @type {any} */
  overview: null,
  /** @type {ReturnType<typeof setTimeout> | null} */
  timer: null,
  /** Bumped at each page change: a load for an older page draws nothing. */
  generation: 0,
};

const PAGES = ['overview', 'items', 'dead-letters', 'groups', 'schedules', 'health'];

function main() {
  return /** @type {HTMLElement} */ (document.getElementById('main'));
}

/** @param {any} o */
function showHeader(o) {
  /** @type {HTMLElement} */ (document.getElementById('dir')).textContent = o.dir;
  const view = /** @type {HTMLElement} */ (document.getElementById('view'));
  view.textContent = o.view === 'live' ? `live: process ${o.pid ?? '(unknown)'}` : 'read-only view';
  view.className = `badge ${o.view === 'live' ? 'live' : 'readonly'}`;
  view.setAttribute('data-view', o.view);
  for (const name of ['groups', 'schedules']) {
    const link = /** @type {HTMLElement} */ (document.querySelector(`#nav a[data-page="${name}"]`));
    link.hidden = !o.extras[name];
  }
}

async function pollOverview() {
  const generation = app.generation;
  try {
    const o = await getJson('overview');
    app.overview = o;
    showHeader(o);
    if (generation !== app.generation) return;
    if (app.page === 'overview') {
      renderOverview(main(), o);
      if (document.getElementById('status')?.classList.contains('error')) say('');
    }
  } catch (error) {
    if (generation === app.generation) sayError(error);
  }
  if (generation === app.generation && app.page === 'overview') app.timer = setTimeout(() => void pollOverview(), document.hidden ? POLL_MS * 5 : POLL_MS);
}

/** @param {string} name */
async function renderExtra(name) {
  const generation = app.generation;
  try {
    const x = await getJson('extras');
    if (generation !== app.generation) return;
    const value = x[name];
    const title = name === 'groups' ? 'Groups' : 'Schedules';
    fill(main(), h('h2', null, title), value === null ? h('p', { class: 'note' }, `The process that has the queue open reports no ${name}.`) : anyValue(value));
  } catch (error) {
    sayError(error);
  }
}

async function route() {
  const wanted = location.hash.replace(/^#/, '');
  const page = PAGES.includes(wanted) ? wanted : 'overview';
  app.page = page;
  app.generation++;
  if (app.timer !== null) clearTimeout(app.timer);
  app.timer = null;
  for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.getAttribute('data-page') === page);
  say('');
  fill(main(), h('p', { class: 'note' }, 'Loading…'));
  if (page === 'overview') return pollOverview();
  // The other pages need to know whether a process serves the queue.
  if (app.overview === null) {
    try {
      app.overview = await getJson('overview');
      showHeader(app.overview);
    } catch (error) {
      sayError(error);
      return;
    }
  }
  if (page === 'items') return renderItems(main(), app.overview.extras.groups);
  if (page === 'dead-letters') {
    // Whether actions can go through an owner is asked now, not taken from an older overview.
    try {
      app.overview = await getJson('overview');
      showHeader(app.overview);
    } catch (error) {
      sayError(error);
    }
    return renderDeadLetters(main(), app.overview.view === 'live');
  }
  if (page === 'health') return renderHealth(main());
  return renderExtra(page);
}

async function start() {
  try {
    Object.assign(session, await getJson('session'));
  } catch (error) {
    sayError(error);
    return;
  }
  const mode = /** @type {HTMLElement} */ (document.getElementById('mode'));
  mode.textContent = session.allowActions ? 'actions allowed' : 'read-only dashboard';
  mode.setAttribute('data-mode', session.allowActions ? 'actions' : 'read-only');
  window.addEventListener('hashchange', () => void route());
  await route();
}

void start();
