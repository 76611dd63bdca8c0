/**
 * Codecs: how a typed queue (`Builder.codec`) turns values into the bytes the store keeps and
 * back. The core only ever sees bytes; a codec runs at the two ends, in `push` and before an item
 * is handed to the consumer. Validation goes through any Standard Schema validator (zod, valibot,
 * arktype, ...), through the spec's types alone: no validator is a dependency.
 */
import { deserialize, serialize } from 'node:v8';
import { QueueError } from '../contract/errors.js';
import { expectation } from './validate.js';

/**
 * Turns values into bytes and back. `encode` may return a string (stored as UTF-8). Either may
 * throw: a push whose value fails to encode rejects and stores nothing; an item that fails to
 * decode is never handed to the consumer, it is moved into the dead-letter queue with the reason.
 */
export interface Codec<T> {
  /** Shown in errors and dead-letter reasons. */
  readonly name: string;
  encode(value: T): Uint8Array | string;
  decode(bytes: Uint8Array): T;
}

/** The value type of a codec. */
export type CodecValue<C> = C extends Codec<infer T> ? T : never;

// ---- Standard Schema v1 (https://standardschema.dev): the types only, as the spec asks. ----

/** One problem a validator found. */
export interface StandardSchemaIssue {
  readonly message: string;
  readonly path?: ReadonlyArray<PropertyKey | { readonly key: PropertyKey }> | undefined;
}

/** The result of a Standard Schema validation. */
export type StandardSchemaResult<Output> =
  | { readonly value: Output; readonly issues?: undefined }
  | { readonly issues: ReadonlyArray<StandardSchemaIssue> };

/** A validator that implements Standard Schema v1. */
export interface StandardSchemaV1<Input = unknown, Output = Input> {
  readonly '~standard': {
    readonly version: 1;
    readonly vendor: string;
    readonly validate: (value: unknown) => StandardSchemaResult<Output> | Promise<StandardSchemaResult<Output>>;
    readonly types?: { readonly input: Input; readonly output: Output } | undefined;
  };
}

/**
 * A schema that answered with a promise: a mistake in the queue's setup, not in one payload, so
 * it fails the reserve instead of moving every item into the dead letters. @internal
 */
export class AsyncSchemaError extends TypeError {}

/** The output type of a Standard Schema validator. */
export type SchemaOutput<S> = S extends StandardSchemaV1<unknown, infer O> ? O : never;

const strictDecoder = new TextDecoder('utf-8', { fatal: true });

/** The payloads as they are: a `Uint8Array` (strings pushed are stored as UTF-8). The default. */
export function bytes(): Codec<Uint8Array> {
  return RAW;
}

const RAW: Codec<Uint8Array> = Object.freeze({
  name: 'bytes',
  encode: (value: Uint8Array) => value,
  decode: (b: Uint8Array) => b,
});

/** UTF-8 text. A payload that is not valid UTF-8 fails to decode (it is never mangled). */
export function text(): Codec<string> {
  return TEXT;
}

const TEXT: Codec<string> = Object.freeze({
  name: 'text',
  encode: (value: string) => {
    if (typeof value !== 'string') throw new TypeError(expectation('value', 'a string', value));
    return value;
  },
  decode: (b: Uint8Array) => strictDecoder.decode(b),
});

/**
 * JSON in UTF-8. `undefined`, functions and symbols do not encode (the push rejects); a BigInt
 * does not either. With a `schema`, every value is validated when pushed and again when read: the
 * value type is the schema's output.
 */
export function json<S extends StandardSchemaV1>(schema: S): Codec<SchemaOutput<S>>;
export function json<T = unknown>(): Codec<T>;
export function json(schema?: StandardSchemaV1): Codec<unknown> {
  const codec: Codec<unknown> = {
    name: 'json',
    encode: (value: unknown) => {
      const out = JSON.stringify(value);
      // JSON.stringify answers undefined for undefined, functions and symbols: nothing to store.
      if (out === undefined) throw new TypeError(expectation('value', 'a value JSON can encode', value));
      return out;
    },
    decode: (b: Uint8Array) => JSON.parse(strictDecoder.decode(b)) as unknown,
  };
  return schema === undefined ? codec : validated(codec, schema);
}

/**
 * The structured clone format of `node:v8` (`serialize`/`deserialize`): Dates, Maps, Sets,
 * typed arrays, BigInts and cycles survive, functions and class identity do not. Node-only, and
 * the format is V8's own: a store written by one Node version is read by the same or a newer one.
 */
export function structured<S extends StandardSchemaV1>(schema: S): Codec<SchemaOutput<S>>;
export function structured<T = unknown>(): Codec<T>;
export function structured(schema?: StandardSchemaV1): Codec<unknown> {
  const codec: Codec<unknown> = {
    name: 'structured',
    encode: (value: unknown) => serialize(value),
    decode: (b: Uint8Array) => deserialize(b) as unknown,
  };
  return schema === undefined ? codec : validated(codec, schema);
}

/**
 * `codec`, with every value validated by `schema` when pushed and when read. The validation must
 * answer synchronously (a schema with async refinements is refused when it answers a promise).
 */
export function validated<S extends StandardSchemaV1>(codec: Codec<unknown>, schema: S): Codec<SchemaOutput<S>> {
  checkCodec(codec);
  const std = (schema as Partial<StandardSchemaV1> | null)?.['~standard'];
  if (std === undefined || std === null || typeof std.validate !== 'function' || std.version !== 1) {
    throw new TypeError(expectation('schema', 'a Standard Schema v1 validator (zod, valibot, arktype, ...)', schema));
  }
  const check = (value: unknown): SchemaOutput<S> => {
    const result = std.validate(value);
    if (result instanceof Promise) {
      // Nobody waits for it: keep its rejection from going unhandled.
      result.catch(() => {});
      throw new AsyncSchemaError(`The ${std.vendor} schema answered asynchronously; a queue's schema must validate synchronously`);
    }
    if (result.issues !== undefined) throw new QueueError('ERR_INVALID', `Invalid value: ${issuesText(result.issues)}`);
    return result.value as SchemaOutput<S>;
  };
  return {
    name: `${codec.name}+${std.vendor}`,
    encode: (value: SchemaOutput<S>) => codec.encode(check(value)),
    decode: (b: Uint8Array) => check(codec.decode(b)),
  };
}

/** The issues of a failed validation, on one line. */
function issuesText(issues: ReadonlyArray<StandardSchemaIssue>): string {
  return issues
    .slice(0, 8)
    .map((issue) => {
      const path = issue.path?.map((p) => String(typeof p === 'object' ? p.key : p)).join('.');
      return path ? `${path}: ${issue.message}` : issue.message;
    })
    .join('; ')
    .concat(issues.length > 8 ? `; and ${issues.length - 8} more` : '');
}

/** Validate a codec given to the builder. */
export function checkCodec<T>(codec: Codec<T>): Codec<T> {
  const c = codec as Partial<Codec<T>> | null;
  if (c === null || typeof c !== 'object' || typeof c.encode !== 'function' || typeof c.decode !== 'function') {
    throw new TypeError(expectation('codec', 'an object with encode(value) and decode(bytes)', codec));
  }
  return { name: typeof c.name === 'string' && c.name !== '' ? c.name : 'custom', encode: c.encode.bind(c), decode: c.decode.bind(c) };
}

/** True for the default codec, whose values are the payload bytes themselves. */
export function isRaw(codec: Codec<unknown>): boolean {
  return codec === RAW;
}

/**
 * Why `codec` could not decode a payload, from what its `decode` threw. An AsyncSchemaError is
 * thrown on: it is a mistake in the queue's setup, not in the payload. @internal
 */
export function decodeFailure(codec: Codec<unknown>, error: unknown): string {
  if (error instanceof AsyncSchemaError) throw error;
  const message = (error as Error)?.message ?? String(error);
  return error instanceof QueueError && error.code === 'ERR_INVALID'
    ? `${codec.name}: ${message}`
    : `${codec.name} could not decode the payload: ${message}`;
}

/** The bytes `value` encodes to, or the error the push rejects with (nothing is stored then). */
export function encodeValue<T>(codec: Codec<T>, value: T): Uint8Array | string | QueueError {
  try {
    const out = codec.encode(value);
    if (typeof out === 'string' || out instanceof Uint8Array) return out;
    return new QueueError('ERR_ENCODE', `The ${codec.name} codec's encode() returned ${typeof out}, not a Uint8Array or a string`);
  } catch (error) {
    if (error instanceof QueueError) return error;
    return new QueueError(
      'ERR_ENCODE',
      `The ${codec.name} codec could not encode the value: ${(error as Error)?.message ?? String(error)}`,
      { cause: error },
    );
  }
}
