/**
 * The JetStream queue refuses the embedded queue's flow controls it cannot keep, with
 * ERR_UNSUPPORTED and nothing stored: groups and group limits (its consumers in other processes
 * share no in-flight count), rate limits and throttled deliveries (a window per process, a server
 * that counts every delivery), and schedules (nothing on the server stores a fire with its item).
 * Uses the server on 127.0.0.1:4222 when one answers there, else starts one from the nats-server
 * binary; skipped, with the reason printed, only when the machine has no nats-server at all.
 */
import { jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { isQueueError } from '../../../src/contract/errors.js';
import { JetStreamBuilder } from '../../../src/engines/jetstream/index.js';
import { type NatsNode, natsServerBinary, startNatsServer } from '../../support/nats-server.js';

const binary = natsServerBinary();
if (binary === undefined)
  console.warn('jetstream-flow.test.ts skipped: no nats-server binary on this machine (looked in /usr/sbin and PATH)');
const maybe = binary === undefined ? test.skip : test;

let nc: NatsConnection;
let own: NatsNode | undefined;
const stream = `PQT_FLOW_${process.pid}`;

beforeAll(async () => {
  if (binary === undefined) return;
  try {
    nc = await connect({ servers: '127.0.0.1:4222', reconnect: false, timeout: 1000 });
    await jetstreamManager(nc);
  } catch {
    await nc?.close().catch(() => {});
    own = await startNatsServer(binary);
    nc = await connect({ servers: own.url });
  }
}, 30_000);

afterAll(async () => {
  if (nc === undefined) return;
  const jsm = await jetstreamManager(nc).catch(() => undefined);
  for (const name of [stream, `${stream}_DEAD`]) await jsm?.streams.delete(name).catch(() => {});
  await nc.close();
  await own?.stop();
});

const unsupported = (e: unknown) => isQueueError(e, 'ERR_UNSUPPORTED');

maybe(
  'JetStream: groups, group limits, rate limits, throttled deliveries and schedules are refused with ERR_UNSUPPORTED and change nothing',
  async () => {
    expect(() => new JetStreamBuilder(nc, { stream, rateLimit: { max: 1, perMs: 1000 } } as never)).toThrow(
      expect.objectContaining({ code: 'ERR_UNSUPPORTED' }),
    );
    const [tx, rx] = await new JetStreamBuilder(nc, { stream, pullExpiresMs: 2000 }).open();
    try {
      await expect(tx.push('x', { group: 'tenant' })).rejects.toSatisfy(unsupported);
      await expect(tx.pushMany(['x', 'y'], { group: 'tenant' })).rejects.toSatisfy(unsupported);
      await expect(tx.schedule('nightly', { everyMs: 1000 }, 'x')).rejects.toSatisfy(unsupported);
      await expect(tx.unschedule('nightly')).rejects.toSatisfy(unsupported);
      await expect(rx.process(() => {}, { groupConcurrency: 1 } as never)).rejects.toSatisfy(unsupported);
      await expect(rx.reserve({ groupConcurrency: 1 })).rejects.toSatisfy(unsupported);
      await expect(rx.reserveMany(2, { groupConcurrency: 1 })).rejects.toSatisfy(unsupported);
      expect(await rx.tryReserve()).toBeNull();
      await tx.push('plain');
      const item = (await rx.reserve())!;
      await expect(item.rateLimited(100)).rejects.toSatisfy(unsupported);
      expect(item.settled).toBe(false);
      await item.ack();
    } finally {
      await tx.close();
    }
  },
);
