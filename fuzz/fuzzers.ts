/**
 * The fuzzers of the registry (fuzz/run.ts). Each `exec` gets its own seeded PRNG and throws
 * {@link FuzzFailure} when its property breaks.
 * - segment-decoder / cursor-decoder: valid store files (from a real run on the crash disk,
 *   captured after a process crash so that segments have unsealed tails and the cursor holds ACK
 *   records), mutated (bit flips, random bytes, huge length fields, truncation, random tails,
 *   wholly random files), written to a fresh crash disk, then open + read everything + append +
 *   close + verifyStore. Property: only QueueError/OpenError with a code ever escapes; no exec
 *   takes more than `hangMs`; no exec grows `arrayBuffers` by more than 64 MiB (a length field
 *   must be bounded before it sizes an allocation).
 * - engine-crash: the model-based crash program of harness/crash-model.ts, one seed per exec.
 * - canary: the same program on a disk whose fsyncs lie; the checker MUST find a violation.
 * - endpoint-decoder: streams of the endpoint's request frames (FORMAT.md §14) as a client would
 *   send them, mutated (or not), fed to the owner's decoder in random chunks. Property: only
 *   ProtocolError ever escapes; a header whose length breaks its type's bound is refused before
 *   any byte past it is taken (never a body waited for or allocated beyond the bound); an
 *   unmutated stream decodes to exactly the requests that were encoded; no hang, no allocation
 *   past 64 MiB.
 * - endpoint-canary: the same, on a decoder whose bounds are lifted by 1 MiB; the checker MUST
 *   find a frame it took past the bound.
 */
import { LogStore } from '../src/stores/log/log-store.js';
import { verifyStore } from '../src/stores/log/engine/verify.js';
import { QueueError } from '../src/contract/errors.js';
import { CrashFileSystem, Prng } from '../src/testing/index.js';
import { PropertyViolation, randomProgram, readAll, runProgram } from '../harness/crash-model.js';
import {
  FRAME_HEADER_BYTES,
  FrameDecoder,
  type FrameBounds,
  GROUPS_LIMIT_MAX,
  SCHEDULES_LIMIT_MAX,
  ProtocolError,
  REQ_COMPACT,
  REQ_PURGE,
  REQ_REDRIVE,
  REQ_STATS,
  REQ_TIMINGS,
  type Request,
  decodeRequest,
  encodeBare,
  encodeCancel,
  encodeDeadLetters,
  encodeGroups,
  encodeHello,
  encodePush,
  encodeSchedules,
  encodeSelection,
  maxFrameBodyBytes,
  requestBounds,
} from '../src/remote/protocol.js';

export class FuzzFailure extends Error {
  override name = 'FuzzFailure';
}

export interface Fuzzer {
  readonly name: string;
  readonly description: string;
  /** The canary: the runner passes only if an exec failed. */
  readonly mustFail?: boolean;
  exec(prng: Prng): Promise<void>;
}

const DIR = '/s';
const MiB = 1024 * 1024;

// ---------------------------------------------------------------------------------------------
// Decoders

interface Corpus {
  files: Map<string, Uint8Array>;
}

let corpora: Corpus[] | null = null;

/** A few valid stores, each captured after a process crash (unsealed tails, ACK records in the cursor). */
async function buildCorpora(): Promise<Corpus[]> {
  const out: Corpus[] = [];
  for (let variant = 0; variant < 4; variant++) {
    const rnd = new Prng(0xc0ffee + variant);
    let fs = new CrashFileSystem({ seed: variant + 1 });
    const store = await LogStore.open(DIR, {
      fs,
      segmentBytes: 256 + variant * 128,
      cursorCheckpointBytes: variant === 3 ? 64 : 1 << 20,
      preallocate: variant === 2,
      autoCompact: false,
    });
    await store.open();
    let seq = 1;
    const acked = new Set<number>();
    for (let i = 0; i < 12 + variant * 4; i++) {
      const n = 1 + rnd.int(3);
      const items = Array.from({ length: n }, () => ({ seq: seq++, bytes: rnd.bytes(rnd.int(60)) }));
      await store.append(items, rnd.bool(0.7));
      if (rnd.bool(0.5)) {
        const s = 1 + rnd.int(seq - 1);
        if (!acked.has(s)) {
          acked.add(s);
          await store.ack([s], rnd.bool());
        }
      }
    }
    if (variant === 1) await store.compact();
    fs = fs.processCrash();
    const files = new Map<string, Uint8Array>();
    for (const [path, bytes] of fs.snapshot({ pristine: true })) if (path.startsWith(`${DIR}/`)) files.set(path, bytes.slice());
    out.push({ files });
  }
  return out;
}

function mutate(rnd: Prng, bytes: Uint8Array): Uint8Array {
  let b: Uint8Array = bytes.slice();
  const rounds = 1 + rnd.int(4);
  for (let r = 0; r < rounds; r++) {
    const kind = rnd.int(9);
    if (b.length === 0 && kind < 6) continue;
    if (kind === 0)
      b[rnd.int(b.length)]! ^= 1 << rnd.int(8); // bit flip
    else if (kind === 1)
      b[rnd.int(b.length)] = rnd.int(256); // random byte
    else if (kind === 2 && b.length >= 4) {
      // A huge or odd 32-bit field (frame lengths sit 4 bytes into each 20-byte frame header).
      const at = rnd.int(b.length - 3);
      const v = rnd.pick([0xffffffff, 0x7fffffff, 0x10000000, 0x0fffffff, 0x01000000, 0, 1, rnd.next() >>> 0]);
      new DataView(b.buffer, b.byteOffset, b.byteLength).setUint32(at, v, rnd.bool());
    } else if (kind === 3 && b.length >= 2) {
      // A huge 16-bit field (meta lengths, header sizes, versions).
      const at = rnd.int(b.length - 1);
      new DataView(b.buffer, b.byteOffset, b.byteLength).setUint16(at, rnd.pick([0xffff, 0x8000, 0, 2, rnd.int(65536)]), rnd.bool());
    } else if (kind === 4) {
      const at = rnd.int(b.length);
      b.set(rnd.bytes(Math.min(b.length - at, 1 + rnd.int(16))), at); // random run
    } else if (kind === 5) {
      const at = rnd.int(b.length);
      b.fill(0, at, Math.min(b.length, at + 1 + rnd.int(64))); // zero run
    } else if (kind === 6)
      b = b.slice(0, rnd.int(b.length + 1)); // truncate
    else if (kind === 7) {
      const tail = rnd.bool() ? rnd.bytes(rnd.int(128)) : new Uint8Array(rnd.int(128));
      const grown = new Uint8Array(b.length + tail.length);
      grown.set(b);
      grown.set(tail, b.length);
      b = grown;
    } else b = rnd.bytes(rnd.int(512)); // wholly random
  }
  return b;
}

function typed(e: unknown): boolean {
  return e instanceof QueueError && typeof e.code === 'string' && e.code.startsWith('ERR_');
}

async function decoderExec(rnd: Prng, target: 'segment' | 'cursor', hangMs: number): Promise<void> {
  corpora ??= await buildCorpora();
  const corpus = rnd.pick(corpora);
  const fs = new CrashFileSystem({ seed: rnd.next() });
  fs.mkdirp(DIR, 0o700);
  const paths = [...corpus.files.keys()];
  const targets = paths.filter((p) => (target === 'segment' ? p.endsWith('.log') : p.endsWith('.pqc')));
  const victims = new Set<string>();
  if (targets.length > 0) {
    victims.add(rnd.pick(targets));
    if (rnd.bool(0.2)) victims.add(rnd.pick(targets));
  }
  const described: string[] = [];
  for (const path of paths) {
    const bytes = victims.has(path) ? mutate(rnd, corpus.files.get(path)!) : corpus.files.get(path)!;
    if (victims.has(path)) described.push(`${path}(${bytes.length}B)`);
    const fd = fs.open(path, 'create');
    if (bytes.length > 0) fs.write(fd, bytes, 0, bytes.length, 0);
    fs.close(fd);
  }
  fs.syncAll();
  const heapBefore = process.memoryUsage().arrayBuffers;
  const started = performance.now();
  const step = (what: string, e: unknown): void => {
    if (!typed(e))
      throw new FuzzFailure(`${what} threw an untyped exception on mutated ${described.join(', ')}: ${(e as Error)?.stack ?? String(e)}`);
  };
  let store: LogStore | null = null;
  try {
    store = await LogStore.open(DIR, { fs, readAheadBytes: 64 + rnd.int(512) });
  } catch (e) {
    step('LogStore.open', e);
  }
  if (store !== null) {
    try {
      const r = await store.open();
      const got = readAll(store);
      if (got.length > r.count) throw new FuzzFailure(`read returned ${got.length} items but count is ${r.count}`);
      await store.append([{ seq: r.nextSeq, bytes: new Uint8Array([1, 2, 3]) }], true);
      await store.compact();
    } catch (e) {
      if (e instanceof FuzzFailure) throw e;
      step('open/read/append/compact', e);
    }
    try {
      await store.close();
    } catch (e) {
      step('close', e);
    }
  }
  try {
    verifyStore(DIR, { fs });
  } catch (e) {
    step('verifyStore', e);
  }
  const elapsedMs = performance.now() - started;
  if (elapsedMs > hangMs)
    throw new FuzzFailure(`one exec took ${elapsedMs.toFixed(0)} ms (> ${hangMs} ms): a hang on ${described.join(', ')}`);
  const grown = process.memoryUsage().arrayBuffers - heapBefore;
  if (grown > 64 * MiB)
    throw new FuzzFailure(
      `arrayBuffers grew by ${(grown / MiB).toFixed(0)} MiB in one exec: an allocation sized by a length field (${described.join(', ')})`,
    );
}

// ---------------------------------------------------------------------------------------------
// Whole engine

/** A disk whose file syncs resolve without syncing: what the canary runs on. */
function lying(fs: CrashFileSystem): CrashFileSystem {
  return new Proxy(fs, {
    get(target, key) {
      if (key === 'fdatasync' || key === 'fsync') return () => Promise.resolve();
      if (key === 'crash') return (...a: unknown[]) => lying((target.crash as (...x: unknown[]) => CrashFileSystem)(...a));
      if (key === 'processCrash') return () => lying(target.processCrash());
      const v = Reflect.get(target, key, target) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}

async function engineExec(rnd: Prng, lie: boolean): Promise<void> {
  const program = randomProgram(rnd, 20 + rnd.int(60));
  try {
    await runProgram(program, lie ? { wrapDisk: lying } : {});
  } catch (e) {
    if (e instanceof PropertyViolation) throw new FuzzFailure(e.message);
    throw e;
  }
}

// ---------------------------------------------------------------------------------------------
// The endpoint's decoder

/** A random request a client could send, and the frame that carries it. */
function randomRequest(rnd: Prng, id: number, maxItemBytes: number): { frame: Uint8Array; request: Request } {
  const kind = rnd.int(9);
  if (kind <= 2) {
    const count = 1 + rnd.int(kind === 0 ? 1 : 8);
    const keyed = rnd.bool(0.3);
    const payloads = Array.from({ length: count }, () => rnd.bytes(rnd.bool(0.1) ? maxItemBytes : rnd.int(Math.min(maxItemBytes, 96) + 1)));
    const keys = keyed ? Array.from({ length: count }, (_, i) => `k${rnd.int(1000)}-${i}${'x'.repeat(rnd.int(40))}`) : undefined;
    const priority = rnd.bool(0.7) ? 0 : rnd.int(256) - 128;
    const notBefore = rnd.bool(0.7) ? 0 : rnd.int(2 ** 32) * 1024;
    const frame = encodePush(id, { payloads, priority, notBefore, keys: keys?.map((k) => new TextEncoder().encode(k)) });
    return { frame, request: { type: 'push', id, payloads, priority, notBefore, keys } };
  }
  if (kind === 3) {
    const target = rnd.next();
    return { frame: encodeCancel(id, target), request: { type: 'cancel', id, target } };
  }
  if (kind === 4) {
    const type = (['stats', 'compact', 'timings'] as const)[rnd.int(3)]!;
    return { frame: encodeBare(type === 'stats' ? REQ_STATS : type === 'compact' ? REQ_COMPACT : REQ_TIMINGS, id), request: { type, id } };
  }
  if (kind === 5) {
    const after = rnd.int(2 ** 32);
    const limit = 1 + rnd.int(1000);
    return { frame: encodeDeadLetters(id, after, limit), request: { type: 'deadLetters', id, after, limit } };
  }
  if (kind === 7) {
    const limit = 1 + rnd.int(GROUPS_LIMIT_MAX);
    return { frame: encodeGroups(id, limit), request: { type: 'groups', id, limit } };
  }
  if (kind === 8) {
    const limit = 1 + rnd.int(SCHEDULES_LIMIT_MAX);
    // A name of up to 128 UTF-8 bytes, some of them beyond ASCII.
    const after = Array.from({ length: rnd.int(40) }, () => (rnd.bool(0.2) ? 'é' : String.fromCharCode(0x61 + rnd.int(26)))).join('');
    return { frame: encodeSchedules(id, new TextEncoder().encode(after), limit), request: { type: 'schedules', id, after, limit } };
  }
  const type = rnd.bool() ? 'redrive' : 'purge';
  const seqs = rnd.bool() ? Array.from({ length: rnd.int(20) }, () => 1 + rnd.int(2 ** 32)) : undefined;
  const limit = rnd.bool() ? 1 + rnd.int(1000) : undefined;
  return { frame: encodeSelection(type === 'redrive' ? REQ_REDRIVE : REQ_PURGE, id, { seqs, limit }), request: { type, id, seqs, limit } };
}

function concatBytes(parts: readonly Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/**
 * Where a decoder with `bounds` must have refused `stream` at the latest: the end of the first
 * header whose type or length breaks them, walking frame by frame; null when every header is in
 * bounds (an error inside a body may still come earlier).
 */
function firstBadHeaderEnd(stream: Uint8Array, bounds: FrameBounds): number | null {
  const view = new DataView(stream.buffer, stream.byteOffset, stream.byteLength);
  let at = 0;
  while (stream.length - at >= FRAME_HEADER_BYTES) {
    const length = view.getUint32(at, true);
    const range = bounds.get(stream[at + 4]!);
    if (range === undefined || length < range[0] || length > range[1]) return at + FRAME_HEADER_BYTES;
    at += FRAME_HEADER_BYTES + length;
  }
  return null;
}

async function endpointExec(rnd: Prng, liftBounds: boolean): Promise<void> {
  const maxItemBytes = rnd.pick([16, 100, 1024, 4096]);
  const bounds = requestBounds(maxItemBytes);
  const frames: Uint8Array[] = [encodeHello(0)];
  const expected: Request[] = [{ type: 'hello', id: 0, version: 1 }];
  for (let i = 0, n = 1 + rnd.int(12); i < n; i++) {
    const { frame, request } = randomRequest(rnd, 1 + i, maxItemBytes);
    frames.push(frame);
    expected.push(request);
  }
  let stream = concatBytes(frames);
  const how = rnd.int(4);
  let described = 'unmutated';
  if (how === 1) {
    stream = mutate(rnd, stream);
    described = 'mutated';
  } else if (how === 2) {
    // A header's length just past its type's bound: the boundary a lax check lets through.
    let at = 0;
    const victim = rnd.int(frames.length);
    for (let i = 0; i < victim; i++) at += frames[i]!.length;
    const max = bounds.get(stream[at + 4]!)![1];
    new DataView(stream.buffer).setUint32(at, max + 1 + rnd.int(64 * 1024), true);
    described = `frame ${victim} over its bound`;
  } else if (how === 3) {
    stream = stream.slice(0, rnd.int(stream.length));
    described = 'truncated';
  }
  const decoderBounds: FrameBounds = liftBounds
    ? new Map([...bounds].map(([t, [lo, hi]]) => [t, [lo, hi + 1024 * 1024] as const]))
    : bounds;
  const decoder = new FrameDecoder(decoderBounds);
  const got: Request[] = [];
  const mustFailBy = firstBadHeaderEnd(stream, bounds);
  const heapBefore = process.memoryUsage().arrayBuffers;
  const started = performance.now();
  let failedInChunkAt: number | null = null;
  let at = 0;
  while (at < stream.length) {
    const end = Math.min(stream.length, at + 1 + rnd.int(rnd.bool() ? 16 : 4096));
    try {
      decoder.feed(stream.subarray(at, end), (frame) => {
        if (frame.body.length > maxFrameBodyBytes(maxItemBytes))
          throw new FuzzFailure(`a frame body of ${frame.body.length} bytes was handed out (${described})`);
        got.push(decodeRequest(frame));
      });
    } catch (e) {
      if (e instanceof FuzzFailure) throw e;
      if (!(e instanceof ProtocolError))
        throw new FuzzFailure(`the decoder threw an untyped exception on a ${described} stream: ${(e as Error)?.stack ?? String(e)}`);
      failedInChunkAt = at;
      break;
    }
    at = end;
  }
  if (mustFailBy !== null && (failedInChunkAt === null || failedInChunkAt >= mustFailBy)) {
    throw new FuzzFailure(
      `a header over its bound (ending at byte ${mustFailBy}) was taken: the decoder ${failedInChunkAt === null ? 'never refused the stream' : `refused it only at byte ${failedInChunkAt}`} (${described})`,
    );
  }
  if (how === 0) {
    if (failedInChunkAt !== null || decoder.partial) throw new FuzzFailure('an unmutated stream was refused');
    const same =
      JSON.stringify(got, (_, v: unknown) => (v instanceof Uint8Array ? [...v] : v)) ===
      JSON.stringify(expected, (_, v: unknown) => (v instanceof Uint8Array ? [...v] : v));
    if (!same) throw new FuzzFailure('an unmutated stream decoded to other requests than were encoded');
  }
  const elapsedMs = performance.now() - started;
  if (elapsedMs > 2000) throw new FuzzFailure(`one exec took ${elapsedMs.toFixed(0)} ms: a hang on a ${described} stream`);
  const grown = process.memoryUsage().arrayBuffers - heapBefore;
  if (grown > 64 * MiB) throw new FuzzFailure(`arrayBuffers grew by ${(grown / MiB).toFixed(0)} MiB in one exec (${described})`);
}

export const FUZZERS: readonly Fuzzer[] = [
  {
    name: 'segment-decoder',
    description: 'mutated segment files: open/read/append/compact/verify throw only typed errors, never hang or over-allocate',
    exec: (rnd) => decoderExec(rnd, 'segment', 2000),
  },
  {
    name: 'cursor-decoder',
    description: 'mutated cursor files: open/read/append/compact/verify throw only typed errors, never hang or over-allocate',
    exec: (rnd) => decoderExec(rnd, 'cursor', 2000),
  },
  {
    name: 'engine-crash',
    description: 'model-based crash programs (harness/crash-model.ts) over the real queue on the crash disk',
    exec: (rnd) => engineExec(rnd, false),
  },
  {
    name: 'canary',
    description: 'engine-crash on a disk whose fsyncs lie: the checker MUST report a violation',
    mustFail: true,
    exec: (rnd) => engineExec(rnd, true),
  },
  {
    name: 'endpoint-decoder',
    description: "mutated streams of the endpoint's request frames: only ProtocolError escapes, bounds hold before allocation",
    exec: (rnd) => endpointExec(rnd, false),
  },
  {
    name: 'endpoint-canary',
    description: 'endpoint-decoder on a decoder whose bounds are lifted: the checker MUST find a frame taken past its bound',
    mustFail: true,
    exec: (rnd) => endpointExec(rnd, true),
  },
];
