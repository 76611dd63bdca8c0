// A plainjob producer process for bench/lib/remote.mjs: opens the SQLite file `file` itself, as
// plainjob's users do, prints `ready`, waits for a line on stdin, then runs `inFlight` concurrent
// adders of a 128-character job for `ms` and prints { n, ms } as JSON.
import { createRequire } from 'node:module';
import * as plainjob from 'plainjob';

const Database = createRequire(import.meta.url)('better-sqlite3');
const [file, inFlight, ms] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4])];
const quiet = { error() {}, warn() {}, info() {}, debug() {} };
const queue = plainjob.defineQueue({ connection: plainjob.better(new Database(file)), logger: quiet });
const text = 'x'.repeat(128);
console.log('ready');
await new Promise((resolve) => process.stdin.once('data', resolve));
process.stdin.destroy();
let n = 0;
const t0 = performance.now();
// add is a synchronous insert: each adder yields a turn after it, as an awaited write would, and
// retries while another process holds SQLite's write lock.
await Promise.all(
  Array.from({ length: inFlight }, async () => {
    while (performance.now() - t0 < ms) {
      for (let tries = 0; ; tries++) {
        try {
          queue.add('job', { p: text });
          break;
        } catch (e) {
          if (!/SQLITE_BUSY/.test(String(e?.code ?? e?.message)) || tries > 1000) throw e;
        }
      }
      n++;
      await new Promise((r) => setImmediate(r));
    }
  }),
);
console.log(JSON.stringify({ n, ms: performance.now() - t0 }));
queue.close();
