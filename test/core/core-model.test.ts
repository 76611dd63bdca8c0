/**
 * Model-based test of the core queue against a reference model: random interleavings of
 * push / pushMany / reserve / ack / nack / nack with a delay / the passing of time / dispose /
 * close+reopen never lose, duplicate or reorder items beyond what the semantics allow. The model's
 * rule for reserve is exact: the item delivered is always the ready item with the lowest seq, and
 * an item nacked with a delay is ready again once its time has passed (time is faked), or at once
 * after a reopen.
 *
 * Reproduce a failure with the seed and path fast-check prints, e.g.
 * `FC_SEED=123 FC_PATH="0:1" npx vitest run test/core/core-model.test.ts`.
 */
import fc from 'fast-check';
import { afterEach, beforeEach, expect, it, vi } from 'vitest';
import { Builder, MemStore, type Consumer, type Producer, type Reserved } from '../../src/index.js';

const dec = (b: Uint8Array) => new TextDecoder().decode(b);

interface Model {
  capacity: number;
  /** Unacked items by seq. */
  items: Map<number, string>;
  /** Deliveries since the last open, by seq. */
  deliveries: Map<number, number>;
  inFlight: number[];
  /** Items nacked with a delay, by seq: the fake time at which each is ready again. */
  delayed: Map<number, number>;
  /** Fake time passed since the run began, in ms. */
  nowMs: number;
  lastSeq: number;
}

interface Real {
  store: MemStore;
  durability: 'sync' | 'group' | 'none';
  tx: Producer;
  rx: Consumer;
  held: Map<number, Reserved>;
}

type Cmd = fc.AsyncCommand<Model, Real>;

function ready(m: Model): number[] {
  return [...m.items.keys()].filter((s) => !m.inFlight.includes(s) && !m.delayed.has(s)).sort((a, b) => a - b);
}

function checkStats(m: Model, r: Real): void {
  expect(r.rx.stats()).toMatchObject({ ready: ready(m).length, inFlight: m.inFlight.length, delayed: m.delayed.size });
}

class Push implements Cmd {
  constructor(
    readonly texts: string[],
    readonly many: boolean,
    /** Pushed as UTF-8 bytes rather than strings: a plain push of bytes takes a path of its own. */
    readonly asBytes: boolean,
  ) {}
  check(m: Readonly<Model>) {
    return m.items.size + this.texts.length <= m.capacity && (this.many || this.texts.length === 1);
  }
  async run(m: Model, r: Real) {
    const values = this.asBytes ? this.texts.map((t) => utf8.encode(t)) : this.texts;
    const seqs = this.many ? await r.tx.pushMany(values) : [await r.tx.push(values[0]!)];
    expect(seqs.length).toBe(this.texts.length);
    seqs.forEach((seq, i) => {
      expect(seq).toBeGreaterThan(m.lastSeq);
      m.lastSeq = seq;
      m.items.set(seq, this.texts[i]!);
    });
    checkStats(m, r);
  }
  toString() {
    return `${this.many ? 'pushMany' : 'push'}(${JSON.stringify(this.texts)}${this.asBytes ? ' as bytes' : ''})`;
  }
}

class Reserve implements Cmd {
  check() {
    return true;
  }
  async run(m: Model, r: Real) {
    const expected = ready(m)[0];
    // A redelivery after a reopen waits for its delivery mark: reserve() waits, tryReserve() does not.
    const item = r.rx.tryReserve() ?? (expected !== undefined ? await r.rx.reserve() : null);
    if (expected === undefined) {
      expect(item).toBeNull();
      return;
    }
    expect(item).not.toBeNull();
    expect(item!.seq).toBe(expected);
    expect(dec(item!.bytes)).toBe(m.items.get(expected));
    const d = (m.deliveries.get(expected) ?? 0) + 1;
    m.deliveries.set(expected, d);
    expect(item!.deliveries).toBe(d);
    m.inFlight.push(expected);
    r.held.set(expected, item!);
    checkStats(m, r);
  }
  toString() {
    return 'reserve';
  }
}

class Settle implements Cmd {
  constructor(
    readonly pick: number,
    readonly how: 'ack' | 'nack' | 'dispose' | 'delay',
    readonly delayMs = 0,
  ) {}
  check(m: Readonly<Model>) {
    return m.inFlight.length > 0;
  }
  async run(m: Model, r: Real) {
    const seq = m.inFlight[this.pick % m.inFlight.length]!;
    const item = r.held.get(seq)!;
    if (this.how === 'ack') await item.ack();
    else if (this.how === 'nack') await item.nack();
    else if (this.how === 'delay') await item.nack({ delayMs: this.delayMs });
    else await item[Symbol.asyncDispose]();
    r.held.delete(seq);
    m.inFlight = m.inFlight.filter((s) => s !== seq);
    if (this.how === 'ack') m.items.delete(seq);
    if (this.how === 'delay' && this.delayMs > 0) m.delayed.set(seq, m.nowMs + this.delayMs);
    await expect(item.ack()).rejects.toMatchObject({ code: 'ERR_ALREADY_SETTLED' });
    checkStats(m, r);
  }
  toString() {
    return this.how === 'delay' ? `nack(#${this.pick}, { delayMs: ${this.delayMs} })` : `${this.how}(#${this.pick})`;
  }
}

class Advance implements Cmd {
  constructor(readonly ms: number) {}
  check() {
    return true;
  }
  async run(m: Model, r: Real) {
    vi.advanceTimersByTime(this.ms);
    m.nowMs += this.ms;
    for (const [seq, dueMs] of m.delayed) if (dueMs <= m.nowMs) m.delayed.delete(seq);
    checkStats(m, r);
  }
  toString() {
    return `advance(${this.ms} ms)`;
  }
}

class Reopen implements Cmd {
  check() {
    return true;
  }
  async run(m: Model, r: Real) {
    await r.tx.close();
    for (const item of r.held.values()) await expect(item.ack()).rejects.toMatchObject({ code: 'ERR_CLOSED' });
    [r.tx, r.rx] = await new Builder(r.store).capacity(m.capacity).durability(r.durability).open();
    r.held.clear();
    m.inFlight = [];
    m.delayed.clear();
    // The store keeps delivery counts: a clean close and reopen leaves them as they were.
    checkStats(m, r);
  }
  toString() {
    return 'close+reopen';
  }
}

const text = fc.string({ maxLength: 8 });
const utf8 = new TextEncoder();
const commands = [
  fc.tuple(text, fc.boolean()).map(([t, asBytes]) => new Push([t], false, asBytes)),
  fc.tuple(fc.array(text, { minLength: 1, maxLength: 4 }), fc.boolean()).map(([ts, asBytes]) => new Push(ts, true, asBytes)),
  fc.constant(new Reserve()),
  fc.constant(new Reserve()),
  fc.nat(16).map((n) => new Settle(n, 'ack')),
  fc.nat(16).map((n) => new Settle(n, 'nack')),
  fc.nat(16).map((n) => new Settle(n, 'dispose')),
  fc.tuple(fc.nat(16), fc.integer({ min: 0, max: 40 })).map(([n, ms]) => new Settle(n, 'delay', ms)),
  fc.integer({ min: 1, max: 30 }).map((ms) => new Advance(ms)),
  fc.constant(new Reopen()),
];

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
});
afterEach(() => {
  vi.useRealTimers();
});

it('theCoreMatchesTheReferenceModel', async () => {
  const seed = process.env.FC_SEED ? Number(process.env.FC_SEED) : 20261129;
  await fc.assert(
    fc.asyncProperty(
      fc.constantFrom('sync', 'group', 'none' as const),
      fc.integer({ min: 1, max: 12 }),
      fc.commands(commands, { maxCommands: 80, size: 'max' }),
      async (durability, capacity, cmds) => {
        const store = new MemStore();
        const [tx, rx] = await new Builder(store).capacity(capacity).durability(durability).open();
        const real: Real = { store, durability, tx, rx, held: new Map() };
        const model: Model = { capacity, items: new Map(), deliveries: new Map(), inFlight: [], delayed: new Map(), nowMs: 0, lastSeq: 0 };
        try {
          await fc.asyncModelRun(() => ({ model, real }), cmds);
          // Liveness: after everything is returned, every unacked item is delivered exactly once, in seq order.
          await new Reopen().run(model, real);
          const drained: number[] = [];
          // reserve(), not tryReserve(): a redelivery after the reopen waits for its delivery mark.
          for (
            let item = real.rx.stats().ready > 0 ? await real.rx.reserve() : null;
            item;
            item = real.rx.stats().ready > 0 ? await real.rx.reserve() : null
          ) {
            expect(dec(item.bytes)).toBe(model.items.get(item.seq));
            drained.push(item.seq);
            await item.ack();
          }
          expect(drained).toEqual([...model.items.keys()].sort((a, b) => a - b));
        } finally {
          await real.tx.close();
        }
      },
    ),
    { seed, numRuns: Number(process.env.FC_RUNS ?? 300), path: process.env.FC_PATH, endOnFailure: false },
  );
});
