// Typed queues: codecs on the builder (json, structured, text, bytes, custom), Standard Schema
// validation at both ends, and payloads that fail to decode or validate, which go to the dead
// letters with the reason and are never handed to the consumer.
import { describe, expect, it } from 'vitest';
import { Builder, MemStore, QueueError, type StandardSchemaV1, json, structured, text, validated } from '../../src/index.js';
import { firstContractStore } from '../support/stores.js';

const code = (c: string) => (e: unknown) => e instanceof QueueError && e.code === c;

interface Order {
  id: number;
  sku: string;
}

/** A Standard Schema validator written by hand, as zod, valibot or arktype provide one. */
const orderSchema: StandardSchemaV1<unknown, Order> = {
  '~standard': {
    version: 1,
    vendor: 'test',
    validate(value: unknown) {
      const v = value as Partial<Order> | null;
      const issues = [];
      if (v === null || typeof v !== 'object') return { issues: [{ message: 'not an object' }] };
      if (typeof v.id !== 'number' || !Number.isInteger(v.id)) issues.push({ message: 'must be an integer', path: ['id'] });
      if (typeof v.sku !== 'string') issues.push({ message: 'must be a string', path: [{ key: 'sku' }] });
      return issues.length > 0 ? { issues } : { value: { id: v.id!, sku: v.sku! } };
    },
  },
};

describe('typed queues', () => {
  it('aJsonQueueHandsOutTheValuePushedThroughReserveProcessAndForAwait', async () => {
    const [tx, rx] = await new Builder(new MemStore()).codec(json<Order>()).open();
    await tx.push({ id: 1, sku: 'a' });
    await tx.pushMany([
      { id: 2, sku: 'b' },
      { id: 3, sku: 'c' },
    ]);
    const first = (await rx.reserve())!;
    expect(first.value).toEqual({ id: 1, sku: 'a' });
    expect(new TextDecoder().decode(first.bytes)).toBe('{"id":1,"sku":"a"}');
    await first.ack();
    const seen: number[] = [];
    const stop = new AbortController();
    await rx.process(
      async (item) => {
        seen.push(item.value.id);
        if (seen.length === 2) stop.abort();
      },
      { signal: stop.signal },
    );
    expect(seen).toEqual([2, 3]);
    await tx.push({ id: 4, sku: 'd' });
    for await (const item of rx) {
      expect(item.value.sku).toBe('d');
      await item.ack();
      break;
    }
    await tx.close();
  });

  it('forAwaitSkipsALongRunOfUndecodableItemsAndHandsOutTheNextGoodOne', async () => {
    // Ready items are taken within one step, refused ones skipped in a loop.
    const store = new MemStore();
    const [raw] = await new Builder(store).open();
    const bad = new TextEncoder().encode('not json');
    for (let i = 0; i < 30_000; i += 1000) await raw.pushMany(Array.from({ length: 1000 }, () => bad));
    await raw.push(JSON.stringify({ id: 7, sku: 'ok' }));
    await raw.close();
    const [tx, rx] = await new Builder(store).codec(json<Order>()).open();
    for await (const item of rx) {
      expect(item.value).toEqual({ id: 7, sku: 'ok' });
      await item.ack();
      break;
    }
    await rx.onIdle();
    expect(rx.stats()).toMatchObject({ deadLetters: 30_000, ready: 0, inFlight: 0 });
    await tx.close();
  });

  it('structuredAndTextCodecsRoundTripWhatTheyPromise', async () => {
    const [stx, srx] = await new Builder(new MemStore()).codec(structured<{ at: Date; tags: Map<string, bigint> }>()).open();
    const at = new Date(1_700_000_000_000);
    await stx.push({ at, tags: new Map([['n', 12n]]) });
    const got = srx.tryReserve()!.value;
    expect(got.at).toEqual(at);
    expect(got.tags.get('n')).toBe(12n);
    await stx.close();
    const [ttx, trx] = await new Builder(new MemStore()).codec(text()).open();
    await ttx.push('héllo');
    expect(trx.tryReserve()!.value).toBe('héllo');
    await ttx.close();
  });

  it('aValueThatDoesNotEncodeRejectsItsPushAndStoresNothing', async () => {
    const [tx] = await new Builder(new MemStore()).codec(json<unknown>()).open();
    await expect(tx.push(undefined)).rejects.toSatisfy(code('ERR_ENCODE'));
    await expect(tx.push({ n: 1n })).rejects.toSatisfy(code('ERR_ENCODE'));
    await expect(tx.pushMany([{ ok: true }, () => 1])).rejects.toSatisfy(code('ERR_ENCODE'));
    const [ttx] = await new Builder(new MemStore()).codec(text()).open();
    await expect(ttx.push(5 as unknown as string)).rejects.toSatisfy(code('ERR_ENCODE'));
    expect(tx.stats()).toMatchObject({ pushed: 0, pendingPushes: 0 });
    await tx.close();
    await ttx.close();
  });

  it('aSchemaRefusesAnInvalidPushWithErrInvalidAndStoresNothing', async () => {
    const [tx, rx] = await new Builder(new MemStore()).codec(json(orderSchema)).open();
    await expect(tx.push({ id: 1.5, sku: 7 } as unknown as Order)).rejects.toSatisfy(
      (e) => code('ERR_INVALID')(e) && /id: must be an integer; sku: must be a string/.test((e as Error).message),
    );
    expect(tx.stats().pushed).toBe(0);
    await tx.push({ id: 9, sku: 'ok' });
    expect(rx.tryReserve()!.value).toEqual({ id: 9, sku: 'ok' });
    await tx.close();
  });

  it('payloadsThatFailToDecodeOrValidateGoToTheDeadLettersWithTheReasonAndAreNeverHandedOut', async () => {
    const store = new MemStore();
    // Written by a byte queue (another producer, an older version): one good, two bad.
    const [btx] = await new Builder(store).open();
    await btx.push('{"id":1,"sku":"good"}');
    await btx.push('not json');
    await btx.push('{"id":"two","sku":"bad"}');
    await btx.push('{"id":4,"sku":"good too"}');
    await btx.close();
    const [tx, rx] = await new Builder(store).codec(json(orderSchema)).open();
    const handled: string[] = [];
    const stop = new AbortController();
    await rx.process(
      async (item) => {
        handled.push(item.value.sku);
        if (handled.length === 2) stop.abort();
      },
      { signal: stop.signal },
    );
    expect(handled).toEqual(['good', 'good too']);
    const dead = await rx.deadLetters.list();
    expect(dead.map((d) => d.seq)).toEqual([2, 3]);
    expect(dead[0]!.reason).toMatch(/^json\+test could not decode the payload: /);
    expect(dead[1]!.reason).toBe('json+test: Invalid value: id: must be an integer');
    expect(rx.stats().deadLetters).toBe(2);
    await tx.close();
  });

  it('tryReservePassesOverAnUndecodablePayloadToTheNextOne', async () => {
    const store = new MemStore();
    const [btx] = await new Builder(store).open();
    await btx.pushMany(['\xff{', '"fine"']);
    await btx.close();
    const [tx, rx] = await new Builder(store).codec(json<string>()).open();
    expect(rx.tryReserve()!.value).toBe('fine');
    await tx.close();
  });

  it('aSchemaThatAnswersAsynchronouslyFailsTheCallsAndMovesNothing', async () => {
    const asyncSchema: StandardSchemaV1<unknown, number> = {
      '~standard': { version: 1, vendor: 'later', validate: async (value) => ({ value: value as number }) },
    };
    const store = new MemStore();
    const [btx] = await new Builder(store).open();
    await btx.push('1');
    await btx.close();
    const [tx, rx] = await new Builder(store).codec(json(asyncSchema)).open();
    await expect(tx.push(2)).rejects.toSatisfy(code('ERR_ENCODE'));
    await expect(rx.reserve()).rejects.toThrow(/answered asynchronously/);
    expect(rx.stats()).toMatchObject({ deadLetters: 0, inFlight: 0, ready: 1 });
    // The for-await iterator rejects the same way and is done after it: it reserves nothing more.
    const it = rx[Symbol.asyncIterator]();
    await expect(it.next()).rejects.toThrow(/answered asynchronously/);
    await expect(it.next()).resolves.toEqual({ value: undefined, done: true });
    expect(rx.stats()).toMatchObject({ deadLetters: 0, ready: 1 });
    expect(rx.stats().redelivered).toBeLessThanOrEqual(1);
    await tx.close();
  });

  it('aForkOfATypedConsumerIsTypedToo', async () => {
    const [tx, rx] = await new Builder(new MemStore()).codec(json<Order>()).open();
    const fork = rx.fork();
    await tx.push({ id: 5, sku: 'f' });
    expect(fork.tryReserve()!.value.id).toBe(5);
    await tx.close();
  });

  it('aCodecOverAStoreWithoutDeadLettersIsRefusedAtOpenAndBadCodecsAreTypeErrors', async () => {
    const plain = firstContractStore();
    await expect(new Builder(plain).codec(json()).open()).rejects.toSatisfy(code('ERR_UNSUPPORTED'));
    const [tx] = await new Builder(plain).open();
    await tx.close();
    expect(() => new Builder(new MemStore()).codec({ encode: () => '' } as never)).toThrow(TypeError);
    expect(() => validated(json(), { '~standard': { version: 2 } } as never)).toThrow(TypeError);
  });

  it('aCustomCodecNamesItselfInItsErrors', async () => {
    const upper = { name: 'upper', encode: (s: string) => s.toUpperCase(), decode: (b: Uint8Array) => new TextDecoder().decode(b) };
    const [tx, rx] = await new Builder(new MemStore()).codec(upper).open();
    await tx.push('abc');
    expect(rx.tryReserve()!.value).toBe('ABC');
    const broken = { name: 'broken', encode: () => 5 as unknown as string, decode: () => 0 };
    const [btx] = await new Builder(new MemStore()).codec(broken).open();
    await expect(btx.push(1 as never)).rejects.toSatisfy((e) => code('ERR_ENCODE')(e) && /broken/.test((e as Error).message));
    await tx.close();
    await btx.close();
  });
});

describe('typed dead letters', () => {
  it('deadLettersDecodeToTheQueueTypeAndOneThatNeverDecodedThrowsErrInvalidAndStays', async () => {
    const store = new MemStore();
    // A byte queue over the same store leaves a payload that is not JSON.
    const [raw, rawRx] = await new Builder(store).open();
    await raw.push('{not json');
    await rawRx.close();
    const [tx, rx] = await new Builder(store).codec(json<Order>()).open();
    await tx.push({ id: 7, sku: 'x' });
    const item = (await rx.reserve())!;
    expect(item.value).toEqual({ id: 7, sku: 'x' });
    await item.deadLetter('out of stock');
    const letters = await rx.deadLetters.list();
    expect(letters.map((l) => l.seq)).toEqual([1, 2]);
    expect(letters[0]!.reason).toMatch(/could not decode/);
    const good: Order = rx.deadLetters.decode(letters[1]!);
    expect(good).toEqual({ id: 7, sku: 'x' });
    expect(() => rx.deadLetters.decode(letters[0]!)).toThrow(expect.objectContaining({ code: 'ERR_INVALID' }));
    expect(() => rx.deadLetters.decode({ seq: 1 } as never)).toThrow(TypeError);
    expect(rx.deadLetters.count()).toBe(2);
    await rx.close();
  });

  it('aByteQueueDecodesADeadLetterToItsBytes', async () => {
    const [tx, rx] = await new Builder(new MemStore()).open();
    await tx.push('abc');
    await (await rx.reserve())!.deadLetter();
    const letter = (await rx.deadLetters.peek())!;
    expect(new TextDecoder().decode(rx.deadLetters.decode(letter))).toBe('abc');
    await rx.close();
  });
});
