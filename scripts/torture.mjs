#!/usr/bin/env node
// SIGKILL torture: repeatedly spawn scripts/torture-child.mjs, which pushes and acks
// under load through the BUILT package (dist/) with durability sync, group or none, SIGKILL it at
// a seeded moment (after a seeded number of reported operations, never a wall-clock delay),
// reopen the store here and check:
// - every push the child reported resolved is present, unless an ack of it was reported resolved
//   (a SIGKILL is a process crash: all three policies survive it);
// - an ack the child reported resolved is never redelivered;
// - nothing is invented: every recovered payload is one the child pushed, with exactly its bytes,
//   under the seq its push resolved with; seqs strictly increase (FIFO by seq);
// - the store opens after every kill (never ERR_CORRUPT).
// About a third of the children open the store with blockingSync (syncs on the main thread).
// About a quarter of them meet a parent that stops reading their stdout for STALL_MS at a seeded
// line: the pipe fills, and a line the child wrote before an operation must still arrive whole
// (the child writes each one synchronously; a write Node had queued inside the child would die
// with it and its ack would read as a lost item).
// Usage: npm run torture -- --kills 300 [--seconds 120] [--seed 0x1234]
// Exit 1 on any violation, with the line that reproduces the run.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const dist = join(here, '..', 'dist', 'index.js');
if (!existsSync(dist)) {
  console.error('torture: dist/ is missing; run `npm run build` first');
  process.exit(2);
}
const { LogStore } = await import(dist);

function parseArgs(argv) {
  const args = { kills: 200, seconds: Infinity, seed: 0x7047 };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const v = argv[i + 1];
    if (a === '--kills') (args.kills = Number(v)), i++;
    else if (a === '--seconds') (args.seconds = Number(v)), i++;
    else if (a === '--seed') (args.seed = Number(v)), i++;
    else if (a === '--help' || a === '-h') {
      console.log('usage: npm run torture -- --kills N [--seconds S] [--seed S]');
      process.exit(0);
    } else {
      console.error(`torture: unknown argument ${a}`);
      process.exit(2);
    }
  }
  if (!Number.isSafeInteger(args.kills) || args.kills < 1)
    throw new RangeError(`Expected \`--kills\` to be a positive integer, got \`${args.kills}\``);
  if (!Number.isSafeInteger(args.seed)) throw new RangeError(`Expected \`--seed\` to be an integer, got \`${args.seed}\``);
  return args;
}

const args = parseArgs(process.argv.slice(2));
const seedHex = `0x${(args.seed >>> 0).toString(16)}`;
let state = args.seed >>> 0;
const rand = () => {
  state = (state + 0x6d2b79f5) >>> 0;
  let t = state;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};
const payloadText = (id) => `t${id}:${'x'.repeat(id % 97)}`;
const POLICIES = ['sync', 'group', 'none'];
/** How long the parent stops reading a stalled child's stdout. */
const STALL_MS = 300;

const root = mkdtempSync(join(tmpdir(), 'pq-torture-'));
const dir = join(root, 'store');
const tty = process.stdout.isTTY;
const started = Date.now();

/** id -> { seq, acked } for every push reported resolved and not yet seen acked. */
const pushed = new Map();
/** seqs whose ack was reported resolved: never to be seen again. */
const ackedSeqs = new Set();
/** seqs whose ack was issued: they may be gone after a kill (the child's line is in the pipe before it calls ack()). */
const ackIssued = new Set();
let nextId = 1;
const totals = {
  kills: 0,
  pushes: 0,
  acks: 0,
  recovered: 0,
  checked: 0,
  byPolicy: { sync: 0, group: 0, none: 0 },
  blocking: 0,
  stalled: 0,
};
const violations = [];

function violation(kill, policy, message) {
  violations.push(`kill ${kill} (${policy}): ${message}`);
}

/** `stallAt`: after reading this many lines, stop reading for STALL_MS (-1: never). */
function runChild(kill, policy, killAfter, stallAt) {
  return new Promise((resolve) => {
    const child = spawn(
      process.execPath,
      [join(here, 'torture-child.mjs'), dir, policy, String((rand() * 2 ** 32) >>> 0), String(nextId)],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let lines = 0;
    let partial = '';
    let stderr = '';
    let killed = false;
    const seqToId = new Map();
    let maxId = nextId - 1;
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (chunk) => {
      const parts = (partial + chunk).split('\n');
      partial = parts.pop();
      for (const line of parts) {
        const [kind, a, b] = line.split(' ');
        if (kind === 'p') {
          const id = Number(a);
          const seq = Number(b);
          pushed.set(id, { seq });
          seqToId.set(seq, id);
          if (id > maxId) maxId = id;
          totals.pushes++;
        } else if (kind === 'a') {
          ackIssued.add(Number(a));
        } else if (kind === 'A') {
          const seq = Number(a);
          ackedSeqs.add(seq);
          totals.acks++;
        } else if (kind === 'X') violation(kill, policy, `child: ${line.slice(2)}`);
        else if (kind === 'ready' && a === 'blocking') totals.blocking++;
        if (kind !== 'ready') lines++;
        if (lines === stallAt && !child.stdout.isPaused()) {
          totals.stalled++;
          child.stdout.pause();
          setTimeout(() => child.stdout.resume(), STALL_MS);
        }
        if (!killed && lines >= killAfter) {
          killed = true;
          child.kill('SIGKILL');
        }
      }
    });
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (c) => (stderr += c));
    child.on('close', (code, signal) => {
      if (signal !== 'SIGKILL')
        violation(kill, policy, `child exited on its own (code ${code}, signal ${signal}): ${stderr.trim().slice(0, 500)}`);
      // Ids the child may have handed out without reporting: never reuse them.
      nextId = Math.max(nextId, maxId + 1) + 1000;
      resolve();
    });
  });
}

async function check(kill, policy) {
  let store;
  try {
    store = await LogStore.open(dir);
  } catch (e) {
    violation(kill, policy, `open after SIGKILL failed: ${e.code}: ${e.message}`);
    return false;
  }
  const recovered = [];
  try {
    for (;;) {
      const got = store.read({
        after: recovered.length ? recovered[recovered.length - 1].seq : 0,
        before: Number.MAX_SAFE_INTEGER,
        limit: 1e6,
      });
      if (got.length === 0) break;
      recovered.push(...got);
    }
  } catch (e) {
    violation(kill, policy, `read after SIGKILL failed: ${e.code}: ${e.message}`);
  }
  const dec = new TextDecoder();
  const present = new Set();
  let prev = 0;
  for (const it of recovered) {
    if (it.seq <= prev) violation(kill, policy, `seq ${it.seq} recovered after ${prev}: not FIFO by seq`);
    prev = it.seq;
    const text = dec.decode(it.bytes);
    const id = Number(text.slice(1, text.indexOf(':')));
    if (!(id > 0) || text !== payloadText(id))
      violation(kill, policy, `seq ${it.seq} holds bytes that were never pushed: ${JSON.stringify(text.slice(0, 40))}`);
    if (ackedSeqs.has(it.seq)) violation(kill, policy, `seq ${it.seq} (id ${id}) came back although its ack resolved`);
    const p = pushed.get(id);
    if (p !== undefined && p.seq !== it.seq)
      violation(kill, policy, `id ${id} resolved with seq ${p.seq} but was recovered as seq ${it.seq}`);
    present.add(id);
    totals.checked++;
  }
  for (const [id, p] of pushed) {
    if (present.has(id)) continue;
    if (!ackIssued.has(p.seq)) violation(kill, policy, `seq ${p.seq} (id ${id}) was reported pushed and never acked, but is missing`);
    pushed.delete(id); // acked and gone
  }
  // Unreported pushes that landed are now part of the store.
  for (const it of recovered) {
    const text = dec.decode(it.bytes);
    pushed.set(Number(text.slice(1, text.indexOf(':'))), { seq: it.seq });
  }
  totals.recovered += recovered.length;
  await store.close();
  return true;
}

function progress(final = false) {
  const secs = (Date.now() - started) / 1000;
  const line = `torture ${seedHex}: ${totals.kills}/${args.kills} kills, ${totals.pushes} pushes and ${totals.acks} acks reported, ${totals.checked} recovered items checked, ${violations.length} violations, ${secs.toFixed(1)} s`;
  if (tty && !final) process.stdout.write(`\r${line}`);
  else if (final || totals.kills % 25 === 0) console.log(line);
}

try {
  for (let kill = 1; kill <= args.kills; kill++) {
    if ((Date.now() - started) / 1000 >= args.seconds) break;
    const policy = POLICIES[Math.floor(rand() * 3)];
    const killAfter = 1 + Math.floor(rand() * (rand() < 0.2 ? 20 : 400));
    const stallAt = killAfter > 1 && rand() < 0.25 ? 1 + Math.floor(rand() * (killAfter - 1)) : -1;
    await runChild(kill, policy, killAfter, stallAt);
    totals.kills++;
    totals.byPolicy[policy]++;
    if (!(await check(kill, policy))) break;
    progress();
    if (violations.length > 0) break;
  }
} finally {
  if (tty) process.stdout.write('\n');
  progress(true);
  console.log(
    `torture: kills by policy: sync ${totals.byPolicy.sync}, group ${totals.byPolicy.group}, none ${totals.byPolicy.none} (${totals.blocking} of them with blockingSync, ${totals.stalled} with their stdout left unread for ${STALL_MS} ms); store ${violations.length > 0 ? 'kept at' : 'was in'} ${dir}`,
  );
  if (violations.length === 0) rmSync(root, { recursive: true, force: true });
}
if (violations.length > 0) {
  console.error(`reproduce: npm run torture -- --kills ${args.kills} --seed ${seedHex}`);
  for (const v of violations.slice(0, 20)) console.error(`VIOLATION ${v}`);
  process.exit(1);
}
console.log(`torture: OK, ${totals.kills} SIGKILLs survived`);
