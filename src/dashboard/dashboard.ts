/** dashboard() and serveDashboard(): the handler of a queue's dashboard, mounted or served on its own port. */
import { createServer, type Server } from 'node:http';
import { DashboardHandler, type HandlerOptions } from './http.js';

export type DashboardOptions = HandlerOptions;

export interface Dashboard {
  /** The `node:http` request handler: `createServer(d.handle)`, or called from a service's routing for paths under `basePath`. */
  readonly handle: DashboardHandler['handle'];
  /** The token every request must carry (in the URL as `?token=`, or the `x-pq-token` header). */
  readonly token: string;
  /** The URL to open, for the dashboard served at `origin` (`http://127.0.0.1:8080`). */
  url(origin: string): string;
  /** Stop sampling the queue, close the connection to its owner and the files it holds open. */
  close(): Promise<void>;
}

/**
 * The dashboard of the queue in `target` (a store directory, or an open `LogStore`, whose `dir`
 * is taken). Requests must name a loopback host (or one of `allowedHosts`) and carry the token;
 * actions (redrive, purge) need `allowActions`. Throws `TypeError` for a bad option.
 */
export function dashboard(target: string | { readonly dir: string }, options: DashboardOptions = {}): Dashboard {
  const dir = typeof target === 'string' ? target : (target as { dir?: unknown } | null)?.dir;
  if (typeof dir !== 'string' || dir.length === 0)
    throw new TypeError(`Expected \`target\` to be a store directory or a LogStore, got ${target === null ? 'null' : typeof target}`);
  if (options === null || typeof options !== 'object')
    throw new TypeError(`Expected \`options\` to be an object, got ${options === null ? 'null' : typeof options}`);
  const handler = new DashboardHandler(dir, options);
  handler.api.startSampling();
  return {
    handle: handler.handle,
    token: handler.token,
    url: (origin: string) => `${origin.replace(/\/$/, '')}${handler.basePath}?token=${handler.token}`,
    close: () => handler.close(),
  };
}

export interface ServeOptions extends Omit<HandlerOptions, 'port' | 'basePath' | 'allowedHosts'> {
  /** The port to listen on, 0 for any free one. @default 0 */
  readonly port?: number;
}

export interface ServedDashboard {
  /** The URL to open: `http://127.0.0.1:<port>/?token=<token>`. */
  readonly url: string;
  readonly port: number;
  readonly token: string;
  /** Stop serving (open connections are cut) and close the dashboard. */
  close(): Promise<void>;
}

/**
 * Serve the dashboard of the queue in `dir` on 127.0.0.1 (`pq ui`). Only this machine can reach it,
 * and only with the token. Rejects with the listen error (a port in use: `EADDRINUSE`).
 */
export async function serveDashboard(dir: string, options: ServeOptions = {}): Promise<ServedDashboard> {
  const port = options.port ?? 0;
  if (!Number.isInteger(port) || port < 0 || port > 65535)
    throw new RangeError(`Expected \`port\` to be an integer from 0 to 65535, got ${String(port)}`);
  const handler = new DashboardHandler(dir, { ...options, port });
  const server: Server = createServer({ requestTimeout: 30_000, headersTimeout: 10_000 }, handler.handle);
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen({ host: '127.0.0.1', port, exclusive: true }, () => {
        server.off('error', reject);
        resolve();
      });
    });
  } catch (error) {
    await handler.close();
    throw error;
  }
  const bound = (server.address() as { port: number }).port;
  handler.port = bound;
  handler.api.startSampling();
  return {
    url: `http://127.0.0.1:${bound}/?token=${handler.token}`,
    port: bound,
    token: handler.token,
    async close() {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      await handler.close();
    },
  };
}
