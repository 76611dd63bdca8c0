/**
 * `pq demo`: a child process pushes and consumes, is SIGKILLed, and the store it leaves behind
 * is reopened and checked against what the child was told.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Builder, LogStore } from '../index.js';
import { UsageError } from './args.js';
import { intOption, reserveReady, type Command, type Cli } from './commands.js';
import { bold, bytesText, dim, fmt, green, red } from './text.js';

const DEMO_PRODUCERS = 64;
const DEMO_PAYLOAD_BYTES = 128;
/** How often the child reports; the parent reads its reports as they come. */
const REPORT_INTERVAL_MS = 50;
/** The line the parent sends on the child's stdin to stop its consumer. */
const PAUSE = 'pause';

/** The payload of producer `p`'s `n`th push: its identity, then filler derived from it, so damage shows. */
function demoPayload(p: number, n: number): Uint8Array {
  const bytes = new Uint8Array(DEMO_PAYLOAD_BYTES);
  const head = Buffer.from(`${p}:${n}:`);
  bytes.set(head);
  let x = (p * 2654435761 + n * 40503) >>> 0;
  for (let i = head.length; i < bytes.length; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    bytes[i] = x >>> 24;
  }
  return bytes;
}

function demoPayloadIntact(bytes: Uint8Array): boolean {
  const m = /^(\d+):(\d+):/.exec(Buffer.from(bytes.subarray(0, 24)).toString('latin1'));
  if (!m) return false;
  return Buffer.from(demoPayload(Number(m[1]), Number(m[2]))).equals(Buffer.from(bytes));
}

interface ChildReport {
  /** Every push through this seq resolved. */
  pushedThrough: number;
  /** The highest seq the consumer took; nothing above it was ever delivered, let alone acked. */
  deliveredThrough: number;
  /** Every ack through this seq resolved. */
  ackedThrough: number;
  pushes: number;
  acks: number;
  /** False once the consumer stopped at the parent's request. */
  consuming: boolean;
}

/**
 * The child of `pq demo`: 64 producers pushing under `group`, one consumer acking, a report on
 * stdout every 50 ms. A `pause` line on stdin stops the consumer while the producers go on.
 */
export async function demoChild(cli: Cli, args: readonly string[]): Promise<number> {
  const dir = args[0]!;
  const [tx, rx] = await new Builder(await LogStore.open(dir)).durability('group').open();
  const state: ChildReport = { pushedThrough: 0, deliveredThrough: 0, ackedThrough: 0, pushes: 0, acks: 0, consuming: true };
  const report = (): void => {
    cli.out.line(JSON.stringify(state));
    cli.out.flush().catch(() => process.exit(1)); // the parent is gone
  };
  setInterval(report, REPORT_INTERVAL_MS);
  const producer = async (p: number) => {
    for (let n = 0; ; n++) {
      const seq = await tx.push(demoPayload(p, n));
      // Batches are stored in seq order, so the highest resolved seq has every lower one resolved.
      if (seq > state.pushedThrough) state.pushedThrough = seq;
      state.pushes++;
    }
  };
  for (let p = 0; p < DEMO_PRODUCERS; p++) void producer(p);
  const pause = new AbortController();
  createInterface({ input: process.stdin }).on('line', (line) => {
    if (line === PAUSE) pause.abort();
  });
  // The consumer issues acks in seq order without waiting for each: they are made durable in
  // group commits, in order, so the acks on disk are always a prefix of the delivered seqs.
  try {
    for (;;) {
      const item = await rx.reserve({ signal: pause.signal });
      if (!item) break;
      const seq = item.seq;
      state.deliveredThrough = seq;
      void item.ack().then(() => {
        state.ackedThrough = seq;
        state.acks++;
      });
    }
  } catch (error) {
    if (!pause.signal.aborted) throw error;
  }
  state.consuming = false;
  report();
  // The producers go on until the parent kills this process.
  return new Promise<number>(() => undefined);
}

interface DemoResult {
  ok: boolean;
  pushedThrough: number;
  deliveredThrough: number;
  ackedThrough: number;
  /** Seqs below the first one recovered: consumed, and their acks durable, before the kill. */
  ackedBeforeKill: number;
  waitingAtKill: number;
  recovered: number;
  storedAfterLastReport: number;
  lost: number;
  damaged: number;
  outOfOrder: number;
  ackedDeliveredAgain: number;
  openMs: number;
}

/** Prints a line of the story; with --json only the result is printed, as one object. */
type Say = (line?: string) => void;

/**
 * Runs the child for about `seconds`, showing its throughput, then pauses its consumer and kills
 * it once items are waiting. Resolves with the child's last report.
 */
async function runAndKill(cli: Cli, dir: string, seconds: number, say: Say): Promise<ChildReport> {
  const tty = cli.out.isTTY && !cli.json;
  const bin = fileURLToPath(new URL('./pq.js', import.meta.url));
  const child = spawn(process.execPath, [bin, '__demo-child', dir], { stdio: ['pipe', 'pipe', 'inherit'] });
  let last: ChildReport = { pushedThrough: 0, deliveredThrough: 0, ackedThrough: 0, pushes: 0, acks: 0, consuming: true };
  let onReport: ((r: ChildReport) => void) | undefined;
  const lines = createInterface({ input: child.stdout! });
  lines.on('line', (line) => {
    try {
      last = JSON.parse(line) as ChildReport;
    } catch {
      // A line torn by the kill: the previous report stands.
      return;
    }
    onReport?.(last);
  });
  let exitedEarly: ((error: Error) => void) | undefined;
  const exited = new Promise<void>((res) =>
    child.once('exit', (code, signal) => {
      exitedEarly?.(new Error(`the demo child exited before the kill (${signal ?? `exit status ${code}`})`));
      res();
    }),
  );
  // Kill at a moment that is not a round number of seconds into the run.
  const killAtMs = seconds * 1000 * 0.6 + ((process.pid * 7919) % Math.max(1, seconds * 300));
  const startedAt = performance.now();
  let previous = last;
  let previousAt = startedAt;
  await new Promise<void>((resolveRun, rejectRun) => {
    const timer = setInterval(() => {
      const now = performance.now();
      const rate = ((last.pushes - previous.pushes) / (now - previousAt)) * 1000;
      const ackRate = ((last.acks - previous.acks) / (now - previousAt)) * 1000;
      previous = last;
      previousAt = now;
      const line = `   pushed ${fmt(last.pushes)} (${fmt(rate)}/s), acked ${fmt(last.acks)} (${fmt(ackRate)}/s)`;
      // A closed stdout surfaces at the next flush; the progress line itself may be lost.
      if (tty) cli.out.text(`\r${line}   `).catch(() => undefined);
      else say(line);
      if (now - startedAt >= killAtMs) {
        clearInterval(timer);
        resolveRun();
      }
    }, 500);
    exitedEarly = (error) => {
      clearInterval(timer);
      rejectRun(error);
    };
  });
  if (tty) say();
  // Stop the consumer, then kill once the child reports pushes beyond what it consumed: those
  // items were stored and never acked, so the reopened store must hold them. Killing a consumer
  // that keeps up could find nothing waiting, and the demo would show no recovery.
  say(`2. pause the consumer; the producers go on`);
  child.stdin!.write(`${PAUSE}\n`);
  const reported = await new Promise<ChildReport>((resolveKill, rejectKill) => {
    exitedEarly = rejectKill;
    onReport = (r) => {
      if (!r.consuming && r.pushedThrough > r.deliveredThrough) resolveKill(r);
    };
  });
  child.kill('SIGKILL');
  exitedEarly = undefined;
  await exited;
  lines.close();
  say(`3. ${red('SIGKILL')} after ${((performance.now() - startedAt) / 1000).toFixed(1)} s`);
  say(
    `   the child last reported: every push through seq ${reported.pushedThrough} resolved, the consumer took items through seq ${reported.deliveredThrough}, every ack through seq ${reported.ackedThrough} resolved`,
  );
  return reported;
}

/** Reopens the store the child left, takes every item, and checks them against its last report. */
async function readBack(dir: string, reported: ChildReport, say: Say): Promise<DemoResult> {
  say('4. reopen the store in this process and read everything back');
  const openedAt = performance.now();
  const store = await LogStore.open(dir);
  const openMs = performance.now() - openedAt;
  const info = store.recovery;
  say(
    `   opened in ${openMs.toFixed(1)} ms; last shutdown ${info.cleanShutdown ? 'clean' : 'not clean'}; tail: ${info.tornBytes} torn byte(s) cut and kept aside, ${bytesText(info.zeroTailBytes)} of preallocated zeros trimmed`,
  );
  const [tx, rx] = await new Builder(store).durability('group').open();
  const ready = rx.stats().ready;
  let first = 0;
  let lastSeq = 0;
  let delivered = 0;
  let damaged = 0;
  let outOfOrder = 0;
  const present = new Set<number>();
  for (let item = await reserveReady(rx); item; item = await reserveReady(rx)) {
    if (first === 0) first = item.seq;
    if (item.seq <= lastSeq) outOfOrder++;
    lastSeq = item.seq;
    if (!demoPayloadIntact(item.bytes)) damaged++;
    present.add(item.seq);
    delivered++;
    await item.ack();
  }
  await tx.close();
  say(`   ${fmt(ready)} item(s) were waiting: seq ${first || '-'} .. ${lastSeq || '-'}`);
  // Acks are issued in seq order and made durable in order, so the seqs below the first one
  // delivered now were acked before the kill. Everything from there through the last push the
  // child saw resolve must be here, and so must every seq above what the consumer took, which
  // was never acked whatever reached the disk.
  const mustStart = Math.max(1, first === 0 ? reported.deliveredThrough + 1 : Math.min(first, reported.deliveredThrough + 1));
  let lost = 0;
  for (let seq = mustStart; seq <= reported.pushedThrough; seq++) if (!present.has(seq)) lost++;
  const ackRegressed = first !== 0 && first <= reported.ackedThrough ? 1 : 0;
  return {
    ok: lost === 0 && damaged === 0 && outOfOrder === 0 && ackRegressed === 0,
    pushedThrough: reported.pushedThrough,
    deliveredThrough: reported.deliveredThrough,
    ackedThrough: reported.ackedThrough,
    ackedBeforeKill: mustStart - 1,
    waitingAtKill: reported.pushedThrough - reported.deliveredThrough,
    recovered: delivered,
    storedAfterLastReport: Math.max(0, lastSeq - reported.pushedThrough),
    lost,
    damaged,
    outOfOrder,
    ackedDeliveredAgain: ackRegressed,
    openMs: Math.round(openMs * 10) / 10,
  };
}

export const demo: Command = async (cli, { values, positionals }) => {
  if (positionals.length > 1) throw new UsageError('pq demo takes at most one [dir]', 'demo');
  const seconds = intOption('demo', 'seconds', values.seconds, 4, 1);
  const made = positionals.length === 0;
  const dir = made ? mkdtempSync(join(tmpdir(), 'pq-demo-')) : resolve(positionals[0]!);
  const say: Say = (line = '') => {
    if (!cli.json) cli.out.line(line);
  };
  try {
    say(bold('persistent-queue demo: a producer is SIGKILLed mid-stream; nothing it was told is stored may be lost'));
    say(dim(`store: ${dir}`));
    say(`1. start a child process: ${DEMO_PRODUCERS} producers pushing ${DEMO_PAYLOAD_BYTES} B items under 'group', one consumer acking`);
    await cli.out.flush();
    const reported = await runAndKill(cli, dir, seconds, say);
    const result = await readBack(dir, reported, say);
    if (cli.json) {
      cli.out.line(JSON.stringify(result, null, 2));
      return result.ok ? 0 : 1;
    }
    say('');
    say(bold('result'));
    say(`   pushes the child saw resolve    ${fmt(result.pushedThrough)} (seq 1 .. ${result.pushedThrough})`);
    say(`   consumed and acked before kill  ${fmt(result.ackedBeforeKill)}`);
    say(`   waiting at the kill, at least   ${fmt(result.waitingAtKill)} (pushed after the consumer's last item)`);
    say(
      `   recovered and delivered now     ${fmt(result.recovered)} (${fmt(result.storedAfterLastReport)} more were stored after the last report)`,
    );
    say(`   damaged payloads                ${result.damaged}`);
    say(`   out of order                    ${result.outOfOrder}`);
    say(`   acked items delivered again     ${result.ackedDeliveredAgain}`);
    say(`   ${result.ok ? green('lost: 0') : red(`lost: ${result.lost}`)}`);
    if (!result.ok) {
      say(red('FAILED: acknowledged data was lost or damaged'));
      return 1;
    }
    say(green('every acknowledged push survived the SIGKILL'));
    // A SIGKILL ends the process, not the kernel: every byte written reaches the disk in the end,
    // so 'none', which never syncs, survives it too. What the syncs of 'group' buy is shown only
    // by losing the page cache, which the simulated crash disk does.
    say(dim(`that is a process crash, which 'none' survives too: the kernel keeps every byte written.`));
    say(dim(`power loss (unsynced writes lost, torn or zero-filled) is what the simulated crash disk shows:`));
    say(dim(`the crash tests of 'npm test', and README "Property-test your own crash recovery".`));
    return 0;
  } finally {
    if (made && !values.keep) rmSync(dir, { recursive: true, force: true });
    else say(dim(`kept ${dir}`));
  }
};
