/**
 * The diagnostics channels: each event is published once, with the right message, at the moment
 * the README names; messages carry no payload and name their queue; nothing is published (and no
 * message built) while a channel has no subscriber.
 */
import { execFileSync } from 'node:child_process';
import diagnosticsChannel from 'node:diagnostics_channel';
import { afterEach, describe, expect, it } from 'vitest';
import { Builder, LogStore, MemStore, QueueError, channels, type ChannelMessages } from '../../src/index.js';
import { CrashFileSystem } from '../../src/testing/index.js';
import { distUrl } from '../support/child-process.js';
import { RecordingStore, tick } from '../support/stores.js';
const dec = (bytes: Uint8Array): string => new TextDecoder().decode(bytes);

type Key = keyof typeof channels;
type Event = [Key, Record<string, unknown>];

const NAMES = Object.entries(channels) as [Key, keyof ChannelMessages][];

/** Subscribes to every channel; `of(queueId)` is what one queue published, in order. */
function record() {
  const events: Event[] = [];
  const subscriptions = NAMES.map(([key, name]) => {
    const fn = (message: unknown) => events.push([key, message as Record<string, unknown>]);
    diagnosticsChannel.subscribe(name, fn);
    return [name, fn] as const;
  });
  const stop = () => {
    for (const [name, fn] of subscriptions) diagnosticsChannel.unsubscribe(name, fn);
  };
  stops.push(stop);
  return { events, stop, of: (queueId: number) => events.filter(([, m]) => m.queueId === queueId) };
}

const stops: (() => void)[] = [];
afterEach(() => {
  for (const stop of stops.splice(0)) stop();
});

describe('channel names', () => {
  it('theChannelsFollowTheNodeConventionAndAreExportedFromTheRoot', () => {
    expect(channels).toEqual({
      push: 'persistent-queue:push',
      deliver: 'persistent-queue:deliver',
      ack: 'persistent-queue:ack',
      nack: 'persistent-queue:nack',
      retry: 'persistent-queue:retry',
      deadLetter: 'persistent-queue:dead-letter',
      failStop: 'persistent-queue:fail-stop',
    });
  });
});

describe('each channel at its moment', () => {
  it('pushIsPublishedForEachItemWhenItsPushResolvesAndNotWhileItIsBeingStored', async () => {
    const rec = record();
    const store = new RecordingStore();
    store.hold = true;
    const [tx, rx] = await new Builder(store).open();
    const id = rx.stats().queueId;
    let seenAtResolve = -1;
    const pushed = tx.pushMany(['a', 'bcd']).then((seqs) => {
      seenAtResolve = rec.of(id).length;
      return seqs;
    });
    await store.heldCount(1);
    expect(rec.of(id)).toEqual([]);
    store.releaseAll();
    expect(await pushed).toEqual([1, 2]);
    expect(seenAtResolve, 'published before the push resolved').toBe(2);
    expect(rec.of(id)).toEqual([
      ['push', { queueId: id, store: 'RecordingStore', seq: 1, byteLength: 1 }],
      ['push', { queueId: id, store: 'RecordingStore', seq: 2, byteLength: 3 }],
    ]);
    await rx.close();
  });

  it('deliverNackRetryAndAckFollowAnItemThroughANackAndItsRedelivery', async () => {
    const rec = record();
    const [tx, rx] = await new Builder(new MemStore()).open();
    const id = rx.stats().queueId;
    await tx.push('xy');
    const item = { queueId: id, store: 'MemStore', seq: 1, byteLength: 2 };
    const first = rx.tryReserve()!;
    expect(rec.of(id).at(-1)).toEqual(['deliver', { ...item, deliveries: 1 }]);
    await first.nack();
    const again = rx.tryReserve()!;
    await again.ack();
    expect(rec.of(id)).toEqual([
      ['push', { queueId: id, store: 'MemStore', seq: 1, byteLength: 2 }],
      ['deliver', { ...item, deliveries: 1 }],
      ['nack', { ...item, deliveries: 1 }],
      ['deliver', { ...item, deliveries: 2 }],
      ['retry', { ...item, deliveries: 2 }],
      ['ack', { ...item, deliveries: 2 }],
    ]);
    await rx.close();
  });

  it('nackComesBeforeTheRetryEvenWhenANackHandsTheItemStraightToAWaitingReserve', async () => {
    const rec = record();
    const [tx, rx] = await new Builder(new MemStore()).open();
    const id = rx.stats().queueId;
    await tx.push('x');
    const first = rx.tryReserve()!;
    const waiting = rx.reserve();
    await first.nack();
    expect((await waiting)!.deliveries).toBe(2);
    expect(rec.of(id).map(([k, m]) => `${k}:${m.deliveries ?? '-'}`)).toEqual(['push:-', 'deliver:1', 'nack:1', 'deliver:2', 'retry:2']);
    await rx.close();
  });

  it('ackIsPublishedWhenTheAckResolvesNotWhenItIsIssued', async () => {
    const rec = record();
    const store = new RecordingStore();
    const [tx, rx] = await new Builder(store).open();
    const id = rx.stats().queueId;
    await tx.pushMany(['a', 'b']);
    const a = rx.tryReserve()!;
    const b = rx.tryReserve()!;
    store.hold = true;
    let seenAtResolve = -1;
    const acked = Promise.all([a.ack(), b.ack()]).then(() => {
      seenAtResolve = rec.of(id).filter(([k]) => k === 'ack').length;
    });
    await store.heldCount(1);
    expect(rec.of(id).filter(([k]) => k === 'ack')).toEqual([]);
    store.releaseAll();
    await acked;
    expect(seenAtResolve).toBe(2);
    expect(
      rec
        .of(id)
        .filter(([k]) => k === 'ack')
        .map(([, m]) => m.seq),
    ).toEqual([1, 2]);
    await rx.close();
  });

  it('retryIsPublishedWhenAnItemReturnedByARefusedAckIsDeliveredAgain', async () => {
    const rec = record();
    const store = new RecordingStore();
    const [tx, rx] = await new Builder(store).open();
    const id = rx.stats().queueId;
    await tx.push('x');
    store.failNextAck = new QueueError('ERR_STORE_FULL', 'no space');
    await expect(rx.tryReserve()!.ack()).rejects.toHaveProperty('code', 'ERR_STORE_FULL');
    expect(rec.of(id).map(([k]) => k)).toEqual(['push', 'deliver']);
    await rx.reserve();
    expect(rec.of(id).slice(2)).toEqual([
      ['deliver', { queueId: id, store: 'RecordingStore', seq: 1, byteLength: 1, deliveries: 2 }],
      ['retry', { queueId: id, store: 'RecordingStore', seq: 1, byteLength: 1, deliveries: 2 }],
    ]);
    expect(rx.stats()).toMatchObject({ acked: 0, nacked: 0, redelivered: 1 });
    await rx.close();
  });

  it('retryIsPublishedWhenADroppedReservationIsDeliveredAgain', async () => {
    const gc = (globalThis as { gc?: () => void }).gc;
    expect(gc, 'run with --expose-gc').toBeTypeOf('function');
    const rec = record();
    const [tx, rx] = await new Builder(new MemStore()).open();
    const id = rx.stats().queueId;
    await tx.push('dropped');
    (() => {
      rx.tryReserve();
    })();
    for (let i = 0; i < 50 && rx.stats().inFlight > 0; i++) {
      gc!();
      await tick();
    }
    expect(rx.stats().ready).toBe(1);
    await rx.reserve();
    expect(rec.of(id).map(([k, m]) => `${k}:${m.deliveries ?? '-'}`)).toEqual(['push:-', 'deliver:1', 'deliver:2', 'retry:2']);
    await rx.close();
  });

  it('failStopIsPublishedOnceWithTheErrorEveryOperationRejectsWith', async () => {
    const rec = record();
    const store = new RecordingStore();
    const [tx, rx] = await new Builder(store).open();
    const id = rx.stats().queueId;
    await tx.push('ok');
    const held = rx.tryReserve()!;
    const cause = Object.assign(new Error('EIO: i/o error, write'), { code: 'EIO' });
    store.failNextAppend = cause;
    const failed = await tx.push('lost').catch((e: unknown) => e);
    await expect(held.ack()).rejects.toBe(failed);
    const stops = rec.of(id).filter(([k]) => k === 'failStop');
    expect(stops).toEqual([['failStop', { queueId: id, store: 'RecordingStore', error: failed }]]);
    expect(failed).toMatchObject({ code: 'ERR_STORE_FAILED', cause });
    await tx.close();
    expect(rec.of(id).filter(([k]) => k === 'failStop')).toHaveLength(1);
  });

  it('failStopIsPublishedWhenTheCrashDiskFailsAnFdatasyncUnderLogStore', async () => {
    const rec = record();
    const fs = new CrashFileSystem({ seed: 7 });
    const [tx, rx] = await new Builder(await LogStore.open('/q', { fs })).durability('sync').open();
    const id = rx.stats().queueId;
    await tx.push('stored');
    fs.inject({ op: 'fdatasync', code: 'EIO' });
    const failed = await tx.push('lost').catch((e: unknown) => e);
    expect(failed).toMatchObject({ code: 'ERR_STORE_FAILED' });
    expect(rec.of(id).map(([k]) => k)).toEqual(['push', 'failStop']);
    expect(rec.of(id)[1]).toEqual(['failStop', { queueId: id, store: 'LogStore', error: failed }]);
    await tx.close();
  });

  it('deadLetterIsPublishedOnceTheMoveIsStoredWithTheReasonAndNeverThePayload', async () => {
    const rec = record();
    const [tx, rx] = await new Builder(new MemStore()).maxDeliveries(2).open();
    const id = rx.stats().queueId;
    await tx.pushMany(['a', 'b', 'c']);
    for (let i = 0; i < 2; i++) await (await rx.reserve())!.nack();
    // The third delivery of 'a' would pass maxDeliveries: it is moved, and 'b' comes next.
    const b = (await rx.reserve())!;
    expect(dec(b.bytes)).toBe('b');
    await b.deadLetter('bad input');
    const dead = rec.of(id).filter(([k]) => k === 'deadLetter');
    expect(dead).toEqual([
      [
        'deadLetter',
        { queueId: id, store: 'MemStore', seq: 1, byteLength: 1, deliveries: 2, reason: 'handed out 2 times (maxDeliveries 2)' },
      ],
      ['deadLetter', { queueId: id, store: 'MemStore', seq: 2, byteLength: 1, deliveries: 1, reason: 'bad input' }],
    ]);
    expect(rx.stats()).toMatchObject({ deadLettered: 2, deadLetters: 2, ready: 1 });
    await rx.close();
  });
});

describe('what a subscriber sees', () => {
  it('aSubscriberThatReadsStatsSeesItsEventAlreadyCounted', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    const id = rx.stats().queueId;
    const seen: string[] = [];
    const subscriptions = NAMES.map(([key, name]) => {
      const fn = (m: unknown) => {
        if ((m as { queueId: number }).queueId !== id) return;
        const s = rx.stats();
        seen.push(
          `${key} ready=${s.ready} inFlight=${s.inFlight} pushed=${s.pushed} acked=${s.acked} nacked=${s.nacked} redelivered=${s.redelivered}`,
        );
      };
      diagnosticsChannel.subscribe(name, fn);
      return () => diagnosticsChannel.unsubscribe(name, fn);
    });
    stops.push(() => {
      for (const u of subscriptions) u();
    });
    await tx.push('x');
    const waiting = rx.reserve();
    await tick();
    const first = (await waiting)!;
    const again = rx.reserve();
    await first.nack();
    await (await again)!.ack();
    expect(seen).toEqual([
      'push ready=1 inFlight=0 pushed=1 acked=0 nacked=0 redelivered=0',
      'deliver ready=0 inFlight=1 pushed=1 acked=0 nacked=0 redelivered=0',
      // The nack hands the item straight to the waiting reserve: it is ready while nack is published.
      'nack ready=1 inFlight=0 pushed=1 acked=0 nacked=1 redelivered=0',
      'deliver ready=0 inFlight=1 pushed=1 acked=0 nacked=1 redelivered=1',
      'retry ready=0 inFlight=1 pushed=1 acked=0 nacked=1 redelivered=1',
      'ack ready=0 inFlight=0 pushed=1 acked=1 nacked=1 redelivered=1',
    ]);
    await rx.close();
  });

  it('aSubscriberThatThrowsLeavesTheQueueWorkingAndItsErrorSurfacesAsUncaught', () => {
    // In a child process, where an uncaught exception is the test's to catch (the built package).
    const script = `
import diagnosticsChannel from 'node:diagnostics_channel';
import { Builder, MemStore, channels } from ${JSON.stringify(distUrl('index.js'))};
const out = [];
process.on('uncaughtException', (e) => out.push('uncaught ' + e.message));
for (const name of Object.values(channels)) diagnosticsChannel.subscribe(name, () => { throw new Error('subscriber bug'); });
const [tx, rx] = await new Builder(new MemStore()).open();
out.push('seq ' + (await tx.push('x')));
await rx.tryReserve().ack();
await rx.onIdle();
out.push(JSON.stringify(rx.stats().acked));
await rx.close();
setImmediate(() => console.log(JSON.stringify(out)));
`;
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' });
    const lines = JSON.parse(out) as string[];
    expect(lines.filter((l) => !l.startsWith('uncaught'))).toEqual(['seq 1', '1']);
    // push, deliver, ack: each subscriber error reported, none swallowed.
    expect(lines.filter((l) => l === 'uncaught subscriber bug')).toHaveLength(3);
  });
});

describe('what a message carries', () => {
  it('messagesNameTheirQueueSoTwoQueuesOfOneStoreClassAreToldApart', async () => {
    const rec = record();
    const [tx1, rx1] = await new Builder(new MemStore()).open();
    const [tx2, rx2] = await new Builder(new MemStore()).open();
    const [id1, id2] = [rx1.stats().queueId, rx2.stats().queueId];
    expect(id2).toBeGreaterThan(id1);
    await tx1.push('one');
    await tx2.push('two');
    expect(rec.of(id1)).toEqual([['push', { queueId: id1, store: 'MemStore', seq: 1, byteLength: 3 }]]);
    expect(rec.of(id2)).toEqual([['push', { queueId: id2, store: 'MemStore', seq: 1, byteLength: 3 }]]);
    await rx1.close();
    await rx2.close();
  });

  it('noMessageHoldsThePayloadOrAnythingThatReachesIt', async () => {
    const rec = record();
    const [tx, rx] = await new Builder(new MemStore()).open();
    const id = rx.stats().queueId;
    const payload = new TextEncoder().encode('secret');
    await tx.push(payload);
    const item = rx.tryReserve()!;
    await item.nack();
    await rx.tryReserve()!.ack();
    const events = rec.of(id);
    expect(events.length).toBe(6);
    for (const [, message] of events) {
      for (const value of Object.values(message)) {
        expect(typeof value === 'number' || typeof value === 'string', `${JSON.stringify(message)}`).toBe(true);
      }
    }
    await rx.close();
  });
});

describe('with no subscriber', () => {
  /** Wraps each channel's publish so a call is seen even when Node would drop it for want of subscribers. */
  function spyOnPublish() {
    const calls: string[] = [];
    const restore: (() => void)[] = [];
    for (const [, name] of NAMES) {
      const channel = diagnosticsChannel.channel(name);
      // Node swaps a channel's prototype as subscribers come and go: call whichever is current.
      channel.publish = function (this: diagnosticsChannel.Channel, message: unknown) {
        calls.push(name);
        return (Object.getPrototypeOf(this) as diagnosticsChannel.Channel).publish.call(this, message);
      };
      restore.push(() => {
        delete (channel as { publish?: unknown }).publish;
      });
    }
    stops.push(() => {
      for (const r of restore) r();
    });
    return calls;
  }

  /** Every event once: push, deliver, nack, retry, ack, and fail-stop. */
  async function everyEvent(): Promise<{ acked: number; ready: number; failed: unknown }> {
    const store = new RecordingStore();
    const [tx, rx] = await new Builder(store).open();
    await tx.pushMany(['a', 'b']);
    await rx.tryReserve()!.nack();
    await rx.tryReserve()!.ack();
    store.failNextAppend = new Error('EIO');
    const failed = await tx.push('c').catch((e: unknown) => e);
    const stats = rx.stats();
    await tx.close();
    return { acked: stats.acked, ready: stats.ready, failed };
  }

  it('aSubscriberAttachedThenDetachedSeesNothingNoPublishIsCalledAndTheQueueWorks', async () => {
    const calls = spyOnPublish();
    const seen: unknown[] = [];
    const fn = (m: unknown) => seen.push(m);
    for (const [, name] of NAMES) diagnosticsChannel.subscribe(name, fn);
    for (const [, name] of NAMES) diagnosticsChannel.unsubscribe(name, fn);
    const result = await everyEvent();
    expect(result).toMatchObject({ acked: 1, ready: 1, failed: expect.objectContaining({ code: 'ERR_STORE_FAILED' }) });
    expect(seen).toEqual([]);
    // No publish call means no message was built: the core builds one only inside the guard.
    expect(calls).toEqual([]);
  });

  it('theSpyDoesSeeEveryPublishWhileSubscribed', async () => {
    const calls = spyOnPublish();
    const rec = record();
    await everyEvent();
    const short = (n: string) => n.replace('persistent-queue:', '');
    expect(calls.map(short)).toEqual(['push', 'push', 'deliver', 'nack', 'deliver', 'retry', 'ack', 'fail-stop']);
    expect(rec.events.map(([k]) => k)).toEqual(['push', 'push', 'deliver', 'nack', 'deliver', 'retry', 'ack', 'failStop']);
  });
});
