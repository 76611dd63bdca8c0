// How soon forward() resumes after its server comes back: a LogStore queue is forwarded into a
// stream of a nats-server this script starts on a free loopback port (its own store directory),
// the server is SIGKILLed mid-forward and started again on the same port and directory, and the
// figure is the time from the connection's reconnect report to the first item the forwarder acks
// after it. Producers keep pushing throughout, so there is always something to forward. It
// measures, it asserts nothing.
//   npm run build && node bench/forward-resume.mjs [--rounds=5]
// The server binary is $NATS_SERVER, /usr/sbin/nats-server, or nats-server on the PATH.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { Builder, LogStore } from '../dist/index.js';
import { forward } from '../dist/engines/jetstream/index.js';

const args = process.argv.slice(2);
const rounds = Number(args.find((a) => a.startsWith('--rounds='))?.slice('--rounds='.length) ?? 5);
const binary = [
  process.env.NATS_SERVER,
  '/usr/sbin/nats-server',
  ...(process.env.PATH ?? '').split(delimiter).map((d) => join(d, 'nats-server')),
].find((c) => c !== undefined && c !== '' && existsSync(c));
if (binary === undefined) {
  console.log('skipped: no nats-server binary (set NATS_SERVER, or install nats-server)');
  process.exit(0);
}

const port = await new Promise((resolve, reject) => {
  const s = createServer();
  s.once('error', reject);
  s.listen(0, '127.0.0.1', () => {
    const { port: p } = s.address();
    s.close(() => resolve(p));
  });
});
const root = mkdtempSync(join(tmpdir(), 'pq-resume-'));
let child;

/** Start the server; resolves on its "Server is ready" line. */
function start() {
  return new Promise((resolve, reject) => {
    child = spawn(binary, ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', join(root, 'js')], { stdio: ['ignore', 'ignore', 'pipe'] });
    let log = '';
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk) => {
      log += chunk;
      if (log.includes('Server is ready')) {
        child.stderr.resume();
        resolve();
      }
    });
    child.once('exit', (code) => reject(new Error(`nats-server exited (${code}):\n${log}`)));
  });
}

async function kill() {
  const gone = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGKILL');
  await gone;
}

/** Resolves on the connection's next status report of `type`. */
async function nextStatus(nc, type) {
  for await (const s of nc.status()) if (s.type === type) return;
}

const tick = () => new Promise((resolve) => setImmediate(resolve));

await start();
const nc = await connect({ servers: `127.0.0.1:${port}`, maxReconnectAttempts: -1, reconnectTimeWait: 50, reconnectJitter: 0 });
const version = nc.info?.version ?? 'unknown';
await (await jetstreamManager(nc)).streams.add({ name: 'RESUME', subjects: ['pq.resume'], duplicate_window: 120e9 });
const store = await LogStore.open(join(root, 'queue'));
const [tx, rx] = await new Builder(store).open();
let pushing = true;
const producer = (async () => {
  for (let i = 0; pushing; i++) {
    await tx.pushMany(Array.from({ length: 64 }, (_, j) => `reading ${i * 64 + j}`));
    await tick();
  }
})();
const stop = new AbortController();
// The defaults: publishTimeoutMs 5000, backoffMs 100.
const f = forward(rx, { connection: nc, subject: 'pq.resume' }, { signal: stop.signal });
const delays = [];
for (let round = 1; round <= rounds; round++) {
  const target = f.stats().forwarded + 2000;
  while (f.stats().forwarded < target) await tick();
  const gone = nextStatus(nc, 'disconnect');
  await kill();
  await gone;
  const back = nextStatus(nc, 'reconnect');
  await start();
  await back;
  const at = performance.now();
  const before = f.stats().forwarded;
  while (f.stats().forwarded === before) await tick();
  delays.push(performance.now() - at);
  console.log(`round ${round}: forwarding resumed ${delays.at(-1).toFixed(1)} ms after the reconnect report`);
}
pushing = false;
await producer;
stop.abort();
await f.done;
await tx.close();
await nc.close();
await kill();
rmSync(root, { recursive: true, force: true });
const sorted = [...delays].sort((a, b) => a - b);
console.log(
  `median ${sorted[Math.floor(sorted.length / 2)].toFixed(1)} ms, max ${sorted.at(-1).toFixed(1)} ms over ${rounds} rounds (nats-server ${version})`,
);
