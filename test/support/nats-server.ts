/**
 * nats-server processes for tests: found on the machine, started on free loopback ports with
 * their own store directories, awaited until they answer, and stopped (always) by the caller.
 * Readiness is polled on the monitoring port, bounded; nothing waits a fixed time.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';

/** The nats-server binary, or undefined when the machine has none. */
export function natsServerBinary(): string | undefined {
  const candidates = [
    process.env.NATS_SERVER_BIN,
    '/usr/sbin/nats-server',
    ...(process.env.PATH ?? '').split(delimiter).map((d) => join(d, 'nats-server')),
  ];
  return candidates.find((c): c is string => c !== undefined && c !== '' && existsSync(c));
}

/** A loopback TCP port nobody listens on now. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const port = (server.address() as { port: number }).port;
      server.close(() => resolve(port));
    });
  });
}

const pause = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Poll `url` until it answers 200, at most `attempts` times. */
async function until200(url: string, attempts: number, alive: () => boolean): Promise<void> {
  for (let i = 0; i < attempts; i++) {
    if (!alive()) throw new Error(`nats-server exited before ${url} answered`);
    try {
      const response = await fetch(url);
      if (response.ok) return;
    } catch {
      // Not listening yet.
    }
    await pause(50);
  }
  throw new Error(`${url} did not answer 200 after ${attempts} polls`);
}

export interface NatsNode {
  readonly name: string;
  readonly port: number;
  readonly url: string;
  readonly monitorPort: number;
  readonly dir: string;
  /** Stop it (SIGTERM, then SIGKILL if it lingers); resolves once it has exited. */
  stop(): Promise<void>;
  /** SIGKILL it (its directory stays until `stop()`); resolves once it has exited. */
  kill(): Promise<void>;
  readonly exited: boolean;
}

interface NodeSpec {
  name: string;
  port: number;
  monitorPort: number;
  cluster?: { port: number; routes: number[] };
}

function start(binary: string, spec: NodeSpec): NatsNode {
  const dir = mkdtempSync(join(tmpdir(), `pq-nats-${spec.name}-`));
  const lines = [
    `server_name: ${spec.name}`,
    `listen: 127.0.0.1:${spec.port}`,
    `http: 127.0.0.1:${spec.monitorPort}`,
    `jetstream { store_dir: "${join(dir, 'js')}" }`,
  ];
  if (spec.cluster) {
    lines.push(
      `cluster { name: pq-test, listen: 127.0.0.1:${spec.cluster.port}, routes: [${spec.cluster.routes.map((p) => `nats-route://127.0.0.1:${p}`).join(', ')}] }`,
    );
  }
  const config = join(dir, 'server.conf');
  writeFileSync(config, lines.join('\n') + '\n');
  const child: ChildProcess = spawn(binary, ['-c', config], { stdio: 'ignore' });
  let exited = false;
  const done = new Promise<void>((resolve) => child.once('exit', () => ((exited = true), resolve())));
  return {
    name: spec.name,
    port: spec.port,
    url: `127.0.0.1:${spec.port}`,
    monitorPort: spec.monitorPort,
    dir,
    get exited() {
      return exited;
    },
    async kill() {
      if (!exited) {
        child.kill('SIGKILL');
        await done;
      }
    },
    async stop() {
      if (!exited) {
        child.kill('SIGTERM');
        const killer = setTimeout(() => child.kill('SIGKILL'), 5000);
        await done;
        clearTimeout(killer);
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** One JetStream server on free ports, answering once this resolves. */
export async function startNatsServer(binary: string): Promise<NatsNode> {
  const node = start(binary, { name: 'pq-single', port: await freePort(), monitorPort: await freePort() });
  try {
    await until200(`http://127.0.0.1:${node.monitorPort}/healthz`, 200, () => !node.exited);
  } catch (error) {
    await node.stop();
    throw error;
  }
  return node;
}

/** A three-node JetStream cluster on loopback, answering (meta leader elected) once this resolves. */
export async function startNatsCluster(binary: string): Promise<NatsNode[]> {
  const ports = await Promise.all(Array.from({ length: 9 }, () => freePort()));
  const routes = [ports[2]!, ports[5]!, ports[8]!];
  const nodes = [0, 1, 2].map((i) =>
    start(binary, { name: `pq-n${i + 1}`, port: ports[i * 3]!, monitorPort: ports[i * 3 + 1]!, cluster: { port: routes[i]!, routes } }),
  );
  try {
    for (const node of nodes) await until200(`http://127.0.0.1:${node.monitorPort}/healthz`, 400, () => !node.exited);
  } catch (error) {
    await Promise.all(nodes.map((n) => n.stop()));
    throw error;
  }
  return nodes;
}
