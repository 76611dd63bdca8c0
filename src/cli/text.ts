/** How `pq` shows numbers, sizes, items and colours. */
import { json } from '../lib/codec.js';

/** Colours only on a terminal, and never when NO_COLOR is set to anything but the empty string. */
const useColor = process.stdout.isTTY === true && !('NO_COLOR' in process.env && process.env.NO_COLOR !== '');
const paint = (code: number) => (text: string) => (useColor ? `\x1b[${code}m${text}\x1b[0m` : text);
export const green = paint(32);
export const red = paint(31);
export const bold = paint(1);
export const dim = paint(2);

export function fmt(n: number): string {
  return Math.round(n).toLocaleString('en-US');
}

export function bytesText(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

export type Format = 'jsonl' | 'text' | 'hex';

function bufferOf(bytes: Uint8Array): Buffer {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/**
 * The codec a queue was written with, as `--codec` names it. A store does not record its codec
 * (payloads are bytes to it), so the user says; only `json` changes what is shown.
 */
export type PayloadCodec = 'bytes' | 'text' | 'json';

export const PAYLOAD_CODECS: readonly PayloadCodec[] = ['bytes', 'text', 'json'];

const JSON_CODEC = json();

/**
 * A payload as JSON shows it: with the `json` codec, `{ json }`, the value a consumer of the queue
 * gets (decoded as `json()` decodes it); otherwise, and for a payload that does not decode,
 * `{ text }` when it is valid UTF-8, `{ base64 }` otherwise.
 */
export function payloadFields(bytes: Uint8Array, codec: PayloadCodec = 'bytes'): { json: unknown } | { text: string } | { base64: string } {
  if (codec === 'json') {
    try {
      return { json: JSON_CODEC.decode(bytes) };
    } catch {
      // Not JSON (a dead letter that failed to decode, an item pushed by other means): shown as bytes.
    }
  }
  const buf = bufferOf(bytes);
  const text = buf.toString('utf8');
  return Buffer.from(text, 'utf8').equals(buf) ? { text } : { base64: buf.toString('base64') };
}

/** One item as one output line. jsonl keeps UTF-8 payloads readable and base64-encodes the rest. */
export function showItem(format: Format, item: ShownItem, deliveries?: number, codec: PayloadCodec = 'bytes'): string {
  const buf = bufferOf(item.bytes);
  if (format === 'text') return buf.toString('utf8');
  if (format === 'hex') return `${item.seq}\t${buf.toString('hex')}`;
  const notBefore = item.notBefore ?? 0;
  return JSON.stringify({
    seq: item.seq,
    bytes: buf.length,
    priority: item.priority ?? 0,
    // ISO 8601 in UTC, null when the item has no not-before time.
    notBefore: notBefore === 0 ? null : new Date(notBefore).toISOString(),
    ...(deliveries !== undefined ? { deliveries } : {}),
    ...payloadFields(item.bytes, codec),
  });
}

/** What `showItem` shows of an item. */
export interface ShownItem {
  readonly seq: number;
  readonly bytes: Uint8Array;
  readonly priority?: number;
  readonly notBefore?: number;
}

/**
 * Characters JSON leaves as they are but a terminal acts on or that make a line read as something
 * else: DEL and the C1 controls (0x9b starts an escape sequence on many terminals), line and
 * paragraph separators, and the marks that reorder text (bidirectional overrides and isolates).
 */
const TERMINAL_ACTIVE = /[\u007f-\u009f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]/g;

/**
 * A string quoted so that a terminal shows it on one line and as it is: a JSON string literal
 * (so it reads back with JSON.parse) that also escapes {@link TERMINAL_ACTIVE}.
 */
export function quoted(s: string): string {
  return terminalSafe(JSON.stringify(s));
}

/**
 * JSON text (one line: JSON.stringify escapes the C0 controls) with {@link TERMINAL_ACTIVE}
 * escaped too; those characters can only stand inside its strings, so it stays the same JSON.
 */
export function terminalSafe(jsonText: string): string {
  return jsonText.replace(TERMINAL_ACTIVE, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** Milliseconds since the Unix epoch as ISO 8601 UTC; 0 (not known) as null. */
export function isoTime(ms: number): string | null {
  return ms === 0 ? null : new Date(ms).toISOString();
}

/** `seq 2`, `seqs 2..4, 7`: at most `limit` ranges, then how many more. */
export function seqRangesText(ranges: readonly { first: number; last: number }[], limit = 8): string {
  const count = ranges.reduce((n, r) => n + r.last - r.first + 1, 0);
  const shown = ranges.slice(0, limit).map((r) => (r.first === r.last ? String(r.first) : `${r.first}..${r.last}`));
  const more = ranges.length > limit ? `, and ${ranges.length - limit} more range(s)` : '';
  return `${count === 1 ? 'seq' : 'seqs'} ${shown.join(', ')}${more}`;
}

/** Where a damaged range lies and what it cost, for `verify` and `salvage`. */
export function damageText(d: {
  offset: number;
  end?: number | undefined;
  lostSeqs?: readonly { first: number; last: number }[] | undefined;
}): string {
  const parts: string[] = [];
  if (d.end !== undefined && d.end > d.offset) parts.push(`bytes ${d.offset}..${d.end - 1} damaged`);
  if (d.lostSeqs !== undefined) parts.push(d.lostSeqs.length === 0 ? 'no unacked item lost' : `lost ${seqRangesText(d.lostSeqs)}`);
  return parts.join('; ');
}

/** `verifying [######........] 1.2 MiB / 4.0 MiB`: a progress line over bytes. */
export function progressBar(label: string, done: number, total: number): string {
  const width = 30;
  const filled = total === 0 ? width : Math.min(width, Math.round((done / total) * width));
  return `${label} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${bytesText(done)} / ${bytesText(total)}`;
}
