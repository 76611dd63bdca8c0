// `connect()`: a producer for a queue another process (or thread) holds, or that nobody holds yet.
import { resolve } from 'node:path';
import { type Codec, checkCodec, isRaw, bytes } from '../lib/codec.js';
import { QueueError } from '../contract/errors.js';
import { nodeFileSystem } from '../fs/node-fs.js';
import { openSpool } from '../stores/log/engine/spool-producer.js';
import type { Durability } from '../api/types.js';
import { expectation, knownKeys, nonEmptyString, optionsObject } from '../lib/validate.js';
import { EndpointClient } from './client.js';
import { RemoteProducer } from './producer.js';

/** Options of {@link connect}. */
export interface ConnectOptions<T = Uint8Array> {
  /**
   * How values become payloads, as the owner's `Builder.codec`: `push(value)` encodes (and
   * validates) here, before anything is sent. Use the codec the owner's queue decodes with.
   * @default bytes()
   */
  codec?: Codec<T>;
  /**
   * When a push through the spool resolves (no process held the queue at `connect()`): `'sync'`,
   * `'group'` or `'none'`, as the queue's own policies. Through the endpoint, a push resolves at
   * the owner's durability point, whatever this says.
   * @default 'group'
   */
  durability?: Durability;
}

const DURABILITIES: readonly string[] = ['sync', 'group', 'none'];

/**
 * A producer for the queue in the LogStore directory `dir`, from any process or thread. When a
 * process has the queue open, pushes go to it through its endpoint (the socket `pq.sock` in `dir`)
 * and resolve at its durability point, sharing its group commit; when none has, `connect()`
 * spools (docs/guides/other-processes.md, "Producers in other processes and threads"). Rejects with `TypeError` or
 * `RangeError` for bad arguments, `ERR_UNSUPPORTED_VERSION` for an owner that speaks another
 * protocol version, and with the spool's error when no process serves the queue and the spool
 * cannot be opened.
 */
export async function connect<T = Uint8Array>(dir: string, options?: ConnectOptions<T>): Promise<RemoteProducer<T>> {
  nonEmptyString('dir', dir);
  const o = optionsObject('options', options);
  knownKeys('options', o, ['codec', 'durability']);
  const codec = o.codec === undefined || isRaw(o.codec as Codec<unknown>) ? bytes() : checkCodec(o.codec as Codec<unknown>);
  let durability: Durability = 'group';
  if (o.durability !== undefined) {
    if (typeof o.durability !== 'string') throw new TypeError(expectation('options.durability', "'sync', 'group' or 'none'", o.durability));
    if (!DURABILITIES.includes(o.durability))
      throw new RangeError(expectation('options.durability', "'sync', 'group' or 'none'", o.durability));
    durability = o.durability as Durability;
  }
  const at = resolve(dir);
  const reached = await EndpointClient.reach(at);
  if ('client' in reached) return new RemoteProducer<T>(reached.client, codec as Codec<unknown>);
  let spool;
  try {
    spool = await openSpool(at, { durability, fs: nodeFileSystem });
  } catch (error) {
    if (!(error instanceof QueueError)) throw error;
    throw new QueueError(
      error.code,
      `No process serves the queue in ${at} (${reached.absent}), and its spool cannot be used: ${error.message}`,
      { cause: error, file: error.file ?? at },
    );
  }
  // An owner that started meanwhile: its pass after it began to serve sees the spool file made
  // above, which holds nothing yet, so this producer goes through the endpoint from its first
  // push and no later push can overtake an earlier one.
  const again = await EndpointClient.reach(at);
  if ('client' in again) {
    await spool.close();
    return new RemoteProducer<T>(again.client, codec as Codec<unknown>);
  }
  return new RemoteProducer<T>(spool, codec as Codec<unknown>);
}
