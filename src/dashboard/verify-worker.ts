/**
 * The dashboard's verify, in a worker thread: a full CRC scan of a large store takes seconds of
 * synchronous reading, which the dashboard's event loop must not wait for. Reads only.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { verifyStore } from '../stores/log/index.js';

const { dir } = workerData as { dir: string };
let last = 0;
const result = verifyStore(dir, {
  onProgress: (doneBytes, totalBytes) => {
    const now = performance.now();
    if (now - last < 200) return;
    last = now;
    parentPort!.postMessage({ progress: { doneBytes, totalBytes } });
  },
});
parentPort!.postMessage({ result });
