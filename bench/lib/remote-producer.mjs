// A producer process for bench/lib/remote.mjs: `connect()` to the queue in `dir` (its owner's
// endpoint) and push 128 B payloads.
//   node remote-producer.mjs rate <dir> <inFlight> <ms>   prints `ready`, waits for a line on stdin,
//        keeps `inFlight` pushes in flight for `ms`, prints { n, ms, cpuMs } as JSON
//   node remote-producer.mjs serial <dir> <count>          one push at a time after 500 to warm up,
//        prints the latency of each in milliseconds as a JSON array
import { connect } from '../../dist/index.js';

const [mode, dir, a, b] = process.argv.slice(2);
const producer = await connect(dir);
const payload = new Uint8Array(128).fill(7);
if (mode === 'rate') {
  const [inFlight, ms] = [Number(a), Number(b)];
  await producer.push(payload);
  console.log('ready');
  await new Promise((resolve) => process.stdin.once('data', resolve));
  process.stdin.destroy();
  let n = 0;
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (performance.now() - t0 < ms) {
        await producer.push(payload);
        n++;
      }
    }),
  );
  const took = performance.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  console.log(JSON.stringify({ n, ms: took, cpuMs: (cpu.user + cpu.system) / 1000 }));
} else {
  const count = Number(a);
  for (let i = 0; i < 500; i++) await producer.push(payload);
  const latencies = new Float64Array(count);
  for (let i = 0; i < count; i++) {
    const t = performance.now();
    await producer.push(payload);
    latencies[i] = performance.now() - t;
  }
  console.log(JSON.stringify([...latencies]));
}
await producer.close();
