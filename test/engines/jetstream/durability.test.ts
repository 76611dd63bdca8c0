/**
 * What a push the server acknowledged survives on JetStream, as `stats().durability` reports it and
 * the `PQ_JETSTREAM_DURABILITY` warning says it, against a real nats-server of the test's own. The
 * queues and forwarders run in child processes importing the built package, so that each run
 * shows the warning exactly as a user's process would (once per process, on stderr). Which rows a
 * real server exercises depends on its version: a server before 2.10 has no `sync_interval`
 * setting and fsyncs every 2 minutes, a later one does not tell a client; the rows the machine's
 * server cannot reach are checked on `durabilityOf` itself.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { RetentionPolicy, StorageType, jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { DURABILITY_WARNING_CODE, durabilityOf, weakerThan } from '../../../src/engines/jetstream/durability.js';
import { JetStreamBuilder, forward } from '../../../src/engines/jetstream/index.js';
import { Builder, MemStore } from '../../../src/index.js';
import { distUrl } from '../../support/child-process.js';
import { type NatsNode, natsServerBinary, startNatsServer } from '../../support/nats-server.js';

const run = promisify(execFile);
const binary = natsServerBinary();
if (binary === undefined) console.log('skipped: no nats-server binary (install nats-server)');

/** A child that opens JetStream queues and forwarders as `scenario` says and prints their `durability`. */
const CHILD = `
import { Builder, LogStore } from ${JSON.stringify(distUrl('index.js'))};
import { JetStreamBuilder, forward } from ${JSON.stringify(distUrl('engines/jetstream/index.js'))};
import { connect } from ${JSON.stringify(import.meta.resolve('@nats-io/transport-node'))};
const [url, dir, scenario] = process.argv.slice(2);
const { queues = [], forwards = [] } = JSON.parse(scenario);
const nc = await connect({ servers: url });
const out = [];
for (const options of queues) {
  try {
    const [, rx] = await new JetStreamBuilder(nc, options).open();
    out.push((await rx.stats()).durability);
    await rx.close();
  } catch (error) {
    out.push({ refused: error.code });
  }
}
let n = 0;
for (const { durability, ...target } of forwards) {
  const [tx, rx] = await new Builder(await LogStore.open(dir + '/' + n++)).durability(durability).open();
  await tx.push('reading');
  const stop = new AbortController();
  const f = forward(rx, { connection: nc, ...target }, { signal: stop.signal });
  await rx.onIdle();
  stop.abort();
  await f.done;
  out.push(f.stats().durability);
  await tx.close();
}
console.log(JSON.stringify(out));
await nc.close();
`;

describe.skipIf(binary === undefined)('what a push survives on JetStream', () => {
  let server: NatsNode;
  let nc: NatsConnection;
  let dir: string;
  let version: string;
  /** True when the machine's server predates `sync_interval` (2.10): it fsyncs every 2 minutes. */
  let fixedInterval: boolean;
  let streams = 0;

  beforeAll(async () => {
    server = await startNatsServer(binary!);
    nc = await connect({ servers: server.url });
    version = nc.info!.version;
    fixedInterval = /^2\.[0-9]\./.test(version);
    dir = mkdtempSync(join(tmpdir(), 'pq-durability-'));
    writeFileSync(join(dir, 'child.mjs'), CHILD);
  });

  afterAll(async () => {
    await nc?.close();
    await server?.stop();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  /** Run the child; its printed reports, and the warnings on its stderr. */
  async function child(scenario: object): Promise<{ reports: Record<string, unknown>[]; warnings: string[]; stderr: string }> {
    const work = mkdtempSync(join(dir, 'run-'));
    const { stdout, stderr } = await run(process.execPath, [join(dir, 'child.mjs'), server.url, work, JSON.stringify(scenario)], {
      encoding: 'utf8',
    });
    const warnings = stderr.split('\n').filter((line) => line.includes(`[${DURABILITY_WARNING_CODE}]`));
    return { reports: JSON.parse(stdout) as Record<string, unknown>[], warnings, stderr };
  }

  const name = (what: string): string => `PQ_DUR_${what}_${process.pid}_${++streams}`;

  /** What the server's version says of a file stream it fsyncs on its own schedule. */
  function onInterval(stated?: 'always'): Record<string, unknown> {
    if (fixedInterval) return { serverVersion: version, syncInterval: 120_000, syncSource: 'server', survives: 'process-crash' };
    if (stated === 'always') return { serverVersion: version, syncInterval: 'always', syncSource: 'stated', survives: 'power-loss' };
    return { serverVersion: version, syncInterval: 'unknown', syncSource: 'unknown', survives: 'unknown' };
  }

  test('aQueueReportsWhatAPushSurvivesAndWarnsOnceInTheProcessWhenThatIsLessThanGroup', async () => {
    const plain = name('Q');
    const stated = name('Q');
    const { reports, warnings } = await child({ queues: [{ stream: plain }, { stream: stated, serverSyncInterval: 'always' }] });
    expect(reports).toEqual([
      { ...onInterval(), stream: plain, storage: 'file', replicas: 1, persistMode: 'default' },
      // A server before 2.10 fsyncs every 2 minutes whatever the caller states.
      { ...onInterval('always'), stream: stated, storage: 'file', replicas: 1, persistMode: 'default' },
    ]);
    // Two queues, one warning: it names the first queue and what its server does.
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain(`JetStream queue ${plain}`);
    expect(warnings[0]).toContain(
      fixedInterval ? `nats-server ${version} fsyncs every 120000 ms` : `nats-server ${version} does not tell a client how often it fsyncs`,
    );
  });

  test('aQueueOnAMemoryStreamIsRefusedBeforeItWarns', async () => {
    // A resolved push there would not survive a restart of the server: refused at open (the row
    // `nothing` of durabilityOf is left to forward(), below), so nothing is reported or warned.
    const stream = name('MEM');
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: stream, subjects: [`pq.${stream}`], retention: RetentionPolicy.Workqueue, storage: StorageType.Memory });
    const { reports, warnings } = await child({ queues: [{ stream }] });
    expect(reports).toEqual([{ refused: 'ERR_UNSUPPORTED' }]);
    expect(warnings).toEqual([]);
  });

  test('forwardFromAQueueUnderNoneIntoAFileStreamReportsItAndDoesNotWarn', async () => {
    const stream = name('FWD');
    const subject = `pq.durability.${stream}`;
    const { reports, warnings, stderr } = await child({ forwards: [{ durability: 'none', subject, stream: { name: stream } }] });
    expect(reports).toEqual([{ ...onInterval(), stream, storage: 'file', replicas: 1, persistMode: 'default' }]);
    // A crash of the server's process loses nothing a file stream acknowledged, as `none` promises.
    expect(warnings).toEqual([]);
    expect(stderr).toBe('');
  });

  test('forwardFromAQueueUnderGroupWarnsOnceThatTheServerMayLoseWhatItAcknowledged', async () => {
    const first = name('FWD');
    const second = name('FWD');
    const { reports, warnings } = await child({
      forwards: [
        { durability: 'group', subject: `pq.durability.${first}`, stream: { name: first } },
        { durability: 'sync', subject: `pq.durability.${second}`, stream: { name: second } },
      ],
    });
    expect(reports).toEqual([
      { ...onInterval(), stream: first, storage: 'file', replicas: 1, persistMode: 'default' },
      { ...onInterval(), stream: second, storage: 'file', replicas: 1, persistMode: 'default' },
    ]);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain(`forward() into stream ${first}`);
    expect(warnings[0]).toContain('(durability group) survives a power loss');
  });

  test('forwardIntoAMemoryStreamWarnsEvenFromAQueueUnderNone', async () => {
    const stream = name('FWDMEM');
    const subject = `pq.durability.${stream}`;
    const { reports, warnings } = await child({ forwards: [{ durability: 'none', subject, stream: { name: stream, storage: 'memory' } }] });
    expect(reports).toEqual([{ ...onInterval(), stream, storage: 'memory', replicas: 1, persistMode: 'default', survives: 'nothing' }]);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain('(durability none) survives a crash of this process');
  });
});

test('aBadServerSyncIntervalThrowsAndStartsNothing', async () => {
  const nc = { publish() {}, subscribe() {}, request() {}, closed() {}, isClosed: () => false, status() {} } as unknown as NatsConnection;
  expect(() => new JetStreamBuilder(nc, { stream: 'S', serverSyncInterval: 0 })).toThrow('Expected `options.serverSyncInterval` to be');
  expect(() => new JetStreamBuilder(nc, { stream: 'S', serverSyncInterval: 'sometimes' as never })).toThrow(TypeError);
  expect(() => new JetStreamBuilder(nc, { stream: 'S', serverSyncInterval: 1.5 })).toThrow(RangeError);
  const [tx, rx] = await new Builder(new MemStore()).open();
  await tx.push('x');
  // A connection still being made is a valid target: the bad option is found before anything starts.
  const pending = new Promise<NatsConnection>(() => {});
  expect(() => forward(rx, { connection: pending, subject: 's', serverSyncInterval: -1 })).toThrow(RangeError);
  expect(() => forward(rx, { connection: pending, subject: 's', serverSyncInterval: '2m' as never })).toThrow(TypeError);
  expect(() => forward(rx, { connection: pending, subject: 's', stream: { name: 'S', subjects: ['other.>'] } })).toThrow(
    /target\.stream\.subjects/,
  );
  expect(() => forward(rx, { connection: pending, subject: 's', stream: { name: '' } })).toThrow(RangeError);
  expect(rx.stats()).toMatchObject({ ready: 1, inFlight: 0 });
  await tx.close();
});

test('durabilityOfGoesByTheServerVersionThenByWhatIsStated', () => {
  const stream = { stream: 'S', storage: 'file', replicas: 1, persistMode: undefined };
  const rows: [Parameters<typeof durabilityOf>[0], Partial<ReturnType<typeof durabilityOf>>][] = [
    [
      { ...stream, serverVersion: '2.9.10', stated: undefined },
      { syncInterval: 120_000, syncSource: 'server', survives: 'process-crash' },
    ],
    [
      { ...stream, serverVersion: '2.9.10', stated: 'always' },
      { syncInterval: 120_000, syncSource: 'server', survives: 'process-crash' },
    ],
    [
      { ...stream, serverVersion: '2.10.0', stated: undefined },
      { syncInterval: 'unknown', syncSource: 'unknown', survives: 'unknown' },
    ],
    [
      { ...stream, serverVersion: '2.12.1', stated: 'always' },
      { syncInterval: 'always', syncSource: 'stated', survives: 'power-loss' },
    ],
    [
      { ...stream, serverVersion: '2.11.4', stated: 10_000 },
      { syncInterval: 10_000, syncSource: 'stated', survives: 'process-crash' },
    ],
    [
      { ...stream, serverVersion: '3.0.0', stated: undefined },
      { syncInterval: 'unknown', survives: 'unknown' },
    ],
    [
      { ...stream, serverVersion: undefined, stated: undefined },
      { serverVersion: 'unknown', syncInterval: 'unknown', survives: 'unknown' },
    ],
    [
      { ...stream, serverVersion: '2.12.1', stated: 'always', persistMode: 'async' },
      { persistMode: 'async', survives: 'nothing' },
    ],
    [
      { ...stream, serverVersion: '2.12.1', stated: 'always', storage: 'memory' },
      { storage: 'memory', survives: 'nothing' },
    ],
    [
      { ...stream, serverVersion: '2.12.1', stated: 'always', replicas: 3 },
      { replicas: 3, survives: 'power-loss' },
    ],
  ];
  for (const [facts, expected] of rows) expect(durabilityOf(facts), JSON.stringify(facts)).toMatchObject(expected);
});

test('weakerThanComparesWhatAPushSurvivesWithTheLocalPolicy', () => {
  const survives = ['power-loss', 'process-crash', 'nothing', 'unknown'] as const;
  const table = {
    sync: [false, true, true, true],
    group: [false, true, true, true],
    // `none` survives a crash of the process: any file stream keeps that much.
    none: [false, false, true, false],
  } as const;
  for (const [policy, row] of Object.entries(table)) {
    expect(
      survives.map((s) => weakerThan(s, policy as 'sync' | 'group' | 'none')),
      policy,
    ).toEqual(row);
  }
});
