// Pushes through the owner's endpoint against the owner's own producers, in one run, 128 B payloads
// (the cells of bench/lib/remote.mjs, which the section `remote` of bench/run.mjs runs too):
//   local group     LogStore 'group', 64 producers in the owner's process awaiting push in a loop
//   remote group    the same owner, 4 producer processes x 16 pushes in flight each, through connect()
//   serial none     one producer process, one push at a time, the owner under 'none': latency p50/p99,
//                   beside the owner's own serial push under 'none'
// Rounds alternate local and remote; the ratio is remote / local of the same round.
// Usage: npm run build && node bench/experiments/endpoint.mjs [rounds=3] [ms=2000] [serialPushes=5000] [inFlight=16]
// (inFlight: pushes in flight per producer process; 16 makes the same 64 in flight as the local producers)
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runRemoteRounds } from '../lib/remote.mjs';

const rounds = Number(process.argv[2] ?? 3);
const ms = Number(process.argv[3] ?? 2000);
const serialPushes = Number(process.argv[4] ?? 5000);
const inFlight = Number(process.argv[5] ?? 16);
const scratch = mkdtempSync(join(tmpdir(), 'pq-endpoint-'));
const fmt = (x) => Math.round(x).toLocaleString('en-US');
const us = (x) => `${(x * 1000).toFixed(1)} µs`;
console.log(`node ${process.version}, ${ms} ms per measurement, 128 B payloads`);
try {
  const { rates, cpu, ratios, serial } = await runRemoteRounds({
    scratch,
    rounds,
    budgetMs: ms,
    serial: serialPushes,
    inFlight,
    cells: ['local-group', 'endpoint-group'],
  });
  for (let r = 0; r < rounds; r++) {
    const [local, remote] = [cpu['local-group'][r], cpu['endpoint-group'][r]];
    console.log(
      `round ${r + 1}: local group 64 producers ${fmt(rates['local-group'][r])} pushes/s | remote group 4 processes x ${inFlight} ${fmt(rates['endpoint-group'][r])} pushes/s | ratio ${ratios['endpoint-group/local-group'][r].toFixed(2)}x | CPU per push: local ${local.owner.toFixed(1)} µs, owner of remote pushes ${remote.owner.toFixed(1)} µs, their producers ${remote.producer.toFixed(1)} µs`,
    );
  }
  for (let r = 0; r < rounds; r++) {
    const [remote, local] = [serial.remote[r], serial.local[r]];
    console.log(
      `serial push under none, ${serialPushes} pushes, round ${r + 1}: remote p50 ${us(remote.p50Ms)} p99 ${us(remote.p99Ms)} | local p50 ${us(local.p50Ms)} p99 ${us(local.p99Ms)}`,
    );
  }
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
