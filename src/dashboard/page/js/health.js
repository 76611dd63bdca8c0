// @ts-check
// The store's health: what its last recovery found and did, its files, its spool, and a full
// verify on demand (a CRC scan of every file that changes nothing).
'use strict';

/** @param {HTMLElement} main */
async function renderHealth(main) {
  const verifyBox = h('div', { 'data-verify': '' });
  const body = h('div');
  fill(main, h('h2', null, 'Health'), body, h('h3', null, 'Verify'), verifyBox);
  /** @type {ReturnType<typeof setTimeout> | null} */
  let timer = null;

  async function load() {
    try {
      const health = await getJson('health');
      show(health);
      if (health.verify.state === 'running' && main.isConnected) timer = setTimeout(() => void load(), 500);
    } catch (error) {
      sayError(error);
    }
  }

  /** @param {any} x */
  function show(x) {
    const r = x.recovery;
    const parts = [];
    if (x.spoolOnly)
      parts.push(h('p', { class: 'note' }, 'No log yet: the directory holds only pushes spooled before any process opened the queue.'));
    else {
      parts.push(
        facts([
          ['View', x.view === 'live' ? `live: process ${x.pid ?? '(unknown)'} has the queue open` : `read-only: ${x.absent}`],
          ['Store id', x.storeId ?? '—'],
          ['Format version', String(x.formatVersion ?? '—')],
          [
            'Seqs',
            `low-water mark ${fmtInt(x.lowWaterMark)}, next seq ${fmtInt(x.nextSeq)}, ${fmtInt(x.ackedRanges)} acked range(s) above the mark`,
          ],
          ['On disk', `${fmtBytes(x.bytesOnDisk)}; cursor ${fmtBytes(x.cursorBytes)}`],
        ]),
      );
      if (r) {
        parts.push(
          h('h3', null, x.view === 'live' ? 'Last recovery (when the owner opened the store)' : 'Recovery (as the files were read)'),
        );
        const clean = x.liveWriter
          ? h('span', null, `none yet: process ${x.liveWriter.pid ?? '(unknown)'} has the store open`)
          : r.cleanShutdown
            ? h('span', { class: 'good' }, 'clean')
            : h('span', { class: 'bad' }, 'not clean: the last writer did not close it');
        parts.push(
          facts([
            ['Last close', clean],
            [
              'Torn bytes cut',
              h(
                'span',
                { 'data-figure': 'tornBytes' },
                `${fmtInt(r.tornBytes)} byte(s)${r.tornFiles.length > 0 ? ` (kept in ${r.tornFiles.join(', ')})` : ''}`,
              ),
            ],
            ['Zero tail trimmed', `${fmtBytes(r.zeroTailBytes)}`],
            ['Stray files deleted', r.strayFilesDeleted.length === 0 ? 'none' : r.strayFilesDeleted.join(', ')],
            ['Superseded segments deleted', r.supersededDeleted.length === 0 ? 'none' : r.supersededDeleted.join(', ')],
            ['Next seq raised', r.nextSeqRaisedFrom === null ? 'no' : `from ${fmtInt(r.nextSeqRaisedFrom)}`],
          ]),
        );
      }
      if (Array.isArray(x.segments)) {
        parts.push(h('h3', null, 'Segments'));
        parts.push(
          table(
            ['File', '#Base seq', '#Bytes', 'State', '#Version'],
            x.segments.map((/** @type {any} */ g) => [
              h('span', { class: 'mono' }, g.file),
              fmtInt(g.baseSeq),
              fmtBytes(g.bytes),
              `${g.sealed ? 'sealed' : 'active'}${g.compacted ? ', compacted' : ''}`,
              String(g.version),
            ]),
            { 'data-table': 'segments' },
          ),
        );
      }
      const sp = x.spool;
      if (sp) {
        parts.push(h('h3', null, 'Spool'));
        parts.push(
          facts([
            ['Waiting', `${fmtInt(sp.pendingRecords)} spooled push(es) in ${fmtInt(sp.files)} file(s)`],
            ['Taken in', sp.ingested === undefined ? '—' : `${fmtInt(sp.ingested)} since the owner opened the queue`],
            ['Torn bytes cut', fmtInt(sp.tornBytes ?? 0)],
            [
              'Problems',
              sp.problems && sp.problems.length > 0
                ? h('ul', null, ...sp.problems.map((/** @type {any} */ p) => h('li', null, `${p.file}: ${p.reason}`)))
                : 'none',
            ],
          ]),
        );
      }
    }
    fill(body, ...parts);
    showVerify(x.verify);
  }

  /** @param {any} v */
  function showVerify(v) {
    const start = h(
      'button',
      {
        type: 'button',
        class: 'primary',
        'data-action': 'verify',
        disabled: v.state === 'running',
        onclick: async () => {
          try {
            await postJson('verify', {});
            if (timer !== null) clearTimeout(timer);
            await load();
          } catch (error) {
            sayError(error);
          }
        },
      },
      v.state === 'running' ? 'Verifying…' : 'Verify now',
    );
    const parts = [
      h(
        'p',
        { class: 'note' },
        'A full CRC scan of every segment and the cursor, as pq verify does. It reads the files and changes nothing.',
      ),
      start,
    ];
    if (v.state === 'running') {
      const p = v.progress;
      parts.push(
        h('p', { 'data-verify-state': 'running' }, p ? `Checked ${fmtBytes(p.doneBytes)} of ${fmtBytes(p.totalBytes)}…` : 'Started…'),
      );
    } else if (v.state === 'failed') {
      parts.push(h('p', { class: 'bad', 'data-verify-state': 'failed' }, `The verify could not run: ${v.error}`));
    } else if (v.state === 'done') {
      const res = v.result;
      const sound = res.problems.length === 0;
      parts.push(
        h(
          'p',
          { 'data-verify-state': 'done' },
          h(
            'span',
            { class: sound ? 'good' : 'bad', 'data-verify-verdict': sound ? 'sound' : 'damaged' },
            sound ? 'Sound' : `${res.problems.length} problem(s)`,
          ),
          ` — checked ${fmtInt(res.files)} file(s), ${fmtInt(res.records)} record(s), ${fmtBytes(res.bytes)}; finished ${fmtTime(v.finishedAt)}.`,
        ),
      );
      if (!sound)
        parts.push(
          table(
            ['File', '#Offset', 'Problem'],
            res.problems.map((/** @type {any} */ p) => [h('span', { class: 'mono' }, p.file), fmtInt(p.offset), p.reason]),
            { 'data-table': 'verify-problems' },
          ),
        );
      for (const n of res.notes) parts.push(h('p', { class: 'note' }, n));
    }
    fill(verifyBox, ...parts);
  }

  await load();
}
