/**
 * Verify on demand (`pq verify` from the dashboard's health page): one run at a time, in a worker
 * thread (./verify-worker.ts), its last result kept. It reads the files and changes nothing, so it
 * needs no owner and runs beside one (whose write in progress it does not call damage).
 */
import { Worker } from 'node:worker_threads';
import type { VerifyResult } from '../stores/log/index.js';

export interface VerifyState {
  readonly state: 'idle' | 'running' | 'done' | 'failed';
  /** Ms since the epoch. */
  readonly startedAt: number | null;
  readonly finishedAt: number | null;
  readonly progress: { readonly doneBytes: number; readonly totalBytes: number } | null;
  readonly result: VerifyResult | null;
  /** Why the run itself failed (not what it found). */
  readonly error: string | null;
}

export class VerifyRunner {
  readonly #dir: string;
  #state: VerifyState = { state: 'idle', startedAt: null, finishedAt: null, progress: null, result: null, error: null };
  #worker: Worker | null = null;

  constructor(dir: string) {
    this.#dir = dir;
  }

  get state(): VerifyState {
    return this.#state;
  }

  /** Start a run unless one is running; answers the state. */
  start(): VerifyState {
    if (this.#worker !== null) return this.#state;
    const startedAt = Date.now();
    this.#state = { state: 'running', startedAt, finishedAt: null, progress: null, result: null, error: null };
    const worker = new Worker(new URL('./verify-worker.js', import.meta.url), { workerData: { dir: this.#dir } });
    this.#worker = worker;
    worker.unref();
    const finish = (state: Partial<VerifyState>): void => {
      if (this.#worker !== worker) return;
      this.#worker = null;
      this.#state = { ...this.#state, finishedAt: Date.now(), ...state };
    };
    worker.on('message', (message: { progress?: VerifyState['progress']; result?: VerifyResult }) => {
      if (message.result !== undefined) finish({ state: 'done', result: message.result });
      else if (message.progress !== undefined && this.#worker === worker) this.#state = { ...this.#state, progress: message.progress };
    });
    worker.on('error', (error) => finish({ state: 'failed', error: error.message }));
    worker.on('exit', (code) => finish({ state: 'failed', error: `the verify worker exited with code ${code} before it reported` }));
    return this.#state;
  }

  /** Stop a run in progress. */
  async close(): Promise<void> {
    const worker = this.#worker;
    this.#worker = null;
    if (worker !== null) await worker.terminate();
  }
}
