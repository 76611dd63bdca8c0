// A reference model of flow control: groups with per-consumer concurrency limits and a rate limit
// (for the queue or by group, with the pauses `item.rateLimited(ms)` asks for), across several
// competing consumers with leases, restarts and crashes, on an injected clock; and a seeded
// workload that drives a real queue beside it. The checker is exact: each reserve by a consumer
// with group limit L gets the ready item of highest priority, lowest seq among those whose group
// has fewer than L items in flight (items without a group always qualify) and whose rate window
// (the queue's, or its group's) has room and is not paused; a try that the model says finds
// nothing finds nothing. So no group ever has more than L in flight through a consumer of limit L,
// no window ever holds more than `max` hand-outs of any `perMs`, and no item waits while it could
// go and a consumer asks (no group starves behind another at its limit). A delivery ended with
// `rateLimited` is not counted. Nothing acked comes back, nothing pushed is lost.
import { Builder, type Consumer, type Producer, QueueError, type RateLimitOptions, type Reserved } from '../src/index.js';
import { ManualClock, Prng } from '../src/testing/index.js';
import type { ScheduleTarget } from './scheduling-model.js';

const dec = (b: Uint8Array) => new TextDecoder().decode(b);

export type FlowTarget = ScheduleTarget;

const WAITING = Symbol('waiting');

/**
 * What `promise` settles with within `turns` turns of the event loop, or WAITING. The stores here
 * answer within a few turns (their syncs settle in the next turn), so a reserve the model expects
 * an item from and that is still waiting after many is waiting for good: reported, not hung on.
 */
async function within<T>(promise: Promise<T>, turns = 200): Promise<T | typeof WAITING> {
  let outcome: { value: T } | { error: unknown } | undefined;
  promise.then(
    (value) => (outcome = { value }),
    (error: unknown) => (outcome = { error }),
  );
  for (let i = 0; i < turns && outcome === undefined; i++) await new Promise<void>((resolve) => setImmediate(resolve));
  if (outcome === undefined) return WAITING;
  if ('error' in outcome) throw outcome.error;
  return outcome.value;
}

interface ModelItem {
  readonly seq: number;
  readonly text: string;
  readonly group: string | undefined;
  readonly priority: number;
  readonly notBefore: number;
  /** Index of the consumer holding it, -1 when none. */
  heldBy: number;
  /** Clock time the holder's lease runs out; Infinity without one. */
  leaseDue: number;
  /** Clock time a nack's delay ends (in memory only: forgotten at a restart); 0 when none. */
  retryDue: number;
  acked: boolean;
  /** Deliveries counted so far, when known: a restart may count one a crash or a throttle left out. */
  deliveries: number | undefined;
}

interface Held {
  readonly item: Reserved;
  readonly consumer: number;
}

export interface FlowRunOptions {
  readonly seed: number;
  readonly steps: number;
  /** Forks beside the queue's own consumer. */
  readonly forks: number;
}

/** What one run did, so that a test can tell its workload reached the cases it is about. */
export interface FlowRunStats {
  reserves: number;
  /** Reserves whose best ready item was of a group at the consumer's limit, and that got another. */
  passedOver: number;
  /** Reserves that found nothing while items were ready, all of groups at the consumer's limit. */
  heldBack: number;
  leaseExpiries: number;
  /** Reserves that found nothing, or another item than the best, because of a rate window. */
  rateHeld: number;
  throttles: number;
  crashes: number;
  reopens: number;
}

const GROUPS = ['hot', 'hot', 'hot', 'warm', 'cold', undefined];
const PRIORITIES = [0, 0, 0, 0, 2, -1];
const DELAYS = [0, 0, 0, 0, 0, 40];
const LIMITS = [1, 1, 2, 3, Infinity];

export async function runFlowModel(target: FlowTarget, options: FlowRunOptions, log: string[]): Promise<FlowRunStats> {
  const stats: FlowRunStats = {
    reserves: 0,
    passedOver: 0,
    heldBack: 0,
    leaseExpiries: 0,
    rateHeld: 0,
    throttles: 0,
    crashes: 0,
    reopens: 0,
  };
  const rng = new Prng(options.seed);
  const clock = new ManualClock();
  const queueLeaseMs = rng.bool() ? Infinity : rng.pick([60, 150]);
  const items = new Map<number, ModelItem>();
  const held = new Map<number, Held>();
  let stale: Reserved[] = [];
  let store = await target.open();
  let tx!: Producer;
  let consumers: Consumer[] = [];
  /** Each consumer's group limit, kept across restarts and re-forks. */
  const limits = Array.from({ length: options.forks + 1 }, () => rng.pick(LIMITS));
  const rate: RateLimitOptions | undefined = rng.bool(0.35)
    ? undefined
    : { max: rng.pick([1, 2, 3]), perMs: rng.pick([20, 50, 120]), by: rng.pick(['queue', 'group'] as const) };
  /** Hand-out times in each rate window (in memory in the queue: a restart starts them empty), and its pause. */
  const windows = new Map<string, { times: number[]; pausedUntil: number }>();
  const windowOf = (m: ModelItem) => {
    const key = rate?.by === 'group' ? (m.group ?? '') : '';
    let w = windows.get(key);
    if (w === undefined) windows.set(key, (w = { times: [], pausedUntil: 0 }));
    return w;
  };
  const inWindow = (w: { times: number[] }) => w.times.filter((t) => t > clock.now() - rate!.perMs).length;
  const rateAllows = (m: ModelItem): boolean => {
    if (rate === undefined) return true;
    const w = windowOf(m);
    return w.pausedUntil <= clock.now() && inWindow(w) < rate.max;
  };

  const fail = (message: string): never => {
    throw new Error(
      `${target.name}: ${message}\nlimits ${JSON.stringify(limits)} rate ${JSON.stringify(rate)}\nlast steps:\n  ${log.slice(-(Number(process.env.FLOW_LOG) || 14)).join('\n  ')}`,
    );
  };
  const openQueue = async (): Promise<void> => {
    const builder = new Builder(store).clock(clock);
    if (target.crashes) builder.ackDurability('group');
    if (queueLeaseMs !== Infinity) builder.leaseMs(queueLeaseMs);
    if (rate !== undefined) builder.rateLimit(rate);
    let rx: Consumer;
    [tx, rx] = await builder.open();
    consumers = [rx];
    for (let i = 0; i < options.forks; i++) consumers.push(rx.fork());
  };
  const inFlight = (group: string): number => {
    let n = 0;
    for (const h of held.keys()) if (items.get(h)!.group === group) n++;
    return n;
  };
  const isReady = (m: ModelItem): boolean => !m.acked && m.heldBy < 0 && m.notBefore <= clock.now() && m.retryDue <= clock.now();
  const better = (a: ModelItem, b: ModelItem | undefined): boolean =>
    b === undefined || a.priority > b.priority || (a.priority === b.priority && a.seq < b.seq);
  /**
   * The item a consumer of limit `limit` must get, the best ready item whatever its group and its
   * window, and the best whatever its window.
   */
  const expected = (limit: number): { want: ModelItem | undefined; best: ModelItem | undefined; unthrottled: ModelItem | undefined } => {
    let want: ModelItem | undefined;
    let best: ModelItem | undefined;
    let unthrottled: ModelItem | undefined;
    for (const m of items.values()) {
      if (!isReady(m)) continue;
      if (better(m, best)) best = m;
      if (m.group !== undefined && inFlight(m.group) >= limit) continue;
      if (better(m, unthrottled)) unthrottled = m;
      if (!rateAllows(m)) continue;
      if (better(m, want)) want = m;
    }
    return { want, best, unthrottled };
  };
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
    let unacked = 0;
    for (const m of items.values()) {
      if (m.acked) continue;
      unacked++;
      if (m.heldBy < 0 && (m.notBefore > clock.now() || m.retryDue > clock.now())) waiting++;
    }
    const want = { inFlight: held.size, delayed: waiting, ready: unacked - held.size - waiting };
    const got = { inFlight: s.inFlight, delayed: s.delayed, ready: s.ready };
    if (JSON.stringify(got) !== JSON.stringify(want)) fail(`stats ${JSON.stringify(got)}, the model says ${JSON.stringify(want)}`);
    if (s.groupLimited + s.rateLimited > s.ready)
      fail(`stats: ${s.groupLimited} and ${s.rateLimited} items held back for their groups and rates, only ${s.ready} ready`);
    if (rate?.by === 'queue') {
      const w = windows.get('');
      const shut = w !== undefined && (w.pausedUntil > clock.now() || inWindow(w) >= rate.max);
      if (s.rateLimited !== (shut ? s.ready - s.groupLimited : 0))
        fail(
          `stats: rateLimited ${s.rateLimited} with the queue's window ${shut ? 'shut' : 'open'}, ready ${s.ready}, groupLimited ${s.groupLimited}`,
        );
    }
  };
  const restart = async (how: 'reopen' | 'crash'): Promise<void> => {
    if (how === 'reopen') await tx.close();
    store = await target.restart(store, how);
    // A crashed process does nothing more: its close is not waited for (a sync it had in flight,
    // a background checkpoint's, never settles on the crash disk), only started so that the dead
    // queue stops its timers and hands nothing out.
    if (how === 'crash') void tx.close().catch(() => {});
    held.clear();
    stale = [];
    windows.clear();
    for (const m of items.values()) {
      m.heldBy = -1;
      m.leaseDue = Infinity;
      m.retryDue = 0;
      m.deliveries = undefined;
    }
    await openQueue();
  };

  await openQueue();
  let text = 0;
  for (let step = 0; step < options.steps; step++) {
    const roll = rng.int(100);
    if (roll < 24) {
      const count = rng.bool(0.7) ? 1 : rng.intBetween(2, 3);
      const group = rng.pick(GROUPS);
      const priority = rng.pick(PRIORITIES);
      const delayMs = rng.pick(DELAYS);
      const texts = Array.from({ length: count }, () => `t${text++}`);
      log.push(`push ${texts.join(',')} group ${group} priority ${priority} delayMs ${delayMs} at ${clock.now()}`);
      const push = { priority, delayMs, ...(group === undefined ? {} : { group }) };
      const seqs = count === 1 ? [await tx.push(texts[0]!, push)] : await tx.pushMany(texts, push);
      const notBefore = delayMs > 0 ? clock.now() + delayMs : 0;
      for (const [i, seq] of seqs.entries())
        items.set(seq, {
          seq,
          text: texts[i]!,
          group,
          priority,
          notBefore,
          heldBy: -1,
          leaseDue: Infinity,
          retryDue: 0,
          acked: false,
          deliveries: 0,
        });
    } else if (roll < 34) {
      const ms = rng.pick([1, 10, 30, 80, 200]);
      log.push(`advance ${ms}`);
      clock.advance(ms);
      expireLeases();
    } else if (roll < 62) {
      const k = rng.int(consumers.length);
      const limit = limits[k]!;
      const leaseMs = rng.bool(0.7) ? undefined : rng.pick([50, Infinity]);
      const { want, best, unthrottled } = expected(limit);
      log.push(`reserve by ${k} (limit ${limit}) leaseMs ${leaseMs} (model: ${want?.text ?? 'none'})`);
      const asked = { groupConcurrency: limit, ...(leaseMs === undefined ? {} : { leaseMs }) };
      if (want === undefined) {
        const got = consumers[k]!.tryReserve({ groupConcurrency: limit });
        if (got !== null) fail(`consumer ${k} got ${dec(got.bytes)} (seq ${got.seq}), the model has nothing it may take`);
        if (best !== undefined) stats.heldBack++;
        if (unthrottled !== undefined) stats.rateHeld++;
      } else {
        // reserve() rather than tryReserve(): an item coming back waits for its delivery mark.
        const answer = await within(consumers[k]!.reserve(asked));
        if (answer === WAITING) fail(`consumer ${k} waits, the model expects ${want.text} (seq ${want.seq})`);
        const got = answer as Reserved | null;
        if (got === null) fail(`consumer ${k} got null, the model expects ${want.text}`);
        if (got!.seq !== want.seq)
          fail(`consumer ${k} got ${dec(got!.bytes)} (seq ${got!.seq}), the model expects ${want.text} (seq ${want.seq})`);
        if (held.has(got!.seq)) fail(`seq ${got!.seq} is held twice`);
        if (want !== best) stats.passedOver++;
        if (want !== unthrottled) stats.rateHeld++;
        if (want.deliveries !== undefined && got!.deliveries !== want.deliveries + 1)
          fail(`${want.text} is handed out with deliveries ${got!.deliveries}, the model counts ${want.deliveries + 1}`);
        want.deliveries = got!.deliveries;
        if (rate !== undefined) {
          const w = windowOf(want);
          w.times.push(clock.now());
          if (inWindow(w) > rate.max) fail(`${inWindow(w)} hand-outs in ${rate.perMs} ms, the limit is ${rate.max}`);
        }
        const lengthMs = leaseMs ?? queueLeaseMs;
        want.heldBy = k;
        want.leaseDue = lengthMs === Infinity ? Infinity : clock.now() + lengthMs;
        held.set(got!.seq, { item: got!, consumer: k });
        if (want.group !== undefined && inFlight(want.group) > limit)
          fail(`group ${want.group} has ${inFlight(want.group)} in flight after a take under limit ${limit}`);
        stats.reserves++;
      }
    } else if (roll < 80 && held.size > 0) {
      const [seq, h] = rng.pick([...held]);
      const m = items.get(seq)!;
      const how = rng.int(4);
      if (how === 0 || how === 1) {
        log.push(`ack ${m.text}`);
        await h.item.ack();
        m.acked = true;
      } else if (how === 3) {
        const ms = rng.pick([0, 15, 40]);
        log.push(`rateLimited ${m.text} ${ms} ms`);
        await h.item.rateLimited(ms);
        // Under a rate limit the item waits, ready, in its paused window; without one, on its own delay.
        m.retryDue = ms > 0 && rate === undefined ? clock.now() + ms : 0;
        if (m.deliveries !== undefined) m.deliveries--;
        if (rate !== undefined) {
          const w = windowOf(m);
          w.pausedUntil = Math.max(w.pausedUntil, clock.now() + ms);
        }
        stats.throttles++;
      } else {
        const delayMs = rng.pick([0, 25]);
        log.push(`nack ${m.text} delayMs ${delayMs}`);
        await h.item.nack({ delayMs });
        m.retryDue = delayMs > 0 ? clock.now() + delayMs : 0;
      }
      held.delete(seq);
      m.heldBy = -1;
      m.leaseDue = Infinity;
    } else if (roll < 85 && stale.length > 0) {
      const item = stale.splice(rng.int(stale.length), 1)[0]!;
      log.push(`stale ack of seq ${item.seq}`);
      const outcome = await item.ack().then(
        () => 'resolved',
        (e: unknown) => (e instanceof QueueError ? e.code : String(e)),
      );
      if (outcome !== 'ERR_LEASE_EXPIRED') fail(`a stale holder's ack of seq ${item.seq}: ${outcome}, expected ERR_LEASE_EXPIRED`);
    } else if (roll < 91 && options.forks > 0) {
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
    } else if (roll < 96) {
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
  // Let every time come and take everything left, with no limit: exactly the unacked items, each once.
  clock.advance(10_000);
  expireLeases();
  for (const h of held.values()) await h.item.ack();
  for (const seq of held.keys()) items.get(seq)!.acked = true;
  held.clear();
  const left: number[] = [];
  const rx = consumers[0]!;
  // Each step moves the clock past any rate window and pause, so the limit never holds the drain.
  while (rx.stats().ready > 0) {
    clock.advance(200);
    const answer = await within(rx.reserve());
    if (answer === WAITING) fail(`the drain waits with ${rx.stats().ready} items ready`);
    const got = answer as Reserved | null;
    if (got === null) fail('the drain got null from an open queue');
    const m = items.get(got!.seq);
    if (m === undefined || m.acked) fail(`seq ${got!.seq} came back after its ack`);
    left.push(got!.seq);
    await got!.ack();
  }
  const want = [...items.values()].filter((m) => !m.acked).map((m) => m.seq);
  left.sort((a, b) => a - b);
  if (JSON.stringify(left) !== JSON.stringify(want))
    fail(`left at the end ${JSON.stringify(left)}, the model says ${JSON.stringify(want)}`);
  await tx.close();
  return stats;
}
