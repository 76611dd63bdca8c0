/**
 * Child processes for the backend tests: a writer that is killed with SIGKILL mid-stream, and a
 * holder that keeps a store open. Children import the BUILT package (dist/), as a user would;
 * `npm test` builds it first.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

export const root = resolve(import.meta.dirname, '..', '..');
export const distUrl = (file: string): string => pathToFileURL(join(root, 'dist', file)).href;

/** Lines a child printed, with a way to wait for a condition on them. */
export class Lines {
  readonly lines: string[] = [];
  #waiters: (() => void)[] = [];
  #partial = '';
  #ended = false;
  stderr = '';

  constructor(readonly child: ChildProcess) {
    child.stdout!.setEncoding('utf8');
    child.stdout!.on('data', (chunk: string) => {
      const parts = (this.#partial + chunk).split('\n');
      this.#partial = parts.pop()!;
      this.lines.push(...parts);
      this.#wake();
    });
    child.stderr!.setEncoding('utf8');
    child.stderr!.on('data', (chunk: string) => (this.stderr += chunk));
    child.on('close', () => {
      this.#ended = true;
      this.#wake();
    });
  }

  #wake(): void {
    for (const w of this.#waiters.splice(0)) w();
  }

  /** Resolves once `predicate` holds; rejects if the child ends first. */
  async until(predicate: (lines: string[]) => boolean): Promise<void> {
    while (!predicate(this.lines)) {
      if (this.#ended) throw new Error(`child ended early (code ${this.child.exitCode}): ${this.stderr}`);
      await new Promise<void>((r) => this.#waiters.push(r));
    }
  }

  /**
   * SIGKILL the child and wait until it is gone and its stdout is read to the end ('close', not
   * 'exit': 'exit' can come while lines it wrote are still in the pipe), so `lines` holds every
   * line it wrote before the kill.
   */
  async kill(): Promise<void> {
    if (this.#ended) return;
    const closed = new Promise((r) => this.child.once('close', r));
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGKILL');
    await closed;
  }
}

/**
 * Run an ES module `source` in a fresh `node` with `args` (and `env` added to this process's
 * environment); its output arrives in the returned Lines.
 */
export function runModule(
  dir: string,
  name: string,
  source: string,
  args: string[],
  nodeArgs: string[] = [],
  env: Record<string, string> = {},
): Lines {
  const file = join(dir, name);
  writeFileSync(file, source);
  return new Lines(
    spawn(process.execPath, [...nodeArgs, file, ...args], { stdio: ['pipe', 'pipe', 'pipe'], env: { ...process.env, ...env } }),
  );
}

/**
 * Source that brings `out(line)` into a child: the line is in the pipe to the parent when it
 * returns, so a SIGKILL never drops a line whose operation went ahead (scripts/line-out.mjs says
 * why process.stdout.write and console.log are not enough).
 */
export const lineWriterSource = `
import { out } from ${JSON.stringify(pathToFileURL(join(root, 'scripts', 'line-out.mjs')).href)};
`;

/**
 * Source of a writer: opens `storeModule`'s `storeClass` at argv[2] under `durability`, prints
 * `ready`, then has `producers` loops push forever, printing `seq payload` for every resolved push
 * (with `out`: each line is in the pipe before the next push can resolve).
 */
export function writerSource(storeModule: string, storeClass: string, durability: string, producers: number): string {
  return `
import { Builder } from ${JSON.stringify(distUrl('index.js'))};
import { ${storeClass} } from ${JSON.stringify(distUrl(storeModule))};
${lineWriterSource}
const store = await ${storeClass}.open(process.argv[2]);
const [tx] = await new Builder(store).durability(${JSON.stringify(durability)}).open();
out('ready');
let n = 0;
await Promise.all(Array.from({ length: ${producers} }, async () => {
  for (;;) {
    const payload = 'item-' + n++;
    const seq = await tx.push(payload);
    out(seq + ' ' + payload);
  }
}));
`;
}

/** Source of a holder: opens the store at argv[2], prints `ready`, and keeps it open until killed. */
export function holderSource(storeModule: string, storeClass: string): string {
  return `
import { ${storeClass} } from ${JSON.stringify(distUrl(storeModule))};
const store = await ${storeClass}.open(process.argv[2]);
await store.open();
console.log('ready');
setInterval(() => {}, 1 << 30);
`;
}

/** Source of a module that registers a resolve hook making `packages` impossible to find. */
export function hideSource(packages: string[]): string {
  const hook = `export async function resolve(specifier, context, next) {
  if (${JSON.stringify(packages)}.includes(specifier)) {
    const e = new Error("Cannot find package '" + specifier + "' (hidden by the test)");
    e.code = 'ERR_MODULE_NOT_FOUND';
    throw e;
  }
  return next(specifier, context);
}`;
  return `import { register } from 'node:module';
register(${JSON.stringify('data:text/javascript,' + encodeURIComponent(hook))});
`;
}

/** Parse the writer's `seq payload` lines. */
export function printedItems(lines: string[]): Map<number, string> {
  const out = new Map<number, string>();
  for (const line of lines) {
    const m = /^(\d+) (.*)$/.exec(line);
    if (m) out.set(Number(m[1]), m[2]!);
  }
  return out;
}
