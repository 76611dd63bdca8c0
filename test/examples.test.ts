/** The README's code runs as written, and its "Implement Store yourself" example passes the conformance suite. */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { expect, it, test } from 'vitest';
import { runStoreConformance } from '../src/conformance.js';
import { type KV, KVStore } from '../examples/kv-store.js';
import { Lines } from './support/child-process.js';
import { freePort, natsServerBinary, startNatsServer } from './support/nats-server.js';
import { NatsServer, natsServerBinary as restartableServerBinary } from './support/nats-restartable.js';

const root = resolve(import.meta.dirname, '..');
const readme = readFileSync(join(root, 'README.md'), 'utf8');

/** Every fenced block of `lang` in the README, in order. */
function blocks(lang: string): string[] {
  return [...readme.matchAll(new RegExp('```' + lang + '\\n([\\s\\S]*?)```', 'g'))].map((m) => m[1]!);
}

/** Run a README block as written, as an .mjs file importing the built package. */
function runAsWritten(block: string) {
  const dir = mkdtempSync(join(tmpdir(), 'pq-readme-'));
  try {
    const dist = pathToFileURL(join(root, 'dist', 'index.js')).href;
    const file = join(dir, 'example.mjs');
    const testing = pathToFileURL(join(root, 'dist', 'testing', 'index.js')).href;
    const dashboard = pathToFileURL(join(root, 'dist', 'dashboard', 'index.js')).href;
    writeFileSync(
      file,
      block
        .replaceAll("from 'persistent-queue'", `from '${dist}'`)
        .replaceAll("from 'persistent-queue/testing'", `from '${testing}'`)
        .replaceAll("from 'persistent-queue/dashboard'", `from '${dashboard}'`),
    );
    // Bounded: a spawnSync that hangs would hold the test worker past the test's own timeout.
    return spawnSync(process.execPath, [file], { encoding: 'utf8', timeout: 50_000 });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

it('theReadmeQuickExampleRunsAsWritten', () => {
  const block = blocks('ts').find((b) => b.includes('new Builder(new MemStore())'));
  expect(block, 'README has the MemStore example').toBeDefined();
  // The example has no type annotations, so it runs as JavaScript against the built package.
  const run = runAsWritten(block!);
  expect(run.status).toBe(0);
  expect(run.stderr).toBe('');
  expect(run.stdout).toBe('job\n');
});

it('theReadmeWorkerWithRetriesRunsAsWrittenAndRetriesEachOrderOnce', () => {
  const block = blocks('js').find((b) => b.includes(".retry({ kind: 'exponential'"));
  expect(block, 'README has the worker with retries').toBeDefined();
  const run = runAsWritten(block!);
  expect(run.status).toBe(0);
  expect(run.stdout).toBe('acked 3, retried 3, delayed 0\n');
  const reported = run.stderr.split('\n').filter((line) => line.startsWith('item ')).sort();
  expect(reported).toEqual([1, 2, 3].map((n) => `item ${n}, delivery 1: upstream busy for order ${n}`));
});

it('theReadmeLeaseExampleRunsAsWrittenAndFencesTheStalledHolder', () => {
  const block = blocks('js').find((b) => b.includes('.leaseMs(50)'));
  expect(block, 'README has the lease example').toBeDefined();
  const run = runAsWritten(block!);
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toBe('true\nERR_LEASE_EXPIRED\n2 1\n');
});

it('theReadmeWorkerWithADeadLetterQueueRunsAsWrittenAndMovesOnlyTheBadItem', () => {
  const block = blocks('js').find((b) => b.includes('.maxDeliveries(3)'));
  expect(block, 'README has the worker with a dead-letter queue').toBeDefined();
  const run = runAsWritten(block!);
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toBe('3 1\nseq 3, 3 deliveries: Error: not an order: 7 bytes\n0\n');
});

it('theReadmeTryFinallyLoopRunsAsPlainJavaScriptAndBreakLeavesTheItemInHandReserved', () => {
  const loop = blocks('js').find((b) => b.includes('for await (const item of rx)') && b.includes('finally'));
  expect(loop, 'README has the try/finally loop').toBeDefined();
  const dir = mkdtempSync(join(tmpdir(), 'pq-readme-'));
  try {
    const dist = pathToFileURL(join(root, 'dist', 'index.js')).href;
    // Plain .mjs, run by the Node that runs the tests (20 in CI), where `await using` would not parse.
    const file = join(dir, 'loop.mjs');
    writeFileSync(
      file,
      `import { Builder, MemStore } from '${dist}';
const [tx, rx] = await new Builder(new MemStore()).open();
await tx.pushMany(['a', 'b', 'fail', 'c']);
const seen = [];
const handle = async (bytes) => {
  const text = new TextDecoder().decode(bytes);
  seen.push(text);
  if (text === 'fail') throw new Error('handler failed');
};
try {
${loop}
} catch (error) {
  seen.push(error.message);
}
// The item the handler threw on was nacked by the finally block: it comes first again.
const again = rx.tryReserve();
seen.push(new TextDecoder().decode(again.bytes), again.deliveries);
await again.ack();
// break: the loop ends, and the item in hand stays reserved, unsettled, until it is settled.
let held;
for await (const item of rx) {
  held = item;
  break;
}
const stats = rx.stats();
seen.push(held.seq, held.settled, stats.inFlight, stats.ready, rx.tryReserve() === null);
await rx.close();
console.log(JSON.stringify(seen));
`,
    );
    const out = execFileSync(process.execPath, [file], { encoding: 'utf8' });
    expect(JSON.parse(out)).toEqual(['a', 'b', 'fail', 'handler failed', 'fail', 2, 4, false, 1, 0, true]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

it('theReadmePrometheusExampleRunsAsWrittenAndItsServerAnswersTheSameText', () => {
  const example = blocks('js').find((b) => b.includes('function metrics('));
  const server = blocks('js').find((b) => b.includes('createServer('));
  expect(example, 'README has the Prometheus example').toBeDefined();
  expect(server, 'README has the metrics server').toBeDefined();
  const dir = mkdtempSync(join(tmpdir(), 'pq-readme-'));
  try {
    const dist = pathToFileURL(join(root, 'dist', 'index.js')).href;
    const file = join(dir, 'metrics.mjs');
    // The example prints the text; then the server block runs and is scraped once.
    writeFileSync(
      file,
      `${example!.replaceAll("from 'persistent-queue'", `from '${dist}'`)}
${server}
await new Promise((resolve) => server.once('listening', resolve));
const scraped = await fetch(\`http://127.0.0.1:\${server.address().port}/metrics\`);
const body = await scraped.text();
server.close();
await rx.close();
console.log(JSON.stringify({ type: scraped.headers.get('content-type'), body }));
`,
    );
    const out = execFileSync(process.execPath, [file], { encoding: 'utf8', env: { ...process.env, METRICS_PORT: '0' } });
    const printed = out.slice(0, out.lastIndexOf('\n{'));
    const served = JSON.parse(out.slice(printed.length + 1)) as { type: string; body: string };
    expect(printed).toBe(`# HELP pq_pushed_total Items whose push resolved.
# TYPE pq_pushed_total counter
pq_pushed_total{queue="1"} 3
# HELP pq_acked_total Items whose ack resolved.
# TYPE pq_acked_total counter
pq_acked_total{queue="1"} 3
# HELP pq_nacked_total Items nacked.
# TYPE pq_nacked_total counter
pq_nacked_total{queue="1"} 1
# HELP pq_redelivered_total Deliveries after the first.
# TYPE pq_redelivered_total counter
pq_redelivered_total{queue="1"} 1
# HELP pq_ready Items waiting for the consumer.
# TYPE pq_ready gauge
pq_ready{queue="1"} 0
# HELP pq_in_flight Items reserved and not yet settled.
# TYPE pq_in_flight gauge
pq_in_flight{queue="1"} 0
# HELP pq_bytes_on_disk Bytes of the store files.
# TYPE pq_bytes_on_disk gauge
# HELP pq_events_total Diagnostics channel messages.
# TYPE pq_events_total counter
pq_events_total{event="push",queue="1",store="MemStore"} 3
pq_events_total{event="deliver",queue="1",store="MemStore"} 4
pq_events_total{event="nack",queue="1",store="MemStore"} 1
pq_events_total{event="retry",queue="1",store="MemStore"} 1
pq_events_total{event="ack",queue="1",store="MemStore"} 3
`);
    expect(served).toEqual({ type: 'text/plain; version=0.0.4; charset=utf-8', body: printed });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

it('theReadmeShowsTheKvStoreExampleVerbatim', () => {
  const source = readFileSync(join(root, 'examples', 'kv-store.ts'), 'utf8');
  expect(blocks('ts')).toContain(source);
});

/** An in-memory ordered KV for the example store. */
class MapKV implements KV {
  data = new Map<string, string>();
  async get(key: string) {
    return this.data.get(key);
  }
  async range(gt: string, lt: string, limit: number): Promise<[string, string][]> {
    const keys = [...this.data.keys()].filter((k) => k > gt && k < lt).sort();
    return keys.slice(0, limit).map((k) => [k, this.data.get(k)!]);
  }
  async batch(ops: { put?: [string, string]; del?: string }[]) {
    for (const op of ops) {
      if (op.put) this.data.set(op.put[0], op.put[1]);
      if (op.del) this.data.delete(op.del);
    }
  }
  async close() {}
}

runStoreConformance(test, {
  name: 'README KVStore',
  create: () => new KVStore(new MapKV()),
  reopen: (previous) => new KVStore(previous.kv),
});

it('theReadmeIdempotencyExampleRunsAsWrittenWithTheResultsItStates', () => {
  const block = blocks('js').find((b) => b.includes("{ key: 'order-42' }"));
  expect(block, 'README has the idempotency example').toBeDefined();
  const run = runAsWritten(block!);
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toBe('true 1\ntrue\nfalse\n');
});

it('theReadmeDelayAndPriorityExampleRunsAsWrittenInTheOrderItStates', () => {
  const block = blocks('js').find((b) => b.includes("{ priority: 10 }"));
  expect(block, 'README has the delay and priority example').toBeDefined();
  const run = runAsWritten(block!);
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toBe("[ 'urgent', 'routine', 'background' ]\n1\n[ 'reminder' ]\n");
});

it('theReadmeCompetingConsumersExampleRunsAsWritten', () => {
  const block = blocks('js').find((b) => b.includes('rx.fork(), rx.fork()'));
  expect(block, 'README has the competing consumers example').toBeDefined();
  const run = runAsWritten(block!);
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toBe('6 2\ntrue\n');
});

it('theReadmeTypedQueueExampleRunsAsWrittenAndDeadLettersTheInvalidPayload', () => {
  const block = blocks('js').find((b) => b.includes('.codec(json(order))'));
  expect(block, 'README has the typed queue example').toBeDefined();
  const run = runAsWritten(block!);
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toBe("ERR_INVALID\n{ id: 8, sku: 'tea' }\njson+hand-written: Invalid value: id: id must be an integer\nERR_INVALID\n");
});

it('theReadmeProcessedSetExampleRunsAsWrittenAndSkipsTheRedelivery', () => {
  const block = blocks('js').find((b) => b.includes('LogProcessedSet.open(join(dir'));
  expect(block, 'README has the processed set example').toBeDefined();
  const run = runAsWritten(block!);
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toBe("[ 'welcome ann', 'welcome bob' ] 1\n");
});

it('theReadmeSqliteProcessedSetExampleRunsAsWrittenAgainstBetterSqlite3', () => {
  const block = blocks('js').find((b) => b.includes('new SqliteProcessedSet(db)'));
  expect(block, 'README has the SqliteProcessedSet example').toBeDefined();
  const sqlite = pathToFileURL(join(root, 'dist', 'sqlite-store.js')).href;
  const peer = pathToFileURL(join(root, 'node_modules', 'better-sqlite3', 'lib', 'index.js')).href;
  const run = runAsWritten(block!.replaceAll("from 'persistent-queue/sqlite'", `from '${sqlite}'`).replaceAll("from 'better-sqlite3'", `from '${peer}'`));
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toBe('2\n');
});

it('theReadmeBatchExampleRunsAsWrittenWithPartialSuccess', () => {
  const block = blocks('js').find((b) => b.includes("batch: { size: 4 }"));
  expect(block, 'README has the batch example').toBeDefined();
  const run = runAsWritten(block!);
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toBe('a,b,c,d\nb,c,d,e\n5\n');
});

it('theReadmeByteCapacityExampleRunsAsWrittenAndAPushWaitsForRoom', () => {
  const block = blocks('js').find((b) => b.includes('.capacityBytes(64 * 1024)'));
  expect(block, 'README has the byte capacity example').toBeDefined();
  const run = runAsWritten(block!);
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toBe('2 8192 true\n');
});

it('theReadmeZeroCopyExampleRunsAsWrittenAndAHeldViewKeepsItsBytes', () => {
  const block = blocks('js').find((b) => b.includes("mkdtempSync(join(tmpdir(), 'views-'))"));
  expect(block, 'README has the zero-copy example').toBeDefined();
  const run = runAsWritten(block!);
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toBe('item 0\n');
});

it('theReadmeJetStreamExampleRunsAsWrittenOnAFreshServer', async (context) => {
  const block = blocks('js').find((b) => b.includes('new JetStreamBuilder('));
  expect(block, 'README has the JetStream example').toBeDefined();
  const binary = natsServerBinary();
  if (binary === undefined) {
    console.warn('theReadmeJetStreamExampleRunsAsWrittenOnAFreshServer skipped: no nats-server binary on this machine');
    context.skip();
    return;
  }
  // A server of its own, so that the example finds no stream of an earlier run.
  const server = await startNatsServer(binary);
  const dir = mkdtempSync(join(tmpdir(), 'pq-readme-'));
  try {
    const file = join(dir, 'jetstream.mjs');
    const require = createRequire(import.meta.url);
    writeFileSync(
      file,
      block!
        .replaceAll("from 'persistent-queue/jetstream'", `from '${pathToFileURL(join(root, 'dist', 'jetstream', 'index.js')).href}'`)
        .replaceAll("from 'persistent-queue'", `from '${pathToFileURL(join(root, 'dist', 'index.js')).href}'`)
        .replaceAll("from '@nats-io/transport-node'", `from '${pathToFileURL(require.resolve('@nats-io/transport-node')).href}'`),
    );
    const run = spawnSync(process.execPath, [file], { encoding: 'utf8', env: { ...process.env, NATS_URL: server.url }, timeout: 30_000 });
    // A server of the test's own is not told to fsync before each ack (nor could one before 2.10).
    expect(durabilityWarnings(run.stderr)).toEqual([expect.stringContaining('JetStream queue ORDERS: nats-server')]);
    expect(run.status).toBe(0);
    expect(run.stdout).toBe('[ 1, 2, 3 ]\n2 2 0\nseq 3, 3 deliveries: Error: no such order: -1\n');
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await server.stop();
  }
});

/**
 * The PQ_JETSTREAM_DURABILITY warnings of a child's stderr; throws on any other line there (Node's
 * hint on how to trace a warning aside).
 */
function durabilityWarnings(stderr: string): string[] {
  const lines = stderr.split('\n').filter((line) => line !== '' && !line.startsWith('(Use `node --trace-warnings'));
  const others = lines.filter((line) => !line.includes('[PQ_JETSTREAM_DURABILITY]'));
  if (others.length > 0) throw new Error(`unexpected stderr:\n${others.join('\n')}`);
  return lines;
}

// Store-and-forward: run with no server on NATS_URL's port, as an edge device boots offline, in a
// directory of its own (the example opens ./telemetry-queue); a server of the test's own starts on
// that port only once the example has printed what its pushes resolved with. The package's
// jetstream subpath is the built forward module.
const natsBinary = restartableServerBinary();
if (natsBinary === null) console.log('skipped theReadmeStoreAndForwardExample: no nats-server binary');
it.skipIf(natsBinary === null)('theReadmeStoreAndForwardExampleStartsOfflineAndForwardsOnceTheServerAppears', async () => {
  const block = blocks('js').find((b) => b.includes("from 'persistent-queue/jetstream'") && b.includes('forward('));
  expect(block, 'README has the store-and-forward example').toBeDefined();
  const dir = mkdtempSync(join(tmpdir(), 'pq-readme-'));
  let server: NatsServer | undefined;
  let example: Lines | undefined;
  try {
    const url = (file: string): string => pathToFileURL(join(root, 'dist', file)).href;
    const source = block!
      .replaceAll("from 'persistent-queue'", `from '${url('index.js')}'`)
      .replaceAll("from 'persistent-queue/jetstream'", `from '${url('jetstream/index.js')}'`)
      .replaceAll("from '@nats-io/transport-node'", `from '${import.meta.resolve('@nats-io/transport-node')}'`)
      .replaceAll("from '@nats-io/jetstream'", `from '${import.meta.resolve('@nats-io/jetstream')}'`);
    writeFileSync(join(dir, 'example.mjs'), source);
    const port = await freePort();
    example = new Lines(spawn(process.execPath, [join(dir, 'example.mjs')], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NATS_URL: `127.0.0.1:${port}` } }));
    // Nothing listens on the port: the pushes resolve all the same.
    await example.until((lines) => lines.length >= 1);
    expect(example.lines).toEqual(['[ 1, 2, 3 ]']);
    server = await NatsServer.start(natsBinary!, { port });
    // 'close': the child has exited and its output is all read.
    const closed = new Promise<number | null>((resolve) => example!.child.once('close', resolve));
    expect(await closed).toBe(0);
    expect(example.lines).toEqual(['[ 1, 2, 3 ]', '0 3']);
    // The local queue (group) survives a power loss; the server, fsyncing on an interval, may not.
    expect(durabilityWarnings(example.stderr)).toEqual([expect.stringContaining('forward() into stream TELEMETRY: nats-server')]);
  } finally {
    await example?.kill();
    rmSync(dir, { recursive: true, force: true });
    await server?.stop();
  }
});

// The worker daemon: it must still be running after its queue has been idle for a second, and stop
// cleanly on SIGTERM. The probe is an unref'd timer loaded before the example: it fires only if
// something else keeps the event loop alive, so its line proves the worker did not exit while idle.
it('theReadmeWorkerDaemonStaysUpWhileIdleAndStopsCleanlyOnSigterm', async () => {
  const block = blocks('js').find((b) => b.includes("process.once('SIGTERM'") && b.includes('worker stopped cleanly'));
  expect(block, 'README has the worker daemon example').toBeDefined();
  const dir = mkdtempSync(join(tmpdir(), 'pq-readme-'));
  try {
    const file = join(dir, 'worker.mjs');
    writeFileSync(file, block!.replaceAll("from 'persistent-queue'", `from '${pathToFileURL(join(root, 'dist', 'index.js')).href}'`));
    const probe = 'data:text/javascript,' + encodeURIComponent("setTimeout(() => console.log('idle for a second, still running'), 1000).unref();");
    const child = spawn(process.execPath, ['--import', probe, file], { cwd: dir, env: { ...process.env, QUEUE_DIR: join(dir, 'jobs') } });
    let stdout = '';
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d));
    const exited = new Promise<number | null>((done) => child.on('exit', (code) => done(code)));
    await new Promise<void>((done, fail) => {
      child.stdout.on('data', (d: Buffer) => {
        stdout += d;
        if (stdout.includes('still running')) done();
      });
      void exited.then((code) => fail(new Error(`the worker exited (${code}) while idle: ${stdout}${stderr}`)));
    });
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(stderr).toBe('');
    expect(stdout).toBe('handled first job\nidle for a second, still running\nworker stopped cleanly\n');
    const stats = spawnSync(process.execPath, [join(root, 'dist', 'cli', 'pq.js'), 'stats', '--json', join(dir, 'jobs')], { encoding: 'utf8' });
    expect(stats.status, stats.stderr).toBe(0);
    expect(JSON.parse(stats.stdout).lastShutdownClean, 'the store was closed cleanly').toBe(true);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

it('theReadmeClusterServicePushesFromEveryWorkerIntoThePrimarysQueue', () => {
  const block = blocks('js').find((b) => b.includes('cluster.fork('));
  expect(block, 'README has the node:cluster example').toBeDefined();
  const run = runAsWritten(block!);
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toBe('[ 25, 25, 25, 25 ]\n');
});

it('theReadmeWorkerThreadsPoolPushesIntoItsOwnProcesssQueueInEachThreadsOrder', () => {
  const block = blocks('js').find((b) => b.includes('isMainThread') && b.includes('connect('));
  expect(block, 'README has the worker_threads example').toBeDefined();
  const run = runAsWritten(block!);
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toBe(`${Array.from({ length: 10 }, (_, i) => `thread 0:${i}`).join(' ')}\n`);
});

// The CLI and the daemon: the README's enqueue script pushes, while the README's worker daemon
// runs, into the queue the daemon holds (a second LogStore.open would be refused with ERR_LOCKED).
it('theReadmeEnqueueScriptPushesIntoTheRunningWorkerDaemonsQueue', async () => {
  const daemon = blocks('js').find((b) => b.includes("process.once('SIGTERM'") && b.includes('worker stopped cleanly'));
  const cli = blocks('js').find((b) => b.includes('enqueue.mjs') && b.includes('connect('));
  expect(daemon, 'README has the worker daemon example').toBeDefined();
  expect(cli, 'README has the enqueue example').toBeDefined();
  const dir = mkdtempSync(join(tmpdir(), 'pq-readme-'));
  const dist = pathToFileURL(join(root, 'dist', 'index.js')).href;
  const env = { ...process.env, QUEUE_DIR: join(dir, 'jobs') };
  try {
    writeFileSync(join(dir, 'worker.mjs'), daemon!.replaceAll("from 'persistent-queue'", `from '${dist}'`));
    writeFileSync(join(dir, 'enqueue.mjs'), cli!.replaceAll("from 'persistent-queue'", `from '${dist}'`));
    const worker = new Lines(spawn(process.execPath, [join(dir, 'worker.mjs')], { cwd: dir, env }));
    await worker.until((l) => l.includes('handled first job'));
    const first = spawnSync(process.execPath, [join(dir, 'enqueue.mjs'), 'resize photo 42'], { cwd: dir, env, encoding: 'utf8' });
    expect(first.stderr).toBe('');
    expect(first.stdout).toBe('queued as 2 (endpoint)\n');
    await worker.until((l) => l.includes('handled resize photo 42'));
    worker.child.kill('SIGTERM');
    await worker.until((l) => l.includes('worker stopped cleanly'));
    expect(worker.lines.filter((l) => l !== '')).toEqual(['handled first job', 'handled resize photo 42', 'worker stopped cleanly']);
    expect(worker.stderr).toBe('');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

it('theReadmeDashboardInAServiceRunsAsWrittenAndShowsTheLiveQueue', () => {
  const block = blocks('js').find((b) => b.includes("from 'persistent-queue/dashboard'"));
  expect(block, 'README has the dashboard in a service').toBeDefined();
  const run = runAsWritten(block!);
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toBe('true\nlive 2\n');
});

it('theReadmeSpoolExampleRunsAsWritten', () => {
  const block = blocks('js').find((b) => b.includes("console.log(producer.mode, await producer.pushMany(['a', 'b', 'c']))"));
  expect(block, 'README has the spool example').toBeDefined();
  const run = runAsWritten(block!);
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toBe("spool [ 0, 0, 0 ]\n1 a\n2 b\n3 c\n");
});
