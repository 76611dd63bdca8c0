// The owner's side of the endpoint (docs/internals/other-processes.md, "Other processes: the
// endpoint"; frames: FORMAT.md §15, "Endpoint frames"): a net.Server on the Unix socket `pq.sock`
// in the store directory, started once the queue is open (the store's lock is held), stopped before
// the store closes.
//
// Every byte a client sends is hostile. A frame that breaks the protocol closes its own
// connection and nothing else: it is decoded in full before anything acts on it, so it stores
// nothing, and other connections never see it. A push goes through the owner's surface, as a push
// of the owner's own producer would: it shares the owner's group commit, and while the queue is at
// capacity it simply stays pending, which is the backpressure a remote caller feels.
import { chmodSync, renameSync, statSync, unlinkSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { ByteArena } from '../lib/bytes.js';
import { QueueError } from '../contract/errors.js';
import { ENDPOINT_FILE, ENDPOINT_TMP_FILE } from '../stores/log/engine/format.js';
import {
  FrameDecoder,
  PROTOCOL_VERSION,
  REQ_HELLO,
  ProtocolError,
  type Frame,
  type FrameBounds,
  type Request,
  decodeRequest,
  encodeDeadLetterList,
  encodeError,
  encodeHelloReply,
  encodeSeqs,
  encodeValue,
  maxFrameBodyBytes,
  requestBounds,
} from './protocol.js';
import { Outbox } from './outbox.js';
import { withSocketPath } from './socket-path.js';
import type { OwnerSurface } from '../contract/owner-surface.js';
import { TimingCollector } from './timings.js';

/** What a connection accepts before its hello: the hello alone. */
const HELLO_BOUNDS: FrameBounds = new Map([[REQ_HELLO, requestBounds(1).get(REQ_HELLO)!]]);

/** Requests one connection may have in flight before the server stops reading from it. */
const PENDING_REQUESTS_MAX = 4096;

/** How long `close()` lets a connection flush its last replies before it is cut. */
const CLOSE_FLUSH_MS = 1000;

/** The socket file's mode: the owner's user alone may connect (the directory is 0700 too). */
const SOCKET_MODE = 0o600;

const onWindows = process.platform === 'win32';

export class EndpointServer {
  readonly #server: Server;
  readonly #surface: OwnerSurface;
  readonly #connections = new Set<Connection>();
  /** Frame body bound of this queue, and the request bounds that follow from it. */
  readonly maxBodyBytes: number;
  readonly bounds: FrameBounds;
  /** Bytes of pushes a connection may have in flight before the server stops reading from it. */
  readonly pendingBytesMax: number;
  /** Copies of payloads that arrived as views into a socket's read chunk. */
  readonly arena = new ByteArena();
  /** Hand-out and ack latencies, measured only while someone asks for them (TIMINGS). */
  readonly timings: TimingCollector;
  readonly #socketFile: string | null;
  /** The socket file's inode once renamed into place: close removes it only if it is still this one. */
  #ino: number | null = null;
  #closing: Promise<void> | null = null;

  private constructor(dir: string, surface: OwnerSurface) {
    this.#surface = surface;
    this.maxBodyBytes = maxFrameBodyBytes(surface.maxItemBytes);
    this.bounds = requestBounds(surface.maxItemBytes);
    this.pendingBytesMax = 2 * this.maxBodyBytes;
    this.timings = new TimingCollector(() => queueIdOf(surface));
    this.#socketFile = onWindows ? null : join(dir, ENDPOINT_FILE);
    this.#server = createServer({ allowHalfOpen: true, pauseOnConnect: false }, (socket) => this.#accept(socket));
  }

  /**
   * Serve the queue in `dir` (absolute; its lock held by this process) through `surface`. A socket
   * left by an earlier owner (killed, so it could not remove it) is replaced.
   */
  static async start(dir: string, surface: OwnerSurface): Promise<EndpointServer> {
    const server = new EndpointServer(dir, surface);
    await withSocketPath(dir, ENDPOINT_TMP_FILE, async (tmpPath) => {
      if (onWindows) return server.#listen(tmpPath);
      // Bound under a name no client connects to, given its mode, then renamed into place: a client
      // can reach the socket only once only this user can. Whatever a killed owner left under
      // either name is stale: this process holds the lock.
      removeIfPresent(tmpPath);
      await server.#listen(tmpPath);
      try {
        chmodSync(tmpPath, SOCKET_MODE);
        const finalPath = join(tmpPath, '..', ENDPOINT_FILE);
        renameSync(tmpPath, finalPath);
        server.#ino = statSync(finalPath).ino;
      } catch (error) {
        await server.close();
        throw error;
      }
    });
    // The server never keeps the owner alive: the queue's waiting consumers do that.
    server.#server.unref();
    return server;
  }

  #listen(path: string): Promise<void> {
    return new Promise((resolve, reject) => {
      const failed = (error: Error): void =>
        reject(new QueueError('ERR_STORE', `Cannot serve the queue at ${path}: ${error.message}`, { cause: error }));
      this.#server.once('error', failed);
      this.#server.listen({ path, exclusive: true }, () => {
        this.#server.off('error', failed);
        this.#server.on('error', () => {});
        resolve();
      });
    });
  }

  #accept(socket: Socket): void {
    if (this.#closing !== null) {
      socket.destroy();
      return;
    }
    socket.unref();
    const connection = new Connection(this, socket, this.#surface, () => this.#connections.delete(connection));
    this.#connections.add(connection);
  }

  /** Stop accepting, let each connection send what it has, then remove the socket file. Idempotent. */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    this.timings.stop();
    const stopped = new Promise<void>((resolve) => this.#server.close(() => resolve()));
    await Promise.all([...this.#connections].map((c) => c.finish()));
    await stopped;
    const file = this.#socketFile;
    if (file !== null && this.#ino !== null) {
      try {
        // Only the socket this server put there: never one another owner made since.
        if (statSync(file).ino === this.#ino) unlinkSync(file);
      } catch {
        // Gone already: nothing to remove.
      }
    }
  }
}

function removeIfPresent(path: string): void {
  try {
    unlinkSync(path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
}

/** One client's connection: its frames decoded in order, its requests in flight, its replies. */
class Connection {
  readonly #server: EndpointServer;
  readonly #socket: Socket;
  readonly #surface: OwnerSurface;
  readonly #gone: () => void;
  readonly #decoder = new FrameDecoder(HELLO_BOUNDS);
  #greeted = false;
  /** Requests in flight by id; a push's entry withdraws it (`cancel`), others have none. */
  readonly #pending = new Map<number, Withdrawal | null>();
  #pendingBytes = 0;
  #paused = false;
  readonly #outbox = new Outbox();
  /** The client sent its last byte (half-close): end the connection once the replies are out. */
  #ended = false;
  #closed = false;
  /** The hello named a version this build does not speak: whatever follows is ignored. */
  #refused = false;
  #onClosed: (() => void) | null = null;

  constructor(server: EndpointServer, socket: Socket, surface: OwnerSurface, gone: () => void) {
    this.#server = server;
    this.#socket = socket;
    this.#surface = surface;
    this.#gone = gone;
    socket.on('data', (chunk: Buffer) => this.#data(chunk));
    socket.on('end', () => this.#end());
    socket.on('error', () => {}); // 'close' follows; a reset is how a killed client leaves
    socket.on('close', () => this.#teardown());
  }

  #data(chunk: Buffer): void {
    if (this.#closed || this.#refused) return;
    try {
      this.#decoder.feed(chunk, (frame) => this.#frame(frame));
    } catch (error) {
      this.#drop(error);
    }
  }

  #end(): void {
    if (this.#refused) return;
    // A frame cut off by the end of the stream is a truncated frame: nothing of it is acted on.
    if (this.#decoder.partial) return this.#drop(new ProtocolError('the stream ended inside a frame'));
    this.#ended = true;
    if (this.#pending.size === 0) this.#outbox.end(this.#socket);
  }

  /** A protocol violation: the connection is cut, its pushes still waiting for capacity withdrawn. */
  #drop(error: unknown): void {
    void error;
    this.#socket.destroy();
    this.#teardown();
  }

  #teardown(): void {
    if (this.#closed) return;
    this.#closed = true;
    // Nobody is left to hear about them: pushes still waiting for capacity are withdrawn.
    for (const controller of this.#pending.values()) controller?.abort();
    this.#gone();
    this.#onClosed?.();
  }

  /** Let the replies already made go out, then end; cut after CLOSE_FLUSH_MS. */
  finish(): Promise<void> {
    if (this.#closed) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const timer = setTimeout(() => this.#socket.destroy(), CLOSE_FLUSH_MS);
      timer.unref();
      this.#onClosed = () => {
        clearTimeout(timer);
        resolve();
      };
      // The owner's close waits for this: the socket keeps the process alive meanwhile.
      this.#socket.ref();
      this.#outbox.end(this.#socket);
    });
  }

  #frame(frame: Frame): void {
    if (this.#closed || this.#refused) return;
    const request = decodeRequest(frame);
    if (!this.#greeted) {
      if (request.type !== 'hello') throw new ProtocolError('the first frame must be a hello');
      return this.#hello(request.id, request.version);
    }
    if (request.type === 'hello') throw new ProtocolError('a second hello');
    if (request.type === 'cancel') {
      this.#pending.get(request.target)?.abort();
      return;
    }
    if (this.#pending.has(request.id)) throw new ProtocolError(`request id ${request.id} is already in flight`);
    if (request.type === 'push') return this.#push(request, frame);
    this.#track(request.id, null, 0, this.#operate(request));
  }

  #hello(id: number, version: number): void {
    if (version !== PROTOCOL_VERSION) {
      // Said in a frame of version 1, which every version's client reads, then the connection ends.
      this.#send(
        encodeError(
          id,
          new QueueError('ERR_UNSUPPORTED_VERSION', `The owner speaks endpoint protocol version ${PROTOCOL_VERSION}, not ${version}`),
        ),
      );
      this.#refused = true;
      this.#outbox.end(this.#socket);
      return;
    }
    this.#greeted = true;
    this.#decoder.bounds = this.#server.bounds;
    this.#send(encodeHelloReply(id, this.#surface.maxItemBytes));
  }

  #push(request: Extract<Request, { type: 'push' }>, frame: Frame): void {
    const payloads = request.payloads;
    // A view into the socket's read chunk would keep the whole chunk alive with the item.
    if (!frame.owned) for (let i = 0; i < payloads.length; i++) payloads[i] = this.#server.arena.copy(payloads[i]!);
    const controller = new Withdrawal();
    const options =
      request.keys === undefined
        ? { priority: request.priority, notBefore: request.notBefore }
        : { priority: request.priority, notBefore: request.notBefore, keys: request.keys };
    let result: Promise<unknown>;
    try {
      result = this.#surface.push(payloads, options, controller.signal);
    } catch (error) {
      result = Promise.reject(error);
    }
    this.#track(request.id, controller, frame.body.length, result);
  }

  #operate(request: Exclude<Request, { type: 'hello' | 'cancel' | 'push' }>): Promise<Uint8Array> {
    const id = request.id;
    const max = this.#server.maxBodyBytes;
    const surface = this.#surface;
    switch (request.type) {
      case 'stats':
        return Promise.resolve().then(() => {
          const stats = { ...surface.stats(), consuming: surface.consuming };
          // A store of very many segments: its figures without the list of them.
          return (
            encodeValue(id, stats, max) ??
            encodeValue(id, withoutSegmentList(stats), max) ??
            encodeError(id, new QueueError('ERR_TOO_LARGE', "The queue's figures do not fit one frame"))
          );
        });
      case 'timings':
        return Promise.resolve().then(
          () =>
            encodeValue(id, this.#server.timings.read(), max) ??
            encodeError(id, new QueueError('ERR_TOO_LARGE', 'The timings do not fit one frame')),
        );
      case 'groups':
        return Promise.resolve().then(() => fitted(id, { ...surface.groups(request.limit) }, 'groups', {}, max));
      case 'schedules':
        return Promise.resolve().then(() => {
          const page = surface.schedules(request.after, request.limit);
          if (page === undefined) return encodeError(id, new QueueError('ERR_UNSUPPORTED', "The queue's store keeps no schedules"));
          return fitted(id, { ...page }, 'schedules', { more: true }, max);
        });
      case 'compact':
        return surface
          .compact()
          .then(
            (result) =>
              encodeValue(id, result, max) ??
              encodeError(id, new QueueError('ERR_TOO_LARGE', "The compaction's result does not fit one frame")),
          );
      case 'deadLetters':
        return surface.listDeadLetters(request.after, request.limit).then((list) => encodeDeadLetterList(id, list, max));
      case 'purge':
        return surface.purge({ seqs: request.seqs, limit: request.limit }).then((count) => encodeValue(id, count, max)!);
      case 'redrive': {
        // Each redriven item's new seq comes back: a selection must not be able to make more than fit.
        const most = Math.floor((max - 4) / 8);
        const can = Math.min(request.seqs?.length ?? Infinity, request.limit ?? Infinity);
        if (can > most)
          return Promise.reject(
            new RangeError(`A redrive through the endpoint takes at most ${most} dead letters at a time, by seqs or limit`),
          );
        return surface.redrive({ seqs: request.seqs, limit: request.limit }).then((seqs) => encodeSeqs(id, seqs));
      }
    }
  }

  /** Count `id` in flight until `result` settles, then send its reply. */
  #track(id: number, controller: Withdrawal | null, bytes: number, result: Promise<unknown>): void {
    this.#pending.set(id, controller);
    this.#pendingBytes += bytes;
    if (!this.#paused && (this.#pendingBytes > this.#server.pendingBytesMax || this.#pending.size >= PENDING_REQUESTS_MAX)) {
      // Backpressure on a client that sends faster than the owner stores: its bytes wait in the kernel.
      this.#paused = true;
      this.#socket.pause();
    }
    result.then(
      (value) => this.#settled(id, bytes, controller === null ? (value as Uint8Array) : encodeSeqs(id, value as number[])),
      (error: unknown) => this.#settled(id, bytes, encodeError(id, error)),
    );
  }

  #settled(id: number, bytes: number, reply: Uint8Array): void {
    this.#pending.delete(id);
    this.#pendingBytes -= bytes;
    if (this.#closed || this.#socket.writableEnded) return;
    this.#send(reply);
    if (this.#paused && this.#pendingBytes <= this.#server.pendingBytesMax / 2 && this.#pending.size < PENDING_REQUESTS_MAX / 2) {
      this.#paused = false;
      this.#socket.resume();
    }
    if (this.#ended && this.#pending.size === 0) this.#outbox.end(this.#socket);
  }

  /** Replies made in one turn go out in one write of one buffer. */
  #send(frame: Uint8Array): void {
    this.#outbox.add(this.#socket, frame);
  }
}

/**
 * What a remote push is withdrawn with (a `cancel`, or its connection cut): the part of an
 * AbortSignal the queue reads (`aborted`, `reason`, `throwIfAborted`, and 'abort' listeners added
 * with `once` and removed). Not an AbortController: one per remote push cost the owner about 3 µs,
 * a sixth of its time per push (measured with bench/experiments/endpoint.mjs), for pushes that
 * are almost never withdrawn.
 */
class Withdrawal {
  aborted = false;
  reason: unknown = undefined;
  #listeners: (() => void)[] | null = null;

  addEventListener(type: 'abort', listener: () => void): void {
    if (type === 'abort' && !this.aborted) (this.#listeners ??= []).push(listener);
  }

  removeEventListener(type: 'abort', listener: () => void): void {
    const listeners = this.#listeners;
    if (type !== 'abort' || listeners === null) return;
    const i = listeners.indexOf(listener);
    if (i >= 0) listeners.splice(i, 1);
  }

  throwIfAborted(): void {
    if (this.aborted) throw this.reason;
  }

  abort(): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = new DOMException('The push was withdrawn', 'AbortError');
    const listeners = this.#listeners ?? [];
    this.#listeners = null;
    for (const listener of listeners) listener();
  }

  get signal(): AbortSignal {
    return this as unknown as AbortSignal;
  }
}

/** The id the queue's diagnostics messages carry (`stats().queueId`). */
function queueIdOf(surface: OwnerSurface): number {
  const id = surface.stats().queueId;
  return typeof id === 'number' ? id : 0;
}

/**
 * `value` as one VALUE frame, with as many entries of its list `key` as fit (halved until they do,
 * `cut` merged in when some were left out), or an ERR_TOO_LARGE error when not even none fit.
 */
function fitted(id: number, value: Record<string, unknown>, key: string, cut: Record<string, unknown>, maxBodyBytes: number): Uint8Array {
  const list = value[key] as unknown[];
  for (let n = list.length; ; n >>= 1) {
    const frame = encodeValue(id, n === list.length ? value : { ...value, [key]: list.slice(0, n), ...cut }, maxBodyBytes);
    if (frame !== null) return frame;
    if (n === 0) return encodeError(id, new QueueError('ERR_TOO_LARGE', `The owner's ${key} do not fit one frame`));
  }
}

function withoutSegmentList(stats: Record<string, unknown>): Record<string, unknown> {
  const store = stats.store as { segments?: unknown[] } | undefined;
  if (store === undefined || !Array.isArray(store.segments)) return stats;
  return { ...stats, store: { ...store, segments: store.segments.length } };
}
