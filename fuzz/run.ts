/**
 * The fuzzer registry: `npm run fuzz -- <name> [--seconds N] [--seed S] [--execs N]`.
 * `npm run fuzz -- list` lists the fuzzers. Exec i runs with seed S + i, so a failure prints the
 * one line that replays exactly that exec (`--seed <S+i> --execs 1`). Progress (execs/s) goes to
 * the terminal once a second. Exit 0 when no property broke — for the canary, exit 0 only when it
 * DID break (reported as expected-fail), proving the harness can fail; exit 1 otherwise.
 * The default seed comes from the clock and is always printed.
 */
import { formatSeed, parseSeed, Prng } from '../src/testing/index.js';
import { FUZZERS, FuzzFailure } from './fuzzers.js';

interface Args {
  name: string;
  seconds: number;
  seed: number;
  execs: number;
}

function usage(): string {
  return `usage: npm run fuzz -- <name> [--seconds N] [--seed S] [--execs N]\nfuzzers:\n${FUZZERS.map((f) => `  ${f.name.padEnd(16)} ${f.description}`).join('\n')}`;
}

function parseArgs(argv: string[]): Args {
  const args: Args = { name: '', seconds: 10, seed: (Date.now() * 2654435761) >>> 0, execs: Infinity };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const v = argv[i + 1];
    if (a === '--seconds') (args.seconds = Number(v)), i++;
    else if (a === '--seed') (args.seed = parseSeed(v ?? '')), i++;
    else if (a === '--execs') (args.execs = Number(v)), i++;
    else if (!a.startsWith('-') && args.name === '') args.name = a;
    else throw new RangeError(`Expected a fuzzer name and --seconds/--seed/--execs, got \`${a}\`\n${usage()}`);
  }
  if (!(args.seconds > 0)) throw new RangeError(`Expected \`--seconds\` to be a positive number, got \`${args.seconds}\``);
  if (!(args.execs > 0)) throw new RangeError(`Expected \`--execs\` to be a positive integer, got \`${args.execs}\``);
  return args;
}

async function main(): Promise<number> {
  let args: Args;
  try {
    args = parseArgs(process.argv.slice(2));
  } catch (e) {
    console.error((e as Error).message);
    return 2;
  }
  if (args.name === '' || args.name === 'list') {
    console.log(usage());
    return args.name === 'list' ? 0 : 2;
  }
  const fuzzer = FUZZERS.find((f) => f.name === args.name);
  if (fuzzer === undefined) {
    console.error(`no fuzzer named ${args.name}\n${usage()}`);
    return 2;
  }
  const tty = process.stderr.isTTY === true;
  const started = performance.now();
  let lastReport = started;
  let execs = 0;
  let failure: { seed: number; message: string } | null = null;
  console.log(
    `fuzz ${fuzzer.name}: seed=${formatSeed(args.seed)} for ${args.seconds} s${Number.isFinite(args.execs) ? ` or ${args.execs} execs` : ''}${fuzzer.mustFail ? ' (canary: must fail)' : ''}`,
  );
  while (execs < args.execs && performance.now() - started < args.seconds * 1000) {
    const seed = (args.seed + execs) >>> 0;
    try {
      await fuzzer.exec(new Prng(seed));
    } catch (e) {
      failure = {
        seed,
        message: e instanceof FuzzFailure ? e.message : `untyped exception in the harness: ${(e as Error)?.stack ?? String(e)}`,
      };
      execs++;
      break;
    }
    execs++;
    const now = performance.now();
    if (now - lastReport >= 1000) {
      lastReport = now;
      const line = `fuzz ${fuzzer.name}: ${execs} execs, ${((execs * 1000) / (now - started)).toFixed(0)} execs/s, ${((now - started) / 1000).toFixed(0)} s`;
      if (tty) process.stderr.write(`\r${line}`);
      else console.log(line);
    }
  }
  if (tty) process.stderr.write('\n');
  const secs = (performance.now() - started) / 1000;
  const summary = `fuzz ${fuzzer.name}: ${execs} execs in ${secs.toFixed(1)} s (${(execs / secs).toFixed(0)} execs/s)`;
  const repro = failure === null ? '' : `reproduce: npm run fuzz -- ${fuzzer.name} --seed ${formatSeed(failure.seed)} --execs 1`;
  if (fuzzer.mustFail) {
    if (failure !== null) {
      console.log(`${summary}: EXPECTED-FAIL (the canary was caught, the harness can fail)\n${repro}\n${failure.message.split('\n')[0]}`);
      return 0;
    }
    console.error(`${summary}: CANARY NOT CAUGHT — the checker never failed on a disk that lies; the harness is broken`);
    return 1;
  }
  if (failure !== null) {
    console.error(`${repro}\n${summary}: FAILED\n${failure.message}`);
    return 1;
  }
  console.log(`${summary}: OK`);
  return 0;
}

process.exitCode = await main();
