/**
 * The command table of `pq` and its argument parser. The usage text, each command's `--help`
 * and the parser all read the same table, so what `--help` describes is what the parser accepts.
 */
import { parseArgs } from 'node:util';

/** A usage mistake: exit status 2, with a pointer to the help that explains the right form. */
export class UsageError extends Error {
  readonly command: string | undefined;

  constructor(message: string, command?: string) {
    super(message);
    this.name = 'UsageError';
    this.command = command;
  }

  /** The help a user should read: `pq dump --help`, or `pq --help` for a mistake outside a command. */
  get helpHint(): string {
    return this.command === undefined ? 'pq --help' : `pq ${this.command} --help`;
  }
}

export interface OptionSpec {
  readonly type: 'string' | 'boolean';
  /** The placeholder shown in the help for a string option's value. */
  readonly value?: string;
  /** A string option that may be given more than once; its values are in `ParsedArgs.lists`. */
  readonly multiple?: boolean;
  /** A string option given twice is a usage error, not the last value winning (an idempotency key). */
  readonly once?: boolean;
  readonly help: string;
}

export interface CommandSpec {
  /** `dump`, or `dlq list` for a subcommand of a group. */
  readonly name: string;
  /** The positional arguments as the synopsis shows them. */
  readonly args: string;
  readonly summary: string;
  readonly options: Readonly<Record<string, OptionSpec>>;
  /** Further paragraphs of the command's `--help`. */
  readonly details?: string;
}

/** Options every command takes. */
export const COMMON_OPTIONS: Readonly<Record<string, OptionSpec>> = {
  json: { type: 'boolean', help: 'print the result, and any error, as JSON' },
  help: { type: 'boolean', help: 'show this help (also -h)' },
};

const FORMAT_OPTION: OptionSpec = {
  type: 'string',
  value: 'jsonl|text|hex',
  help: 'jsonl (the default, also --json): one JSON object per item; text: each payload as it is; hex: seq and payload in hex',
};

/**
 * `--codec`: a store keeps bytes and does not record the codec a typed queue wrote them with, so
 * the user names it. Only `json` changes the output: JSON lines then carry the value itself.
 */
const CODEC_OPTION: OptionSpec = {
  type: 'string',
  value: 'bytes|text|json',
  help: "the queue's codec (default bytes); json: JSON lines show each payload as the JSON value a consumer gets (`json`), a payload that is not JSON as usual",
};

/**
 * The commands that take the store's lock wait for it with this: cron jobs, hooks and shell loops
 * run several `pq` at once, and the store takes one writer at a time.
 */
const WAIT_OPTION: OptionSpec = {
  type: 'string',
  value: 'MS',
  help: 'wait up to MS milliseconds while another process holds the store (default 0: fail at once with ERR_LOCKED)',
};

/** `--seq` and `--limit` of the dead-letter commands that change the store. */
const DLQ_SELECTION: Readonly<Record<string, OptionSpec>> = {
  seq: { type: 'string', value: 'SEQ', multiple: true, help: 'only the dead letter with this seq (repeat for more)' },
  limit: { type: 'string', value: 'N', help: 'at most N dead letters, oldest first' },
};

export const COMMANDS: readonly CommandSpec[] = [
  {
    name: 'demo',
    args: '[dir]',
    summary: 'watch a producer get SIGKILLed and lose nothing',
    options: {
      seconds: { type: 'string', value: 'N', help: 'run the producers for about N seconds before the kill (default 4)' },
      keep: { type: 'boolean', help: 'keep the temporary store afterwards' },
    },
    details:
      'Starts a child process with 64 producers and one consumer, pauses the consumer so items are\n' +
      'waiting, SIGKILLs the child, reopens the store and checks every push the child saw resolve.\n' +
      'Without [dir] the store lives in a temporary directory that is removed afterwards.\n' +
      "A SIGKILL is a process crash, which even 'none' survives; power loss is shown by the\n" +
      "simulated crash disk (the crash tests of 'npm test').",
  },
  {
    name: 'stats',
    args: '<dir>',
    summary: "live figures from the queue's owner, or its files read-only",
    options: {
      rates: {
        type: 'string',
        value: 'MS',
        help: 'ask the owner twice, MS milliseconds apart, and show its pushes, acks and nacks per second',
      },
      'read-only': { type: 'boolean', help: "read the store's files even while a process serves the queue" },
    },
    details:
      'While a process has the queue open and serves it, its figures as it answers now: ready, in\n' +
      'flight, leased, delayed, dead letters, whether a consumer is taking items, its counters since\n' +
      'it opened the queue, and its store\'s (--json: "view": "live" and that process\'s pid).\n' +
      "Otherwise the store's files, read-only: no lock is taken and nothing written, so it works on a\n" +
      'store another process holds, and shows it as it is at that moment (--json: "view": "read-only").\n' +
      "There 'unacked' counts every item not yet acked: ready, delayed (not yet due) and in flight in a\n" +
      "process that has the queue open (leases live in that process's memory: 'leased' is not known).\n" +
      "'spool' counts the pushes spooled while no process served the queue, not yet taken in.",
  },
  {
    name: 'verify',
    args: '<dir>',
    summary: 'full CRC scan of every file; never changes a byte',
    options: {},
    details: 'Exit status 1 when a problem is found. Progress is shown on stderr when it is a terminal.',
  },
  {
    name: 'salvage',
    args: '<src> <dst>',
    summary: 'copy every intact unacked item into a new store',
    options: {},
    details:
      'Reads <src> without changing it (no byte, lock or timestamp) and writes every intact, unacked\n' +
      'item, those after damage included, into a new store at <dst>, which must not exist or be an\n' +
      'empty directory. Reports each damaged byte range and exactly which seqs were lost. The new\n' +
      'store numbers the items from 1 in their old order; the report maps old seqs to new (--json\n' +
      'lists every run). Exit status 0 once the copy is complete, whatever was lost. Progress is shown\n' +
      'on stderr when it is a terminal.',
  },
  {
    name: 'schedules',
    args: '<dir>',
    summary: 'list the schedules a store keeps, with when each fires next',
    options: {},
    details:
      'Read-only: takes no lock and writes nothing. One line per schedule: its name, its slots\n' +
      '(every N ms, or a cron expression and its time zone), its catch-up policy and its next fire\n' +
      'time (ISO 8601 UTC); a time already passed fires when a queue next opens the store.\n' +
      '--json prints one JSON object per schedule.',
  },
  {
    name: 'dump',
    args: '<dir>',
    summary: 'print unacked items without consuming them',
    options: {
      from: { type: 'string', value: 'SEQ', help: 'start at this seq (default: the oldest item)' },
      limit: { type: 'string', value: 'N', help: 'print at most N items' },
      format: FORMAT_OPTION,
      codec: CODEC_OPTION,
    },
    details:
      'Read-only: takes no lock and writes nothing, so it works on a store another process\nhas open, and shows it as it is at that moment.\nProgress is shown on stderr when stderr is a terminal and the output is not.',
  },
  {
    name: 'push',
    args: '<dir> [DATA...]',
    summary: 'push each DATA (or each stdin line)',
    options: {
      create: { type: 'boolean', help: 'create the store if <dir> is not one yet' },
      durability: {
        type: 'string',
        value: 'sync|group|none',
        help: "durability policy of spooled pushes (default group); through the endpoint the owner's applies",
      },
      priority: { type: 'string', value: 'N', help: 'priority of the items, -128 to 127 (default 0); higher goes first' },
      delay: { type: 'string', value: 'MS', help: 'hand the items out no sooner than MS milliseconds from now' },
      'not-before': { type: 'string', value: 'TIME', help: 'hand the items out no sooner than TIME (ISO 8601, or ms since the epoch)' },
      key: {
        type: 'string',
        value: 'KEY',
        once: true,
        help: 'idempotency key of the one DATA: a key the store remembers stores nothing again',
      },
      wait: { type: 'string', value: 'MS', help: 'accepted as the other writing commands take it; push never waits: it takes no lock' },
    },
    details:
      "Never takes the store's lock, so it never fails with ERR_LOCKED. While a process has the queue\n" +
      'open and serves it, each item goes to it through its endpoint, is stored under its durability\n' +
      'policy, and its seq is printed. While none does, the items are spooled (written beside the store,\n' +
      'under --durability) and pq says so: the process that next opens the queue (or polls the spool,\n' +
      'if one has it open without serving) takes them in and gives them seqs.\n' +
      'Without DATA, each line of stdin is an item; an empty stdin is a usage error (nothing is pushed\n' +
      'or created). Without --create, <dir> must already be a store.\n--delay and --not-before exclude each other.\n' +
      '--key takes exactly one DATA argument; pushed again with the same key within 24 hours, nothing\n' +
      'is stored (through the endpoint the seq of the first push is printed).',
  },
  {
    name: 'pop',
    args: '<dir>',
    summary: 'take items (ack them unless --no-ack)',
    options: {
      count: { type: 'string', value: 'N', help: 'take at most N items (default 1)' },
      'no-ack': { type: 'boolean', help: 'leave the items in the store' },
      format: FORMAT_OPTION,
      codec: CODEC_OPTION,
      wait: WAIT_OPTION,
    },
    details:
      'Items are written in batches, and a batch is acked only once its lines have been handed to\n' +
      'the operating system. When the reader closes the pipe early (| head), pq stops quietly with\n' +
      'exit status 0 and nothing it could not write is acked; lines still in the pipe buffer when\n' +
      'the reader exits were delivered and are not returned. Pushes spooled while no process had the\n' +
      'queue open are taken in first, as any open of the queue does.\n' +
      "pop takes the store's lock: items are not handed out through the endpoint of a process that has\n" +
      'the queue open. Beside one whose consumer is taking items it is refused with ERR_CONSUMED\n' +
      '(exit status 3) naming that process; beside any other holder, ERR_LOCKED.',
  },
  {
    name: 'compact',
    args: '<dir>',
    summary: 'run a compaction pass, report bytes reclaimed',
    options: { wait: WAIT_OPTION },
    details:
      'While a process has the queue open and serves it, that process compacts its store (its\n' +
      "endpoint is asked) and pq reports the result; otherwise pq takes the store's lock and compacts it.",
  },
  {
    name: 'dlq list',
    args: '<dir>',
    summary: 'print dead letters without changing them',
    options: {
      after: { type: 'string', value: 'SEQ', help: 'only dead letters with a seq above SEQ' },
      limit: { type: 'string', value: 'N', help: 'print at most N dead letters' },
      codec: CODEC_OPTION,
    },
    details:
      'One line per dead letter, oldest seq first: its seq, times delivered, first and last delivery\n' +
      "and when it was moved (ISO 8601 UTC, '-' when not known), the reason, and the payload: text\n" +
      'as a quoted string when it is UTF-8, base64 otherwise. --json prints the same fields as one\n' +
      'JSON object per line (times as strings, null when not known; the payload as `text` or `base64`).\n' +
      'While a process has the queue open and serves it, its dead letters as it holds them now.\n' +
      'Otherwise read-only: takes no lock and writes nothing, so it works on a store another process\n' +
      'holds without serving it.',
  },
  {
    name: 'dlq redrive',
    args: '<dir>',
    summary: 'put dead letters back into the queue',
    options: { ...DLQ_SELECTION, wait: WAIT_OPTION },
    details:
      'Without --seq or --limit, every dead letter. Each one becomes a new item at the end of the\n' +
      'queue, with a new seq and a fresh delivery count; prints how many and their new seqs. A --seq\n' +
      'that is not a dead letter is reported and skipped. Through the process that has the queue open\n' +
      "while one serves it; otherwise under the store's lock.",
  },
  {
    name: 'dlq purge',
    args: '<dir>',
    summary: 'delete dead letters for good',
    options: {
      ...DLQ_SELECTION,
      yes: { type: 'boolean', help: 'confirm deleting every dead letter (needed without --seq or --limit)' },
      wait: WAIT_OPTION,
    },
    details:
      'Prints how many were deleted. A --seq that is not a dead letter is reported and skipped.\n' +
      "Through the process that has the queue open while one serves it; otherwise under the store's lock.",
  },
  {
    name: 'ui',
    args: '<dir>',
    summary: 'serve a dashboard of the queue on 127.0.0.1',
    options: {
      port: { type: 'string', value: 'N', help: 'listen on port N of 127.0.0.1 (default 0: a free port)' },
      'allow-actions': {
        type: 'boolean',
        help: 'let the dashboard redrive and purge dead letters (through the process that has the queue open)',
      },
    },
    details:
      'Prints the URL to open, with a random token that every request must carry, and serves until\n' +
      'Ctrl-C. Only this machine can connect (127.0.0.1), and only pages addressed to it by that name.\n' +
      'Pages: overview (figures, throughput and latency charts), items, dead letters, health (recovery,\n' +
      'verify on demand), and groups and schedules when the queue has them. While a process has the\n' +
      "queue open and serves it, its live figures; otherwise the store's files, read-only. Without\n" +
      '--allow-actions the dashboard changes nothing; with it, redrive and purge go through the process\n' +
      'that has the queue open, each after a confirmation.',
  },
];

/** The commands that gather subcommands (`pq dlq list`), with what `pq <group> --help` says of them. */
export const GROUPS: Readonly<Record<string, { readonly summary: string; readonly details: string }>> = {
  dlq: {
    summary: 'the dead-letter queue: items moved out by maxDeliveries or item.deadLetter()',
    details: 'Dead letters keep their seq, bytes and delivery history until redriven or purged.',
  },
};

export function isGroup(name: string): boolean {
  return Object.hasOwn(GROUPS, name);
}

/** The commands of a group: `list`, `redrive`, `purge` for `dlq`. */
export function groupCommands(group: string): string[] {
  return COMMANDS.filter((c) => c.name.startsWith(`${group} `)).map((c) => c.name.slice(group.length + 1));
}

/** The text of `pq dlq --help`. */
export function groupHelp(group: string): string {
  const info = GROUPS[group]!;
  const subs = COMMANDS.filter((c) => c.name.startsWith(`${group} `));
  const width = Math.max(...subs.map((c) => c.name.length)) + 2;
  return [
    `Usage: pq ${group} <${groupCommands(group).join('|')}> <dir> [options]`,
    '',
    info.summary[0]!.toUpperCase() + info.summary.slice(1) + '.',
    info.details,
    '',
    'Commands:',
    ...subs.map((c) => `  ${c.name.padEnd(width)}${c.summary}`),
    '',
    `pq ${group} <command> --help describes a command.`,
  ].join('\n');
}

export function findCommand(name: string): CommandSpec | undefined {
  return COMMANDS.find((c) => c.name === name);
}

function optionsOf(spec: CommandSpec): Readonly<Record<string, OptionSpec>> {
  return { ...spec.options, ...COMMON_OPTIONS };
}

function optionSynopsis(name: string, o: OptionSpec): string {
  return o.type === 'string' ? `[--${name} ${o.value ?? 'VALUE'}]${o.multiple === true ? '...' : ''}` : `[--${name}]`;
}

/** `dump <dir> [--from SEQ] [--limit N] [--format jsonl|text|hex] [--json]`: the options of the command itself. */
export function synopsis(spec: CommandSpec): string {
  return `${ownSynopsis(spec)} [--json]`;
}

/** The column where a command's summary starts in `pq --help`. */
const SUMMARY_COLUMN = 42;

/** `dump <dir> [--from SEQ] ...` without the options every command takes. */
function ownSynopsis(spec: CommandSpec): string {
  return [spec.name, spec.args, ...Object.entries(spec.options).map(([name, o]) => optionSynopsis(name, o))].join(' ');
}

/** The text of `pq --help`. */
export function usageText(): string {
  const lines: string[] = [];
  for (const c of COMMANDS) {
    const head = `  ${ownSynopsis(c)}`;
    if (head.length < SUMMARY_COLUMN - 1) lines.push(head.padEnd(SUMMARY_COLUMN) + c.summary);
    else lines.push(head, ' '.repeat(SUMMARY_COLUMN) + c.summary);
  }
  return [
    'Usage: pq <command> [options]',
    '',
    'Commands:',
    ...lines,
    '',
    'Every command also takes --json (its output, and any error, as JSON) and --help.',
    'pq --version prints the version; pq <command> --help describes a command.',
    '',
    'A process that has the queue open serves it: push, stats, compact and the dlq commands act',
    'through it; with none, push spools and the others read or lock the store itself.',
    '',
    'Exit status: 0 success (also when the reader of the output closes it early), 1 failure,',
    '2 usage error, 3 pop refused beside the process that consumes the queue (ERR_CONSUMED).',
    'Colours only on a terminal; NO_COLOR honoured.',
  ].join('\n');
}

/** The text of `pq <command> --help`. */
export function commandHelp(spec: CommandSpec): string {
  const options = Object.entries(optionsOf(spec));
  const names = options.map(([name, o]) => (o.type === 'string' ? `--${name} ${o.value ?? 'VALUE'}` : `--${name}`));
  const width = Math.max(...names.map((n) => n.length)) + 2;
  return [
    `Usage: pq ${synopsis(spec)}`,
    '',
    spec.summary[0]!.toUpperCase() + spec.summary.slice(1) + '.',
    ...(spec.details !== undefined ? ['', spec.details] : []),
    '',
    'Options:',
    ...options.map(([, o], i) => `  ${names[i]!.padEnd(width)}${o.help}`),
  ].join('\n');
}

export interface ParsedArgs {
  readonly values: Readonly<Record<string, string | boolean | undefined>>;
  /** Every value of each option that may be repeated (`--seq 3 --seq 5`), in order; [] when not given. */
  readonly lists: Readonly<Record<string, readonly string[]>>;
  readonly positionals: readonly string[];
}

/**
 * Parse a command's arguments against its table entry. node:util's parseArgs runs in its lenient
 * mode and every check is done here, because its strict mode's messages name its own conventions
 * (an "ambiguous" `--limit -1`, unbalanced quotes around suggestions) instead of the command's.
 * A string option's value may start with one dash (`--from -1` reaches the range check and is
 * reported there), but not with two: `--from --limit 5` is a missing value.
 */
export function parseCommandArgs(spec: CommandSpec, args: readonly string[]): ParsedArgs {
  const options = optionsOf(spec);
  let tokens;
  try {
    tokens = parseArgs({
      args: [...args],
      options: Object.fromEntries(
        Object.entries(options).map(([name, o]) => [name, name === 'help' ? { type: o.type, short: 'h' } : { type: o.type }]),
      ),
      strict: false,
      allowPositionals: true,
      tokens: true,
    }).tokens;
  } catch (error) {
    // The lenient mode does not throw for any input known today; should a future Node add a case,
    // its message stays out of the CLI's output.
    throw new UsageError(
      `cannot read the arguments of '${spec.name}' (${(error as { code?: string }).code ?? 'unknown reason'})`,
      spec.name,
    );
  }
  // Asking for help is never a mistake, whatever else the line holds.
  if (tokens.some((t) => t.kind === 'option' && t.name === 'help')) return { values: { help: true }, lists: {}, positionals: [] };
  const values: Record<string, string | boolean | undefined> = {};
  const lists: Record<string, string[]> = {};
  for (const [name, o] of Object.entries(options)) if (o.multiple === true) lists[name] = [];
  const positionals: string[] = [];
  for (const token of tokens) {
    if (token.kind === 'positional') {
      positionals.push(token.value);
      continue;
    }
    if (token.kind !== 'option') continue;
    const option = Object.hasOwn(options, token.name) ? options[token.name] : undefined;
    if (option === undefined) {
      throw new UsageError(`unknown option ${token.rawName} for '${spec.name}'`, spec.name);
    }
    if (option.type === 'boolean') {
      if (token.value !== undefined) throw new UsageError(`option --${token.name} takes no value, got '${token.value}'`, spec.name);
      values[token.name] = true;
      continue;
    }
    if (token.value === undefined || (!token.inlineValue && token.value.startsWith('--'))) {
      throw new UsageError(`option --${token.name} needs a value (${option.value ?? 'VALUE'})`, spec.name);
    }
    if (option.multiple === true) lists[token.name]!.push(token.value);
    else if (option.once === true && values[token.name] !== undefined)
      throw new UsageError(`option --${token.name} may be given once`, spec.name);
    else values[token.name] = token.value;
  }
  return { values, lists, positionals };
}

/**
 * Whether `--json` appears among the options (before any `--`). It decides the form of an error
 * that is found while the arguments are being read, so it is looked up before they are parsed.
 */
export function wantsJson(args: readonly string[]): boolean {
  for (const a of args) {
    if (a === '--') return false;
    if (a === '--json') return true;
  }
  return false;
}
