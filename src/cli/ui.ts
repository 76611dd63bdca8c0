/**
 * `pq ui`: serve the dashboard of a queue on 127.0.0.1 (docs/guides/dashboard.md, "The dashboard: `pq ui`"). It prints
 * the URL to open, with the token every request must carry, and serves until interrupted. The
 * dashboard reads the live queue through the process that has it open, and the store's files
 * read-only; with `--allow-actions` it can redrive and purge dead letters through that process.
 */
import { serveDashboard } from '../dashboard/index.js';
import { UsageError } from './args.js';
import { intOption, oneDir, storeKind, type Command } from './commands.js';

/** The port could not be listened on (in use, not allowed): exit status 1, code `ERR_LISTEN`. */
export class ListenError extends Error {
  readonly code = 'ERR_LISTEN';

  constructor(port: number, cause: unknown) {
    super(`cannot listen on 127.0.0.1:${port}: ${(cause as Error)?.message ?? String(cause)}`, { cause });
    this.name = 'ListenError';
  }
}

export const ui: Command = async (cli, { values, positionals }) => {
  const dir = oneDir('ui', positionals);
  const port = intOption('ui', 'port', values.port, 0);
  if (port > 65535) throw new UsageError(`--port must be an integer from 0 to 65535, got '${String(values.port)}'`, 'ui');
  const allowActions = values['allow-actions'] === true;
  // A path that holds no store is refused now, as every command refuses it, not at the first page.
  storeKind(dir);
  let served;
  try {
    served = await serveDashboard(dir, { port, allowActions });
  } catch (error) {
    throw new ListenError(port, error);
  }
  // Listening for Ctrl-C before the URL is printed: whoever reads it may stop the dashboard at once,
  // and a signal that came before the handler would end the process without closing it.
  const stopped = new Promise<void>((resolve) => {
    const stop = (): void => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      resolve();
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
  if (cli.json) {
    cli.out.line(JSON.stringify({ url: served.url, port: served.port, allowActions }));
  } else {
    cli.out.line(
      `pq ui: the dashboard of ${dir}, ${allowActions ? 'with actions (redrive, purge)' : 'read-only (--allow-actions lets it redrive and purge)'}; Ctrl-C stops it`,
    );
    cli.out.line(served.url);
  }
  await cli.out.flush();
  await stopped;
  await served.close();
  return 0;
};
