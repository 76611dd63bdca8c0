// @ts-check
// The overview: the queue's figures, throughput and latency charts over the last minutes, items by
// priority, the owner's counters, and the store on disk. Redrawn at each poll (about once a second).
'use strict';

/** The charts show this much. */
const WINDOW_MS = 5 * 60_000;

/**
 * A figure card. `name` is the figure's name in the page (`data-figure`), for whoever reads it.
 * @param {string} name
 * @param {string} label
 * @param {string} value
 * @param {string} [sub]
 */
function card(name, label, value, sub) {
  const words = /^[a-z]/.test(value);
  return h(
    'div',
    { class: 'card' },
    h('div', { class: 'label' }, label),
    h('div', { class: words ? 'value words' : 'value', 'data-figure': name }, value),
    sub ? h('div', { class: 'sub' }, sub) : null,
  );
}

/**
 * @param {HTMLElement} main
 * @param {any} o the overview (src/dashboard/api.ts, `Overview`)
 */
function renderOverview(main, o) {
  const f = o.figures;
  const live = o.view === 'live';
  const parts = [];
  parts.push(h('h2', null, 'Overview'));
  if (!live) {
    const why = o.spoolOnly
      ? 'No process has opened this queue yet: its directory holds only spooled pushes, which the first process to open it takes in.'
      : `Read-only view: no process serves the queue (${o.absent}). These are its files as read at ${fmtTime(o.at)}; ready and in flight are known only to the process that has the queue open.`;
    parts.push(h('p', { class: 'banner', 'data-banner': 'read-only' }, why));
    if (o.liveWriter)
      parts.push(
        h(
          'p',
          { class: 'note' },
          `Process ${o.liveWriter.pid ?? '(unknown)'} holds the store without serving it: its items are shown up to its last whole record.`,
        ),
      );
  }
  const leasedSub = live && f.leased > 0 ? `${fmtInt(f.leased)} leased` : undefined;
  parts.push(
    h(
      'div',
      { class: 'cards' },
      card('ready', 'Ready', fmtInt(f.ready), live ? undefined : 'known to the owner'),
      card('inFlight', 'In flight', fmtInt(f.inFlight), leasedSub ?? (live ? undefined : 'known to the owner')),
      card('leased', 'Leased', fmtInt(f.leased)),
      card('delayed', 'Delayed', fmtInt(f.delayed), 'not yet due'),
      card('unacked', 'Unacked', fmtInt(f.unacked), 'ready, delayed and in flight'),
      card('deadLetters', 'Dead letters', fmtInt(f.deadLetters)),
      card('bytesOnDisk', 'On disk', fmtBytes(f.bytesOnDisk), `${fmtInt(f.segments)} segment(s)`),
      card('spool', 'Spool backlog', fmtInt(f.spoolPending), `${fmtInt(f.spoolFiles)} file(s) not taken in`),
      live ? card('consumer', 'Consumer', f.consuming ? 'taking items' : 'idle', `${fmtInt(f.pendingPushes)} push(es) pending`) : null,
    ),
  );
  parts.push(h('h3', null, 'Throughput and latency'));
  if (live) {
    const now = o.at;
    // The charts span the samples there are, from a minute up to five.
    const earliest = Math.min(
      now,
      ...o.rates.map((/** @type {any} */ p) => p.at),
      ...o.latency.buckets.map((/** @type {any} */ b) => b.at),
    );
    const windowMs = Math.min(WINDOW_MS, Math.max(60_000, Math.ceil((now - earliest) / 30_000) * 30_000));
    /** @param {string} field */
    const rate = (field) => /** @type {[number, number][]} */ (o.rates.map((/** @type {any} */ p) => [p.at, p[field]]));
    /** @param {'handout' | 'ack'} kind @param {'p50' | 'p99'} q */
    const lat = (kind, q) =>
      /** @type {[number, number][]} */ (
        o.latency.buckets.filter((/** @type {any} */ b) => b[kind] !== null).map((/** @type {any} */ b) => [b.at + 500, b[kind][q]])
      );
    parts.push(
      h(
        'div',
        { class: 'charts' },
        lineChart({
          id: 'throughput',
          title: 'Per second',
          unit: fmtRate,
          windowMs,
          now,
          empty: 'sampling: the first rates appear within seconds',
          series: [
            { name: 'pushes', cls: 's0', points: rate('pushed') },
            { name: 'acks', cls: 's1', points: rate('acked') },
            { name: 'retries (redeliveries)', cls: 's2', points: rate('redelivered') },
            { name: 'dead letters', cls: 's3', points: rate('deadLettered') },
          ],
        }),
        lineChart({
          id: 'latency',
          title: 'Latency (p50 solid, p99 dashed)',
          unit: fmtMs,
          log: true,
          windowMs,
          now,
          empty: 'no item pushed and handed out since the dashboard began to watch',
          series: [
            { name: 'push → hand-out p50', cls: 's0', points: lat('handout', 'p50') },
            { name: 'push → hand-out p99', cls: 's0 dash', points: lat('handout', 'p99') },
            { name: 'hand-out → ack p50', cls: 's1', points: lat('ack', 'p50') },
            { name: 'hand-out → ack p99', cls: 's1 dash', points: lat('ack', 'p99') },
          ],
        }),
      ),
    );
    if (o.latency.since !== null)
      parts.push(
        h(
          'p',
          { class: 'note' },
          `Latency is measured by the owner for items pushed and handed out since ${fmtTime(o.latency.since)}, when the dashboard began to watch.`,
        ),
      );
  } else {
    parts.push(
      h('p', { class: 'note' }, 'Throughput and latency are measured by the process that has the queue open; none serves it now.'),
    );
  }
  parts.push(h('h3', null, 'By priority'));
  const bp = o.byPriority;
  if (o.filesError)
    parts.push(h('p', { class: 'banner', 'data-banner': 'files' }, `The store's files could not be read here: ${o.filesError}`));
  else if (bp === null || bp.byPriority.length === 0) parts.push(h('p', { class: 'note' }, 'No unacked items.'));
  else {
    const max = Math.max(...bp.byPriority.map((/** @type {any} */ r) => r.count));
    const bar = (/** @type {number} */ n) => {
      const el = h('span', { class: 'bar' });
      el.style.width = `${Math.max(1, Math.round((n / max) * 200))}px`;
      return el;
    };
    parts.push(
      table(
        ['#Priority', '#Items', ''],
        bp.byPriority.map((/** @type {any} */ r) => [String(r.priority), fmtInt(r.count), bar(r.count)]),
        { 'data-table': 'by-priority', class: 'narrow' },
      ),
    );
    const next = bp.nextDueAt === null ? '' : `; the next delayed item is due at ${fmtTime(bp.nextDueAt)}`;
    const asOf = `as its files held them at ${fmtTime(bp.at)}`;
    parts.push(
      h(
        'p',
        { class: 'note' },
        bp.complete
          ? `Unacked items ${asOf}${next}.`
          : `Unacked items up to seq ${fmtInt(bp.scannedThrough)} ${asOf} (the count stops there on a very large backlog)${next}.`,
      ),
    );
  }
  if (live && f.counters) {
    parts.push(h('h3', null, 'Since the owner opened the queue'));
    const c = f.counters;
    parts.push(
      h(
        'div',
        { class: 'cards' },
        card('pushed', 'Pushed', fmtInt(c.pushed)),
        card('acked', 'Acked', fmtInt(c.acked)),
        card('nacked', 'Nacked', fmtInt(c.nacked)),
        card('redelivered', 'Redelivered', fmtInt(c.redelivered)),
        card('retried', 'Retried', fmtInt(c.retried)),
        card('deadLettered', 'Dead-lettered', fmtInt(c.deadLettered)),
        card('leaseExpired', 'Leases expired', fmtInt(c.leaseExpired)),
      ),
    );
    parts.push(
      h(
        'p',
        { class: 'note' },
        `Durability ${f.durability ?? '—'}; acks ${f.ackDurability ?? '—'}; capacity ${f.capacity === null ? 'unbounded' : fmtInt(f.capacity)}.`,
      ),
    );
  }
  fill(main, ...parts);
}
