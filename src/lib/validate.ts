/**
 * Argument checks shared by every public entry point. One message template:
 * Expected `name` to be <what>, got `<value>` (<type>).
 */

function describe(value: unknown): string {
  let shown: string;
  if (typeof value === 'string') shown = JSON.stringify(value).slice(0, 60);
  else if (typeof value === 'bigint') shown = `${value}n`;
  else if (typeof value === 'function') shown = value.name || 'function';
  else if (value === null || typeof value !== 'object') shown = String(value);
  else shown = Array.isArray(value) ? 'array' : Object.prototype.toString.call(value);
  return `\`${shown}\` (${value === null ? 'null' : typeof value})`;
}

export function expectation(name: string, what: string, value: unknown): string {
  return `Expected \`${name}\` to be ${what}, got ${describe(value)}`;
}

/** A positive safe integer, or Infinity when `allowInfinity`. */
export function positiveInteger(name: string, value: unknown, allowInfinity = false): number {
  if (typeof value !== 'number') throw new TypeError(expectation(name, 'a positive integer', value));
  if (allowInfinity && value === Infinity) return value;
  if (!Number.isSafeInteger(value) || value <= 0) throw new RangeError(expectation(name, 'a positive integer', value));
  return value;
}

/** A non-negative safe integer. */
export function nonNegativeInteger(name: string, value: unknown): number {
  if (typeof value !== 'number') throw new TypeError(expectation(name, 'a non-negative integer', value));
  if (!Number.isSafeInteger(value) || value < 0) throw new RangeError(expectation(name, 'a non-negative integer', value));
  return value;
}

const NO_OPTIONS: Record<string, unknown> = Object.freeze({});

export function optionsObject(name: string, value: unknown): Record<string, unknown> {
  if (value === undefined) return NO_OPTIONS;
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new TypeError(expectation(name, 'an object', value));
  }
  return value as Record<string, unknown>;
}

export function optionalSignal(name: string, value: unknown): AbortSignal | undefined {
  if (value === undefined) return undefined;
  if (!(value instanceof AbortSignal)) throw new TypeError(expectation(name, 'an AbortSignal', value));
  return value;
}

export function nonEmptyString(name: string, value: unknown): string {
  if (typeof value !== 'string') throw new TypeError(expectation(name, 'a non-empty string', value));
  if (value.length === 0) throw new RangeError(expectation(name, 'a non-empty string', value));
  return value;
}

/**
 * Refuse option names outside `known`: a misspelt option (`segmentByte`) would otherwise be
 * ignored silently and the store would run with the default.
 */
export function knownKeys(name: string, options: Record<string, unknown>, known: readonly string[]): void {
  // Checked without allocating when every key is known: push options are checked on every push.
  let allKnown = true;
  for (const k in options) {
    if (Object.hasOwn(options, k) && !known.includes(k)) {
      allKnown = false;
      break;
    }
  }
  if (allKnown) return;
  const unknown = Object.keys(options).filter((k) => !known.includes(k));
  if (unknown.length > 0) {
    throw new TypeError(
      `Unknown ${unknown.length === 1 ? 'option' : 'options'} in \`${name}\`: ${unknown.map((k) => `\`${k}\``).join(', ')} (known: ${known.join(', ')})`,
    );
  }
}

/** `value` as a payload size limit: a positive integer up to `cap`, or `fallback` when missing. */
export function maxBytesOption(name: string, value: unknown, fallback: number, cap: number): number {
  if (value === undefined) return fallback;
  const n = positiveInteger(name, value);
  if (n > cap) throw new RangeError(expectation(name, `a positive integer of at most ${cap}`, n));
  return n;
}
