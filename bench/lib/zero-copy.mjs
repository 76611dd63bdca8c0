// Zero-copy reads beside copied reads (section `zerocopy` of bench/run.mjs). A LogStore backlog
// is written, the store is opened again (so every item is read from the segments, none from the
// tail cache), and a consumer drains it: `tryReserve()` (or `await reserve()` when nothing is read
// ahead) and `ackMany` every 256 items, under `durability('none')` so the read path, not fsync,
// is what is timed. Each round runs every cell on a fresh store, the order rotated; a ratio is
// taken within a round, zero-copy against copy at the same payload size. Bytes copied per
// delivery are counted by wrapping the arena's copy (the one place payloads are copied in user
// space) during the drain.
import { mkdtempSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { ByteArena } from '../../dist/lib/bytes.js';
import { Builder, LogStore } from '../../dist/index.js';

/** [id, payload bytes, zeroCopyReads] */
export const ZERO_COPY_CELLS = [
  ['128/copy', 128, false],
  ['128/zero-copy', 128, true],
  ['16384/copy', 16384, false],
  ['16384/zero-copy', 16384, true],
];

async function fill(dir, payloadBytes, totalBytes) {
  const [tx, rx] = await new Builder(await LogStore.open(dir)).durability('none').open();
  const payload = new Uint8Array(payloadBytes).fill(7);
  const count = Math.max(256, Math.floor(totalBytes / payloadBytes));
  for (let i = 0; i < count; i += 256) await tx.pushMany(Array.from({ length: Math.min(256, count - i) }, () => payload));
  await rx.close();
  return count;
}

async function drainCell(scratch, [, payloadBytes, zeroCopyReads], totalBytes) {
  const dir = join(mkdtempSync(join(scratch, 'zero-copy-')), 'q');
  try {
    const count = await fill(dir, payloadBytes, totalBytes);
    const [, rx] = await new Builder(await LogStore.open(dir, { zeroCopyReads })).durability('none').open();
    const original = ByteArena.prototype.copy;
    let copied = 0;
    ByteArena.prototype.copy = function (bytes) {
      copied += bytes.byteLength;
      return original.call(this, bytes);
    };
    let sink = 0;
    const t0 = performance.now();
    try {
      let held = [];
      for (let n = 0; n < count; n++) {
        const item = rx.tryReserve() ?? (await rx.reserve());
        sink += item.bytes[item.bytes.length - 1];
        held.push(item);
        if (held.length === 256) {
          await rx.ackMany(held);
          held = [];
        }
      }
      if (held.length > 0) await rx.ackMany(held);
    } finally {
      ByteArena.prototype.copy = original;
    }
    const seconds = (performance.now() - t0) / 1000;
    await rx.close();
    if (sink < 0) throw new Error('unreachable');
    return { rate: count / seconds, copiedPerItem: copied / count };
  } finally {
    rmSync(dirname(dir), { recursive: true, force: true });
  }
}

export async function runZeroCopyRounds({ scratch, rounds, totalBytes }) {
  const rates = Object.fromEntries(ZERO_COPY_CELLS.map(([id]) => [id, []]));
  const copied = Object.fromEntries(ZERO_COPY_CELLS.map(([id]) => [id, 0]));
  for (let round = 0; round < rounds; round++) {
    for (let k = 0; k < ZERO_COPY_CELLS.length; k++) {
      const cell = ZERO_COPY_CELLS[(k + round) % ZERO_COPY_CELLS.length];
      const { rate, copiedPerItem } = await drainCell(scratch, cell, totalBytes);
      rates[cell[0]].push(rate);
      copied[cell[0]] = copiedPerItem;
    }
  }
  const ratios = {};
  for (const size of [128, 16384]) {
    ratios[`${size}`] = rates[`${size}/zero-copy`].map((r, i) => r / rates[`${size}/copy`][i]);
  }
  return { rates, ratios, copied };
}
