/**
 * A `nats-server` with JetStream of the test's own: a free loopback port, a store directory in a
 * temp dir, stopped (or SIGKILLed, and started again on the same port and directory) by the test.
 * Readiness is awaited on the server's own "Server is ready" line, never on a fixed wait.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';

/** The nats-server binary: $NATS_SERVER, /usr/sbin/nats-server, or one on the PATH; null when there is none. */
export function natsServerBinary(): string | null {
  const candidates = [
    process.env.NATS_SERVER,
    '/usr/sbin/nats-server',
    ...(process.env.PATH ?? '').split(delimiter).map((d) => join(d, 'nats-server')),
  ];
  for (const c of candidates) if (c !== undefined && c !== '' && existsSync(c)) return c;
  return null;
}

/** The longest wait for a server to say it is ready; a bound on an awaited event, not a sleep. */
const READY_BOUND_MS = 20_000;

export class NatsServer {
  #child: ChildProcess | null = null;
  #port = -1;
  /** What the server wrote to stderr since it was last started (for a failing test to print). */
  log = '';
  readonly storeDir: string;

  private constructor(
    readonly binary: string,
    readonly root: string,
  ) {
    this.storeDir = join(root, 'js');
  }

  /**
   * Start a server with a fresh store directory, on `port` when given (a client may already be
   * dialling it: an edge device that booted before its server), else on a free port it picks.
   */
  static async start(binary: string, options: { port?: number } = {}): Promise<NatsServer> {
    const server = new NatsServer(binary, mkdtempSync(join(tmpdir(), 'pq-nats-')));
    await server.#spawn(options.port ?? -1);
    return server;
  }

  get port(): number {
    return this.#port;
  }

  get url(): string {
    return `127.0.0.1:${this.#port}`;
  }

  async #spawn(port: number): Promise<void> {
    const child = spawn(this.binary, ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', this.storeDir], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    this.#child = child;
    let log = '';
    await new Promise<void>((resolve, reject) => {
      const bound = setTimeout(() => fail(new Error(`nats-server not ready within ${READY_BOUND_MS} ms:\n${log}`)), READY_BOUND_MS);
      const fail = (e: Error): void => {
        clearTimeout(bound);
        child.kill('SIGKILL');
        reject(e);
      };
      child.stderr!.setEncoding('utf8');
      child.stderr!.on('data', (chunk: string) => {
        log += chunk;
        const m = /Listening for client connections on [^\s]*:(\d+)/.exec(log);
        if (m !== null) this.#port = Number(m[1]);
        if (log.includes('Server is ready')) {
          clearTimeout(bound);
          resolve();
        }
      });
      child.once('exit', (code, signal) => fail(new Error(`nats-server exited (${code ?? signal}) before it was ready:\n${log}`)));
    });
    // Keep draining its log so that a full pipe never blocks the server; the last part is kept.
    this.log = log;
    child.stderr!.on('data', (chunk: string) => {
      this.log = (this.log + chunk).slice(-65_536);
    });
  }

  /** SIGKILL the server and wait until it is gone: what it wrote stays in its store directory. */
  async kill(): Promise<void> {
    await this.#end('SIGKILL');
  }

  /** Start it again on the same port and store directory. */
  async restart(): Promise<void> {
    if (this.#child !== null) throw new Error('nats-server is still running');
    await this.#spawn(this.#port);
  }

  /** Stop the server (if running) and delete its directory. */
  async stop(): Promise<void> {
    await this.#end('SIGTERM');
    rmSync(this.root, { recursive: true, force: true });
  }

  async #end(signal: NodeJS.Signals): Promise<void> {
    const child = this.#child;
    this.#child = null;
    if (child === null || child.exitCode !== null || child.signalCode !== null) return;
    const gone = new Promise((r) => child.once('exit', r));
    child.kill(signal);
    await gone;
  }
}
