// Where a JetStream push spends its CPU: the JetStream queue's push and the NATS client's own
// `js.publish` (each awaited, 64 producers, 128 B), with the CPU time this process and the
// nats-server process used during each pass, per message. On a machine whose cores the server and
// the client share, it tells how much of the gap to the embedded queue is the server's work and how
// much the client side's. Linux only (reads /proc/<pid>/stat for the server).
// Usage: npm run build && node bench/experiments/jetstream-cpu.mjs <nats-server pid> [items=20000] [rounds=2]
//   NATS_URL (default 127.0.0.1:4222) names the server; the streams made are deleted at the end.
import { readFileSync } from 'node:fs';
import { connect } from '@nats-io/transport-node';
import { RetentionPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { JetStreamBuilder } from '../../dist/engines/jetstream/index.js';

const [pidArg, itemsArg, roundsArg] = process.argv.slice(2);
const serverPid = Number(pidArg);
if (!Number.isSafeInteger(serverPid)) {
  console.error('usage: node bench/experiments/jetstream-cpu.mjs <nats-server pid> [items=20000] [rounds=2]');
  process.exit(2);
}
const ITEMS = Number(itemsArg ?? 20_000);
const ROUNDS = Number(roundsArg ?? 2);
const TICKS_PER_S = 100; // USER_HZ on Linux

/** CPU time the process has used, in clock ticks (utime + stime, fields 14 and 15 of /proc/<pid>/stat). */
const ticks = (pid) => {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return Number(fields[11]) + Number(fields[12]);
};

const nc = await connect({ servers: process.env.NATS_URL ?? '127.0.0.1:4222' });
const jsm = await jetstreamManager(nc);
const js = jetstream(nc);
const stream = `PQ_CPU_${process.pid}`;
const raw = `${stream}_RAW`;
const [tx] = await new JetStreamBuilder(nc, { stream }).open();
await jsm.streams.add({ name: raw, subjects: [raw], retention: RetentionPolicy.Workqueue });
const payload = new Uint8Array(128).fill(7);

async function pushAll(push, n) {
  const per = Math.ceil(n / 64);
  await Promise.all(
    Array.from({ length: 64 }, async (_, p) => {
      for (let i = p * per; i < Math.min(n, (p + 1) * per); i++) await push(payload);
    }),
  );
}

const cells = [
  ['JetStream queue push', (b) => tx.push(b)],
  ['client js.publish', (b) => js.publish(raw, b)],
];
try {
  for (let round = 0; round < ROUNDS; round++) {
    for (const [name, push] of round % 2 === 0 ? cells : [...cells].reverse()) {
      await pushAll(push, 1000);
      const server0 = ticks(serverPid);
      const self0 = process.cpuUsage();
      const start = process.hrtime.bigint();
      await pushAll(push, ITEMS);
      const wallS = Number(process.hrtime.bigint() - start) / 1e9;
      const self = process.cpuUsage(self0);
      const serverS = (ticks(serverPid) - server0) / TICKS_PER_S;
      const selfS = (self.user + self.system) / 1e6;
      console.log(
        `${name.padEnd(22)} ${String(Math.round(ITEMS / wallS)).padStart(7)} msgs/s   ` +
          `this process ${((selfS / ITEMS) * 1e6).toFixed(1).padStart(5)} µs/msg (${Math.round((selfS / wallS) * 100)} % of a core)   ` +
          `nats-server ${((serverS / ITEMS) * 1e6).toFixed(1).padStart(5)} µs/msg (${Math.round((serverS / wallS) * 100)} % of a core)`,
      );
    }
  }
} finally {
  await tx.close();
  for (const name of [stream, `${stream}_DEAD`, `${stream}_KEYS`, raw]) await jsm.streams.delete(name).catch(() => {});
  await nc.close();
}
