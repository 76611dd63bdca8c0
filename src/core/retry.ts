// The retry policy `process()` applies when a handler fails: how long a failed item waits before
// it is ready again. Pure functions of (deliveries, error); the waiting itself is delayed.ts's.
import { expectation, knownKeys, optionsObject } from '../lib/validate.js';
import type { NackOptions } from '../api/types.js';

/** Why a handler failed: what it threw, or the `TimeoutError` of `timeoutMs`. */
export type RetryDelayFunction = (deliveries: number, error: unknown) => number;

/**
 * `min(maxMs, baseMs × factor^(deliveries − 1))`, then shortened by up to `jitter` of itself at
 * random, so that items that failed together do not come back together.
 */
export interface ExponentialRetry {
  kind: 'exponential';
  /** The delay after the first failed delivery, before jitter. @default 100 */
  baseMs?: number;
  /** The longest delay, before jitter. @default 30000 */
  maxMs?: number;
  /** Growth per failed delivery, at least 1. @default 2 */
  factor?: number;
  /** The share of the delay taken off at random, from 0 (none) to 1 (anything down to 0). @default 0.5 */
  jitter?: number;
  /** Where the jitter comes from: a function returning numbers in [0, 1). @default Math.random */
  random?: () => number;
}

/** The same delay after every failure. */
export interface FixedRetry {
  kind: 'fixed';
  delayMs: number;
}

/** Any function of the deliveries so far (the failed one included) and the error. */
export interface CustomRetry {
  kind: 'custom';
  /** Returns the delay in ms: a finite number, 0 or more. */
  delayMs: RetryDelayFunction;
}

/** How `process()` retries an item whose handler threw or timed out (`Builder.retry`). */
export type RetryPolicy = ExponentialRetry | FixedRetry | CustomRetry;

/** What `Builder.retry` takes: a policy object, or its custom delay function alone. */
export type RetryPolicyInput = RetryPolicy | RetryDelayFunction;

/** The default policy: exponential from 100 ms, doubling, at most 30 s, half of it jittered. */
export const DEFAULT_RETRY: Readonly<Required<Omit<ExponentialRetry, 'random'>>> = Object.freeze({
  kind: 'exponential',
  baseMs: 100,
  maxMs: 30_000,
  factor: 2,
  jitter: 0.5,
});

/** A finite number, 0 or more (a delay in ms). */
export function delayMs(name: string, value: unknown): number {
  if (typeof value !== 'number') throw new TypeError(expectation(name, 'a finite number of ms, 0 or more', value));
  if (!Number.isFinite(value) || value < 0) throw new RangeError(expectation(name, 'a finite number of ms, 0 or more', value));
  return value;
}

/** The delay `nack(options)` asks for, in ms (0: none); throws on options it does not take. */
export function nackDelay(options: NackOptions | undefined): number {
  const o = optionsObject('options', options);
  knownKeys('options', o, ['delayMs']);
  return o.delayMs === undefined ? 0 : delayMs('options.delayMs', o.delayMs);
}

function numberIn(name: string, value: unknown, fallback: number, min: number, max: number, what: string): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number') throw new TypeError(expectation(name, what, value));
  if (!Number.isFinite(value) || value < min || value > max) throw new RangeError(expectation(name, what, value));
  return value;
}

function exponential(o: Record<string, unknown>): RetryDelayFunction {
  knownKeys('retry', o, ['kind', 'baseMs', 'maxMs', 'factor', 'jitter', 'random']);
  const d = DEFAULT_RETRY;
  const baseMs = numberIn('retry.baseMs', o.baseMs, d.baseMs, 0, Number.MAX_VALUE, 'a finite number of ms, 0 or more');
  const maxMs = numberIn(
    'retry.maxMs',
    o.maxMs,
    Math.max(d.maxMs, baseMs),
    baseMs,
    Number.MAX_VALUE,
    `a finite number of ms, at least baseMs (${baseMs})`,
  );
  const factor = numberIn('retry.factor', o.factor, d.factor, 1, Number.MAX_VALUE, 'a finite number, at least 1');
  const jitter = numberIn('retry.jitter', o.jitter, d.jitter, 0, 1, 'a number from 0 to 1');
  if (o.random !== undefined && typeof o.random !== 'function') throw new TypeError(expectation('retry.random', 'a function', o.random));
  const random = (o.random as (() => number) | undefined) ?? Math.random;
  return (deliveries) => {
    // factor ** n overflows to Infinity for large n, and min() then gives maxMs.
    const nominal = Math.min(maxMs, baseMs * factor ** Math.max(0, deliveries - 1));
    if (jitter === 0) return nominal;
    const r = random();
    // A random source outside [0, 1) would make a negative or longer delay: clamp it.
    return nominal * (1 - jitter * Math.min(1, Math.max(0, Number.isFinite(r) ? r : 0)));
  };
}

/** Validate a policy and turn it into its delay function. Throws TypeError/RangeError. */
export function retryDelays(input: unknown): RetryDelayFunction {
  if (typeof input === 'function') return custom(input as RetryDelayFunction);
  const o = optionsObject('retry', input === undefined ? null : input);
  const kind = o.kind;
  if (typeof kind !== 'string') throw new TypeError(expectation('retry.kind', "'exponential', 'fixed' or 'custom'", kind));
  switch (kind) {
    case 'exponential':
      return exponential(o);
    case 'fixed': {
      knownKeys('retry', o, ['kind', 'delayMs']);
      const fixed = delayMs('retry.delayMs', o.delayMs);
      return () => fixed;
    }
    case 'custom':
      knownKeys('retry', o, ['kind', 'delayMs']);
      if (typeof o.delayMs !== 'function')
        throw new TypeError(expectation('retry.delayMs', 'a function (deliveries, error) => ms', o.delayMs));
      return custom(o.delayMs as RetryDelayFunction);
    default:
      throw new RangeError(expectation('retry.kind', "'exponential', 'fixed' or 'custom'", kind));
  }
}

/** A custom function's answer is checked at each failure: a bad one is a programmer error. */
function custom(fn: RetryDelayFunction): RetryDelayFunction {
  return (deliveries, error) => delayMs('the delay returned by the retry function', fn(deliveries, error));
}

/** The delay function of the default policy. */
export const defaultRetryDelays: RetryDelayFunction = exponential({ ...DEFAULT_RETRY });
