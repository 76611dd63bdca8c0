// The targets of ../shared/BRIEF.md ("What good looks like"), computed from one results file as
// ratios of figures measured in the same run. Shared by bench/run.mjs and bench/report.mjs.

const MiB = 2 ** 20;

function byId(results) {
  return new Map(results.filter((r) => r.id).map((r) => [r.id, r]));
}

/** Each target: { key, what, measured, baseline, ratio, goal, met, detail }. */
export function computeTargets(output) {
  const R = byId(output.results);
  const v = (id) => R.get(id)?.value;
  const targets = [];
  const add = (t) => {
    const ratio = t.ratio ?? (t.measured !== undefined && t.baseline !== undefined ? t.measured / t.baseline : undefined);
    const ok = ratio === undefined || Number.isNaN(ratio) ? null : t.lowerIsBetter ? ratio <= t.goal : ratio >= t.goal;
    targets.push({ ...t, ratio, met: ok });
  };
  const bestOf = (ids) => ids.map((id) => [id, v(id)]).filter(([, x]) => x !== undefined).sort((a, b) => b[1] - a[1])[0] ?? [undefined, undefined];

  for (const p of [1, 4, 64]) {
    const mem = v(`benny/memstore/e2e/p${p}/128`);
    const bare = v(`benny/bare/e2e/p${p}/128`);
    if (mem !== undefined) add({ key: `memstore-vs-bare-p${p}`, what: `MemStore end to end, 128 B, ${p} producer(s) (benny) vs bare array queue`, measured: mem, baseline: bare, goal: 0.5, unit: 'msgs/s' });
  }

  const [noneId, none] = bestOf([1, 4, 64].map((p) => `queue/logstore/none/p${p}/128/e2e`));
  if (none !== undefined) {
    add({ key: 'none-e2e-abs', what: `LogStore none end to end, 128 B (best: ${noneId.split('/')[3]})`, measured: none, baseline: 1.5e6, goal: 1, unit: 'msgs/s', baselineLabel: '1.5 M msgs/s' });
    add({ key: 'none-vs-raw', what: 'LogStore none end to end, 128 B vs raw batched writeSync of the same frames', measured: none, baseline: v('raw/batched-append/128'), goal: 0.4, unit: 'msgs/s' });
  }
  const group64 = v('queue/logstore/group/p64/128/push');
  const [rawBest64Id, rawBest64] = bestOf(['raw/sync64/append/128', 'raw/sync64/overwrite/128']);
  if (group64 !== undefined) {
    add({ key: 'group-vs-raw64', what: `LogStore group, 64 producers, push only vs best raw 64 frames + fdatasync (${rawBest64Id?.split('/')[2]})`, measured: group64, baseline: rawBest64, goal: 0.75, unit: 'msgs/s' });
    add({ key: 'group-vs-sync', what: 'LogStore group vs sync, 64 producers, push only', measured: group64, baseline: v('queue/logstore/sync/p64/128/push'), goal: 20, unit: 'msgs/s' });
  }
  const sync1 = v('queue/logstore/sync/p1/128/push');
  const [rawBest1Id, rawBest1] = bestOf(['raw/sync1/append/128', 'raw/sync1/overwrite/128']);
  if (sync1 !== undefined) {
    add({ key: 'sync-vs-raw1', what: `LogStore sync, 1 producer, push only vs best raw write + fdatasync per record (${rawBest1Id?.split('/')[2]})`, measured: sync1, baseline: rawBest1, goal: 0.8, unit: 'msgs/s' });
    add({ key: 'vs-sqlite-1', what: 'LogStore sync, 1 producer, push only vs better-sqlite3 FULL, 1 insert per commit', measured: sync1, baseline: v('peer/sqlite/durable/perCommit1/128'), goal: 1, unit: 'msgs/s' });
  }
  if (group64 !== undefined) {
    add({ key: 'vs-sqlite-64', what: 'LogStore group, 64 producers, push only vs better-sqlite3 FULL, 64 inserts per commit', measured: group64, baseline: v('peer/sqlite/durable/perCommit64/128'), goal: 1.3, unit: 'msgs/s' });
  }
  const groupE2e = v('queue/logstore/group/p64/128/e2e');
  if (groupE2e !== undefined) {
    add({ key: 'vs-sqlite-e2e', what: 'LogStore group end to end, 64 producers, 64 acks in flight vs better-sqlite3 FULL, 64 in + 64 out per commit pair', measured: groupE2e, baseline: v('peer/sqlite/durable/endToEnd64/128'), goal: 1.5, unit: 'msgs/s' });
  }
  if (group64 !== undefined) {
    add({ key: 'vs-level-64', what: 'LogStore group, 64 producers, push only vs classic-level sync: true, batches of 64', measured: group64, baseline: v('peer/level/durable/perCommit64/128'), goal: 3, unit: 'msgs/s' });
  }

  const sizes = [...new Set(output.results.filter((r) => r.kind === 'open').map((r) => r.items))].sort((a, b) => a - b);
  const big = sizes[sizes.length - 1];
  if (big !== undefined) {
    const note = big < 10_000_000 ? ` (quick run: ${big.toLocaleString('en-US')} items, target is at 10 M)` : '';
    const clean = R.get(`open/${big}/clean`);
    const kill = R.get(`open/${big}/kill`);
    if (clean) add({ key: 'open-clean', what: `open after clean close, ${big.toLocaleString('en-US')} items${note}`, measured: clean.value, baseline: 100, goal: 1, lowerIsBetter: true, unit: 'ms', baselineLabel: '100 ms' });
    if (kill) add({ key: 'open-kill', what: `open after SIGKILL, ${big.toLocaleString('en-US')} items${note}`, measured: kill.value, baseline: 1000, goal: 1, lowerIsBetter: true, unit: 'ms', baselineLabel: '1 s' });
    const growth = Math.max(...output.results.filter((r) => r.kind === 'open').map((r) => r.rssGrowthBytes));
    add({ key: 'open-memory', what: 'resident memory growth at open, worst case over all backlogs', measured: growth, baseline: 64 * MiB, goal: 1, lowerIsBetter: true, unit: 'bytes', baselineLabel: '64 MiB' });
  }
  const afterAck = output.results.find((r) => r.id?.startsWith('disk/') && r.how === 'after-ack');
  if (afterAck) {
    add({ key: 'disk-after-ack', what: `disk use after the ${afterAck.items.toLocaleString('en-US')}-item backlog is acked vs one 64 MiB segment`, measured: afterAck.value, baseline: 64 * MiB, goal: 1.1, lowerIsBetter: true, unit: 'bytes', baselineLabel: '64 MiB' });
  }
  return targets;
}

export function fmtValue(x, unit) {
  if (x === undefined || Number.isNaN(x)) return 'n/a';
  if (unit === 'msgs/s') return x >= 1e6 ? `${(x / 1e6).toFixed(2)} M/s` : x >= 1e3 ? `${(x / 1e3).toFixed(1)} k/s` : `${x.toFixed(0)}/s`;
  if (unit === 'ms') return `${x < 10 ? x.toFixed(1) : x.toFixed(0)} ms`;
  if (unit === 'bytes') return x >= MiB ? `${(x / MiB).toFixed(1)} MiB` : `${(x / 1024).toFixed(1)} KiB`;
  return `${x}`;
}

export function fmtRatio(t) {
  if (t.ratio === undefined || Number.isNaN(t.ratio)) return 'n/a';
  if (t.lowerIsBetter) return `${(t.ratio * 100).toFixed(0)} % of limit`;
  return t.goal >= 1 && !(t.goal === 1 && t.baselineLabel) ? `${t.ratio.toFixed(2)}×` : `${(t.ratio * 100).toFixed(0)} %`;
}

export function fmtGoal(t) {
  if (t.lowerIsBetter) return `≤ ${t.baselineLabel}`;
  if (t.baselineLabel) return `≥ ${t.baselineLabel}`;
  return t.goal >= 1 ? `≥ ${t.goal}×` : `≥ ${t.goal * 100} %`;
}

/** Plain-text table for the console. */
export function formatTargets(targets) {
  const rows = targets.map((t) => [t.met === null ? '?' : t.met ? 'met' : 'MISSED', fmtRatio(t), fmtGoal(t), fmtValue(t.measured, t.unit), t.baselineLabel ? '' : fmtValue(t.baseline, t.unit), t.what]);
  const head = ['status', 'ratio', 'target', 'measured', 'baseline', 'what'];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]))).join('  ');
  return ['targets (../shared/BRIEF.md):', line(head), ...rows.map(line)].join('\n');
}
