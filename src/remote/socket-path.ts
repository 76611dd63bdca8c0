// Where the owner of a queue listens and a producer connects (docs/internals/other-processes.md,
// "Other processes: the endpoint"): the Unix domain socket `pq.sock` in the store directory, or on
// Windows a named pipe whose name is made from the directory's path.
//
// A Unix socket's path must fit `sun_path` (108 bytes with its NUL on Linux, 104 on macOS and the
// BSDs); libuv refuses a longer one, and older versions cut it silently. A longer store path is
// reached through a symlink to the store directory made in a fresh private directory (mkdtemp:
// mode 0700, owned by this user) under the OS temp directory, used for the one bind or connect
// call and removed at once: the socket file itself stays in the store directory, with the store
// directory's permissions in front of it. No abstract-namespace socket is ever used: it would have
// no permissions at all.
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { QueueError } from '../contract/errors.js';
import { ENDPOINT_FILE } from '../stores/log/engine/format.js';

/** The longest socket path the platform's `sun_path` holds, in bytes, without its NUL. */
export const SOCKET_PATH_BYTES_MAX = process.platform === 'linux' ? 107 : 103;

const onWindows = process.platform === 'win32';

/**
 * The named pipe of the queue in `dir` (an absolute path) on Windows: one per store directory, the
 * path hashed so that any length fits. Untested here: no Windows runner.
 */
export function pipeName(dir: string): string {
  const key = createHash('sha256').update(dir.toLowerCase()).digest('hex').slice(0, 32);
  return `\\\\.\\pipe\\persistent-queue-${key}`;
}

/**
 * Run `use` with a path that reaches `name` in the store directory `dir` (absolute): the direct
 * path when it fits the platform's limit, else one through a symlink in a private temporary
 * directory, removed once `use` settles. On Windows, the queue's named pipe whatever `name` is.
 */
export async function withSocketPath<T>(dir: string, name: string, use: (path: string) => Promise<T>): Promise<T> {
  if (onWindows) return use(pipeName(dir));
  const direct = join(dir, name);
  if (Buffer.byteLength(direct) <= SOCKET_PATH_BYTES_MAX) return use(direct);
  const privateDir = mkdtempSync(join(tmpdir(), 'pq-'));
  try {
    const link = join(privateDir, 'd');
    const short = join(link, name);
    if (Buffer.byteLength(short) > SOCKET_PATH_BYTES_MAX) {
      throw new QueueError(
        'ERR_UNSUPPORTED',
        `The endpoint of the queue in ${dir} cannot be reached: its path, even through ${short}, is longer than the ${SOCKET_PATH_BYTES_MAX} bytes a Unix socket path may have (set TMPDIR to a shorter directory)`,
      );
    }
    symlinkSync(dir, link, 'dir');
    return await use(short);
  } finally {
    rmSync(privateDir, { recursive: true, force: true });
  }
}

/** The path of the endpoint's socket file in `dir`, or the pipe's name on Windows. */
export function endpointPath(dir: string): string {
  return onWindows ? pipeName(dir) : join(dir, ENDPOINT_FILE);
}
