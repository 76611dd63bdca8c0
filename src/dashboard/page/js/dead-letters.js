// @ts-check
// Dead letters: each with its reason, deliveries and times; redrive and purge one, the selected
// ones, or all, through the process that has the queue open, each after a confirmation.
'use strict';

const lettersState = {
  after: 0,
  back: /** @type {number[]} */ ([]),
  limit: 50,
};

/**
 * @param {HTMLElement} main
 * @param {boolean} live a process serves the queue (actions go through it)
 */
async function renderDeadLetters(main, live) {
  const canAct = session.allowActions && live;
  const info = h('p', { class: 'note', 'data-info': 'dead-letters' });
  const list = h('div', { 'data-list': 'dead-letters' });
  const pager = h('div', { class: 'pager' });
  /** @type {Set<number>} */
  const selected = new Set();
  const bulk = h('div', { class: 'toolbar' });
  const why = !session.allowActions
    ? 'Read-only dashboard: start pq ui with --allow-actions to redrive and purge.'
    : !live
      ? 'No process serves the queue: redrive and purge go through the process that has it open.'
      : 'Redrive puts a dead letter back at the end of the queue as a new item (new seq, fresh delivery count); purge deletes it for good.';
  fill(main, h('h2', null, 'Dead letters'), h('p', { class: 'note', 'data-note': 'actions' }, why), bulk, info, list, pager);

  /** @param {'redrive' | 'purge'} action @param {number[] | null} seqs null: all */
  async function act(action, seqs) {
    const what =
      seqs === null
        ? 'every dead letter'
        : seqs.length === 1
          ? `dead letter seq ${seqs[0]}`
          : `${seqs.length} dead letters (seqs ${seqs.slice(0, 8).join(', ')}${seqs.length > 8 ? ', …' : ''})`;
    const text =
      action === 'redrive'
        ? `Redrive ${what}? Each becomes a new item at the end of the queue and will be delivered again.`
        : `Purge ${what}? This deletes them for good; it cannot be undone.`;
    if (!(await confirmAction(text, action === 'redrive' ? 'Redrive' : 'Purge'))) return;
    try {
      const result = await postJson(`dead-letters/${action}`, seqs === null ? { all: true } : { seqs });
      if (action === 'redrive') {
        const moved =
          result.from !== null && result.seqs.length <= 8
            ? result.from.map((/** @type {number} */ s, /** @type {number} */ i) => `seq ${s} → seq ${result.seqs[i]}`).join(', ')
            : `new seqs ${result.seqs.slice(0, 8).join(', ')}${result.seqs.length > 8 ? ', …' : ''}`;
        say(`Redrove ${fmtInt(result.count)} dead letter(s)${result.count > 0 ? `: ${moved}` : ''}.`);
      } else say(`Purged ${fmtInt(result.count)} dead letter(s).`);
      selected.clear();
      await load();
    } catch (error) {
      sayError(error);
    }
  }

  function showBulk() {
    if (!canAct) {
      fill(bulk);
      return;
    }
    const chosen = [...selected].sort((a, b) => a - b);
    fill(
      bulk,
      h(
        'button',
        { type: 'button', 'data-action': 'redrive-selected', disabled: chosen.length === 0, onclick: () => void act('redrive', chosen) },
        `Redrive selected (${chosen.length})`,
      ),
      h(
        'button',
        {
          type: 'button',
          class: 'danger',
          'data-action': 'purge-selected',
          disabled: chosen.length === 0,
          onclick: () => void act('purge', chosen),
        },
        `Purge selected (${chosen.length})`,
      ),
      h('button', { type: 'button', 'data-action': 'redrive-all', onclick: () => void act('redrive', null) }, 'Redrive all'),
      h('button', { type: 'button', class: 'danger', 'data-action': 'purge-all', onclick: () => void act('purge', null) }, 'Purge all'),
      h('button', { type: 'button', 'data-action': 'refresh', onclick: () => void load() }, 'Refresh'),
    );
  }

  async function load() {
    try {
      const page = await getJson('dead-letters', { after: lettersState.after, limit: lettersState.limit });
      show(page);
    } catch (error) {
      sayError(error);
    }
  }

  /** @param {any} page */
  function show(page) {
    const letters = page.letters;
    for (const seq of [...selected]) if (!letters.some((/** @type {any} */ d) => d.seq === seq)) selected.delete(seq);
    info.textContent =
      letters.length === 0
        ? lettersState.after === 0
          ? 'No dead letters.'
          : 'No more dead letters.'
        : `Seq ${fmtInt(letters[0].seq)} … ${fmtInt(letters[letters.length - 1].seq)}: ${fmtInt(letters.length)} shown.`;
    const head = [
      ...(canAct ? [''] : []),
      '#Seq',
      '#Deliveries',
      'First delivery',
      'Last delivery',
      'Dead since',
      'Reason',
      '#Size',
      'Payload',
      ...(canAct ? [''] : []),
    ];
    const rows = letters.map((/** @type {any} */ d) => {
      const box = /** @type {HTMLInputElement} */ (
        h('input', { type: 'checkbox', 'aria-label': `select seq ${d.seq}`, 'data-select': d.seq })
      );
      box.checked = selected.has(d.seq);
      box.addEventListener('click', (event) => event.stopPropagation());
      box.addEventListener('change', () => {
        if (box.checked) selected.add(d.seq);
        else selected.delete(d.seq);
        showBulk();
      });
      const tr = h(
        'tr',
        { class: 'clickable', 'data-seq': d.seq },
        canAct ? h('td', null, box) : null,
        h('td', { class: 'num' }, fmtInt(d.seq)),
        h('td', { class: 'num' }, fmtInt(d.deliveries)),
        h('td', null, fmtTime(d.firstDeliveredAt)),
        h('td', null, fmtTime(d.lastDeliveredAt)),
        h('td', null, fmtTime(d.deadAt)),
        h('td', { class: 'reason', 'data-reason': '' }, d.reason),
        h('td', { class: 'num' }, fmtBytes(d.size)),
        h('td', { class: 'preview' }, payloadPreview(d.payload)),
        canAct
          ? h(
              'td',
              { class: 'actions' },
              h(
                'button',
                {
                  type: 'button',
                  'data-action': 'redrive',
                  onclick: (/** @type {Event} */ e) => (e.stopPropagation(), void act('redrive', [d.seq])),
                },
                'Redrive',
              ),
              ' ',
              h(
                'button',
                {
                  type: 'button',
                  class: 'danger',
                  'data-action': 'purge',
                  onclick: (/** @type {Event} */ e) => (e.stopPropagation(), void act('purge', [d.seq])),
                },
                'Purge',
              ),
            )
          : null,
      );
      tr.addEventListener('click', () => void openLetter(d.seq));
      return tr;
    });
    fill(
      list,
      h(
        'table',
        { 'data-table': 'dead-letters' },
        h('thead', null, h('tr', null, ...head.map((l) => h('th', l.startsWith('#') ? { class: 'num' } : null, l.replace(/^#/, ''))))),
        h('tbody', null, ...rows),
      ),
    );
    const last = letters[letters.length - 1]?.seq;
    fill(
      pager,
      h(
        'button',
        {
          type: 'button',
          'data-action': 'first',
          disabled: lettersState.after === 0,
          onclick: () => ((lettersState.after = 0), (lettersState.back = []), void load()),
        },
        'First',
      ),
      h(
        'button',
        {
          type: 'button',
          'data-action': 'previous',
          disabled: lettersState.back.length === 0,
          onclick: () => ((lettersState.after = lettersState.back.pop() ?? 0), void load()),
        },
        'Previous',
      ),
      h(
        'button',
        {
          type: 'button',
          'data-action': 'next',
          disabled: page.end,
          onclick: () => (lettersState.back.push(lettersState.after), (lettersState.after = last), void load()),
        },
        'Next',
      ),
    );
    showBulk();
  }

  showBulk();
  await load();
}

/** @param {number} seq */
async function openLetter(seq) {
  try {
    const d = await getJson('dead-letter', { seq });
    showDetail(
      `Dead letter ${fmtInt(d.seq)}`,
      h(
        'div',
        null,
        facts([
          ['Reason', d.reason],
          ['Deliveries', fmtInt(d.deliveries)],
          ['First delivery', fmtTime(d.firstDeliveredAt)],
          ['Last delivery', fmtTime(d.lastDeliveredAt)],
          ['Dead since', fmtTime(d.deadAt)],
        ]),
        payloadView(d.payload, d.size, d.truncated),
      ),
    );
  } catch (error) {
    sayError(error);
  }
}
