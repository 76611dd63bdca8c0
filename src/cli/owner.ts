/**
 * How `pq` acts on a queue another process has open: through that process (the owner), on the
 * endpoint it serves (docs/guides/other-processes.md, "Producers in other processes and threads"). A store has one owner,
 * which holds its lock and the queue's state in memory; a command that would take the lock goes
 * through the owner instead while one serves, and takes the lock as before while none does.
 */
import { resolve } from 'node:path';
import { nodeFileSystem } from '../fs/node-fs.js';
import { isQueueError } from '../index.js';
import { liveHolder } from '../stores/log/engine/store-dir.js';
import { EndpointClient } from '../remote/client.js';

/** The process that serves a queue, connected. */
export interface Owner {
  readonly client: EndpointClient;
  /** Its pid, as its lock file names it; null when the lock does not say (the owner is closing). */
  readonly pid: number | null;
}

/**
 * The process that serves the queue in `dir`, connected, or null when none does (no endpoint, or
 * a stale one nobody listens on). Throws when one serves but cannot be reached, or speaks another
 * protocol version (`ERR_UNSUPPORTED_VERSION`).
 */
export async function reachOwner(dir: string): Promise<Owner | null> {
  const at = resolve(dir);
  const reached = await EndpointClient.reach(at);
  if (!('client' in reached)) return null;
  return { client: reached.client, pid: liveHolder(nodeFileSystem, at)?.pid ?? null };
}

/** `process 4242`, or words that stand for it when its pid is not known. */
export function ownerName(owner: { readonly pid: number | null }): string {
  return owner.pid !== null ? `process ${owner.pid}` : 'the process that has it open';
}

/**
 * Run `viaOwner` on the process that serves the queue in `dir`, else `viaLock` (which takes the
 * store's lock). A lock found held is asked about once more: an owner that began to serve after
 * the first look is reached through its endpoint, not reported as `ERR_LOCKED`.
 */
export async function throughOwnerOrLock<T>(dir: string, viaOwner: (owner: Owner) => Promise<T>, viaLock: () => Promise<T>): Promise<T> {
  const owner = await reachOwner(dir);
  if (owner !== null) return withOwner(owner, viaOwner);
  try {
    return await viaLock();
  } catch (error) {
    if (!isQueueError(error, 'ERR_LOCKED')) throw error;
    const late = await reachOwner(dir).catch(() => null);
    if (late === null) throw error;
    return withOwner(late, viaOwner);
  }
}

/** Run `fn` on `owner`, then close the connection whatever happens. */
export async function withOwner<T>(owner: Owner, fn: (owner: Owner) => Promise<T>): Promise<T> {
  try {
    return await fn(owner);
  } finally {
    await owner.client.close();
  }
}

/** Items a consumer of the owner settled since it opened the queue (its counters). */
export function settled(figures: Record<string, unknown>): number {
  let sum = 0;
  for (const name of ['acked', 'nacked', 'deadLettered']) {
    const value = figures[name];
    if (typeof value === 'number') sum += value;
  }
  return sum;
}

/** How long the second look at the owner's figures waits for a busy consumer's counters to move. */
const SECOND_LOOK_MS = 25;

/** What one answer of the owner says of its consumer: waiting for items, holding some, or settling some. */
export function busy(figures: Record<string, unknown>): boolean {
  const positive = (name: string): boolean => typeof figures[name] === 'number' && (figures[name] as number) > 0;
  return figures.consuming === true || positive('inFlight') || positive('pendingAcks');
}

/**
 * Whether a consumer of the owner is taking items, from its figures `first` and, when they say
 * no, a second answer a moment later. The owner's `consuming` is true while a consumer waits for
 * an item or holds one; a busy `process()` worker whose handlers finish at once may be doing
 * neither at the very instant the owner answers (its items are settled, their acks waiting for a
 * sync, or it is between two items), but its counters of settled items move meanwhile. Resolves
 * with the latest figures too.
 */
export async function consumerActive(
  owner: Owner,
  first: Record<string, unknown>,
): Promise<{ consuming: boolean; figures: Record<string, unknown> }> {
  if (busy(first)) return { consuming: true, figures: first };
  await new Promise((done) => setTimeout(done, SECOND_LOOK_MS));
  const second = await owner.client.stats();
  return { consuming: busy(second) || settled(second) !== settled(first), figures: second };
}

/**
 * `pq pop` refused because another process consumes the queue: items cannot be reserved through
 * the endpoint, and popping beside the consumer would compete with it. Exit status 3.
 */
export class ConsumedError extends Error {
  readonly pid: number | null;

  constructor(message: string, pid: number | null) {
    super(message);
    this.name = 'ConsumedError';
    this.pid = pid;
  }
}
