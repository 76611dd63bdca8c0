// The project's performance targets (BENCHMARKS.md, "Targets"), computed from one results file as
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
    const ok = t.reference || ratio === undefined || Number.isNaN(ratio) ? null : t.lowerIsBetter ? ratio <= t.goal : ratio >= t.goal;
    targets.push({ ...t, ratio, met: ok });
  };
  const bestOf = (ids) =>
    ids
      .map((id) => [id, v(id)])
      .filter(([, x]) => x !== undefined)
      .sort((a, b) => b[1] - a[1])[0] ?? [undefined, undefined];

  // The per-item baselines, from interleaved rounds with no harness between loop and queue.
  const memSimple = R.get('baseline/ratio/memstore/simple');
  if (memSimple) {
    add({
      key: 'memstore-vs-simple',
      what: 'MemStore end to end, 128 B, 1 serial producer + `await ack` consumer vs the simplest async queue doing the same (interleaved rounds)',
      measured: v('baseline/memstore'),
      baseline: v('baseline/simple'),
      ratio: memSimple.value,
      ratioMin: memSimple.min,
      ratioMax: memSimple.max,
      goal: 0.5,
      unit: 'msgs/s',
    });
  }
  const noneRaw = R.get('baseline/ratio/logstore-none/raw-batched');
  if (noneRaw) {
    add({
      key: 'none-serial-abs',
      what: 'LogStore none end to end, 128 B, 1 serial producer + `await ack` consumer',
      measured: v('baseline/logstore-none'),
      baseline: 1.5e6,
      goal: 1,
      unit: 'msgs/s',
      baselineLabel: '1.5 M msgs/s',
    });
    add({
      key: 'none-serial-vs-raw',
      what: 'the same vs raw writeSync of the same frames, 64 per write (interleaved rounds)',
      measured: v('baseline/logstore-none'),
      baseline: v('baseline/raw-batched'),
      ratio: noneRaw.value,
      ratioMin: noneRaw.min,
      ratioMax: noneRaw.max,
      goal: 0.4,
      unit: 'msgs/s',
    });
    const perPush = R.get('baseline/ratio/logstore-none/raw-write-per-push');
    if (perPush)
      add({
        key: 'none-serial-vs-write-per-push',
        reference: true,
        what: '(reference, not a target) the same vs raw writeSync of one frame per call: the floor of a push that reaches the OS before it resolves',
        measured: v('baseline/logstore-none'),
        baseline: v('baseline/raw-write-per-push'),
        ratio: perPush.value,
        goal: 1,
        unit: 'msgs/s',
      });
  }
  for (const p of [1, 4, 64]) {
    const mem = v(`benny/memstore/e2e/p${p}/128`);
    const bare = v(`benny/bare/e2e/p${p}/128`);
    // Through benny's harness, which both pay: kept as a reference, not as the target.
    if (mem !== undefined)
      add({
        key: `memstore-vs-bare-p${p}`,
        reference: true,
        what: `(reference) MemStore end to end, 128 B, ${p} producer(s) (benny) vs the bench's bare array queue under the same harness`,
        measured: mem,
        baseline: bare,
        goal: 0.5,
        unit: 'msgs/s',
      });
  }

  const [noneId, none] = bestOf([1, 4, 64].map((p) => `queue/logstore/none/p${p}/128/e2e`));
  if (none !== undefined) {
    add({
      key: 'none-e2e-abs',
      what: `LogStore none end to end, 128 B (best: ${noneId.split('/')[3]})`,
      measured: none,
      baseline: 1.5e6,
      goal: 1,
      unit: 'msgs/s',
      baselineLabel: '1.5 M msgs/s',
    });
    add({
      key: 'none-vs-raw',
      what: 'LogStore none end to end, 128 B vs raw batched writeSync of the same frames',
      measured: none,
      baseline: v('raw/batched-append/128'),
      goal: 0.4,
      unit: 'msgs/s',
    });
  }
  const noneTurn = v('queue/logstore/none/p64/128/e2e/turn1');
  if (noneTurn !== undefined) {
    add({
      key: 'none-e2e-abs-turn1',
      what: 'LogStore none end to end, 128 B, 64 producers, with storeCallsPerTurn(1)',
      measured: noneTurn,
      baseline: 1.5e6,
      goal: 1,
      unit: 'msgs/s',
      baselineLabel: '1.5 M msgs/s',
    });
  }
  // The fsync-bound targets come from the interleaved A/B rounds when the run has them (every
  // contestant once per round, back to back; the ratio is the median of the per-round ratios),
  // otherwise from the matrix and raw sections, measured minutes apart.
  const ab = (group, ratio) => R.get(`ab/${group}/ratio/${ratio}`);
  const abRate = (group, name) => v(`ab/${group}/${name}`);
  const fromAb = (t0, group, ratio, num) => {
    const r = ab(group, ratio);
    if (!r) return false;
    // The A/B rounds' plain LogStore contestant syncs every batch in the threadpool
    // (bench/lib/ab.mjs); the defaults are measured in section "The log at the disk's limit".
    const t = num === 'logstore' ? { ...t0, what: `${t0.what}; LogStore with every sync in the threadpool (\`blockingSync: false\`)` } : t0;
    // "baseline" is the median of the per-round denominators, the figure the ratio was taken against.
    add({
      ...t,
      measured: abRate(group, num),
      baseline: r.denominatorMedian,
      ratio: r.value,
      rounds: r.samples.length,
      ratioMin: r.min,
      ratioMax: r.max,
      source: 'ab',
    });
    return true;
  };
  // LogStore against the best raw loop: from the A/B rounds (strict, plus the async-only loops as
  // a reference row), else from the matrix and raw sections.
  const rawTarget = (t, group, measured, rawIds) => {
    const strict = { ...t, what: `${t.what} (of: append, overwrite, overwrite with fdatasyncSync on the main thread)` };
    if (fromAb(strict, group, 'logstore/raw', 'logstore')) {
      const reference = 'the same, against the async raw loops only: the limit for an engine that keeps the event loop free';
      fromAb(
        { ...t, key: `${t.key}-async`, reference: true, what: `(reference, not the target) ${reference}` },
        group,
        'logstore/raw-async',
        'logstore',
      );
    } else if (measured !== undefined) {
      const [bestId, best] = bestOf(rawIds);
      add({ ...t, what: `${t.what} (${bestId?.split('/')[2]})`, measured, baseline: best });
    }
  };
  // Reference rows: the contract's floor (bench/lib/floor.mjs) against the same denominator in the
  // same rounds, the most any queue with these promises reached there; and LogStore against it.
  const floorRef = (key, group, floorName, den, what) =>
    fromAb(
      { key, reference: true, what: `(reference, not a target) ${what}`, goal: 1, unit: 'msgs/s' },
      group,
      `${floorName}/${den}`,
      floorName,
    );
  const group64 = v('queue/logstore/group/p64/128/push');
  rawTarget(
    {
      key: 'group-vs-raw64',
      what: 'LogStore group, 64 producers, push only vs best raw 64 frames + fdatasync',
      goal: 0.75,
      unit: 'msgs/s',
    },
    'group64',
    group64,
    ['raw/sync64/append/128', 'raw/sync64/overwrite/128'],
  );
  floorRef(
    'group-vs-raw64-floor',
    'group64',
    'floor',
    'raw',
    "the contract's floor, async fdatasync, vs the same best raw loop: what any queue with these promises that keeps the event loop free reached",
  );
  fromAb(
    {
      key: 'group-vs-floor',
      reference: true,
      what: "(reference, not a target) LogStore group, 64 producers, push only vs the contract's floor (async fdatasync), same rounds",
      goal: 1,
      unit: 'msgs/s',
    },
    'group64',
    'logstore/floor',
    'logstore',
  );
  if (group64 !== undefined) {
    add({
      key: 'group-vs-sync',
      what: 'LogStore group vs sync, 64 producers, push only (matrix cells, measured minutes apart)',
      measured: group64,
      baseline: v('queue/logstore/sync/p64/128/push'),
      goal: 20,
      unit: 'msgs/s',
    });
  }
  const sync1 = v('queue/logstore/sync/p1/128/push');
  rawTarget(
    {
      key: 'sync-vs-raw1',
      what: 'LogStore sync, 1 producer, push only vs best raw write + fdatasync per record',
      goal: 0.8,
      unit: 'msgs/s',
    },
    'sync1',
    sync1,
    ['raw/sync1/append/128', 'raw/sync1/overwrite/128'],
  );
  floorRef('sync-vs-raw1-floor', 'sync1', 'floor', 'raw', "the contract's floor, async fdatasync, 1 producer, vs the same best raw loop");
  const ts1 = {
    key: 'vs-sqlite-1',
    what: 'LogStore sync, 1 producer, push only vs better-sqlite3 FULL, 1 insert per commit',
    goal: 1,
    unit: 'msgs/s',
  };
  if (!fromAb(ts1, 'sync1', 'logstore/sqlite', 'logstore') && sync1 !== undefined) {
    add({ ...ts1, measured: sync1, baseline: v('peer/sqlite/durable/perCommit1/128') });
  }
  const ts64 = {
    key: 'vs-sqlite-64',
    what: 'LogStore group, 64 producers, push only vs better-sqlite3 FULL, 64 inserts per commit',
    goal: 1.3,
    unit: 'msgs/s',
  };
  if (!fromAb(ts64, 'group64', 'logstore/sqlite', 'logstore') && group64 !== undefined) {
    add({ ...ts64, measured: group64, baseline: v('peer/sqlite/durable/perCommit64/128') });
  }
  floorRef('vs-sqlite-64-floor', 'group64', 'floor', 'sqlite', "the contract's floor, async fdatasync, vs the same better-sqlite3 commits");
  const tse = {
    key: 'vs-sqlite-e2e',
    what: 'LogStore group end to end, 64 producers, consumer acking 64 per batch vs better-sqlite3 FULL, 64 in + 64 out per commit pair',
    goal: 1.5,
    unit: 'msgs/s',
  };
  const groupE2e = v('queue/logstore/group/p64/128/e2e');
  if (!fromAb(tse, 'e2e64', 'logstore/sqlite', 'logstore') && groupE2e !== undefined) {
    add({
      ...tse,
      what: 'LogStore group end to end, 64 producers, 64 acks in flight vs better-sqlite3 FULL, 64 in + 64 out per commit pair',
      measured: groupE2e,
      baseline: v('peer/sqlite/durable/endToEnd64/128'),
    });
  }
  const tl = {
    key: 'vs-level-64',
    what: 'LogStore group, 64 producers, push only vs classic-level sync: true, batches of 64',
    goal: 3,
    unit: 'msgs/s',
  };
  if (!fromAb(tl, 'group64', 'logstore/level', 'logstore') && group64 !== undefined) {
    add({ ...tl, measured: group64, baseline: v('peer/level/durable/perCommit64/128') });
  }
  floorRef('vs-level-64-floor', 'group64', 'floor', 'level', "the contract's floor, async fdatasync, vs the same classic-level batches");
  // The same fsync-bound targets with the opt-in blockingSync (README, "Blocking syncs"): the
  // syncs on the main thread, as the peers' and the main-thread raw loop's are. A/B rounds only.
  const blocking = 'with blockingSync (opt-in: the event loop stands still during each flush)';
  fromAb(
    {
      key: 'sync-vs-raw1-blocking',
      what: `LogStore sync, 1 producer, push only, ${blocking}, vs best raw write + fdatasync per record (of: append, overwrite, overwrite with fdatasyncSync on the main thread)`,
      goal: 0.8,
      unit: 'msgs/s',
    },
    'sync1',
    'logstore-blocking/raw',
    'logstore-blocking',
  );
  fromAb(
    {
      key: 'vs-sqlite-1-blocking',
      what: `LogStore sync, 1 producer, push only, ${blocking}, vs better-sqlite3 FULL, 1 insert per commit`,
      goal: 1,
      unit: 'msgs/s',
    },
    'sync1',
    'logstore-blocking/sqlite',
    'logstore-blocking',
  );
  fromAb(
    {
      key: 'group-vs-raw64-blocking',
      what: `LogStore group, 64 producers, push only, ${blocking}, vs best raw 64 frames + fdatasync (of: append, overwrite, overwrite with fdatasyncSync on the main thread)`,
      goal: 0.75,
      unit: 'msgs/s',
    },
    'group64',
    'logstore-blocking/raw',
    'logstore-blocking',
  );
  floorRef(
    'group-vs-raw64-blocking-floor',
    'group64',
    'floor-main-thread',
    'raw',
    "the contract's floor with fdatasyncSync on the main thread vs the same best raw loop",
  );
  fromAb(
    {
      key: 'group-blocking-vs-floor',
      reference: true,
      what: "(reference, not a target) LogStore group, 64 producers, push only, with blockingSync, vs the contract's floor with fdatasyncSync, same rounds",
      goal: 1,
      unit: 'msgs/s',
    },
    'group64',
    'logstore-blocking/floor-main-thread',
    'logstore-blocking',
  );
  fromAb(
    {
      key: 'vs-sqlite-64-blocking',
      what: `LogStore group, 64 producers, push only, ${blocking}, vs better-sqlite3 FULL, 64 inserts per commit`,
      goal: 1.3,
      unit: 'msgs/s',
    },
    'group64',
    'logstore-blocking/sqlite',
    'logstore-blocking',
  );
  fromAb(
    {
      key: 'vs-level-64-blocking',
      what: `LogStore group, 64 producers, push only, ${blocking}, vs classic-level sync: true, batches of 64`,
      goal: 3,
      unit: 'msgs/s',
    },
    'group64',
    'logstore-blocking/level',
    'logstore-blocking',
  );

  // The README's consumer code under default options, against push only in the same rounds.
  for (const [kind, goal, what] of [
    ['loop', 0.8, "README's serial consumer (for await + await item.ack()), default options, 64 producers, LogStore, vs push only"],
    ['process', 0.9, "README's process(handler, { concurrency: 64 }), default options, 64 producers, LogStore, vs push only"],
  ]) {
    const r = R.get(`readme/logstore/p64/128/ratio/${kind}`);
    if (r)
      add({
        key: `readme-${kind}`,
        what,
        measured: v(`readme/logstore/p64/128/${kind}`),
        baseline: r.denominatorMedian,
        ratio: r.value,
        rounds: r.samples.length,
        ratioMin: r.min,
        ratioMax: r.max,
        source: 'ab',
        goal,
        unit: 'msgs/s',
      });
    const f = R.get(`readme/logstore/p64/128/ratio/floor-${kind}`);
    if (f)
      add({
        key: `readme-${kind}-floor`,
        reference: true,
        what: `(reference, not a target) the contract's floor (bench/lib/floor.mjs) with the same consumer, vs its own push only, same rounds`,
        measured: v(`readme/logstore/p64/128/floor-${kind}`),
        baseline: f.denominatorMedian,
        ratio: f.value,
        rounds: f.samples.length,
        ratioMin: f.min,
        ratioMax: f.max,
        source: 'ab',
        goal,
        unit: 'msgs/s',
      });
  }

  // The log at the disk's limit (section `limits`): every per-item target beside its reference in
  // the same rounds, so that each ratio is taken within one round (bench/lib/limits.mjs).
  for (const row of output.results.filter((r) => r.kind === 'limits-row')) {
    const ours = v(`limits/${row.ours}`);
    add({
      key: `limits-${row.key}`,
      what: `${row.what} vs ${row.against} (section "The log at the disk's limit")`,
      measured: ours,
      baseline: row.denominatorMedian,
      ratio: row.value,
      rounds: row.samples.length,
      ratioMin: row.min,
      ratioMax: row.max,
      source: 'ab',
      goal: row.goal,
      unit: 'msgs/s',
      ...(row.floor ? { reference: true } : {}),
    });
  }
  // Producers in other processes (section `remote`): the ratios that have a goal.
  for (const r of output.results.filter((x) => x.kind === 'remote-ratio' && x.goal !== undefined)) {
    add({
      key: `remote-${r.name.replace('/', '-vs-')}`,
      what: `${r.what} vs ${r.against} (section "Producers in other processes")`,
      measured: v(`remote/${r.name.split('/')[0]}`),
      baseline: r.denominatorMedian,
      ratio: r.value,
      rounds: r.samples.length,
      ratioMin: r.min,
      ratioMax: r.max,
      source: 'ab',
      goal: r.goal,
      unit: 'msgs/s',
    });
  }

  const sizes = [...new Set(output.results.filter((r) => r.kind === 'open').map((r) => r.items))].sort((a, b) => a - b);
  const big = sizes[sizes.length - 1];
  if (big !== undefined) {
    const note = big < 10_000_000 ? ` (quick run: ${big.toLocaleString('en-US')} items, target is at 10 M)` : '';
    const clean = R.get(`open/${big}/clean`);
    const kill = R.get(`open/${big}/kill`);
    // The slowest open counts (the first one after the build is the slowest: see BENCHMARKS.md).
    const slowest = (r) => Math.max(...r.samples);
    const each = (r) => `slowest of ${r.samples.length} opens in fresh processes; median ${r.value.toFixed(0)} ms`;
    if (clean)
      add({
        key: 'open-clean',
        what: `open after clean close, ${big.toLocaleString('en-US')} items${note} (${each(clean)})`,
        measured: slowest(clean),
        baseline: 100,
        goal: 1,
        lowerIsBetter: true,
        unit: 'ms',
        baselineLabel: '100 ms',
      });
    if (kill)
      add({
        key: 'open-kill',
        what: `open after SIGKILL, ${big.toLocaleString('en-US')} items${note} (${each(kill)})`,
        measured: slowest(kill),
        baseline: 1000,
        goal: 1,
        lowerIsBetter: true,
        unit: 'ms',
        baselineLabel: '1 s',
      });
    const growth = Math.max(...output.results.filter((r) => r.kind === 'open').map((r) => r.rssGrowthBytes));
    add({
      key: 'open-memory',
      what: 'resident memory growth at open, worst case over all backlogs',
      measured: growth,
      baseline: 64 * MiB,
      goal: 1,
      lowerIsBetter: true,
      unit: 'bytes',
      baselineLabel: '64 MiB',
    });
  }
  const afterAck = output.results.find((r) => r.id?.startsWith('disk/') && r.how === 'after-ack');
  if (afterAck) {
    const open =
      afterAck.bytesOnDiskAfterAck === undefined ? '' : `; ${(afterAck.bytesOnDiskAfterAck / 1024).toFixed(0)} KiB while still open`;
    add({
      key: 'disk-after-ack',
      what: `disk use after the ${afterAck.items.toLocaleString('en-US')}-item backlog is acked, compaction settled and the store closed${open}, vs one 64 MiB segment`,
      measured: afterAck.value,
      baseline: 64 * MiB,
      goal: 1.1,
      lowerIsBetter: true,
      unit: 'bytes',
      baselineLabel: 'about one segment (1.1 × 64 MiB)',
    });
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
  const asTimes = t.goal >= 1 && !(t.goal === 1 && t.baselineLabel);
  const f = (x) => (asTimes ? `${x.toFixed(2)}×` : `${(x * 100).toFixed(0)} %`);
  // A/B figures: the median of the per-round ratios, with the range over the rounds.
  if (t.source === 'ab') return `${f(t.ratio)} (${t.rounds} rounds: ${f(t.ratioMin)}–${f(t.ratioMax)})`;
  return f(t.ratio);
}

export function fmtGoal(t) {
  if (t.lowerIsBetter) return `≤ ${t.baselineLabel}`;
  if (t.baselineLabel) return `≥ ${t.baselineLabel}`;
  return t.goal >= 1 ? `≥ ${t.goal}×` : `≥ ${t.goal * 100} %`;
}

/** Plain-text table for the console. */
export function formatTargets(targets) {
  const rows = targets.map((t) => [
    t.reference ? 'ref' : t.met === null ? '?' : t.met ? 'met' : 'MISSED',
    fmtRatio(t),
    fmtGoal(t),
    fmtValue(t.measured, t.unit),
    t.baselineLabel ? '' : fmtValue(t.baseline, t.unit),
    t.what,
  ]);
  const head = ['status', 'ratio', 'target', 'measured', 'baseline', 'what'];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]))).join('  ');
  return ['targets:', line(head), ...rows.map(line)].join('\n');
}
