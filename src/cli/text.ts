/** How `pq` shows numbers, sizes, items and colours. */

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

/** One item as one output line. jsonl keeps UTF-8 payloads readable and base64-encodes the rest. */
export function showItem(format: Format, seq: number, bytes: Uint8Array, deliveries?: number): string {
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (format === 'text') return buf.toString('utf8');
  if (format === 'hex') return `${seq}\t${buf.toString('hex')}`;
  const text = buf.toString('utf8');
  const utf8 = Buffer.from(text, 'utf8').equals(buf);
  return JSON.stringify({
    seq,
    bytes: buf.length,
    ...(deliveries !== undefined ? { deliveries } : {}),
    ...(utf8 ? { text } : { base64: buf.toString('base64') }),
  });
}
