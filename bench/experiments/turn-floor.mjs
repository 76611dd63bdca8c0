// The `group` push-only row (64 producers, 128 B) against its raw reference, with the turn of the
// event loop that LogStore's default takes between two blocking flushes. Under
// `blockingSync: 'auto'` a batch syncs on the calling thread only once per turn, so that timers
// and I/O run between two stalls (docs/internals/engine.md, "Write path"); the raw loop and the
// contract's floor of the `limits` section never yield between their flushes. Here the floor runs
// both ways (`turn`: each batch gathered over a setImmediate instead of a microtask), beside
// LogStore with its defaults, with `blockingSync: true`, and with `blockingSync: true` and no
// per-turn budget of store calls (`storeCallsPerTurn(1e6)`: no turn between flushes, a measurement
// only, since it stalls the loop for every flush in a row). Every contestant once per round in a
// rotating order (bench/lib/ab.mjs); every file gets its zeros inside the clock, as a new
// LogStore's active segment does, except the raw loop's, the row's reference.
// Usage: npm run build && node bench/experiments/turn-floor.mjs [rounds=7] [ms=600]
import { printAbGroup } from '../lib/ab.mjs';
import { floorRate } from '../lib/floor.mjs';
import { logStoreGroupPush } from '../lib/queue-work.mjs';
import { rawSyncLoop } from '../lib/raw.mjs';

const rounds = Number(process.argv[2] ?? 7);
const budgetMs = Number(process.argv[3] ?? 600);
const RECORDS = 600_000;
const payload = Buffer.alloc(128, 7);

const raw = (s, ms) =>
  rawSyncLoop(s, { frameBytes: 20 + 128, records: RECORDS, batch: 64, preallocate: true, budgetMs: ms, mainThread: true });
const floor = (turnPerFlush) => (s, ms) =>
  floorRate(s, { producers: 64, payload, records: RECORDS, budgetMs: ms, mainThread: true, inband: true, turnPerFlush });
const logstore = (blockingSync, storeCallsPerTurn) => (s, ms) =>
  logStoreGroupPush(s, ms, { payload: new Uint8Array(payload), blockingSync, storeCallsPerTurn });

const group = {
  id: 'turn-floor',
  title: '`group`, 64 producers, push only: a turn of the event loop between two flushes, or none',
  contestants: {
    raw,
    floor: floor(false),
    'floor-turn': floor(true),
    logstore: logstore(undefined),
    'logstore-blocking': logstore(true),
    'logstore-blocking-noturn': logstore(true, 1_000_000),
  },
  ratios: {
    'floor/raw': ['floor', 'raw'],
    'floor-turn/raw': ['floor-turn', 'raw'],
    'logstore/raw': ['logstore', 'raw'],
    'logstore-blocking/raw': ['logstore-blocking', 'raw'],
    'logstore-blocking-noturn/raw': ['logstore-blocking-noturn', 'raw'],
    'logstore/floor-turn': ['logstore', 'floor-turn'],
    'logstore-blocking-noturn/floor': ['logstore-blocking-noturn', 'floor'],
  },
};

await printAbGroup(group, rounds, budgetMs);
