// The disk a full queue takes under a byte capacity: fill a LogStore queue to `capacityBytes`,
// then run it full for a while (a consumer acks, producers refill), and report the store's files.
// Usage: npm run build && node bench/experiments/capacity-bytes-disk.mjs [capacityMiB] [payloadBytes] [segmentMiB]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Builder, LogStore } from '../../dist/index.js';

const MiB = 1024 * 1024;
const capacityBytes = Number(process.argv[2] ?? 64) * MiB;
const payloadBytes = Number(process.argv[3] ?? 1024);
const segmentBytes = Number(process.argv[4] ?? 64) * MiB;
const dir = mkdtempSync(join(tmpdir(), 'pq-capacity-disk-'));
const fmt = (n) => `${(n / MiB).toFixed(1)} MiB`;
try {
  const store = await LogStore.open(dir, { segmentBytes });
  const [tx, rx] = await new Builder(store).capacityBytes(capacityBytes).durability('none').open();
  const payload = new Uint8Array(payloadBytes).fill(7);
  const fits = Math.floor(capacityBytes / payloadBytes);
  for (let i = 0; i < fits; i += 64) await tx.pushMany(Array.from({ length: Math.min(64, fits - i) }, () => payload));
  const full = rx.stats();
  console.log(
    `full:   ${fits} items of ${payloadBytes} B, payload ${fmt(full.bytes)} of ${fmt(capacityBytes)}; on disk ${fmt(full.bytesOnDisk)} in ${full.segments} segments`,
  );
  // Steady state: the consumer acks the oldest, producers refill; the queue stays full.
  let peak = full.bytesOnDisk;
  let peakSegments = full.segments;
  for (let round = 0; round < 4 * fits; round++) {
    const item = await rx.reserve();
    await item.ack();
    await tx.push(payload);
    if (round % 1024 === 0) {
      const s = rx.stats();
      if (s.bytesOnDisk > peak) {
        peak = s.bytesOnDisk;
        peakSegments = s.segments;
      }
    }
  }
  const end = rx.stats();
  console.log(
    `steady: after ${4 * fits} more acks and pushes, on disk ${fmt(end.bytesOnDisk)} in ${end.segments} segments; peak ${fmt(peak)} in ${peakSegments} segments`,
  );
  console.log(`ratio:  peak disk / capacityBytes = ${(peak / capacityBytes).toFixed(2)}`);
  await rx.close();
} finally {
  rmSync(dir, { recursive: true, force: true });
}
