// How close can any queue with this contract come to the raw loop, under `group`, 64 producers,
// 128 B, push only? The floor (bench/lib/floor.mjs) is the least work the contract asks for: a
// promise per push resolved once durable, a CRC-framed copy of the payload, one write(2) and one
// fdatasync per batch, a preallocated file, and nothing else.
//
// Contestants, every one once per round in a rotating order (bench/lib/ab.mjs):
//   raw-async / raw-main   write 64 pre-built frames + fdatasync (async / on the main thread)
//   floor / floor-main     the floor above (async fdatasync / fdatasyncSync)
//   logstore / -blocking   the queue over LogStore `group` (default / blockingSync)
//   sqlite                 better-sqlite3, WAL, synchronous FULL, 64 inserts per commit
//   level                  classic-level, batches of 64 written with sync
// The rates are medians over the rounds; each ratio is the median of the per-round ratios.
// Usage: npm run build && node bench/experiments/group-floor.mjs [rounds=7] [ms=600]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Builder, LogStore } from '../../dist/index.js';
import { runAbGroup } from '../lib/ab.mjs';
import { floorRate } from '../lib/floor.mjs';
import { levelPeer, sqlitePeer } from '../lib/peers.mjs';
import { pushOnly } from '../lib/queue-work.mjs';
import { rawSyncLoop } from '../lib/raw.mjs';
import { median } from '../lib/stats.mjs';

const rounds = Number(process.argv[2] ?? 7);
const budgetMs = Number(process.argv[3] ?? 600);
const PRODUCERS = 64;
const PAYLOAD = new Uint8Array(128).fill(7);
const FRAME_BYTES = 20 + 128;
const floor = (mainThread) => (s, ms) => floorRate(s, { producers: PRODUCERS, payload: PAYLOAD, records: Math.ceil((600_000 * ms) / 1000), budgetMs: ms, mainThread });

async function logStoreRun(scratch, ms, blockingSync) {
  const dir = mkdtempSync(join(scratch, 'floor-log-'));
  try {
    const [tx] = await new Builder(await LogStore.open(join(dir, 'q'), { blockingSync })).durability('group').open();
    try {
      const r = await pushOnly(tx, { producers: PRODUCERS, payload: PAYLOAD, count: 2_000_000, budgetMs: ms });
      return r.msgs / r.seconds;
    } finally {
      await tx.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const raw = (mainThread) => (s, ms) => rawSyncLoop(s, { frameBytes: FRAME_BYTES, records: 2_000_000, batch: 64, preallocate: true, budgetMs: ms, mainThread });
const BEST_RAW = ['raw-async', 'raw-main'];
const group = {
  id: 'group-floor',
  contestants: {
    'raw-async': raw(false),
    'raw-main': raw(true),
    floor: floor(false),
    'floor-main': floor(true),
    logstore: (s, ms) => logStoreRun(s, ms, false),
    'logstore-blocking': (s, ms) => logStoreRun(s, ms, true),
    sqlite: async (s, ms) => {
      const r = await sqlitePeer(s, { durable: true, mode: 'perCommit', batch: 64, payload: Buffer.from(PAYLOAD), count: 2_000_000, budgetMs: ms });
      return r.msgs / r.seconds;
    },
    level: async (s, ms) => {
      const r = await levelPeer(s, { sync: true, mode: 'perCommit', batch: 64, payload: Buffer.from(PAYLOAD), count: 2_000_000, budgetMs: ms });
      return r.msgs / r.seconds;
    },
  },
  ratios: {
    'floor / best raw': ['floor', BEST_RAW],
    'floor / raw-async': ['floor', 'raw-async'],
    'floor-main / best raw': ['floor-main', BEST_RAW],
    'logstore / best raw': ['logstore', BEST_RAW],
    'logstore / floor': ['logstore', 'floor'],
    'logstore-blocking / floor-main': ['logstore-blocking', 'floor-main'],
    'floor / sqlite': ['floor', 'sqlite'],
    'floor-main / sqlite': ['floor-main', 'sqlite'],
    'logstore / sqlite': ['logstore', 'sqlite'],
    'floor / level': ['floor', 'level'],
    'floor-main / level': ['floor-main', 'level'],
    'logstore / level': ['logstore', 'level'],
    'logstore-blocking / sqlite': ['logstore-blocking', 'sqlite'],
    'logstore-blocking / level': ['logstore-blocking', 'level'],
    'sqlite / best raw': ['sqlite', BEST_RAW],
  },
};

const scratch = mkdtempSync(join(tmpdir(), 'pq-floor-'));
try {
  const res = await runAbGroup(group, { scratch, rounds, budgetMs, onRound: (r) => process.stderr.write(`round ${r + 1}/${rounds}\n`) });
  const k = (x) => `${(x / 1000).toFixed(1)} k/s`;
  console.log(`group, ${PRODUCERS} producers, 128 B, push only: ${rounds} rounds of ${budgetMs} ms (median, min–max)`);
  for (const [name, v] of Object.entries(res.rates)) console.log(`  ${name.padEnd(20)} ${k(median(v)).padStart(11)}  (${k(Math.min(...v))} – ${k(Math.max(...v))})`);
  for (const [id, v] of Object.entries(res.ratios)) console.log(`  ${id.padEnd(32)} ${median(v).toFixed(2)}  (${Math.min(...v).toFixed(2)} – ${Math.max(...v).toFixed(2)})`);
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
