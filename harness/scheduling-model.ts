// A reference model of what the queue hands out, and when, with delays, priorities, leases and
// several competing consumers, and a seeded workload that drives a real queue beside it on an
// injected clock. The checker is exact: each reserve gets the ready item of highest priority,
// lowest seq among those; no item is held by two consumers; a lease that ran out makes its
// holder's ack reject with ERR_LEASE_EXPIRED and the item is handed out again; nothing acked comes
// back, nothing pushed is lost, across restarts of the queue (and, where the target can, crashes).
import { Builder, type Consumer, type Producer, QueueError, type Reserved, type Store } from '../src/index.js';
import { ManualClock, Prng } from '../src/testing/index.js';

const dec = (b: Uint8Array) => new TextDecoder().decode(b);

/** The store under test: a fresh one, and one over what a clean close or a crash left. */
export interface ScheduleTarget {
  readonly name: string;
  open(): Promise<Store>;
  /** Over the same data after `close()`; with `crash`, after a power loss of the open store. */
  restart(previous: Store, how: 'reopen' | 'crash'): Promise<Store>;
  /** The target can simulate a power loss. */
  readonly crashes: boolean;
}

interface ModelItem {
  readonly seq: number;
  readonly text: string;
  readonly priority: number;
  readonly notBefore: number;
  /** Index of the consumer holding it, -1 when none. */
  heldBy: number;
  /** Clock time the holder's lease runs out; Infinity without one. */
  leaseDue: number;
  /** Clock time a nack's delay ends (in memory only: forgotten at a restart); 0 when none. */
  retryDue: number;
  /** A push that resolved is durable: a crash keeps it. An ack may be lost by a crash (redelivery). */
  acked: boolean;
}

interface Held {
  readonly item: Reserved;
  readonly consumer: number;
}

export interface ScheduleRunOptions {
  readonly seed: number;
  readonly steps: number;
  /** Forks beside the queue's own consumer. */
  readonly forks: number;
}

const PRIORITIES = [-2, 0, 0, 0, 0, 1, 4];
const DELAYS = [0, 0, 0, 0, 20, 75, 300];

/** Run one seeded workload; throws (with what differed) when the queue departs from the model. */
/** What one run did, so that a test can tell its workload reached the cases it is about. */
export interface ScheduleRunStats {
  reserves: number;
  leaseExpiries: number;
  staleAcks: number;
  crashes: number;
  reopens: number;
}

export async function runScheduleModel(target: ScheduleTarget, options: ScheduleRunOptions, log: string[]): Promise<ScheduleRunStats> {
  const stats: ScheduleRunStats = { reserves: 0, leaseExpiries: 0, staleAcks: 0, crashes: 0, reopens: 0 };
  const rng = new Prng(options.seed);
  const clock = new ManualClock();
  const queueLeaseMs = rng.bool() ? Infinity : rng.pick([40, 120]);
  const items = new Map<number, ModelItem>();
  const held = new Map<number, Held>();
  /** Reservations whose lease ran out: their holder's calls must be refused. */
  let stale: Reserved[] = [];
  let store = await target.open();
  let tx!: Producer;
  let consumers: Consumer[] = [];

  const fail = (message: string): never => {
    throw new Error(`${target.name}: ${message}\nlast steps:\n  ${log.slice(-12).join('\n  ')}`);
  };
  const openQueue = async (): Promise<void> => {
    // Acks are synced before they resolve where crashes are simulated, so that a crash loses no
    // resolved ack and the model stays exact (a lazy ack lost to a crash would only redeliver).
    const builder = new Builder(store).clock(clock);
    if (target.crashes) builder.ackDurability('group');
    if (queueLeaseMs !== Infinity) builder.leaseMs(queueLeaseMs);
    let rx: Consumer;
    [tx, rx] = await builder.open();
    consumers = [rx];
    for (let i = 0; i < options.forks; i++) consumers.push(rx.fork());
  };
  const isReady = (m: ModelItem): boolean => !m.acked && m.heldBy < 0 && m.notBefore <= clock.now() && m.retryDue <= clock.now();
  const expected = (): ModelItem | undefined => {
    let best: ModelItem | undefined;
    for (const m of items.values()) {
      if (!isReady(m)) continue;
      if (best === undefined || m.priority > best.priority || (m.priority === best.priority && m.seq < best.seq)) best = m;
    }
    return best;
  };
  /** Leases that ran out by now: the items are ready again, their holders stale. */
  const expireLeases = (): void => {
    for (const [seq, h] of held) {
      const m = items.get(seq)!;
      if (m.leaseDue <= clock.now()) {
        held.delete(seq);
        m.heldBy = -1;
        m.leaseDue = Infinity;
        stale.push(h.item);
        stats.leaseExpiries++;
      }
    }
  };
  const checkStats = (): void => {
    const s = tx.stats();
    let waiting = 0;
    let leased = 0;
    let unacked = 0;
    for (const m of items.values()) {
      if (m.acked) continue;
      unacked++;
      if (m.heldBy >= 0) {
        if (m.leaseDue !== Infinity) leased++;
      } else if (m.notBefore > clock.now() || m.retryDue > clock.now()) waiting++;
    }
    const want = { inFlight: held.size, delayed: waiting, leased, ready: unacked - held.size - waiting };
    const got = { inFlight: s.inFlight, delayed: s.delayed, leased: s.leased, ready: s.ready };
    if (JSON.stringify(got) !== JSON.stringify(want)) fail(`stats ${JSON.stringify(got)}, the model says ${JSON.stringify(want)}`);
  };
  const restart = async (how: 'reopen' | 'crash'): Promise<void> => {
    if (how === 'reopen') await tx.close();
    store = await target.restart(store, how);
    if (how === 'crash') await tx.close().catch(() => {});
    held.clear();
    stale = [];
    for (const m of items.values()) {
      m.heldBy = -1;
      m.leaseDue = Infinity;
      m.retryDue = 0;
    }
    await openQueue();
  };

  await openQueue();
  let text = 0;
  for (let step = 0; step < options.steps; step++) {
    const roll = rng.int(100);
    if (roll < 22) {
      const count = rng.bool(0.7) ? 1 : rng.intBetween(2, 3);
      const priority = rng.pick(PRIORITIES);
      const delayMs = rng.pick(DELAYS);
      const texts = Array.from({ length: count }, () => `t${text++}`);
      log.push(`push ${texts.join(',')} priority ${priority} delayMs ${delayMs} at ${clock.now()}`);
      const seqs = count === 1 ? [await tx.push(texts[0]!, { priority, delayMs })] : await tx.pushMany(texts, { priority, delayMs });
      const notBefore = delayMs > 0 ? clock.now() + delayMs : 0;
      for (const [i, seq] of seqs.entries())
        items.set(seq, { seq, text: texts[i]!, priority, notBefore, heldBy: -1, leaseDue: Infinity, retryDue: 0, acked: false });
    } else if (roll < 34) {
      const ms = rng.pick([1, 10, 20, 50, 120, 400]);
      log.push(`advance ${ms}`);
      clock.advance(ms);
      expireLeases();
    } else if (roll < 60) {
      const k = rng.int(consumers.length);
      const leaseMs = rng.bool(0.6) ? undefined : rng.pick([30, 90, Infinity]);
      const want = expected();
      log.push(`reserve by ${k} leaseMs ${leaseMs} (model: ${want?.text ?? 'none'})`);
      if (want === undefined) {
        const got = consumers[k]!.tryReserve();
        if (got !== null) fail(`consumer ${k} got ${dec(got.bytes)} (seq ${got.seq}), the model has nothing ready`);
      } else {
        // reserve() rather than tryReserve(): an item coming back waits for its delivery mark.
        const got = await consumers[k]!.reserve(leaseMs === undefined ? undefined : { leaseMs });
        if (got === null) fail(`consumer ${k} got null, the model expects ${want.text}`);
        if (got!.seq !== want.seq)
          fail(`consumer ${k} got ${dec(got!.bytes)} (seq ${got!.seq}), the model expects ${want.text} (seq ${want.seq})`);
        if (held.has(got!.seq)) fail(`seq ${got!.seq} is held twice`);
        const lengthMs = leaseMs ?? queueLeaseMs;
        want.heldBy = k;
        want.leaseDue = lengthMs === Infinity ? Infinity : clock.now() + lengthMs;
        held.set(got!.seq, { item: got!, consumer: k });
        stats.reserves++;
      }
    } else if (roll < 76 && held.size > 0) {
      const [seq, h] = rng.pick([...held]);
      const m = items.get(seq)!;
      const how = rng.int(3);
      if (how === 0) {
        log.push(`ack ${m.text}`);
        await h.item.ack();
        m.acked = true;
      } else {
        const delayMs = how === 1 ? 0 : rng.pick([10, 60]);
        log.push(`nack ${m.text} delayMs ${delayMs}`);
        await h.item.nack({ delayMs });
        m.retryDue = delayMs > 0 ? clock.now() + delayMs : 0;
      }
      held.delete(seq);
      m.heldBy = -1;
      m.leaseDue = Infinity;
    } else if (roll < 82 && held.size > 0) {
      const [seq, h] = rng.pick([...held]);
      const ms = rng.pick([25, 100]);
      log.push(`extend ${items.get(seq)!.text} by ${ms}`);
      await h.item.extend(ms);
      items.get(seq)!.leaseDue = clock.now() + ms;
    } else if (roll < 88 && stale.length > 0) {
      const item = stale.splice(rng.int(stale.length), 1)[0]!;
      log.push(`stale ack of seq ${item.seq}`);
      const outcome = await item.ack().then(
        () => 'resolved',
        (e: unknown) => (e instanceof QueueError ? e.code : String(e)),
      );
      if (outcome !== 'ERR_LEASE_EXPIRED') fail(`a stale holder's ack of seq ${item.seq}: ${outcome}, expected ERR_LEASE_EXPIRED`);
      stats.staleAcks++;
    } else if (roll < 93 && options.forks > 0) {
      const k = rng.intBetween(1, options.forks);
      log.push(`close fork ${k}, fork again`);
      await consumers[k]!.close();
      for (const [seq, h] of held) {
        if (h.consumer !== k) continue;
        held.delete(seq);
        const m = items.get(seq)!;
        m.heldBy = -1;
        m.leaseDue = Infinity;
      }
      consumers[k] = consumers[0]!.fork();
    } else if (roll < 97) {
      const how = target.crashes && rng.bool() ? 'crash' : 'reopen';
      log.push(how);
      await restart(how);
      if (how === 'crash') stats.crashes++;
      else stats.reopens++;
    } else {
      continue;
    }
    checkStats();
  }
  // Let every time come and take everything left: exactly the unacked items, each once.
  clock.advance(10_000);
  expireLeases();
  for (const h of held.values()) await h.item.ack();
  for (const seq of held.keys()) items.get(seq)!.acked = true;
  held.clear();
  const left: number[] = [];
  const rx = consumers[0]!;
  // tryReserve() may answer null while an asynchronous store's read is out: wait while items are ready.
  for (
    let got = rx.tryReserve() ?? (rx.stats().ready > 0 ? await rx.reserve() : null);
    got;
    got = rx.tryReserve() ?? (rx.stats().ready > 0 ? await rx.reserve() : null)
  ) {
    const m = items.get(got.seq);
    if (m === undefined || m.acked) fail(`seq ${got.seq} came back after its ack`);
    left.push(got.seq);
    await got.ack();
  }
  const want = [...items.values()].filter((m) => !m.acked).map((m) => m.seq);
  left.sort((a, b) => a - b);
  if (JSON.stringify(left) !== JSON.stringify(want))
    fail(`left at the end ${JSON.stringify(left)}, the model says ${JSON.stringify(want)}`);
  await tx.close();
  return stats;
}
