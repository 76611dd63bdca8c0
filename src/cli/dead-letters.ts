/**
 * The dead-letter commands of `pq`: `dlq list`, `dlq redrive`, `dlq purge`. While a process serves
 * the queue they go through it (its endpoint): it holds the dead letters in memory and the store's
 * lock. While none does, `list` reads the store without a lock and the others take it.
 */
import { Builder, LogStore, type Consumer, type DeadLetter } from '../index.js';
import { UsageError, type ParsedArgs } from './args.js';
import { codecOption, emit, intOption, oneDir, storeKind, waitOption, type Command } from './commands.js';
import { ownerName, reachOwner, throughOwnerOrLock, withOwner, type Owner } from './owner.js';
import { fmt, isoTime, payloadFields, quoted, seqRangesText, terminalSafe, type PayloadCodec } from './text.js';

/** Dead letters `dlq list` asks the store for at a time. */
const LIST_PAGE_ITEMS = 256;

/**
 * Dead letters one redrive or purge request names through the endpoint: the owner answers a
 * redrive with every new seq in one frame, so a request must not name more than fit.
 */
const SEQS_PER_REQUEST = 4096;

/** Where the dead letters are read and changed: the owner's queue, or one this command opens. */
interface Letters {
  /** Dead letters with a seq above `after`, at most `limit`, oldest first. */
  page(after: number, limit: number): Promise<DeadLetter[]>;
  /** Redrive exactly these; resolves with the new seqs. */
  redrive(seqs: readonly number[]): Promise<number[]>;
  /** Purge exactly these; resolves with how many were deleted. */
  purge(seqs: readonly number[]): Promise<number>;
  /** The owner's pid when the owner does the work; undefined when this command holds the lock. */
  readonly owner: Owner | undefined;
}

function lettersOfOwner(owner: Owner): Letters {
  const client = owner.client;
  return {
    owner,
    page: (after, limit) => client.deadLetters(after, limit),
    async redrive(seqs) {
      const moved: number[] = [];
      for (let i = 0; i < seqs.length; i += SEQS_PER_REQUEST)
        moved.push(...(await client.redrive({ seqs: seqs.slice(i, i + SEQS_PER_REQUEST), limit: undefined })));
      return moved;
    },
    async purge(seqs) {
      let count = 0;
      for (let i = 0; i < seqs.length; i += SEQS_PER_REQUEST)
        count += await client.purge({ seqs: seqs.slice(i, i + SEQS_PER_REQUEST), limit: undefined });
      return count;
    },
  };
}

function lettersOfConsumer(rx: Consumer): Letters {
  return {
    owner: undefined,
    page: (after, limit) => rx.deadLetters.list({ after, limit }),
    redrive: (seqs) => (seqs.length === 0 ? Promise.resolve([]) : rx.deadLetters.redrive({ seqs })),
    purge: (seqs) => (seqs.length === 0 ? Promise.resolve(0) : rx.deadLetters.purge({ seqs })),
  };
}

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

/** Print the dead letters `page` gives, from `after` on, at most `limit`, a page at a time. */
async function printLetters(
  cli: Parameters<Command>[0],
  page: (after: number, limit: number) => Promise<DeadLetter[]>,
  after: number,
  limit: number,
  codec: PayloadCodec,
): Promise<number> {
  let from = after;
  let printed = 0;
  while (printed < limit) {
    const letters = await page(from, Math.min(LIST_PAGE_ITEMS, limit - printed));
    if (letters.length === 0) break;
    for (const d of letters) await emit(cli.out, cli.json ? JSON.stringify(deadLetterJson(d, codec)) : deadLetterLine(d, codec));
    printed += letters.length;
    from = letters[letters.length - 1]!.seq;
  }
  await cli.out.flush();
  return 0;
}

export const deadLetterList: Command = async (cli, { values, positionals }) => {
  const after = intOption('dlq list', 'after', values.after, 0);
  const limit = intOption('dlq list', 'limit', values.limit, Number.MAX_SAFE_INTEGER, 1);
  const codec = codecOption('dlq list', values.codec);
  const dir = oneDir('dlq list', positionals);
  const kind = storeKind(dir);
  // The owner holds the dead letters as they are now; the cursor file has them as of its last write.
  const owner = await reachOwner(dir);
  if (owner !== null) return withOwner(owner, (o) => printLetters(cli, (from, n) => o.client.deadLetters(from, n), after, limit, codec));
  // Only pushes spooled before any process opened the queue: nothing was ever delivered, let alone dead-lettered.
  if (kind === 'spool') return 0;
  // Read-only, as stats and dump: dead letters live in the cursor file, which the read-only open
  // reads like any other, so no lock is taken and no byte written.
  const store = await LogStore.open(dir, { readOnly: true });
  try {
    return await printLetters(cli, async (from, n) => [...store.readDeadLetters({ after: from, limit: n })], after, limit, codec);
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
 * dead letters. Read under the store's lock, or from the owner that holds it (which may move a
 * dead letter between this read and the request: the count the request returns says so).
 */
async function choose(letters: Letters, selection: Selection): Promise<{ chosen: number[]; skipped: number[] }> {
  const { seqs, limit } = selection;
  const chosen: number[] = [];
  const found = new Set<number>();
  let after = 0;
  read: for (;;) {
    const page = await letters.page(after, LIST_PAGE_ITEMS);
    if (page.length === 0) break;
    for (const d of page) {
      if (seqs === undefined) {
        if (chosen.length >= limit) break read;
        chosen.push(d.seq);
      } else if (seqs.has(d.seq)) {
        found.add(d.seq);
        if (chosen.length < limit) chosen.push(d.seq);
      }
    }
    after = page[page.length - 1]!.seq;
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
  const kind = storeKind(dir);
  const store = await LogStore.open(dir, { ...waitOption(command, args.values.wait), mustExist: kind === 'log' });
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

/** Run `fn` on the dead letters: through the process that serves the queue, or under the store's lock. */
function withLetters<T>(command: string, dir: string, args: ParsedArgs, fn: (letters: Letters) => Promise<T>): Promise<T> {
  waitOption(command, args.values.wait);
  storeKind(dir);
  return throughOwnerOrLock(
    dir,
    (owner) => fn(lettersOfOwner(owner)),
    () => withQueue(command, dir, args, (rx) => fn(lettersOfConsumer(rx))),
  );
}

/** ` (through process 4242, which has the queue open)`, or nothing under the lock. */
function throughText(owner: Owner | undefined): string {
  return owner === undefined ? '' : ` (through ${ownerName(owner)}, which has the queue open)`;
}

function viaJson(owner: Owner | undefined): Record<string, unknown> {
  return owner === undefined ? { via: 'lock' } : { via: 'endpoint', pid: owner.pid };
}

/** `2 of the 3 dead letters chosen`: a request through the owner that moved fewer than it named. */
const MOVED_MEANWHILE = '(another process redrove or purged the others since they were listed)';

export const deadLetterRedrive: Command = async (cli, args) => {
  const selection = selectionOf('dlq redrive', args);
  const dir = oneDir('dlq redrive', args.positionals);
  const { chosen, skipped, seqs, owner } = await withLetters('dlq redrive', dir, args, async (letters) => {
    const picked = await choose(letters, selection);
    const newSeqs = await letters.redrive(picked.chosen);
    if (letters.owner === undefined && newSeqs.length !== picked.chosen.length) {
      throw new Error(`redrive moved ${newSeqs.length} of the ${picked.chosen.length} dead letters read under the lock`);
    }
    return { ...picked, seqs: newSeqs, owner: letters.owner };
  });
  // Through the owner a dead letter may have gone since it was listed: then which new seq came
  // from which old one is not known, and `from` is null.
  const exact = seqs.length === chosen.length;
  if (cli.json) {
    cli.out.line(
      JSON.stringify({ count: seqs.length, seqs, from: exact ? chosen : null, ...(exact ? {} : { chosen }), skipped, ...viaJson(owner) }),
    );
    return 0;
  }
  if (seqs.length === 0 && chosen.length === 0) cli.out.line(`redrove 0 dead letters${throughText(owner)}`);
  else if (exact)
    cli.out.line(
      `redrove ${fmt(seqs.length)} dead letter(s): ${seqRangesText(rangesOf(chosen))} -> ${seqRangesText(rangesOf(seqs))}${throughText(owner)}`,
    );
  else
    cli.out.line(
      `redrove ${fmt(seqs.length)} of the ${fmt(chosen.length)} dead letters chosen, ${seqRangesText(rangesOf(chosen))} ${MOVED_MEANWHILE}: new ${seqs.length === 0 ? 'seqs none' : seqRangesText(rangesOf(seqs))}${throughText(owner)}`,
    );
  if (skipped.length > 0) cli.out.line(`not dead letters, skipped: ${seqRangesText(rangesOf(skipped))}`);
  return 0;
};

export const deadLetterPurge: Command = async (cli, args) => {
  const selection = selectionOf('dlq purge', args);
  const dir = oneDir('dlq purge', args.positionals);
  if (selection.seqs === undefined && args.values.limit === undefined && args.values.yes !== true) {
    throw new UsageError('without --seq or --limit, pq dlq purge deletes every dead letter: pass --yes to confirm', 'dlq purge');
  }
  const { chosen, skipped, count, owner } = await withLetters('dlq purge', dir, args, async (letters) => {
    const picked = await choose(letters, selection);
    const purged = await letters.purge(picked.chosen);
    if (letters.owner === undefined && purged !== picked.chosen.length)
      throw new Error(`purge deleted ${purged} of the ${picked.chosen.length} dead letters read under the lock`);
    return { ...picked, count: purged, owner: letters.owner };
  });
  if (cli.json) {
    cli.out.line(JSON.stringify({ count, seqs: chosen, skipped, ...viaJson(owner) }));
    return 0;
  }
  if (count === 0 && chosen.length === 0) cli.out.line(`purged 0 dead letters${throughText(owner)}`);
  else if (count === chosen.length)
    cli.out.line(`purged ${fmt(count)} dead letter(s): ${seqRangesText(rangesOf(chosen))}${throughText(owner)}`);
  else
    cli.out.line(
      `purged ${fmt(count)} of the ${fmt(chosen.length)} dead letters chosen, ${seqRangesText(rangesOf(chosen))} ${MOVED_MEANWHILE}${throughText(owner)}`,
    );
  if (skipped.length > 0) cli.out.line(`not dead letters, skipped: ${seqRangesText(rangesOf(skipped))}`);
  return 0;
};
