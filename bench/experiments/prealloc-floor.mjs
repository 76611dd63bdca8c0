// The `group` push-only row (64 producers, 128 B) against its raw reference, with the zeros of
// preallocation inside the clock and outside it. The raw loop of the row and the contract's floor
// (bench/lib/floor.mjs) zero-fill their file before the clock starts; a new LogStore zero-fills its
// active segment 4 MiB ahead of its writes as it goes, and the next fdatasync flushes those zeros.
// Here the raw loop and the floor run both ways ('inband': zeros written as LogStore writes them),
// beside LogStore with its defaults and with `blockingSync`, every contestant once per round in a
// rotating order (bench/lib/ab.mjs). Every sync of these contestants runs on the main thread
// except LogStore's under 'auto', which chooses.
// Usage: npm run build && node bench/experiments/prealloc-floor.mjs [rounds=7] [ms=600]
import { printAbGroup } from '../lib/ab.mjs';
import { floorRate } from '../lib/floor.mjs';
import { logStoreGroupPush } from '../lib/queue-work.mjs';
import { rawSyncLoop } from '../lib/raw.mjs';

const rounds = Number(process.argv[2] ?? 7);
const budgetMs = Number(process.argv[3] ?? 600);
const RECORDS = 600_000;
const payload = Buffer.alloc(128, 7);

const raw = (preallocate) => (s, ms) =>
  rawSyncLoop(s, { frameBytes: 20 + 128, records: RECORDS, batch: 64, preallocate, budgetMs: ms, mainThread: true });
const floor = (inband) => (s, ms) => floorRate(s, { producers: 64, payload, records: RECORDS, budgetMs: ms, mainThread: true, inband });
const logstore = (blockingSync) => (s, ms) => logStoreGroupPush(s, ms, { payload: new Uint8Array(payload), blockingSync });

const group = {
  id: 'prealloc-floor',
  title: '`group`, 64 producers, push only: zeros before the clock and inside it',
  contestants: {
    'raw-prefilled': raw(true),
    'raw-inband': raw('inband'),
    'floor-prefilled': floor(false),
    'floor-inband': floor(true),
    logstore: logstore(undefined),
    'logstore-blocking': logstore(true),
  },
  ratios: {
    'raw-inband/raw-prefilled': ['raw-inband', 'raw-prefilled'],
    'floor-prefilled/raw-prefilled': ['floor-prefilled', 'raw-prefilled'],
    'floor-inband/raw-prefilled': ['floor-inband', 'raw-prefilled'],
    'logstore/raw-prefilled': ['logstore', 'raw-prefilled'],
    'logstore-blocking/raw-prefilled': ['logstore-blocking', 'raw-prefilled'],
    'logstore/floor-inband': ['logstore', 'floor-inband'],
    'logstore-blocking/floor-inband': ['logstore-blocking', 'floor-inband'],
  },
};

await printAbGroup(group, rounds, budgetMs);
