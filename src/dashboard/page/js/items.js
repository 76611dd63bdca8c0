// @ts-check
// Items: pages of the store's unacked items, read from its files, filtered by state, priority, key
// (prefix) and group. The server reads a bounded number of items per page, so a page of a filter
// that matches little may stop early and say how far it looked; Next goes on from there.
'use strict';

const itemsState = {
  /** Items with a seq above this. */
  after: 0,
  /** The `after` of the pages before, for Previous. */
  back: /** @type {number[]} */ ([]),
  limit: 50,
  /** @type {Record<string, string>} */
  filters: { state: '', priority: '', key: '', group: '' },
  /** The last page shown. */
  /** @type {any} */
  page: null,
};

/**
 * @param {HTMLElement} main
 * @param {boolean} groups whether the store's items carry groups
 */
async function renderItems(main, groups) {
  const form = h('form', { class: 'toolbar', 'data-form': 'items-filter' });
  const stateSelect = /** @type {HTMLSelectElement} */ (
    h(
      'select',
      { name: 'state' },
      h('option', { value: '' }, 'any'),
      h('option', { value: 'due' }, 'due'),
      h('option', { value: 'delayed' }, 'delayed'),
    )
  );
  stateSelect.value = itemsState.filters.state ?? '';
  const priority = /** @type {HTMLInputElement} */ (
    h('input', { name: 'priority', type: 'number', min: -128, max: 127, placeholder: 'any' })
  );
  priority.value = itemsState.filters.priority ?? '';
  const key = /** @type {HTMLInputElement} */ (h('input', { name: 'key', type: 'text', placeholder: 'starts with', maxlength: 255 }));
  key.value = itemsState.filters.key ?? '';
  const group = /** @type {HTMLInputElement} */ (h('input', { name: 'group', type: 'text', placeholder: 'any', maxlength: 255 }));
  group.value = itemsState.filters.group ?? '';
  const from = /** @type {HTMLInputElement} */ (h('input', { name: 'from', type: 'number', min: 1, placeholder: 'seq' }));
  form.append(
    h('label', null, 'State', stateSelect),
    h('label', null, 'Priority', priority),
    h('label', null, 'Key', key),
    groups ? h('label', null, 'Group', group) : '',
    h('button', { type: 'submit', class: 'primary', 'data-action': 'filter' }, 'Filter'),
    h('label', null, 'From seq', from),
    h('button', { type: 'button', 'data-action': 'go', onclick: () => goTo(Math.max(0, Number(from.value || 1) - 1)) }, 'Go'),
  );
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    itemsState.filters = { state: stateSelect.value, priority: priority.value, key: key.value, group: groups ? group.value : '' };
    goTo(0);
  });
  const info = h('p', { class: 'note', 'data-info': 'items' });
  const list = h('div', { 'data-list': 'items' });
  const pager = h('div', { class: 'pager' });
  fill(
    main,
    h('h2', null, 'Items'),
    h(
      'p',
      { class: 'note' },
      "Unacked items, oldest first, as the store's files hold them. Due: ready, or in flight in the process that has the queue open (its files do not say which). Click an item to see its payload.",
    ),
    form,
    info,
    list,
    pager,
  );

  /** @param {number} after */
  function goTo(after) {
    itemsState.back = [];
    itemsState.after = after;
    void load();
  }

  async function load() {
    try {
      const f = itemsState.filters;
      const page = await getJson('items', {
        after: itemsState.after,
        limit: itemsState.limit,
        state: f.state,
        priority: f.priority,
        key: f.key,
        group: f.group,
      });
      itemsState.page = page;
      show(page);
    } catch (error) {
      sayError(error);
    }
  }

  /** @param {any} page */
  function show(page) {
    const items = page.items;
    const first = items[0]?.seq;
    const last = items[items.length - 1]?.seq;
    const filtered = Object.values(itemsState.filters).some((v) => v !== '');
    info.textContent =
      (items.length === 0 ? 'No items here' : `Seq ${fmtInt(first)} … ${fmtInt(last)}: ${fmtInt(items.length)} item(s) shown`) +
      ` of ${fmtInt(page.unacked)} unacked${filtered ? ' (before filtering)' : ''}; next seq ${fmtInt(page.nextSeq)}.` +
      (!page.end && items.length < itemsState.limit ? ` Looked through seq ${fmtInt(page.scannedThrough)}: Next goes on from there.` : '');
    const rows = items.map((/** @type {any} */ it) => {
      const tr = h(
        'tr',
        { class: 'clickable', 'data-seq': it.seq },
        h('td', { class: 'num' }, fmtInt(it.seq)),
        h('td', null, it.state === 'delayed' ? `delayed` : 'due'),
        h('td', { class: 'num' }, String(it.priority)),
        h('td', null, it.notBefore === null ? '—' : fmtTime(it.notBefore)),
        h('td', { class: 'mono' }, it.key === null ? '—' : it.key),
        groups ? h('td', null, it.group === null ? '—' : it.group) : null,
        h('td', { class: 'num' }, fmtBytes(it.size)),
        h('td', { class: 'preview' }, payloadPreview(it.payload)),
      );
      tr.addEventListener('click', () => void openItem(it.seq));
      return tr;
    });
    const head = ['#Seq', 'State', '#Priority', 'Not before', 'Key', ...(groups ? ['Group'] : []), '#Size', 'Payload'];
    fill(
      list,
      h(
        'table',
        { 'data-table': 'items' },
        h('thead', null, h('tr', null, ...head.map((l) => h('th', l.startsWith('#') ? { class: 'num' } : null, l.replace(/^#/, ''))))),
        h('tbody', null, ...rows),
      ),
    );
    const next = page.end ? null : page.scannedThrough;
    fill(
      pager,
      h('button', { type: 'button', 'data-action': 'first', disabled: itemsState.after === 0, onclick: () => goTo(0) }, 'First'),
      h(
        'button',
        {
          type: 'button',
          'data-action': 'previous',
          disabled: itemsState.back.length === 0,
          onclick: () => {
            itemsState.after = itemsState.back.pop() ?? 0;
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
          disabled: next === null,
          onclick: () => {
            if (next === null) return;
            itemsState.back.push(itemsState.after);
            itemsState.after = next;
            void load();
          },
        },
        'Next',
      ),
      h(
        'button',
        {
          type: 'button',
          'data-action': 'last',
          onclick: () => goTo(Math.max(page.lowWaterMark - 1, page.nextSeq - 1 - itemsState.limit)),
        },
        'Last',
      ),
    );
  }

  await load();
}

/** @param {number} seq */
async function openItem(seq) {
  try {
    const it = await getJson('item', { seq });
    showDetail(
      `Item ${fmtInt(it.seq)}`,
      h(
        'div',
        null,
        facts([
          ['State', it.state],
          ['Priority', String(it.priority)],
          ['Not before', fmtTime(it.notBefore)],
          ['Key', it.key ?? '—'],
          ['Group', it.group ?? '—'],
        ]),
        payloadView(it.payload, it.size, it.truncated),
      ),
    );
  } catch (error) {
    sayError(error);
  }
}
