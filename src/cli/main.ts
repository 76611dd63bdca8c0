/**
 * `pq`: look inside a persistent-queue store, use it from a shell, and watch it survive a crash.
 * Exit status: 0 success (also when the reader of the output closes it early), 1 failure
 * (corruption, a held store, ...), 2 bad usage, 3 `pop` refused beside the process that consumes
 * the queue.
 */
import { readFileSync } from 'node:fs';
import { QueueError } from '../index.js';
import {
  commandHelp,
  findCommand,
  groupCommands,
  groupHelp,
  isGroup,
  parseCommandArgs,
  usageText,
  UsageError,
  wantsJson,
  type CommandSpec,
} from './args.js';
import { compact, dump, pop, verify, type Cli, type Command } from './commands.js';
import { ConsumedError } from './owner.js';
import { push } from './push.js';
import { stats } from './stats.js';
import { deadLetterList, deadLetterPurge, deadLetterRedrive } from './dead-letters.js';
import { demo, demoChild } from './demo.js';
import { salvage } from './salvage.js';
import { ListenError, ui } from './ui.js';
import { schedules } from './schedules.js';
import { Output, OutputClosed, OutputFailed } from './output.js';

const RUN: Record<string, Command> = {
  demo,
  stats,
  verify,
  salvage,
  dump,
  push,
  pop,
  compact,
  schedules,
  'dlq list': deadLetterList,
  'dlq redrive': deadLetterRedrive,
  'dlq purge': deadLetterPurge,
  ui,
};

const isHelp = (word: string | undefined): boolean => word === '--help' || word === '-h' || word === 'help';

/**
 * The command `words` name and the arguments after it: `dump q` is `dump`, `dlq list q` is
 * `dlq list`. A group named without a command (`pq dlq`, `pq dlq --json`) is a usage mistake;
 * `pq dlq --help` is answered with `{ group }`.
 */
function commandOf(words: readonly string[]): { spec: CommandSpec; args: readonly string[] } | { group: string } {
  const [name, ...args] = words as [string, ...string[]];
  const spec = findCommand(name);
  if (spec) return { spec, args };
  if (!isGroup(name)) throw new UsageError(name.startsWith('-') ? `unknown option ${name}` : `unknown command '${name}'`);
  const [sub, ...rest] = args;
  if (isHelp(sub)) return { group: name };
  const choices = groupCommands(name);
  const oneOf = `${choices.slice(0, -1).join(', ')} or ${choices[choices.length - 1]}`;
  if (sub === undefined || sub.startsWith('-')) throw new UsageError(`pq ${name} needs a command before its arguments: ${oneOf}`, name);
  const subSpec = findCommand(`${name} ${sub}`);
  if (!subSpec) throw new UsageError(`unknown command '${name} ${sub}': the ${name} commands are ${oneOf}`, name);
  return { spec: subSpec, args: rest };
}

/** The version in the package's own package.json, two levels above `dist/cli/`. */
function version(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
  return pkg.version;
}

/** A failure as the user sees it: a stable code, a message, and where it applies. */
interface Failure {
  code: string;
  message: string;
  file?: string;
  offset?: number;
  pid?: number;
  help?: string;
}

function failureOf(error: unknown): Failure {
  if (error instanceof UsageError) return { code: 'ERR_USAGE', message: error.message, help: error.helpHint };
  if (error instanceof ConsumedError)
    return error.pid === null
      ? { code: 'ERR_CONSUMED', message: error.message }
      : { code: 'ERR_CONSUMED', message: error.message, pid: error.pid };
  if (error instanceof OutputFailed) return { code: 'ERR_OUTPUT', message: error.message };
  if (error instanceof ListenError) return { code: error.code, message: error.message };
  if (error instanceof QueueError) {
    const failure: Failure = { code: error.code, message: error.message };
    if (error.file !== undefined) failure.file = error.file;
    if (error.offset !== undefined) failure.offset = error.offset;
    const pid = (error.cause as { pid?: unknown } | undefined)?.pid;
    if (error.code === 'ERR_LOCKED' && typeof pid === 'number') failure.pid = pid;
    return failure;
  }
  return { code: 'ERR_INTERNAL', message: error instanceof Error ? error.message : String(error) };
}

/** One line for every failure a user can meet. */
function describe(f: Failure): string {
  if (f.code === 'ERR_USAGE') return `pq: ${f.message} (see ${f.help})`;
  if (f.code === 'ERR_OUTPUT' || f.code === 'ERR_INTERNAL' || f.code === 'ERR_LISTEN') return `pq: ${f.message}`;
  const where =
    f.file !== undefined && !f.message.includes(f.file) ? ` (${f.file}${f.offset !== undefined ? ` at offset ${f.offset}` : ''})` : '';
  const pid = f.pid !== undefined && !f.message.includes(String(f.pid)) ? ` (held by pid ${f.pid})` : '';
  return `pq: ${f.code}: ${f.message}${where}${pid}`;
}

async function report(cli: Cli, error: unknown): Promise<number> {
  const f = failureOf(error);
  cli.err.line(cli.json ? JSON.stringify(f) : describe(f));
  // The message matters more than an output that is gone; a closed stderr is not reported.
  await cli.err.flush().catch(() => undefined);
  return f.code === 'ERR_USAGE' ? 2 : f.code === 'ERR_CONSUMED' ? 3 : 1;
}

/** Runs one command line; every failure is reported here and turned into an exit status. */
export async function main(argv: readonly string[], io: { out: Output; err: Output }): Promise<number> {
  const [command, ...args] = argv;
  const cli: Cli = { ...io, json: wantsJson(command === undefined ? [] : [command, ...args]) };
  try {
    if (command === undefined) {
      cli.err.line(usageText());
      return 2;
    }
    if (isHelp(command)) {
      const topic = args[0];
      if (topic === undefined || topic.startsWith('-')) {
        cli.out.line(usageText());
        return 0;
      }
      // `pq help dlq` as `pq dlq --help`, `pq help dlq list` as `pq dlq list --help`.
      const words = args.filter((a) => !a.startsWith('-')).slice(0, 2);
      const found = words.length === 1 && isGroup(topic) ? { group: topic } : commandOf(words);
      cli.out.line('group' in found ? groupHelp(found.group) : commandHelp(found.spec));
      return 0;
    }
    if (command === '--version') {
      cli.out.line(cli.json ? JSON.stringify({ version: version() }) : version());
      return 0;
    }
    if (command === '__demo-child') return await demoChild(cli, args);
    const found = commandOf(argv);
    if ('group' in found) {
      cli.out.line(groupHelp(found.group));
      return 0;
    }
    const { spec } = found;
    const parsed = parseCommandArgs(spec, found.args);
    if (parsed.values.help === true) {
      cli.out.line(commandHelp(spec));
      return 0;
    }
    return await RUN[spec.name]!(cli, parsed);
  } catch (error) {
    // The reader of the output went away (`pq dump | head`): like `head` users expect, pq ends
    // quietly and successfully; pop has acked only what it had handed over.
    if (error instanceof OutputClosed) return 0;
    return report(cli, error);
  }
}

/**
 * The executable's whole life: run the command, make sure everything it wrote reached the
 * operating system, then exit. Exiting before a pipe write completes would cut the output off.
 */
export async function run(argv: readonly string[]): Promise<never> {
  const io = { out: new Output(process.stdout), err: new Output(process.stderr) };
  let code = await main(argv, io);
  // A write that failed while the command ran was reported by main already.
  const reported = io.out.failure !== undefined;
  try {
    await io.out.flush();
  } catch (error) {
    if (!reported && !(error instanceof OutputClosed)) code = await report({ ...io, json: wantsJson(argv) }, error);
  }
  await io.err.flush().catch(() => undefined);
  // An explicit exit, because a reader of stdin (push) may still hold the event loop open.
  process.exit(code);
}
