// What bounds pushes through the owner's endpoint with 4 producer processes × 16 in flight (the
// `remote` row endpoint-group/local-group): the endpoint's cells of bench/lib/remote.mjs in
// interleaved rounds beside two floors over the same Unix socket, with no queue at all:
//   floor-echo   a server that answers each 128 B request as it arrives (4 bytes back), the frames
//                of one turn written as one buffer on both sides, as the endpoint does
//   floor-fsync  the same server writing each turn's requests to a preallocated file and answering
//                them once an fdatasync that started after their write completed: the least a
//                `group` push through a socket does (one sync in flight, the rest gathered)
// and the owner's own 64 producers (local-group). The producers of the floors are this file run
// with `--producer`, 16 requests in flight each, as bench/lib/remote-producer.mjs pushes.
// Usage: npm run build && node bench/experiments/endpoint-floor.mjs [rounds=5] [ms=1500]
import { spawn } from 'node:child_process';
import { closeSync, fdatasync, fdatasyncSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { remoteCells } from '../lib/remote.mjs';
import { median } from '../lib/stats.mjs';

const REQUEST_BYTES = 4 + 128;
const REPLY_BYTES = 4;
const PROCESSES = 4;
const IN_FLIGHT = 16;

/** Frames of one turn, written as one buffer on the next tick (src/remote/outbox.ts does the same). */
function outbox(socket) {
  let parts = [];
  return (buf) => {
    if (parts.length === 0)
      process.nextTick(() => {
        const out = parts.length === 1 ? parts[0] : Buffer.concat(parts);
        parts = [];
        if (!socket.destroyed) socket.write(out);
      });
    parts.push(buf);
  };
}

/** Split a byte stream into `size`-byte frames; calls `each(count)` with how many whole frames arrived. */
function framer(size, each) {
  let carry = 0;
  return (chunk) => {
    const bytes = carry + chunk.length;
    carry = bytes % size;
    const n = Math.floor(bytes / size);
    if (n > 0) each(n);
  };
}

if (process.argv[2] === '--producer') {
  const [path, ms] = [process.argv[3], Number(process.argv[4])];
  const socket = createConnection(path);
  await new Promise((r) => socket.once('connect', r));
  const send = outbox(socket);
  const request = Buffer.alloc(REQUEST_BYTES, 7);
  request.writeUInt32LE(128, 0);
  const waiting = [];
  socket.on(
    'data',
    framer(REPLY_BYTES, (n) => {
      for (let i = 0; i < n; i++) waiting.shift()();
    }),
  );
  const push = () =>
    new Promise((resolve) => {
      waiting.push(resolve);
      send(request);
    });
  console.log('ready');
  await new Promise((resolve) => process.stdin.once('data', resolve));
  process.stdin.destroy();
  let n = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: IN_FLIGHT }, async () => {
      while (performance.now() - t0 < ms) {
        await push();
        n++;
      }
    }),
  );
  console.log(JSON.stringify({ n, ms: performance.now() - t0 }));
  socket.end();
} else {
  const rounds = Number(process.argv[2] ?? 5);
  const ms = Number(process.argv[3] ?? 1500);
  const base = mkdtempSync(join(tmpdir(), 'pq-endpoint-floor-'));

  async function floor(sync) {
    const dir = mkdtempSync(join(base, 'f-'));
    const path = join(dir, 's.sock');
    const fd = openSync(join(dir, 'log'), 'w+', 0o600);
    const fileBytes = 256 * 2 ** 20;
    if (sync) {
      const zeros = Buffer.alloc(1 << 20);
      for (let at = 0; at < fileBytes; at += zeros.length) writeSync(fd, zeros, 0, zeros.length, at);
      fdatasyncSync(fd);
    }
    let at = 0;
    let syncing = false;
    let gathered = []; // [answer, count] written since the running sync started
    const startSync = () => {
      syncing = true;
      const covered = gathered;
      gathered = [];
      fdatasync(fd, () => {
        for (const [answer, count] of covered) answer(count);
        syncing = false;
        if (gathered.length) startSync();
      });
    };
    const reply = Buffer.alloc(REPLY_BYTES);
    const server = createServer((socket) => {
      const send = outbox(socket);
      const answer = (count) => {
        for (let i = 0; i < count; i++) send(reply);
      };
      socket.on('data', (chunk) => {
        if (!sync) return framer(REQUEST_BYTES, answer)(chunk);
        writeSync(fd, chunk, 0, chunk.length, at % fileBytes);
        at += chunk.length;
        return undefined;
      });
      if (sync) {
        const count = framer(REQUEST_BYTES, (n) => {
          gathered.push([answer, n]);
          if (!syncing) startSync();
        });
        socket.on('data', count);
      }
    });
    await new Promise((r) => server.listen(path, r));
    const self = new URL(import.meta.url).pathname;
    const procs = Array.from({ length: PROCESSES }, () =>
      spawn(process.execPath, [self, '--producer', path, String(ms)], { stdio: ['pipe', 'pipe', 'inherit'] }),
    );
    const lines = procs.map((p) => {
      let out = '';
      p.stdout.setEncoding('utf8');
      const waiters = [];
      p.stdout.on('data', (d) => {
        out += d;
        for (const w of waiters.splice(0)) w();
      });
      return async (test) => {
        for (;;) {
          const l = out.split('\n').find(test);
          if (l !== undefined) return l;
          await new Promise((r) => waiters.push(r));
        }
      };
    });
    for (const l of lines) await l((x) => x === 'ready');
    for (const p of procs) p.stdin.write('go\n');
    const results = await Promise.all(lines.map((l) => l((x) => x.startsWith('{')).then(JSON.parse)));
    await Promise.all(procs.map((p) => new Promise((r) => (p.exitCode !== null ? r() : p.once('exit', r)))));
    server.close();
    closeSync(fd);
    rmSync(dir, { recursive: true, force: true });
    return { rate: results.reduce((s, r) => s + r.n / (r.ms / 1000), 0) };
  }

  const remote = remoteCells();
  const cells = {
    'local-group': (dir) => remote['local-group'](dir, ms),
    'endpoint-group': (dir) => remote['endpoint-group'](dir, ms),
    'floor-echo': () => floor(false),
    'floor-fsync': () => floor(true),
  };
  const names = Object.keys(cells);
  const out = Object.fromEntries(names.map((k) => [k, []]));
  try {
    for (let r = 0; r < rounds; r++) {
      for (let i = 0; i < names.length; i++) {
        const name = names[(i + r) % names.length];
        const dir = mkdtempSync(join(base, 'c-'));
        out[name].push((await cells[name](dir)).rate);
        rmSync(dir, { recursive: true, force: true });
      }
    }
  } finally {
    rmSync(base, { recursive: true, force: true });
  }
  const range = (xs) => `${median(xs).toFixed(2)} (${Math.min(...xs).toFixed(2)}–${Math.max(...xs).toFixed(2)})`;
  console.log(
    `${rounds} rounds of ${ms} ms, ${PROCESSES} processes × ${IN_FLIGHT} in flight, 128 B; pushes/s, median of rounds; ratios: median (min–max) of per-round ratios`,
  );
  for (const name of names) console.log(`${name.padEnd(15)} ${median(out[name]).toFixed(0).padStart(9)}`);
  const ratio = (a, b) => out[a].map((x, i) => x / out[b][i]);
  for (const [a, b] of [
    ['endpoint-group', 'local-group'],
    ['floor-fsync', 'local-group'],
    ['floor-echo', 'local-group'],
    ['endpoint-group', 'floor-fsync'],
  ])
    console.log(`${a} / ${b}: ${range(ratio(a, b))}`);
}
