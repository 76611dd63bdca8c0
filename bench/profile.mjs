// Profile one matrix cell: runs it under `node --cpu-prof` in a child process and prints the
// self time by function (top N) and by source file.
// Usage: npm run build && node bench/profile.mjs <store> <policy> <producers> <payloadBytes> <push|drain|e2e> [budgetMs] [--top=25]
// e.g.   node bench/profile.mjs logstore none 64 128 e2e 3000
// The store `endpoint` profiles the owner and its producer processes of the `remote` section's cell
// `endpoint-<policy>` (bench/lib/remote.mjs; producers is the number of processes, 16 pushes in
// flight each): node bench/profile.mjs endpoint group 4 128 push 3000
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runCell } from './lib/cell.mjs';
import { remoteCells } from './lib/remote.mjs';

const args = process.argv.slice(2).filter((a) => !a.startsWith('--'));
const top = Number(process.argv.find((a) => a.startsWith('--top='))?.slice(6) ?? 25);
const [store = 'logstore', policy = 'none', producers = '64', payload = '128', workload = 'e2e', budgetMs = '3000'] = args;
const task = { store, policy, producers: Number(producers), payload: Number(payload), workload };

if (process.argv.includes('--child')) {
  const scratch = mkdtempSync(join(tmpdir(), 'pq-prof-'));
  try {
    if (store === 'endpoint') {
      const cell = remoteCells({ processes: task.producers })[`endpoint-${policy}`];
      await cell(mkdtempSync(join(scratch, 'warm-')), 300);
      const r = await cell(mkdtempSync(join(scratch, 'run-')), Number(budgetMs));
      console.log(
        `endpoint ${policy} ${producers} processes x 16: ${Math.round(r.rate).toLocaleString('en-US')} pushes/s; CPU per push: owner ${r.ownerCpuUsPerPush.toFixed(1)} µs, producers ${r.producerCpuUsPerPush.toFixed(1)} µs`,
      );
    } else {
      await runCell(task, { budgetMs: 300, scratch }); // warm up the JIT outside the figure that matters
      const r = await runCell(task, { budgetMs: Number(budgetMs), scratch });
      console.log(
        `${store} ${policy} p${producers} ${payload} B ${workload}: ${Math.round(r.msgs / r.seconds).toLocaleString('en-US')} msgs/s (${r.msgs} msgs in ${r.seconds.toFixed(2)} s)`,
      );
    }
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
} else {
  const dir = mkdtempSync(join(tmpdir(), 'pq-cpuprof-'));
  try {
    const self = fileURLToPath(import.meta.url);
    // The producer processes of the endpoint cell are profiled too (bench/lib/remote.mjs reads this).
    const env = store === 'endpoint' ? { ...process.env, PQ_BENCH_PROFILE_PRODUCERS: join(dir, 'producers') } : process.env;
    process.stdout.write(
      execFileSync(process.execPath, ['--cpu-prof', `--cpu-prof-dir=${dir}`, self, ...args, '--child'], { encoding: 'utf8', env }),
    );
    const file = join(
      dir,
      readdirSync(dir).find((f) => f.endsWith('.cpuprofile')),
    );
    if (store === 'endpoint') console.log('the owner:');
    console.log(summarise(JSON.parse(readFileSync(file, 'utf8')), top));
    if (store === 'endpoint') {
      // The last run's producers: their profiles are the newest (the warm-up's come first).
      const files = readdirSync(join(dir, 'producers'))
        .filter((f) => f.endsWith('.cpuprofile'))
        .sort();
      const last = files.slice(-Number(producers));
      console.log(`one producer process of ${last.length}:`);
      console.log(summarise(JSON.parse(readFileSync(join(dir, 'producers', last[0]), 'utf8')), top));
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Self time per function and per file from a .cpuprofile (samples × sampling interval). */
export function summarise(profile, topN) {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const selfUs = new Map();
  const dts = profile.timeDeltas;
  for (let i = 0; i < profile.samples.length; i++) selfUs.set(profile.samples[i], (selfUs.get(profile.samples[i]) ?? 0) + (dts[i] ?? 0));
  const fns = new Map();
  const files = new Map();
  let total = 0;
  const root = process.cwd();
  for (const [id, us] of selfUs) {
    const cf = byId.get(id).callFrame;
    const file = cf.url ? relative(root, cf.url.replace(/^file:\/\//, '')) || cf.url : '(native/vm)';
    const key = `${cf.functionName || '(anonymous)'}  ${file}:${cf.lineNumber + 1}`;
    fns.set(key, (fns.get(key) ?? 0) + us);
    files.set(file, (files.get(file) ?? 0) + us);
    total += us;
  }
  const pct = (us) => `${((us / total) * 100).toFixed(1).padStart(5)} %`;
  const lines = [`self time, ${(total / 1e6).toFixed(2)} s sampled; top ${topN} functions:`];
  for (const [k, us] of [...fns].sort((a, b) => b[1] - a[1]).slice(0, topN)) lines.push(`  ${pct(us)}  ${k}`);
  // Who calls the hottest native functions (self time lands there, the cause is in the caller).
  const parent = new Map();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const hot = [...fns]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 3)
    .map(([k]) => k);
  for (const k of hot) {
    if (!k.includes('(native/vm)') || k.startsWith('(')) continue;
    const callers = new Map();
    for (const [id, us] of selfUs) {
      const cf = byId.get(id).callFrame;
      if (!k.startsWith(`${cf.functionName}  `)) continue;
      const chain = [];
      for (let p = parent.get(id); p !== undefined && chain.length < 4; p = parent.get(p)) {
        const pf = byId.get(p).callFrame;
        chain.push(`${pf.functionName || '(anon)'}:${pf.lineNumber + 1}`);
      }
      const c = chain.join(' < ');
      callers.set(c, (callers.get(c) ?? 0) + us);
    }
    lines.push(`callers of ${k.split('  ')[0]}:`);
    for (const [c, us] of [...callers].sort((a, b) => b[1] - a[1]).slice(0, 4)) lines.push(`  ${pct(us)}  ${c}`);
  }
  lines.push('by file:');
  for (const [k, us] of [...files].sort((a, b) => b[1] - a[1]).slice(0, 12)) lines.push(`  ${pct(us)}  ${k}`);
  return lines.join('\n');
}
