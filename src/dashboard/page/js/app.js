// @ts-check
// The dashboard page: its pages by the URL's hash (#overview, #items, #dead-letters, #groups,
// #schedules, #health), the header, and the overview's poll.
'use strict';

const POLL_MS = 1000;
/** The groups page asks the owner this often. */
const GROUPS_POLL_MS = 2000;

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
  if (generation === app.generation && app.page === 'overview')
    app.timer = setTimeout(() => void pollOverview(), document.hidden ? POLL_MS * 5 : POLL_MS);
}

async function pollGroups() {
  const generation = app.generation;
  let live = false;
  try {
    const g = await getJson('groups', { limit: GROUPS_SHOWN });
    if (generation !== app.generation) return;
    live = g.view === 'live' && g.report !== null;
    renderGroups(main(), g);
    if (document.getElementById('status')?.classList.contains('error')) say('');
  } catch (error) {
    if (generation === app.generation) sayError(error);
  }
  // A form being typed into is not redrawn under the user's hands while nothing changes: only live figures are polled.
  if (generation === app.generation && app.page === 'groups' && live)
    app.timer = setTimeout(() => void pollGroups(), document.hidden ? GROUPS_POLL_MS * 5 : GROUPS_POLL_MS);
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
  // The other pages need to know whether a process serves the queue. Those whose content depends
  // on it (actions through an owner, its groups and schedules) ask now, not an older overview.
  if (app.overview === null || page !== 'items') {
    try {
      app.overview = await getJson('overview');
      showHeader(app.overview);
    } catch (error) {
      sayError(error);
      if (app.overview === null) return;
    }
  }
  if (page === 'items') return renderItems(main(), app.overview.extras.groups);
  if (page === 'dead-letters') return renderDeadLetters(main(), app.overview.view === 'live');
  if (page === 'health') return renderHealth(main());
  if (page === 'groups') return pollGroups();
  return renderSchedules(main());
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
