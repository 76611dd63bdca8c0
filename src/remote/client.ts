// A producer's side of the endpoint (frames: FORMAT.md §15, "Endpoint frames"): one connection to
// the process that holds the queue, requests sent as frames and matched to their replies by id.
//
// A request is answered only by the owner. When the connection ends before an answer (the owner
// was killed, or closed its queue without answering), the request rejects with `ERR_OWNER_GONE`:
// a push may or may not be stored then, and no request ever waits for an owner that is gone.
import { connect as netConnect, type Socket } from 'node:net';
import { QueueError, type QueueErrorCode } from '../contract/errors.js';
import type { DeadLetter } from '../contract/store.js';
import type { ProducerBackend } from './backend.js';
import {
  ERROR_KIND_ABORT,
  ERROR_KIND_QUEUE,
  ERROR_KIND_RANGE,
  ERROR_KIND_TYPE,
  FrameDecoder,
  GROUPS_LIMIT_MAX,
  HELLO_REPLY_BOUNDS,
  PROTOCOL_VERSION,
  PUSH_HEADER_BYTES,
  ProtocolError,
  REQ_COMPACT,
  REQ_PURGE,
  REQ_REDRIVE,
  REQ_STATS,
  REQ_TIMINGS,
  SCHEDULES_LIMIT_MAX,
  type Reply,
  type Selection,
  decodeReply,
  encodeBare,
  encodeCancel,
  encodeDeadLetters,
  encodeGroups,
  encodeHello,
  encodePush,
  encodeSchedules,
  encodeSelection,
  maxFrameBodyBytes,
  pushItemBytes,
  replyBounds,
} from './protocol.js';
import { Outbox } from './outbox.js';
import { endpointPath, withSocketPath } from './socket-path.js';
import { ENDPOINT_FILE } from '../stores/log/engine/format.js';
import type { RemotePushOptions } from '../contract/owner-surface.js';
import type { Timings } from './timings.js';
import type { GroupReport } from '../core/group-report.js';
import type { SchedulePage } from '../core/schedules.js';
import { isValidScheduleName } from '../contract/schedule-table.js';
import { MAX_SCHEDULE_NAME_BYTES } from '../contract/store.js';
import { expectation } from '../lib/validate.js';

/** The most groups and schedules one request may ask for: the dashboard's limits are the endpoint's. */
export { GROUPS_LIMIT_MAX, SCHEDULES_LIMIT_MAX } from './protocol.js';

/** Why connecting found no owner to talk to: nothing listens, so the spool is the way in. */
const NO_OWNER = new Set(['ENOENT', 'ECONNREFUSED']);

const utf8 = new TextEncoder();

interface PendingRequest {
  resolve(reply: Reply): void;
  reject(error: unknown): void;
}

/** What `connect()` found at the endpoint. */
/** How long `reach` waits for an owner's first answer before it takes it for none. */
const HELLO_TIMEOUT_MS = 2000;

export type Reached = { readonly client: EndpointClient } | { readonly absent: string };

export class EndpointClient implements ProducerBackend {
  readonly mode = 'endpoint' as const;
  readonly dir: string;
  readonly #socket: Socket;
  readonly #decoder = new FrameDecoder(HELLO_REPLY_BOUNDS);
  readonly #pending = new Map<number, PendingRequest>();
  #nextId = 1;
  readonly #outbox = new Outbox();
  /** Set once the connection is gone or closed: every later request rejects with it. */
  #ended: QueueError | null = null;
  #closing: Promise<void> | null = null;
  readonly #gone: Promise<void>;
  /** The owner's limit, from its hello reply. */
  maxItemBytes = 0;
  #maxBodyBytes = 0;

  private constructor(dir: string, socket: Socket) {
    this.dir = dir;
    this.#socket = socket;
    socket.on('data', (chunk: Buffer) => {
      try {
        this.#decoder.feed(chunk, (frame) => this.#reply(decodeReply(frame)));
      } catch (error) {
        this.#lost(`sent a frame that breaks the protocol (${(error as Error).message})`, error);
        socket.destroy();
      }
    });
    socket.on('error', () => {}); // 'close' follows
    this.#gone = new Promise((resolve) => {
      socket.on('close', () => {
        this.#lost('closed the connection');
        resolve();
      });
    });
    // An idle connection keeps no process alive; one with a request in flight does (`#send`).
    socket.unref();
  }

  /**
   * Connect to the owner of the queue in `dir` (absolute) and greet it. `absent` when no process
   * serves the queue (no socket, or a stale one: nothing listens); throws when one does but cannot
   * be reached or speaks another version.
   */
  static async reach(dir: string): Promise<Reached> {
    let socket: Socket;
    try {
      socket = await withSocketPath(dir, ENDPOINT_FILE, (path) => dial(path));
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code !== undefined && NO_OWNER.has(code)) {
        const path = endpointPath(dir);
        return { absent: code === 'ENOENT' ? `there is no ${path}` : `nothing listens on ${path}: the process that served it is gone` };
      }
      if (error instanceof QueueError) throw error;
      throw new QueueError('ERR_STORE', `Cannot reach the queue in ${dir}: ${(error as Error).message}`, { cause: error, file: dir });
    }
    const client = new EndpointClient(dir, socket);
    let reply: Reply;
    let timer: ReturnType<typeof setTimeout> | undefined;
    try {
      // An owner that accepts but never answers (stopped, or stuck) is taken for none: the spool
      // is safe whatever it does (its next pass ingests what was spooled), a wait for it is not.
      const silent = new Promise<'silent'>((resolve) => {
        timer = setTimeout(() => resolve('silent'), HELLO_TIMEOUT_MS);
        timer.unref?.();
      });
      const answer = await Promise.race([client.#request((id) => encodeHello(id)), silent]);
      if (answer === 'silent') {
        socket.destroy();
        return { absent: `the process on ${endpointPath(dir)} did not answer within ${HELLO_TIMEOUT_MS} ms` };
      }
      reply = answer;
    } catch (error) {
      socket.destroy();
      // An owner that closed the connection before it answered is closing its queue: none is served.
      if (error instanceof QueueError && error.code === 'ERR_OWNER_GONE')
        return { absent: `the process that served it on ${endpointPath(dir)} closed the queue` };
      throw error;
    } finally {
      if (timer !== undefined) clearTimeout(timer);
    }
    if (reply.type !== 'hello' || reply.version !== PROTOCOL_VERSION) {
      socket.destroy();
      throw new QueueError(
        'ERR_UNSUPPORTED_VERSION',
        `The process that holds the queue in ${dir} answered with protocol version ${reply.type === 'hello' ? reply.version : '?'}; this build speaks ${PROTOCOL_VERSION}`,
      );
    }
    client.maxItemBytes = reply.maxItemBytes;
    client.#maxBodyBytes = maxFrameBodyBytes(reply.maxItemBytes);
    client.#decoder.bounds = replyBounds(reply.maxItemBytes);
    return { client };
  }

  // ---- Producing ----

  /**
   * Push `payloads` as the owner's own producer would; resolves with their seqs once the owner's
   * push resolved (at its durability point). A batch larger than one frame is sent as several
   * pushes, in order. Aborting `signal` withdraws what still waits for capacity at the owner.
   */
  pushMany(payloads: Uint8Array[], options: RemotePushOptions, signal: AbortSignal | undefined): Promise<number[]> {
    if (this.#ended !== null) return Promise.reject(this.#ended);
    if (signal?.aborted) return Promise.reject(signal.reason);
    const max = this.maxItemBytes;
    for (const p of payloads) {
      if (p.length > max)
        return Promise.reject(new QueueError('ERR_TOO_LARGE', `Item of ${p.length} bytes exceeds the store's limit of ${max} bytes`));
    }
    const keys = options.keys?.map((k) => utf8.encode(k));
    const priority = options.priority ?? 0;
    const notBefore = options.notBefore ?? 0;
    // Frames of at most #maxBodyBytes: one payload of maxItemBytes with the longest key always fits.
    const parts: Promise<Reply>[] = [];
    const ids: number[] = [];
    let start = 0;
    let bytes = PUSH_HEADER_BYTES;
    const flush = (end: number): void => {
      const from = start;
      parts.push(
        this.#request((id) => {
          ids.push(id);
          return encodePush(id, {
            payloads: from === 0 && end === payloads.length ? payloads : payloads.slice(from, end),
            priority,
            notBefore,
            keys: keys?.slice(from, end),
          });
        }),
      );
      start = end;
      bytes = PUSH_HEADER_BYTES;
    };
    for (let i = 0; i < payloads.length; i++) {
      const item = pushItemBytes(payloads[i]!, keys?.[i]);
      if (i > start && bytes + item > this.#maxBodyBytes) flush(i);
      bytes += item;
    }
    flush(payloads.length);
    let onAbort: (() => void) | undefined;
    if (signal !== undefined) {
      onAbort = () => {
        for (const id of ids) if (this.#pending.has(id)) this.#cancel(id);
      };
      signal.addEventListener('abort', onAbort, { once: true });
    }
    const done = parts.length === 1 ? parts[0]!.then(seqsOf) : Promise.all(parts).then((replies) => replies.flatMap(seqsOf));
    return done.then(
      (seqs) => {
        if (onAbort !== undefined) signal!.removeEventListener('abort', onAbort);
        return seqs;
      },
      (error: unknown) => {
        if (onAbort !== undefined) signal!.removeEventListener('abort', onAbort);
        // Withdrawn by the owner on our cancel: as a local push aborted while it waited, with the signal's reason.
        if (error instanceof WithdrawnError)
          throw signal?.aborted
            ? signal.reason
            : new QueueError('ERR_CLOSED', 'The producer was closed while the push waited for capacity');
        throw error;
      },
    );
  }

  // ---- Operating (what `pq` does to a live queue) ----

  /** The owner's queue and store figures, and whether a consumer of it is reserving items. */
  async stats(): Promise<Record<string, unknown>> {
    return replyValue(await this.#call((id) => encodeBare(REQ_STATS, id)));
  }

  /** Dead letters with a seq above `after`, at most `limit` (fewer when they would not fit one frame). */
  async deadLetters(after: number, limit: number): Promise<DeadLetter[]> {
    const reply = await this.#call((id) => encodeDeadLetters(id, after, limit));
    if (reply.type !== 'deadLetters') throw new QueueError('ERR_OWNER_GONE', 'The owner answered a dead-letter list with another reply');
    return reply.list;
  }

  async redrive(selection: Selection): Promise<number[]> {
    return seqsOf(await this.#call((id) => encodeSelection(REQ_REDRIVE, id, selection)));
  }

  async purge(selection: Selection): Promise<number> {
    return replyValue(await this.#call((id) => encodeSelection(REQ_PURGE, id, selection)));
  }

  /**
   * The owner's push-to-hand-out and hand-out-to-ack latencies per second, for the last minutes.
   * The first call starts the owner measuring; it stops once nobody has asked for a while.
   */
  async timings(): Promise<Timings> {
    return replyValue(await this.#call((id) => encodeBare(REQ_TIMINGS, id)));
  }

  /**
   * The owner's groups with items in flight or waiting aside, the busiest `limit` (1 to
   * {@link GROUPS_LIMIT_MAX}) listed. Ask only an owner whose `stats()` has `groups`: one of an
   * earlier release closes the connection on a request it does not know.
   */
  async groups(limit: number): Promise<GroupReport> {
    const n = pageLimit(limit, GROUPS_LIMIT_MAX);
    return replyValue(await this.#call((id) => encodeGroups(id, n)));
  }

  /**
   * The owner's schedules whose names sort after `after` (`''`: from the first), by name, at most
   * `limit` (1 to {@link SCHEDULES_LIMIT_MAX}; fewer when they would not fit one frame), and whether
   * more follow. Ask only an owner whose `stats()` has `schedules`.
   */
  async schedules(after: string, limit: number): Promise<SchedulePage> {
    const what = `'' or a schedule name (1 to ${MAX_SCHEDULE_NAME_BYTES} UTF-8 bytes)`;
    if (typeof after !== 'string') throw new TypeError(expectation('after', what, after));
    if (after !== '' && !isValidScheduleName(after)) throw new RangeError(expectation('after', what, after));
    const n = pageLimit(limit, SCHEDULES_LIMIT_MAX);
    const name = utf8.encode(after);
    return replyValue(await this.#call((id) => encodeSchedules(id, name, n)));
  }

  async compact(): Promise<unknown> {
    return replyValue(await this.#call((id) => encodeBare(REQ_COMPACT, id)));
  }

  #call(frame: (id: number) => Uint8Array): Promise<Reply> {
    if (this.#ended !== null) return Promise.reject(this.#ended);
    return this.#request(frame);
  }

  // ---- Connection ----

  /**
   * Withdraw the pushes still waiting for capacity at the owner (they reject with `ERR_CLOSED`),
   * wait for the answers to the others, then close the connection. Idempotent.
   */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    if (this.#ended === null) {
      const pending = [...this.#pending.keys()];
      this.#ended = new QueueError('ERR_CLOSED', 'The producer is closed');
      for (const id of pending) this.#cancel(id);
      await Promise.all(pending.map((id) => new Promise<void>((resolve) => this.#whenSettled(id, resolve))));
      this.#outbox.end(this.#socket);
    }
    // The caller waits for the close: the socket keeps the process alive meanwhile.
    this.#socket.ref();
    await this.#gone;
  }

  #whenSettled(id: number, then: () => void): void {
    const entry = this.#pending.get(id);
    if (entry === undefined) return then();
    const { resolve, reject } = entry;
    entry.resolve = (reply) => {
      resolve(reply);
      then();
    };
    entry.reject = (error) => {
      reject(error);
      then();
    };
  }

  /** The next request id: from 1, wrapping past 2^32 − 1, never one still in flight. */
  #id(): number {
    let id = this.#nextId;
    while (this.#pending.has(id) || id === 0) id = id >= 0xffffffff ? 1 : id + 1;
    this.#nextId = id >= 0xffffffff ? 1 : id + 1;
    return id;
  }

  /** Send the frame `frame(id)` makes for a fresh request id; resolves with the owner's reply to it. */
  #request(frame: (id: number) => Uint8Array): Promise<Reply> {
    return new Promise<Reply>((resolve, reject) => {
      const id = this.#id();
      if (this.#pending.size === 0) this.#socket.ref();
      this.#pending.set(id, { resolve, reject });
      this.#send(frame(id));
    });
  }

  /** Ask the owner to withdraw push `id` if it still waits for capacity; the push's own reply says whether it did. */
  #cancel(id: number): void {
    // A cancel is answered by nobody: its id is only a frame field, taken off the same counter.
    this.#send(encodeCancel(this.#id(), id));
  }

  /** Frames made in one turn go out in one write of one buffer. */
  #send(frame: Uint8Array): void {
    this.#outbox.add(this.#socket, frame);
  }

  #reply(reply: Reply): void {
    const entry = this.#pending.get(reply.id);
    if (entry === undefined) throw new ProtocolError(`a reply to request ${reply.id}, which is not in flight`);
    this.#pending.delete(reply.id);
    if (this.#pending.size === 0) this.#socket.unref();
    if (reply.type === 'error') entry.reject(errorOf(reply));
    else entry.resolve(reply);
  }

  /** The connection is gone: every request in flight rejects, and every later one. */
  #lost(how: string, cause?: unknown): void {
    const error = new QueueError(
      'ERR_OWNER_GONE',
      `The process that holds the queue in ${this.dir} ${how} before it answered: a push in flight may or may not be stored`,
      cause === undefined ? {} : { cause },
    );
    this.#ended ??= error;
    const pending = [...this.#pending.values()];
    this.#pending.clear();
    for (const entry of pending) entry.reject(error);
  }
}

/** Marks a push the owner withdrew on a cancel: the producer rejects it as an aborted or closed one. */
class WithdrawnError extends Error {}

function errorOf(reply: Extract<Reply, { type: 'error' }>): Error {
  switch (reply.kind) {
    case ERROR_KIND_QUEUE:
      return new QueueError(reply.code as QueueErrorCode, reply.message);
    case ERROR_KIND_TYPE:
      return new TypeError(reply.message);
    case ERROR_KIND_RANGE:
      return new RangeError(reply.message);
    case ERROR_KIND_ABORT:
      return new WithdrawnError(reply.message);
    default:
      return new Error(reply.message);
  }
}

/** A page's `limit`: an integer from 1 to `max`. */
function pageLimit(limit: unknown, max: number): number {
  const what = `an integer from 1 to ${max}`;
  if (typeof limit !== 'number') throw new TypeError(expectation('limit', what, limit));
  if (!Number.isInteger(limit) || limit < 1 || limit > max) throw new RangeError(expectation('limit', what, limit));
  return limit;
}

function seqsOf(reply: Reply): number[] {
  if (reply.type !== 'seqs') throw new QueueError('ERR_OWNER_GONE', `The owner answered with a ${reply.type} reply where seqs were due`);
  return reply.seqs;
}

function replyValue<T>(reply: Reply): T {
  if (reply.type !== 'value') throw new QueueError('ERR_OWNER_GONE', `The owner answered with a ${reply.type} reply where a value was due`);
  return reply.value as T;
}

/** A connected socket to `path`, or the connect error (its errno code tells why). */
function dial(path: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = netConnect({ path });
    socket.once('connect', () => {
      socket.off('error', reject);
      resolve(socket);
    });
    socket.once('error', reject);
  });
}
