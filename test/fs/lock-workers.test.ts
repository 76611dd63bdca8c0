/**
 * Two worker threads of one process opening the same store: they share the pid, but each has its
 * own module instances (its own in-process open registry and its own record of the locks "this
 * process" holds). The second open must be refused as a second open in another process is.
 * A child process runs the two opens (main thread, then a worker) under each lock kind.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { distUrl, runModule } from '../support/child-process.js';

const made: string[] = [];
afterAll(() => {
  for (const d of made.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** Main thread opens argv[2] and keeps it; a worker then opens it and reports what happened. */
const TWO_THREADS = `
import { Worker, isMainThread, workerData, parentPort } from 'node:worker_threads';
import { LogStore } from ${JSON.stringify(distUrl('log-store.js'))};
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
    parentPort.postMessage('refused ' + e.code);
  }
}
`;

describe.each(['flock', 'pidfile'] as const)('the %s lock', (kind) => {
  test('aWorkerThreadCannotOpenAStoreItsMainThreadHolds', async () => {
    const tmp = mkdtempSync(join(tmpdir(), 'pq-lockw-'));
    made.push(tmp);
    const child = runModule(tmp, 'two-threads.mjs', TWO_THREADS, [join(tmp, 'store')], [], { PERSISTENT_QUEUE_LOCK: kind });
    await child.until((lines) => lines.length > 0);
    expect(child.lines[0]).toBe('refused ERR_LOCKED');
  });
});
