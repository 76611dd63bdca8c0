/**
 * `pq` as the CLI tests run it: the built binary in a spawned process, and the processes beside it
 * (an owner that serves the queue). Everything imports the BUILT package (dist/), as a user would.
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { type Lines, distUrl, root, runModule } from './child-process.js';

export const bin = join(root, 'dist', 'cli', 'pq.js');

export interface PqResult {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

export function pq(args: string[], input?: string, nodeArgs: string[] = []): PqResult {
  const r = spawnSync(process.execPath, [...nodeArgs, bin, ...args], { encoding: 'utf8', input, env: { ...process.env, NO_COLOR: '1' } });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/**
 * Take in what the spool of the store in `dir` holds, as the next process to open the queue does:
 * open a queue over the store, wait for the pass that starts at its open, close it. In a process
 * of its own, so that a test stays synchronous.
 */
export function takeSpoolIn(dir: string): void {
  const source = `import { Builder, LogStore } from ${JSON.stringify(distUrl('index.js'))};
const store = await LogStore.open(process.argv[1]);
const [tx] = await new Builder(store).open();
await store.ingestSpool();
await tx.close();`;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', source, dir], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`taking in the spool of ${dir} failed: ${r.stderr}`);
}

/**
 * `pq push <dir> ...args` with no process serving the queue (so the items are spooled), then the
 * spool taken in: the items are in the store's log, numbered in their order, as a test that only
 * needs items in a store wants them.
 */
export function pushStored(dir: string, args: string[], input?: string): PqResult {
  const r = pq(['push', dir, ...args], input);
  if (r.code !== 0) throw new Error(`pq push ${dir} ${args.join(' ')} failed (exit ${r.code}): ${r.stderr}`);
  if (!r.stdout.startsWith('spooled ') && !r.stdout.startsWith('{')) throw new Error(`pq push did not spool: ${r.stdout}`);
  takeSpoolIn(dir);
  return r;
}

/**
 * A process that holds the queue in `dir` and serves it, with no consumer: `builder` is appended
 * to `new Builder(store)` (`.capacity(2)`). A line on its stdin closes the queue; it prints
 * `closed` and exits. Resolves once it serves.
 */
export async function serveQueue(work: string, dir: string, builder = ''): Promise<Lines> {
  const owner = runModule(
    work,
    `owner-${Math.floor(performance.now() * 1000)}.mjs`,
    `import { Builder, LogStore } from ${JSON.stringify(distUrl('index.js'))};
const store = await LogStore.open(process.argv[2]);
const [tx] = await new Builder(store)${builder}.open();
console.log('serving');
process.stdin.once('data', async () => {
  await tx.close();
  console.log('closed');
  process.exit(0);
});`,
    [dir],
  );
  await owner.until((lines) => lines.includes('serving'));
  return owner;
}

/** Close the queue of an owner from {@link serveQueue} and wait for it to exit. */
export async function closeQueue(owner: Lines): Promise<void> {
  owner.child.stdin!.write('close\n');
  await owner.until((lines) => lines.includes('closed'));
  if (owner.child.exitCode === null) await new Promise((done) => owner.child.once('exit', done));
}
