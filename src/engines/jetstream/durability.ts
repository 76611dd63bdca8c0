// What a push the server acknowledged survives on JetStream, and the warning when that is less than
// the local queue's policy promises. A JetStream publish ack means the message is written, not that
// it is on disk: each server fsyncs its stream files every `sync_interval` (2 minutes unless its
// configuration says `always`), so a power loss can take the acknowledged writes of the last
// interval with it, on every replica that lost power. See docs/guides/scaling-out.md, "What a push survives on
// JetStream", and docs/internals/jetstream.md, "The JetStream queue".
import type { Durability } from '../../api/types.js';
import { expectation } from '../../lib/validate.js';

/** The server's `sync_interval` as its operator set it: `'always'` (fsync before each ack) or ms between fsyncs. */
export type ServerSyncInterval = 'always' | number;

/**
 * What a push the server acknowledged survives on one server:
 * - `'power-loss'`: file storage fsynced before the ack (`sync_interval: always`);
 * - `'process-crash'`: file storage fsynced on an interval: a crash of the server's process loses
 *   nothing, a power loss (or kernel crash) of its machine may lose the writes of the last interval;
 * - `'nothing'`: memory storage, or a stream whose `persist_mode` is `async`: a crash or restart of
 *   the server's process may lose it;
 * - `'unknown'`: file storage, and the server does not tell a client how often it fsyncs.
 * With replicas, a push is acknowledged once a quorum has it: losing fewer than half of the nodes at
 * once loses nothing whatever this says; losing power on all of them at once is this, per node.
 */
export type Survives = 'power-loss' | 'process-crash' | 'nothing' | 'unknown';

/** What `stats().durability` of a JetStream queue, and of a forwarder, tells. */
export interface JetStreamDurability {
  /** The server's version, from the INFO it sent when the connection was made. */
  readonly serverVersion: string;
  /** How often the server fsyncs stream files: `'always'`, ms between fsyncs, or `'unknown'`. */
  readonly syncInterval: ServerSyncInterval | 'unknown';
  /**
   * Where `syncInterval` comes from: `'server'` (a server before 2.10 has no setting and fsyncs
   * every 2 minutes), `'stated'` (the `serverSyncInterval` option), or `'unknown'` (2.10 and later
   * do not tell a client; only their monitoring endpoint and the system account do).
   */
  readonly syncSource: 'server' | 'stated' | 'unknown';
  /** The stream the items are stored in. */
  readonly stream: string;
  /** Its storage: `'file'` or `'memory'`. */
  readonly storage: string;
  /** Its replicas. */
  readonly replicas: number;
  /** Its `persist_mode` (servers from 2.12): `'default'`, `'async'`, or `'default'` when the server has none. */
  readonly persistMode: string;
  readonly survives: Survives;
}

/** The fsync interval of a server before 2.10, which has no `sync_interval` setting. */
export const FIXED_SYNC_INTERVAL_MS = 120_000;

/** Validate a `serverSyncInterval` option. @internal */
export function serverSyncOption(name: string, value: unknown): ServerSyncInterval | undefined {
  if (value === undefined || value === 'always') return value;
  const what = "'always' or a positive integer (ms between the server's fsyncs)";
  if (typeof value !== 'number') throw new TypeError(expectation(name, what, value));
  if (!Number.isSafeInteger(value) || value <= 0) throw new RangeError(expectation(name, what, value));
  return value;
}

/** True for a version older than 2.10, the first with a `sync_interval` setting. */
function beforeSyncSetting(version: string): boolean {
  const m = /^v?(\d+)\.(\d+)\./.exec(version);
  if (m === null) return false;
  const major = Number(m[1]);
  return major < 2 || (major === 2 && Number(m[2]) < 10);
}

/** What the server's INFO, the stream's configuration and the caller's statement tell. @internal */
export interface DurabilityFacts {
  readonly serverVersion: string | undefined;
  readonly stated: ServerSyncInterval | undefined;
  readonly stream: string;
  readonly storage: string | undefined;
  readonly replicas: number | undefined;
  readonly persistMode: string | undefined;
}

/**
 * Put the facts together. A server before 2.10 fsyncs every 2 minutes whatever the caller states
 * (it has no setting to change that); a later one is taken at the caller's word, or is unknown.
 * @internal
 */
export function durabilityOf(f: DurabilityFacts): JetStreamDurability {
  const serverVersion = f.serverVersion ?? 'unknown';
  let syncInterval: ServerSyncInterval | 'unknown' = 'unknown';
  let syncSource: JetStreamDurability['syncSource'] = 'unknown';
  if (f.serverVersion !== undefined && beforeSyncSetting(f.serverVersion)) {
    syncInterval = FIXED_SYNC_INTERVAL_MS;
    syncSource = 'server';
  } else if (f.stated !== undefined) {
    syncInterval = f.stated;
    syncSource = 'stated';
  }
  const storage = f.storage ?? 'file';
  const persistMode = f.persistMode === undefined || f.persistMode === '' ? 'default' : f.persistMode;
  let survives: Survives;
  if (storage === 'memory' || persistMode === 'async') survives = 'nothing';
  else if (syncInterval === 'always') survives = 'power-loss';
  else if (syncInterval === 'unknown') survives = 'unknown';
  else survives = 'process-crash';
  return { serverVersion, syncInterval, syncSource, stream: f.stream, storage, replicas: f.replicas ?? 1, persistMode, survives };
}

/** True when a push kept under `policy` survives something that `survives` does not. @internal */
export function weakerThan(survives: Survives, policy: Durability): boolean {
  // `none` survives the process's crash, which file storage on any interval survives too.
  if (policy === 'none') return survives === 'nothing';
  return survives !== 'power-loss';
}

/** The stable code of the warning, for `process.on('warning')` and `--disable-warning`. */
export const DURABILITY_WARNING_CODE = 'PQ_JETSTREAM_DURABILITY';

let warned = false;

function syncText(d: JetStreamDurability): string {
  const server = `nats-server ${d.serverVersion}`;
  if (d.storage === 'memory') return `${server} keeps stream ${d.stream} in memory`;
  if (d.persistMode === 'async') return `${server} acknowledges what stream ${d.stream} stores before writing it (persist_mode async)`;
  if (d.syncInterval === 'unknown')
    return `${server} does not tell a client how often it fsyncs (its sync_interval: every 2 minutes unless set to always)`;
  const why = d.syncSource === 'server' ? 'a server before 2.10 cannot be told otherwise' : 'as serverSyncInterval states';
  return `${server} fsyncs every ${d.syncInterval} ms (${why})`;
}

const SURVIVES_TEXT: Record<Survives, string> = {
  'power-loss': 'a power loss',
  'process-crash': "a crash of the server's process, not a power loss of its machine",
  nothing: "nothing: not even a crash or restart of the server's process",
  unknown: "a crash of the server's process; whether it survives a power loss is unknown",
};

/**
 * Emit `PQ_JETSTREAM_DURABILITY` once in the process when `d` is weaker than `policy`; `what`
 * names the queue or forwarder, `policyText` what the policy promises. Returns whether it warned now.
 * @internal
 */
export function warnIfWeaker(d: JetStreamDurability, policy: Durability, what: string, policyText: string): boolean {
  if (warned || !weakerThan(d.survives, policy)) return false;
  warned = true;
  const replicas =
    d.replicas > 1
      ? ` With ${d.replicas} replicas, losing fewer than half of the nodes at once loses nothing; a power loss of all of them may.`
      : '';
  const fix =
    d.syncInterval === 'unknown'
      ? ' If the server is configured with sync_interval: always, say so with serverSyncInterval: "always".'
      : d.storage === 'memory' || d.persistMode === 'async'
        ? ''
        : ' Set sync_interval: always on the server (nats-server 2.10 or later) to fsync before each ack.';
  process.emitWarning(
    `${what}: ${syncText(d)}, so a push it acknowledged survives ${SURVIVES_TEXT[d.survives]}, while ${policyText}.${replicas}${fix} See README, "What a push survives on JetStream".`,
    { type: 'PersistentQueueWarning', code: DURABILITY_WARNING_CODE },
  );
  return true;
}
