// The spool with no owner against the queue's own push, as interleaved rounds in one process (the
// cells of bench/lib/remote.mjs, which the section `remote` of bench/run.mjs runs too): 64
// concurrent pushes of 128 B under `group`, into a spool file (`connect()` while no process has the
// queue open: src/stores/log/engine/spool-producer.ts) and into an open queue over LogStore (the in-process push
// of the README). Each figure is the median of the rounds; the ratio the median of the per-round
// ratios. Also the spool under `sync` and `none` (64 concurrent pushes too), for scale.
// Usage: npm run build && node bench/experiments/spool.mjs [rounds=8] [ms=700]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runRemoteRounds } from '../lib/remote.mjs';
import { median } from '../lib/stats.mjs';

const rounds = Number(process.argv[2] ?? 8);
const ms = Number(process.argv[3] ?? 700);
const scratch = mkdtempSync(join(tmpdir(), 'pq-spool-bench-'));
try {
  const { rates, ratios } = await runRemoteRounds({
    scratch,
    rounds,
    budgetMs: ms,
    cells: ['local-group', 'spool-group', 'spool-sync', 'spool-none'],
  });
  console.log(`${rounds} rounds of ${ms} ms, 64 concurrent pushes of 128 B; items/s, median of rounds`);
  for (const [k, xs] of Object.entries(rates)) console.log(`${k.padEnd(12)} ${median(xs).toFixed(0).padStart(9)}`);
  const ratio = ratios['spool-group/local-group'];
  console.log(`spool group / queue group: ${median(ratio).toFixed(2)} (${ratio.map((x) => x.toFixed(2)).join(' ')})`);
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
