/**
 * The code of README.md and docs/ runs as written (each block found by what it contains, wherever
 * it lives: test/support/docs.ts), and the "Implement Store yourself" example passes the
 * conformance suite. test/docs/code-blocks.test.ts checks that every block is run by some test.
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { expect, it } from 'vitest';
import { docBlock } from './support/docs.js';
import { Lines } from './support/child-process.js';
import { freePort, natsServerBinary, startNatsServer } from './support/nats-server.js';
import { NatsServer, natsServerBinary as restartableServerBinary } from './support/nats-restartable.js';

const root = resolve(import.meta.dirname, '..');

/** Run a block as written, as an .mjs file importing the built package. */
function runAsWritten(block: string) {
  const dir = mkdtempSync(join(tmpdir(), 'pq-docs-'));
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

it('theMemStoreExampleRunsAsWritten', () => {
  const block = docBlock('ts', 'new Builder(new MemStore())');
  // The example has no type annotations, so it runs as JavaScript against the built package.
  const run = runAsWritten(block);
  expect(run.status).toBe(0);
  expect(run.stderr).toBe('');
  expect(run.stdout).toBe('job\n');
});

it('theWorkerWithRetriesRunsAsWrittenAndRetriesEachOrderOnce', () => {
  const block = docBlock('js', ".retry({ kind: 'exponential', baseMs: 20");
  const run = runAsWritten(block);
  expect(run.status).toBe(0);
  expect(run.stdout).toBe('acked 3, retried 3, delayed 0\n');
  const reported = run.stderr
    .split('\n')
    .filter((line) => line.startsWith('item '))
    .sort();
  expect(reported).toEqual([1, 2, 3].map((n) => `item ${n}, delivery 1: upstream busy for order ${n}`));
});

it('theLeaseExampleRunsAsWrittenAndFencesTheStalledHolder', () => {
  const block = docBlock('js', '.leaseMs(50)');
  const run = runAsWritten(block);
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toBe('true\nERR_LEASE_EXPIRED\n2 1\n');
});

it('theGroupExampleRunsAsWrittenAndTheSmallTenantIsNotHeldBehindTheFlood', () => {
  const block = docBlock('js', 'groupConcurrency: 1', "'tenant-small'");
  const run = runAsWritten(block);
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toBe("[ 'big 1', 'small 1', 'big 2' ]\n");
});

it('thePerTenantWorkerRunsAsWrittenWithinEachTenantsRateAndItsThrottledDeliveryIsNotCounted', () => {
  const block = docBlock('js', ".rateLimit({ max: 2, perMs: 250, by: 'group' })");
  const run = runAsWritten(block);
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toBe(
    "[\n  'globex invoice 1 (delivery 1)',\n  'globex invoice 2 (delivery 1)',\n  'globex invoice 3 (delivery 1)'\n]\n0 0\n",
  );
});

it('theNightlyJobRunsAsWrittenAndCatchesUpEachMissedNightAcrossTheChangeToSummerTime', () => {
  const block = docBlock('js', "tx.schedule('nightly-report'");
  const run = runAsWritten(block);
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toBe(
    "[\n  '2026-03-28T02:00:00.000Z',\n  '2026-03-29T01:00:00.000Z',\n  '2026-03-30T01:00:00.000Z'\n]\n2026-03-31T01:00:00.000Z\n",
  );
});

it('theWorkerWithADeadLetterQueueRunsAsWrittenAndMovesOnlyTheBadItem', () => {
  const block = docBlock('js', '.maxDeliveries(3)', 'new Builder(await LogStore.open(dir))');
  const run = runAsWritten(block);
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toBe('3 1\nseq 3, 3 deliveries: Error: not an order: 7 bytes\n0\n');
});

it('theTryFinallyLoopRunsAsPlainJavaScriptAndBreakLeavesTheItemInHandReserved', () => {
  const loop = docBlock('js', 'for await (const item of rx)', 'finally');
  const dir = mkdtempSync(join(tmpdir(), 'pq-docs-'));
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

it('thePrometheusExampleRunsAsWrittenAndItsServerAnswersTheSameText', () => {
  const example = docBlock('js', 'function metrics(');
  const server = docBlock('js', 'createServer(', 'res.end(metrics([rx]))');
  const dir = mkdtempSync(join(tmpdir(), 'pq-docs-'));
  try {
    const dist = pathToFileURL(join(root, 'dist', 'index.js')).href;
    const file = join(dir, 'metrics.mjs');
    // The example prints the text; then the server block runs and is scraped once.
    writeFileSync(
      file,
      `${example.replaceAll("from 'persistent-queue'", `from '${dist}'`)}
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

it('theDocsShowTheKvStoreExampleVerbatim', () => {
  const source = readFileSync(join(root, 'examples', 'kv-store.ts'), 'utf8');
  expect(docBlock('ts', 'export class KVStore implements Store')).toBe(source);
});

// The conformance suite's two lines as the docs write them, over the example store: the block is
// run as a module of its own, importing the sources, so its tests register with this file's.
{
  const dir = mkdtempSync(join(root, 'test', '.docs-conformance-'));
  try {
    const file = join(dir, 'conformance.ts');
    const block = docBlock('js', "runStoreConformance(test, { name: 'KVStore'");
    writeFileSync(
      file,
      `import { KVStore } from '${join(root, 'examples', 'kv-store.ts')}';
import { MapKV as MyKV } from '${join(root, 'test', 'support', 'map-kv.ts')}';
${block.replaceAll("from 'persistent-queue/conformance'", `from '${join(root, 'src', 'conformance', 'index.ts')}'`)}`,
    );
    await import(/* @vite-ignore */ pathToFileURL(file).href);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

it('theIdempotencyExampleRunsAsWrittenWithTheResultsItStates', () => {
  const block = docBlock('js', "{ key: 'order-42' }");
  const run = runAsWritten(block);
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toBe('true 1\ntrue\nfalse\n');
});

it('theDelayAndPriorityExampleRunsAsWrittenInTheOrderItStates', () => {
  const block = docBlock('js', '{ priority: 10 }');
  const run = runAsWritten(block);
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toBe("[ 'urgent', 'routine', 'background' ]\n1\n[ 'reminder' ]\n");
});

it('theCompetingConsumersExampleRunsAsWritten', () => {
  const block = docBlock('js', 'rx.fork(), rx.fork()');
  const run = runAsWritten(block);
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toBe('6 2\ntrue\n');
});

it('theTypedQueueExampleRunsAsWrittenAndDeadLettersTheInvalidPayload', () => {
  const block = docBlock('js', '.codec(json(order))');
  const run = runAsWritten(block);
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toBe("ERR_INVALID\n{ id: 8, sku: 'tea' }\njson+hand-written: Invalid value: id: id must be an integer\nERR_INVALID\n");
});

it('theProcessedSetExampleRunsAsWrittenAndSkipsTheRedelivery', () => {
  const block = docBlock('js', 'LogProcessedSet.open(join(dir');
  const run = runAsWritten(block);
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toBe("[ 'welcome ann', 'welcome bob' ] 1\n");
});

it('theSqliteProcessedSetExampleRunsAsWrittenAgainstBetterSqlite3', () => {
  const block = docBlock('js', 'new SqliteProcessedSet(db)');
  const sqlite = pathToFileURL(join(root, 'dist', 'stores', 'sqlite', 'index.js')).href;
  const peer = pathToFileURL(join(root, 'node_modules', 'better-sqlite3', 'lib', 'index.js')).href;
  const run = runAsWritten(
    block.replaceAll("from 'persistent-queue/sqlite'", `from '${sqlite}'`).replaceAll("from 'better-sqlite3'", `from '${peer}'`),
  );
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toBe('2\n');
});

it('theBatchExampleRunsAsWrittenWithPartialSuccess', () => {
  const block = docBlock('js', 'batch: { size: 4 }');
  const run = runAsWritten(block);
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toBe('a,b,c,d\nb,c,d,e\n5\n');
});

it('theByteCapacityExampleRunsAsWrittenAndAPushWaitsForRoom', () => {
  const block = docBlock('js', '.capacityBytes(64 * 1024)');
  const run = runAsWritten(block);
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toBe('2 8192 true\n');
});

it('theZeroCopyExampleRunsAsWrittenAndAHeldViewKeepsItsBytes', () => {
  const block = docBlock('js', "mkdtempSync(join(tmpdir(), 'views-'))");
  const run = runAsWritten(block);
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toBe('item 0\n');
});

it('theJetStreamExampleRunsAsWrittenOnAFreshServer', async (context) => {
  const block = docBlock('js', 'new JetStreamBuilder(');
  const binary = natsServerBinary();
  if (binary === undefined) {
    console.warn('theJetStreamExampleRunsAsWrittenOnAFreshServer skipped: no nats-server binary on this machine');
    context.skip();
    return;
  }
  // A server of its own, so that the example finds no stream of an earlier run.
  const server = await startNatsServer(binary);
  const dir = mkdtempSync(join(tmpdir(), 'pq-docs-'));
  try {
    const file = join(dir, 'jetstream.mjs');
    const require = createRequire(import.meta.url);
    writeFileSync(
      file,
      block
        .replaceAll(
          "from 'persistent-queue/jetstream'",
          `from '${pathToFileURL(join(root, 'dist', 'engines', 'jetstream', 'index.js')).href}'`,
        )
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
if (natsBinary === null) console.log('skipped theStoreAndForwardExample: no nats-server binary');
it.skipIf(natsBinary === null)('theStoreAndForwardExampleStartsOfflineAndForwardsOnceTheServerAppears', async () => {
  const block = docBlock('js', "from 'persistent-queue/jetstream'", 'forward(');
  const dir = mkdtempSync(join(tmpdir(), 'pq-docs-'));
  let server: NatsServer | undefined;
  let example: Lines | undefined;
  try {
    const url = (file: string): string => pathToFileURL(join(root, 'dist', file)).href;
    const source = block
      .replaceAll("from 'persistent-queue'", `from '${url('index.js')}'`)
      .replaceAll("from 'persistent-queue/jetstream'", `from '${url('engines/jetstream/index.js')}'`)
      .replaceAll("from '@nats-io/transport-node'", `from '${import.meta.resolve('@nats-io/transport-node')}'`)
      .replaceAll("from '@nats-io/jetstream'", `from '${import.meta.resolve('@nats-io/jetstream')}'`);
    writeFileSync(join(dir, 'example.mjs'), source);
    const port = await freePort();
    example = new Lines(
      spawn(process.execPath, [join(dir, 'example.mjs')], {
        cwd: dir,
        stdio: ['ignore', 'pipe', 'pipe'],
        env: { ...process.env, NATS_URL: `127.0.0.1:${port}` },
      }),
    );
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
it('theWorkerDaemonStaysUpWhileIdleAndStopsCleanlyOnSigterm', async () => {
  const block = docBlock('js', "process.once('SIGTERM'", 'worker stopped cleanly');
  const dir = mkdtempSync(join(tmpdir(), 'pq-docs-'));
  try {
    const file = join(dir, 'worker.mjs');
    writeFileSync(file, block.replaceAll("from 'persistent-queue'", `from '${pathToFileURL(join(root, 'dist', 'index.js')).href}'`));
    const probe =
      'data:text/javascript,' + encodeURIComponent("setTimeout(() => console.log('idle for a second, still running'), 1000).unref();");
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
    const stats = spawnSync(process.execPath, [join(root, 'dist', 'cli', 'pq.js'), 'stats', '--json', join(dir, 'jobs')], {
      encoding: 'utf8',
    });
    expect(stats.status, stats.stderr).toBe(0);
    expect(JSON.parse(stats.stdout).lastShutdownClean, 'the store was closed cleanly').toBe(true);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

it('theClusterServicePushesFromEveryWorkerIntoThePrimarysQueue', () => {
  const block = docBlock('js', 'cluster.fork(');
  const run = runAsWritten(block);
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toBe('[ 25, 25, 25, 25 ]\n');
});

it('theWorkerThreadsPoolPushesIntoItsOwnProcesssQueueInEachThreadsOrder', () => {
  const block = docBlock('js', 'isMainThread', 'connect(');
  const run = runAsWritten(block);
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toBe(`${Array.from({ length: 10 }, (_, i) => `thread 0:${i}`).join(' ')}\n`);
});

// The CLI and the daemon: the enqueue script of the docs pushes, while their worker daemon
// runs, into the queue the daemon holds (a second LogStore.open would be refused with ERR_LOCKED).
it('theEnqueueScriptPushesIntoTheRunningWorkerDaemonsQueue', async () => {
  const daemon = docBlock('js', "process.once('SIGTERM'", 'worker stopped cleanly');
  const cli = docBlock('js', 'enqueue.mjs', 'connect(');
  const dir = mkdtempSync(join(tmpdir(), 'pq-docs-'));
  const dist = pathToFileURL(join(root, 'dist', 'index.js')).href;
  const env = { ...process.env, QUEUE_DIR: join(dir, 'jobs') };
  try {
    writeFileSync(join(dir, 'worker.mjs'), daemon.replaceAll("from 'persistent-queue'", `from '${dist}'`));
    writeFileSync(join(dir, 'enqueue.mjs'), cli.replaceAll("from 'persistent-queue'", `from '${dist}'`));
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

it('theDashboardInAServiceRunsAsWrittenAndShowsTheLiveQueue', () => {
  const block = docBlock('js', "from 'persistent-queue/dashboard'", "basePath: '/ops/queue/'");
  const run = runAsWritten(block);
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toBe('true\nlive 2\n');
});

it('theSpoolExampleRunsAsWritten', () => {
  const block = docBlock('js', "console.log(producer.mode, await producer.pushMany(['a', 'b', 'c']))");
  const run = runAsWritten(block);
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toBe('spool [ 0, 0, 0 ]\n1 a\n2 b\n3 c\n');
});

/** `block` with the package's entry points made the built files, written as `name` in `dir`. */
function writeWithDist(dir: string, name: string, block: string): string {
  const url = (file: string): string => pathToFileURL(join(root, 'dist', file)).href;
  const file = join(dir, name);
  writeFileSync(
    file,
    block
      .replaceAll("from 'persistent-queue/sqlite'", `from '${url('stores/sqlite/index.js')}'`)
      .replaceAll("from 'persistent-queue/level'", `from '${url('stores/level/index.js')}'`)
      .replaceAll("from 'persistent-queue'", `from '${url('index.js')}'`),
  );
  return file;
}

// The README's first example, as a newcomer runs it: in a directory of its own, three times. The
// second run is SIGKILLed while its handler holds the second item (a module loaded before the
// example kills the process once that line is printed); the third finds that item first, with the
// delivery the kill cut short counted, and loses nothing.
it('theGettingStartedWorkerHandlesItsItemsAndAfterAKillHandsTheUnackedOneOutAgainFirst', () => {
  const dir = mkdtempSync(join(tmpdir(), 'pq-docs-'));
  try {
    const file = writeWithDist(dir, 'worker.mjs', docBlock('js', "LogStore.open('./jobs')", 'rx.process('));
    const run = (args: string[] = []) => spawnSync(process.execPath, [...args, file], { cwd: dir, encoding: 'utf8', timeout: 50_000 });
    const handled = (lines: string[]) => lines.map((line) => `handled ${line}\n`).join('');
    const first = run();
    expect(first.stderr).toBe('');
    expect(first.status).toBe(0);
    expect(first.stdout).toBe(handled(['resize photo 41 (delivery 1)', 'resize photo 42 (delivery 1)', 'send receipt 7 (delivery 1)']));
    const killer = `data:text/javascript,${encodeURIComponent(
      "const log = console.log; console.log = (...a) => { log(...a); if (String(a[0]).includes('photo 42')) process.kill(process.pid, 'SIGKILL'); };",
    )}`;
    const killed = run(['--import', killer]);
    expect(killed.signal).toBe('SIGKILL');
    expect(killed.stdout).toBe(handled(['resize photo 41 (delivery 1)', 'resize photo 42 (delivery 1)']));
    const after = run();
    expect(after.stderr).toBe('');
    expect(after.status).toBe(0);
    expect(after.stdout).toBe(
      handled([
        'resize photo 42 (delivery 2)',
        'send receipt 7 (delivery 1)',
        'resize photo 41 (delivery 1)',
        'resize photo 42 (delivery 1)',
        'send receipt 7 (delivery 1)',
      ]),
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

// The one-line process() call of the docs, with the names it assumes: a queue `rx`, a `handle`
// function and a `signal`, aborted here once every item is handled.
it('theProcessOneLinerHandlesEveryItemFourAtATimeUntilItsSignalAborts', () => {
  const dir = mkdtempSync(join(tmpdir(), 'pq-docs-'));
  try {
    const block = docBlock('js', 'handle(item.bytes), { concurrency: 4, signal }');
    const file = writeWithDist(
      dir,
      'process.mjs',
      `import { Builder, MemStore } from 'persistent-queue';
const [tx, rx] = await new Builder(new MemStore()).open();
await tx.pushMany(Array.from({ length: 20 }, (_, i) => \`job \${i}\`));
const stop = new AbortController();
const signal = stop.signal;
let running = 0;
let most = 0;
const seen = [];
async function handle(bytes) {
  running++;
  most = Math.max(most, running);
  await new Promise((resolve) => setImmediate(resolve));
  seen.push(new TextDecoder().decode(bytes));
  running--;
  if (seen.length === 20) stop.abort();
}
${block}
await rx.onIdle();
console.log(JSON.stringify({ handled: seen.length, distinct: new Set(seen).size, most, acked: rx.stats().acked }));
await rx.close();
`,
    );
    const run = spawnSync(process.execPath, [file], { encoding: 'utf8', timeout: 50_000 });
    expect(run.stderr).toBe('');
    expect(run.status).toBe(0);
    expect(JSON.parse(run.stdout)).toEqual({ handled: 20, distinct: 20, most: 4, acked: 20 });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

// The `await using` loop, compiled by the TypeScript this repository builds with (type checks off:
// the block assumes its `rx` and `handle`) for ES2022, and run on the Node that runs the tests,
// where `await using` does not parse as plain JavaScript before Node 24: an item its handler threw
// on is nacked at scope exit and comes first again.
it('theAwaitUsingLoopCompiledByTypeScriptNacksTheItemItsHandlerThrewOn', () => {
  const dir = mkdtempSync(join(tmpdir(), 'pq-docs-'));
  try {
    const loop = docBlock('ts', 'await using held = item');
    writeWithDist(
      dir,
      'loop.mts',
      `import { Builder, MemStore } from 'persistent-queue';
const [tx, rx] = await new Builder(new MemStore()).open();
await tx.pushMany(['a', 'fail', 'b']);
const seen: unknown[] = [];
const handle = async (bytes: Uint8Array) => {
  const text = new TextDecoder().decode(bytes);
  seen.push(text);
  if (text === 'fail') throw new Error('handler failed');
};
try {
${loop}
} catch (error) {
  seen.push((error as Error).message);
}
const again = rx.tryReserve()!;
seen.push(new TextDecoder().decode(again.bytes), again.deliveries, rx.stats().inFlight);
await again.ack();
await rx.close();
console.log(JSON.stringify(seen));
`,
    );
    const tsc = join(root, 'node_modules', '.bin', 'tsc');
    const compiled = spawnSync(
      tsc,
      ['loop.mts', '--noCheck', '--target', 'es2022', '--module', 'nodenext', '--lib', 'es2022,esnext.disposable', '--outDir', 'out'],
      { cwd: dir, encoding: 'utf8' },
    );
    expect(compiled.stdout + compiled.stderr).toBe('');
    expect(readFileSync(join(dir, 'out', 'loop.mjs'), 'utf8')).not.toMatch(/await using/);
    const out = execFileSync(process.execPath, [join(dir, 'out', 'loop.mjs')], { encoding: 'utf8' });
    expect(JSON.parse(out)).toEqual(['a', 'fail', 'handler failed', 'fail', 2, 1]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

// The SqliteStore and LevelStore lines of the docs, in a directory of their own: both subpaths load
// beside their peers, and the queue over SqliteStore takes a push and hands it out.
it('theSqliteStoreSnippetOpensAQueueInTheWorkingDirectory', () => {
  const dir = mkdtempSync(join(tmpdir(), 'pq-docs-'));
  try {
    const block = docBlock('js', "SqliteStore.open('./outbox.db')");
    const file = writeWithDist(
      dir,
      'stores.mjs',
      `${block}
await tx.push('through SQLite');
console.log(new TextDecoder().decode((await rx.reserve()).bytes), typeof LevelStore.open);
await rx.close();
`,
    );
    const run = spawnSync(process.execPath, [file], { cwd: dir, encoding: 'utf8', timeout: 50_000 });
    expect(run.stderr).toBe('');
    expect(run.status).toBe(0);
    expect(run.stdout).toBe('through SQLite function\n');
    expect(readdirSync(dir)).toContain('outbox.db');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

// The example of code written for both engines, type-checked as a user's strict TypeScript
// (`persistent-queue` resolved through its package exports to the published types) and run.
it('theExampleWrittenForBothEnginesTypeChecksUnderStrictAndRuns', () => {
  const dir = mkdtempSync(join(tmpdir(), 'pq-docs-'));
  try {
    mkdirSync(join(dir, 'node_modules'));
    symlinkSync(root, join(dir, 'node_modules', 'persistent-queue'), 'dir');
    writeFileSync(join(dir, 'package.json'), '{ "type": "module" }');
    // And the published classes of both engines, as a user's code holds them, are the interfaces.
    const parity = `
import type { Consumer, Producer, QueueItem, RemoteProducer, Reserved } from 'persistent-queue';
import type { JetStreamConsumer, JetStreamProducer, JetStreamReserved } from 'persistent-queue/jetstream';
export const consumers: QueueConsumer<string>[] = [] as (Consumer<string> | JetStreamConsumer<string>)[];
export const producers: QueueProducer<string>[] = [] as (Producer<string> | JetStreamProducer<string> | RemoteProducer<string>)[];
export const items: QueueItem<string>[] = [] as (Reserved<string> | JetStreamReserved<string>)[];
`;
    writeFileSync(join(dir, 'both.mts'), docBlock('ts', 'async function drainReady(rx: QueueConsumer<string>)') + parity);
    const tsc = join(root, 'node_modules', '.bin', 'tsc');
    const args = [
      'both.mts',
      '--strict',
      '--target',
      'es2022',
      '--module',
      'nodenext',
      '--lib',
      'es2022,esnext.disposable',
      '--types',
      'node',
      '--typeRoots',
      join(root, 'node_modules', '@types'),
      '--outDir',
      'out',
    ];
    const compiled = spawnSync(tsc, args, { cwd: dir, encoding: 'utf8' });
    expect(compiled.stdout + compiled.stderr).toBe('');
    const out = execFileSync(process.execPath, [join(dir, 'out', 'both.mjs')], { encoding: 'utf8' });
    expect(out).toBe("[ 'a', 'b', 'c' ] 0\n");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
