/**
 * Two worker threads of one process opening the same store: they share the pid, but each has its
 * own module instances (its own in-process open registry and its own record of the locks "this
 * process" holds). The second open must be refused as a second open in another process is.
 * A child process runs the two opens (main thread, then a worker) under each lock kind.
 */
import { cpSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { distUrl, root, runModule } from '../support/child-process.js';

const made: string[] = [];
afterAll(() => {
  for (const d of made.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** Main thread opens argv[2] and keeps it; a worker then opens it and reports what happened. */
const TWO_THREADS = `
import { Worker, isMainThread, workerData, parentPort } from 'node:worker_threads';
import { LogStore } from ${JSON.stringify(distUrl('stores/log/log-store.js'))};
if (isMainThread) {
  const held = await LogStore.open(process.argv[2]);
  const w = new Worker(new URL(import.meta.url), { workerData: process.argv[2] });
  w.once('message', async (m) => {
    console.log(m);
    await held.close();
    process.exit(0);
  });
} else {
  try {
    const second = await LogStore.open(workerData);
    parentPort.postMessage('opened');
    await second.close();
  } catch (e) {
    parentPort.postMessage('refused ' + e.code + (e.message.includes('locked by this process (pid ' + process.pid + ')') ? ' by this process' : ': ' + e.message));
  }
}
`;

/** One thread, two copies of the package (as two dependencies that each bundle it): argv[3] is the copy. */
const TWO_COPIES = `
const A = (await import(${JSON.stringify(distUrl('stores/log/log-store.js'))})).LogStore;
const B = (await import(process.argv[3])).LogStore;
const held = await A.open(process.argv[2]);
try {
  const second = await B.open(process.argv[2]);
  console.log('opened');
  await second.close();
} catch (e) {
  console.log('refused ' + e.code);
}
await held.close();
`;

describe.each(['flock', 'pidfile'] as const)('the %s lock', (kind) => {
  test('aSecondCopyOfThePackageInTheSameThreadCannotOpenAStoreTheFirstHolds', async () => {
    const tmp = mkdtempSync(join(tmpdir(), 'pq-lockc-'));
    made.push(tmp);
    // A copy of dist/ elsewhere: its own module instances, its own open registry and lock records.
    cpSync(join(root, 'dist'), join(tmp, 'copy', 'dist'), { recursive: true });
    cpSync(join(root, 'package.json'), join(tmp, 'copy', 'package.json'));
    symlinkSync(join(root, 'node_modules'), join(tmp, 'copy', 'node_modules'));
    const copy = pathToFileURL(join(tmp, 'copy', 'dist', 'stores', 'log', 'log-store.js')).href;
    const child = runModule(tmp, 'two-copies.mjs', TWO_COPIES, [join(tmp, 'store'), copy], [], { PERSISTENT_QUEUE_LOCK: kind });
    await child.until((lines) => lines.length > 0);
    expect(child.lines[0], child.stderr).toBe('refused ERR_LOCKED');
  });

  test('aWorkerThreadCannotOpenAStoreItsMainThreadHolds', async () => {
    const tmp = mkdtempSync(join(tmpdir(), 'pq-lockw-'));
    made.push(tmp);
    const child = runModule(tmp, 'two-threads.mjs', TWO_THREADS, [join(tmp, 'store')], [], { PERSISTENT_QUEUE_LOCK: kind });
    await child.until((lines) => lines.length > 0);
    // The holder is this very process: the message says so, not "another process" with our own pid.
    expect(child.lines[0]).toBe('refused ERR_LOCKED by this process');
  });
});
