// @ts-check
// Schedules: each schedule's name, its slots (a period or a cron expression and time zone), when it
// fires next, how far it has fired, its catch-up policy and its items' priority and group; as the
// process that has the queue open runs them, or, with none, as the store holds them (what
// `pq schedules DIR` lists). A page at a time, by name.
'use strict';

const schedulesState = {
  /** The page lists the schedules whose names sort after this ('' : from the first). */
  after: '',
  /** The `after` of the pages before, for Previous. */
  back: /** @type {string[]} */ ([]),
  limit: 50,
};

/** A period, in the largest unit it is a whole number of. @param {number} ms */
function fmtPeriod(ms) {
  for (const [unit, size] of /** @type {[string, number][]} */ ([
    ['d', 86_400_000],
    ['h', 3_600_000],
    ['min', 60_000],
    ['s', 1000],
  ])) {
    if (ms >= size && ms % size === 0) return `${fmtInt(ms / size)} ${unit}`;
  }
  return `${fmtInt(ms)} ms`;
}

/** @param {any} s a schedule, as `tx.schedules()` lists it */
function specText(s) {
  if (typeof s.everyMs === 'number') return `every ${fmtPeriod(s.everyMs)}`;
  if (typeof s.cron === 'string') return `cron ${s.cron} (${s.tz})`;
  return '—';
}

/**
 * When `s` fires next, as of `at`.
 * @param {any} s
 * @param {number} at
 * @param {boolean} live
 */
function nextText(s, at, live) {
  if (s.nextAt === null) return `not fired here: ${s.problem ?? 'unknown'}`;
  if (s.nextAt > at) return fmtTime(s.nextAt);
  return `${fmtTime(s.nextAt)} (${live ? 'due now' : 'passed: fires when a process opens the queue'})`;
}

/** @param {HTMLElement} main */
async function renderSchedules(main) {
  const info = h('p', { class: 'note', 'data-info': 'schedules' });
  const list = h('div', { 'data-list': 'schedules' });
  const pager = h('div', { class: 'pager' });
  const about = h('p', { class: 'note' });
  fill(main, h('h2', null, 'Schedules'), about, info, list, pager);

  async function load() {
    try {
      show(await getJson('schedules', { after: schedulesState.after, limit: schedulesState.limit }));
    } catch (error) {
      sayError(error);
    }
  }

  /** @param {any} v the schedules view (src/dashboard/api.ts, `SchedulesView`) */
  function show(v) {
    const live = v.view === 'live';
    about.textContent = live
      ? `As process ${v.pid ?? '(unknown)'} runs them, at ${fmtTime(v.at)}. Fired through: every slot up to that time fired or was passed over.`
      : `As the store holds them, read at ${fmtTime(v.at)}: no process serves the queue (${v.absent}), and schedules fire only while one has it open. Fired through: every slot up to that time fired or was passed over. pq schedules ${session.dir} lists the same.`;
    const page = v.page;
    if (page === null) {
      fill(list);
      fill(pager);
      info.textContent = `Process ${v.pid ?? '(unknown)'} has the queue open and reports no schedules (its store keeps none, or a release of persistent-queue before schedules were reported).`;
      return;
    }
    const items = page.schedules;
    info.textContent =
      page.total === 0
        ? 'No schedules. tx.schedule(name, spec, value) adds one.'
        : `${fmtInt(page.total)} schedule(s)${items.length < page.total ? `; ${fmtInt(items.length)} shown here` : ''}.`;
    const rows = items.map((/** @type {any} */ s) =>
      h(
        'tr',
        { 'data-schedule': s.name },
        h('td', { class: 'mono', 'data-name': '' }, oneLine(s.name, 80)),
        h('td', { class: 'mono' }, specText(s)),
        h('td', { 'data-next': '' }, nextText(s, v.at, live)),
        h('td', null, fmtTime(s.firedThrough)),
        h('td', null, s.catchUp === 'all' ? `all (at most ${fmtInt(s.maxCatchUp)})` : s.catchUp),
        h('td', { class: 'num' }, String(s.priority)),
        h('td', { class: 'mono' }, typeof s.group === 'string' ? oneLine(s.group, 40) : '—'),
      ),
    );
    const head = ['Name', 'Slots', 'Next fire', 'Fired through', 'Catch-up', '#Priority', 'Group'];
    fill(
      list,
      items.length === 0
        ? null
        : h(
            'table',
            { 'data-table': 'schedules' },
            h('thead', null, h('tr', null, ...head.map((l) => h('th', l.startsWith('#') ? { class: 'num' } : null, l.replace(/^#/, ''))))),
            h('tbody', null, ...rows),
          ),
    );
    const last = items[items.length - 1]?.name;
    fill(
      pager,
      h(
        'button',
        {
          type: 'button',
          'data-action': 'previous',
          disabled: schedulesState.back.length === 0,
          onclick: () => {
            schedulesState.after = schedulesState.back.pop() ?? '';
            void load();
          },
        },
        'Previous',
      ),
      h(
        'button',
        {
          type: 'button',
          'data-action': 'next',
          disabled: !page.more || last === undefined,
          onclick: () => {
            if (last === undefined) return;
            schedulesState.back.push(schedulesState.after);
            schedulesState.after = last;
            void load();
          },
        },
        'Next',
      ),
      h('button', { type: 'button', 'data-action': 'refresh', onclick: () => void load() }, 'Refresh'),
    );
  }

  await load();
}
