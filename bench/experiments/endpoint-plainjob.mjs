// Four producer processes into one queue, ours against plainjob (SQLite through better-sqlite3,
// each process opening the same database file, as its users do), in one run, 128 B payloads (the
// cells of bench/lib/remote.mjs, which the section `remote` of bench/run.mjs runs too):
//   ours      an owner process holds the queue (LogStore, 'group': survives power loss; and 'none':
//             survives a process crash) and four producer processes push through connect(), 16
//             pushes in flight each
//   plainjob  four processes add jobs to one SQLite file (WAL, synchronous=NORMAL: survives a
//             process crash, not a power loss), 16 concurrent adds each
// The order rotates each round; the figure is jobs stored per second over the window, median of rounds.
// Usage: npm run build && node bench/experiments/endpoint-plainjob.mjs [rounds=3] [ms=2000]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runRemoteRounds } from '../lib/remote.mjs';
import { median } from '../lib/stats.mjs';

const rounds = Number(process.argv[2] ?? 3);
const ms = Number(process.argv[3] ?? 2000);
const scratch = mkdtempSync(join(tmpdir(), 'pq-endpoint-plainjob-'));
try {
  const { rates, ratios } = await runRemoteRounds({
    scratch,
    rounds,
    budgetMs: ms,
    cells: ['endpoint-group', 'plainjob', 'endpoint-none'],
  });
  const f = (xs) => `${median(xs).toFixed(2)} (${xs.map((x) => x.toFixed(2)).join(' ')})`;
  console.log(`${rounds} rounds of ${ms} ms, 4 producer processes x 16 in flight, 128 B`);
  console.log(`ours (LogStore group, through the owner's endpoint)  ${median(rates['endpoint-group']).toFixed(0)} pushes/s`);
  console.log(`plainjob (SQLite WAL NORMAL, each process opens the file)  ${median(rates.plainjob).toFixed(0)} adds/s`);
  console.log(`ours 'none' (survives a process crash, as plainjob's NORMAL does)  ${median(rates['endpoint-none']).toFixed(0)} pushes/s`);
  console.log(`ours group / plainjob: ${f(ratios['endpoint-group/plainjob'])}`);
  console.log(`ours none / plainjob: ${f(ratios['endpoint-none/plainjob'])}`);
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
