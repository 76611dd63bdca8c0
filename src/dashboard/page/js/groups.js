// @ts-check
// Groups: those with items in flight or waiting aside (for a consumer's groupConcurrency, or for
// their rate window), busiest first, as the process that has the queue open reports them. Which
// items are in flight lives in that process's memory: without it the page says so, and the items
// page still filters the stored items by group.
'use strict';

/** Groups the page lists (the busiest; the owner says how many there are in all). */
const GROUPS_SHOWN = 50;

/**
 * Show the items of `group` on the items page.
 * @param {string} group
 */
function itemsOfGroup(group) {
  itemsState.filters = { state: '', priority: '', key: '', group };
  itemsState.after = 0;
  itemsState.back = [];
  location.hash = 'items';
}

/** A field and a button that open the items page filtered by a group. */
function groupFilterForm() {
  const input = /** @type {HTMLInputElement} */ (h('input', { name: 'group', type: 'text', placeholder: 'group', maxlength: 64 }));
  const form = h(
    'form',
    { class: 'toolbar', 'data-form': 'group-items' },
    h('label', null, 'Group', input),
    h('button', { type: 'submit', 'data-action': 'group-items' }, 'Show its items'),
  );
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    if (input.value !== '') itemsOfGroup(input.value);
  });
  return form;
}

/** @param {{ max: number, perMs: number, by: string } | null} limit */
function rateLimitText(limit) {
  return limit === null
    ? 'none'
    : `${fmtInt(limit.max)} per ${fmtMs(limit.perMs)}, ${limit.by === 'group' ? 'each group' : 'the whole queue'}`;
}

/**
 * @param {HTMLElement} main
 * @param {any} g the groups view (src/dashboard/api.ts, `GroupsView`)
 */
function renderGroups(main, g) {
  // The figures are redrawn at each poll; the form below them stays, with what is typed into it.
  let body = /** @type {HTMLElement | null} */ (main.querySelector('[data-groups-body]'));
  if (body === null) {
    body = h('div', { 'data-groups-body': '' });
    fill(
      main,
      h('h2', null, 'Groups'),
      body,
      h('h3', null, 'Items of a group'),
      h('p', { class: 'note' }, 'The stored items of a group, on the items page:'),
      groupFilterForm(),
    );
  }
  /** @type {Child[]} */
  const parts = [];
  const r = g.report;
  if (g.view !== 'live') {
    parts.push(
      h(
        'p',
        { class: 'banner', 'data-banner': 'read-only' },
        `In-flight figures need an owner: no process serves the queue now (${g.absent}). Which items of a group are in flight, and which wait for their group's limit or rate window, is known only to the process that has the queue open.`,
      ),
    );
    fill(body, ...parts);
    return;
  }
  if (r === null) {
    parts.push(
      h(
        'p',
        { class: 'note' },
        `Process ${g.pid ?? '(unknown)'} has the queue open and reports no groups (a release of persistent-queue before groups were reported).`,
      ),
    );
    fill(body, ...parts);
    return;
  }
  parts.push(
    h(
      'p',
      { class: 'note' },
      `As process ${g.pid ?? '(unknown)'} reported them at ${fmtTime(g.at)}: the groups with items in flight or waiting aside, busiest first. Refreshed every few seconds.`,
    ),
  );
  parts.push(
    h(
      'div',
      { class: 'cards' },
      card('groups', 'Groups active', fmtInt(r.total), 'items in flight or waiting'),
      card('groupsInFlight', 'In flight', fmtInt(r.inFlight), 'items of every group'),
      card('groupLimited', 'Waiting: group limit', fmtInt(r.groupLimited), 'at their groupConcurrency'),
      card('rateLimited', 'Waiting: rate limit', fmtInt(r.rateLimited), "for their group's window"),
      card('rateLimit', 'Rate limit', rateLimitText(r.rateLimit)),
    ),
  );
  if (r.queueRateWaitMs !== null && r.queueRateWaitMs > 0)
    parts.push(
      h(
        'p',
        { class: 'banner', 'data-banner': 'queue-rate' },
        `The queue's rate window is full: nothing is handed out for ${fmtMs(r.queueRateWaitMs)}.`,
      ),
    );
  if (r.groups.length === 0)
    parts.push(h('p', { class: 'note', 'data-info': 'groups' }, 'No group has items in flight or waiting aside now.'));
  else {
    const rows = r.groups.map((/** @type {any} */ x) =>
      h(
        'tr',
        { 'data-group': x.group },
        h('td', { class: 'mono', 'data-name': '' }, oneLine(x.group, 80)),
        h('td', { class: 'num', 'data-in-flight': '' }, fmtInt(x.inFlight)),
        h('td', { class: 'num' }, fmtInt(x.groupLimited)),
        h('td', { class: 'num' }, fmtInt(x.rateLimited)),
        h('td', null, x.rateWaitMs > 0 ? `full for ${fmtMs(x.rateWaitMs)}` : '—'),
        h(
          'td',
          { class: 'actions' },
          h('button', { type: 'button', 'data-action': 'items', onclick: () => itemsOfGroup(x.group) }, 'Items'),
        ),
      ),
    );
    const head = ['Group', '#In flight', '#Waiting: group limit', '#Waiting: rate limit', 'Rate window', ''];
    parts.push(
      h(
        'table',
        { 'data-table': 'groups' },
        h('thead', null, h('tr', null, ...head.map((l) => h('th', l.startsWith('#') ? { class: 'num' } : null, l.replace(/^#/, ''))))),
        h('tbody', null, ...rows),
      ),
    );
    parts.push(
      h(
        'p',
        { class: 'note', 'data-info': 'groups' },
        r.total > r.groups.length ? `The ${fmtInt(r.groups.length)} busiest of ${fmtInt(r.total)} groups.` : `${fmtInt(r.total)} group(s).`,
      ),
    );
  }
  fill(body, ...parts);
}
