/** The dead-letter commands of `pq`: `dlq list`, `dlq redrive`, `dlq purge`. */
import { Builder, LogStore, type Consumer, type DeadLetter } from '../index.js';
import { UsageError, type ParsedArgs } from './args.js';
import { codecOption, emit, intOption, oneDir, waitOption, type Command } from './commands.js';
import { fmt, isoTime, payloadFields, quoted, seqRangesText, terminalSafe, type PayloadCodec } from './text.js';

/** Dead letters `dlq list` asks the store for at a time. */
const LIST_PAGE_ITEMS = 256;

/** A dead letter as `--json` prints it: the fields of the text line, under the library's names. */
function deadLetterJson(d: DeadLetter, codec: PayloadCodec): Record<string, unknown> {
  return {
    seq: d.seq,
    bytes: d.bytes.byteLength,
    deliveries: d.deliveries,
    firstDeliveredAt: isoTime(d.firstDeliveredAt),
    lastDeliveredAt: isoTime(d.lastDeliveredAt),
    deadAt: isoTime(d.deadAt),
    reason: d.reason,
    ...payloadFields(d.bytes, codec),
  };
}

/**
 * A dead letter as one text line. The reason and a UTF-8 payload are quoted, so neither can break
 * the line or act on the terminal; any other payload is base64, as in jsonl. With the json codec,
 * a payload that decodes is shown as `json` and its value's JSON text, escaped likewise.
 */
function deadLetterLine(d: DeadLetter, codec: PayloadCodec): string {
  const payload = payloadFields(d.bytes, codec);
  const time = (ms: number): string => isoTime(ms) ?? '-';
  return [
    `seq ${d.seq}`,
    `deliveries ${d.deliveries}`,
    `first ${time(d.firstDeliveredAt)}`,
    `last ${time(d.lastDeliveredAt)}`,
    `dead ${time(d.deadAt)}`,
    `reason ${quoted(d.reason)}`,
    `${d.bytes.byteLength} B ${'json' in payload ? `json ${terminalSafe(JSON.stringify(payload.json))}` : 'text' in payload ? quoted(payload.text) : `base64 ${payload.base64}`}`,
  ].join('  ');
}

export const deadLetterList: Command = async (cli, { values, positionals }) => {
  const after = intOption('dlq list', 'after', values.after, 0);
  const limit = intOption('dlq list', 'limit', values.limit, Number.MAX_SAFE_INTEGER, 1);
  const codec = codecOption('dlq list', values.codec);
  const dir = oneDir('dlq list', positionals);
  // Read-only, as stats and dump: dead letters live in the cursor file, which the read-only open
  // reads like any other, so no lock is taken and no byte written.
  const store = await LogStore.open(dir, { readOnly: true });
  try {
    let from = after;
    let printed = 0;
    while (printed < limit) {
      const page = store.readDeadLetters({ after: from, limit: Math.min(LIST_PAGE_ITEMS, limit - printed) });
      if (page.length === 0) break;
      for (const d of page) await emit(cli.out, cli.json ? JSON.stringify(deadLetterJson(d, codec)) : deadLetterLine(d, codec));
      printed += page.length;
      from = page[page.length - 1]!.seq;
    }
    await cli.out.flush();
    return 0;
  } finally {
    await store.close();
  }
};

/** What `--seq` and `--limit` pick: `seqs` undefined for every dead letter. */
interface Selection {
  readonly seqs: ReadonlySet<number> | undefined;
  readonly limit: number;
}

function selectionOf(command: string, { values, lists }: ParsedArgs): Selection {
  const given = lists.seq ?? [];
  const seqs = given.length === 0 ? undefined : new Set(given.map((v) => intOption(command, 'seq', v, 0, 1)));
  return { seqs, limit: intOption(command, 'limit', values.limit, Infinity, 1) };
}

/**
 * The seqs of the dead letters a selection picks, oldest first, and the `--seq`s that are not
 * dead letters. Read under the store's lock, so the library moves exactly these.
 */
async function choose(rx: Consumer, selection: Selection): Promise<{ chosen: number[]; skipped: number[] }> {
  const { seqs, limit } = selection;
  const chosen: number[] = [];
  const found = new Set<number>();
  for await (const d of rx.deadLetters) {
    if (seqs === undefined) {
      if (chosen.length >= limit) break;
      chosen.push(d.seq);
    } else if (seqs.has(d.seq)) {
      found.add(d.seq);
      if (chosen.length < limit) chosen.push(d.seq);
    }
  }
  const skipped = seqs === undefined ? [] : [...seqs].filter((s) => !found.has(s)).sort((a, b) => a - b);
  return { chosen, skipped };
}

/** `2, 5..7`: sorted seqs as the ranges `seqRangesText` prints. */
function rangesOf(seqs: readonly number[]): { first: number; last: number }[] {
  const ranges: { first: number; last: number }[] = [];
  for (const seq of seqs) {
    const last = ranges[ranges.length - 1];
    if (last !== undefined && seq === last.last + 1) last.last = seq;
    else ranges.push({ first: seq, last: seq });
  }
  return ranges;
}

/** Opens the store for writing, runs `fn` on the queue over it, and closes it whatever happens. */
async function withQueue<T>(command: string, dir: string, args: ParsedArgs, fn: (rx: Consumer) => Promise<T>): Promise<T> {
  const store = await LogStore.open(dir, { ...waitOption(command, args.values.wait), mustExist: true });
  // `group` acks: a purge is durable when it is reported, not only once the store closes.
  const queue = await new Builder(store)
    .durability('group')
    .ackDurability('group')
    .open()
    .catch(async (error: unknown) => {
      await store.close().catch(() => undefined);
      throw error;
    });
  const [tx, rx] = queue;
  try {
    return await fn(rx);
  } finally {
    await tx.close();
  }
}

export const deadLetterRedrive: Command = async (cli, args) => {
  const selection = selectionOf('dlq redrive', args);
  const dir = oneDir('dlq redrive', args.positionals);
  const { chosen, skipped, seqs } = await withQueue('dlq redrive', dir, args, async (rx) => {
    const picked = await choose(rx, selection);
    const newSeqs = picked.chosen.length === 0 ? [] : await rx.deadLetters.redrive({ seqs: picked.chosen });
    if (newSeqs.length !== picked.chosen.length) {
      throw new Error(`redrive moved ${newSeqs.length} of the ${picked.chosen.length} dead letters read under the lock`);
    }
    return { ...picked, seqs: newSeqs };
  });
  if (cli.json) {
    cli.out.line(JSON.stringify({ count: seqs.length, seqs, from: chosen, skipped }));
    return 0;
  }
  cli.out.line(seqs.length === 0 ? 'redrove 0 dead letters' : `redrove ${fmt(seqs.length)} dead letter(s): ${seqRangesText(rangesOf(chosen))} -> ${seqRangesText(rangesOf(seqs))}`);
  if (skipped.length > 0) cli.out.line(`not dead letters, skipped: ${seqRangesText(rangesOf(skipped))}`);
  return 0;
};

export const deadLetterPurge: Command = async (cli, args) => {
  const selection = selectionOf('dlq purge', args);
  const dir = oneDir('dlq purge', args.positionals);
  if (selection.seqs === undefined && args.values.limit === undefined && args.values.yes !== true) {
    throw new UsageError('without --seq or --limit, pq dlq purge deletes every dead letter: pass --yes to confirm', 'dlq purge');
  }
  const { chosen, skipped, count } = await withQueue('dlq purge', dir, args, async (rx) => {
    const picked = await choose(rx, selection);
    const purged = picked.chosen.length === 0 ? 0 : await rx.deadLetters.purge({ seqs: picked.chosen });
    if (purged !== picked.chosen.length) throw new Error(`purge deleted ${purged} of the ${picked.chosen.length} dead letters read under the lock`);
    return { ...picked, count: purged };
  });
  if (cli.json) {
    cli.out.line(JSON.stringify({ count, seqs: chosen, skipped }));
    return 0;
  }
  cli.out.line(count === 0 ? 'purged 0 dead letters' : `purged ${fmt(count)} dead letter(s): ${seqRangesText(rangesOf(chosen))}`);
  if (skipped.length > 0) cli.out.line(`not dead letters, skipped: ${seqRangesText(rangesOf(skipped))}`);
  return 0;
};
