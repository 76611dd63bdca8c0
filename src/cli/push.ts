/**
 * `pq push`: push from a shell into a queue, whether a process has it open or not. It never takes
 * the store's lock, so it never fails with `ERR_LOCKED` and never keeps the queue's owner from
 * opening it: while a process serves the queue, the pushes go to it through its endpoint and are
 * answered with their seqs; while none does, they are spooled, and the process that next takes
 * the spool in (at its open, or at its next poll) gives them seqs (`connect()`).
 */
import { createInterface } from 'node:readline';
import {
  PRIORITY_MAX,
  PRIORITY_MIN,
  QueueError,
  connect,
  isQueueError,
  type Durability,
  type PushOptions,
  type RemoteProducer,
} from '../index.js';
import { isValidKey } from '../contract/records/keys.js';
import { MAX_KEY_BYTES } from '../contract/store.js';
import { UsageError } from './args.js';
import { emit, intOption, storeKind, waitOption, type Command } from './commands.js';
import { fmt } from './text.js';

/** Pushes through the endpoint kept in flight at once: they are pipelined, and answered in order. */
const PUSHES_IN_FLIGHT = 1024;

/** `--priority N`, `--delay MS`, `--not-before TIME` of `pq push`, as push options. */
function scheduleOptions(values: Record<string, string | boolean | undefined>): PushOptions {
  const options: { priority?: number; delayMs?: number; notBefore?: number } = {};
  const priority = values.priority;
  if (priority !== undefined) {
    const n = Number(priority);
    if (typeof priority !== 'string' || priority.trim() === '' || !Number.isInteger(n) || n < PRIORITY_MIN || n > PRIORITY_MAX) {
      throw new UsageError(`--priority must be an integer from ${PRIORITY_MIN} to ${PRIORITY_MAX}, got '${String(priority)}'`, 'push');
    }
    options.priority = n;
  }
  if (values.delay !== undefined && values['not-before'] !== undefined)
    throw new UsageError('--delay and --not-before exclude each other', 'push');
  if (values.delay !== undefined) options.delayMs = intOption('push', 'delay', values.delay, 0);
  const at = values['not-before'];
  if (at !== undefined) {
    const text = typeof at === 'string' ? at.trim() : '';
    const ms = /^\d+$/.test(text) ? Number(text) : Date.parse(text);
    if (!Number.isSafeInteger(ms) || ms < 0)
      throw new UsageError(`--not-before must be an ISO 8601 time or ms since the epoch, got '${String(at)}'`, 'push');
    options.notBefore = ms;
  }
  return options;
}

function durabilityOption(value: string | boolean | undefined): Durability {
  const d = typeof value === 'string' ? value : 'group';
  if (d !== 'sync' && d !== 'group' && d !== 'none') throw new UsageError(`--durability must be sync, group or none, got '${d}'`, 'push');
  return d;
}

async function readStdinLines(): Promise<string[]> {
  const lines: string[] = [];
  const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of rl) lines.push(line);
  return lines;
}

/**
 * Each payload pushed on its own, pipelined: the owner's capacity may be smaller than the batch (a
 * `pushMany` larger than the capacity is refused), and one push always fits. The owner's group
 * commit gathers them all the same. Seqs are printed in order as they come, so after a failure
 * the lines printed name exactly the pushes that were stored before it.
 */
async function pushEach(
  cli: Parameters<Command>[0],
  producer: RemoteProducer,
  payloads: readonly string[],
  options: PushOptions,
): Promise<number[]> {
  const seqs: number[] = [];
  const inFlight: Promise<number>[] = [];
  let next = 0;
  while (seqs.length < payloads.length) {
    while (next < payloads.length && inFlight.length < PUSHES_IN_FLIGHT) inFlight.push(producer.push(payloads[next++]!, options));
    const seq = await inFlight.shift()!;
    seqs.push(seq);
    if (!cli.json) await emit(cli.out, String(seq));
  }
  return seqs;
}

export const push: Command = async (cli, { values, positionals }) => {
  if (positionals.length < 1) throw new UsageError('pq push needs a <dir>', 'push');
  const [dir, ...data] = positionals as [string, ...string[]];
  const durability = durabilityOption(values.durability);
  const schedule = scheduleOptions(values);
  // Checked as every writing command checks it; a push never waits for the lock, which it never takes.
  waitOption('push', values.wait);
  const create = values.create === true;
  // Checked before anything is read or made: a refused key leaves nothing behind.
  const key = values.key;
  if (key !== undefined) {
    if (typeof key !== 'string' || !isValidKey(key))
      throw new UsageError(`--key must be 1 to ${MAX_KEY_BYTES} UTF-8 bytes, got '${String(key)}'`, 'push');
    if (data.length !== 1)
      throw new UsageError(
        `--key takes exactly one DATA argument, got ${data.length === 0 ? 'none (stdin is not read with --key)' : data.length}`,
        'push',
      );
  }
  // A path that cannot take the pushes is reported before stdin is consumed; one that --create
  // would make is made only once there is something to push (by connect(), as LogStore.open makes it).
  try {
    storeKind(dir, create);
  } catch (error) {
    throw isQueueError(error, 'ERR_NOT_FOUND')
      ? new QueueError('ERR_NOT_FOUND', `${error.message} (pass --create to make one)`, { cause: error, file: error.file })
      : error;
  }
  const payloads = data.length > 0 ? data : await readStdinLines();
  if (payloads.length === 0)
    throw new UsageError('pq push got nothing to push: give DATA arguments, or lines on stdin (stdin was empty)', 'push');
  const producer = await connect(dir, { durability });
  try {
    if (producer.mode === 'endpoint') {
      const seqs =
        typeof key === 'string'
          ? [await producer.push(payloads[0]!, { ...schedule, key })]
          : await pushEach(cli, producer, payloads, schedule);
      if (cli.json) cli.out.line(JSON.stringify({ count: seqs.length, seqs, via: 'endpoint' }));
      else if (typeof key === 'string') cli.out.line(String(seqs[0]));
      return 0;
    }
    if (typeof key === 'string') await producer.push(payloads[0]!, { ...schedule, key });
    else await producer.pushMany(payloads, schedule);
    if (cli.json) cli.out.line(JSON.stringify({ count: payloads.length, seqs: null, via: 'spool' }));
    else
      cli.out.line(`spooled ${fmt(payloads.length)} item(s): no process serves the queue now; the one that takes them in gives them seqs`);
    return 0;
  } finally {
    await producer.close();
  }
};
