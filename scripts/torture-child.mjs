// The process `scripts/torture.mjs` SIGKILLs: pushes and acks under load through the BUILT package
// (dist/), reporting every resolved operation on stdout, one line each:
//   ready [blocking] | p <id> <seq> (push resolved) | a <seq> (ack issued) | A <seq> (ack resolved) | X <message> (a check failed here)
// argv: dir policy seed firstId
import { Builder, LogStore } from '../dist/index.js';
// Each line is in the pipe before the operation it reports goes on (see line-out.mjs).
import { out } from './line-out.mjs';

const [dir, policy, seedText, firstIdText] = process.argv.slice(2);
let state = Number(seedText) >>> 0;
/** mulberry32: the child's seeded choices (never Math.random). */
const rand = () => {
  state = (state + 0x6d2b79f5) >>> 0;
  let t = state;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};
const enc = new TextEncoder();
const dec = new TextDecoder();
export const payloadText = (id) => `t${id}:${'x'.repeat(id % 97)}`;

const segmentBytes = 4096 + Math.floor(rand() * 8192);
const cursorCheckpointBytes = 512 + Math.floor(rand() * 4096);
// About a third of the children sync on the main thread (blockingSync), so kills land inside those flushes too.
const blockingSync = rand() < 0.3;
const store = await LogStore.open(dir, { segmentBytes, cursorCheckpointBytes, blockingSync });
const [tx, rx] = await new Builder(store).durability(policy).open();
out(blockingSync ? 'ready blocking' : 'ready');
let nextId = Number(firstIdText);
const producers = policy === 'sync' ? 1 : 8;
for (let k = 0; k < producers; k++) {
  (async () => {
    for (;;) {
      const id = nextId++;
      const seq = await tx.push(enc.encode(payloadText(id)));
      out(`p ${id} ${seq}`);
    }
  })();
}
(async () => {
  const held = [];
  for (;;) {
    const item = await rx.reserve();
    const text = dec.decode(item.bytes);
    const id = Number(text.slice(1, text.indexOf(':')));
    if (text !== payloadText(id))
      out(`X seq ${item.seq} delivered with bytes that were never pushed: ${JSON.stringify(text.slice(0, 40))}`);
    const r = rand();
    if (r < 0.7) {
      out(`a ${item.seq}`); // issued: from here on the item may be gone after a kill
      item.ack().then(() => out(`A ${item.seq}`));
    } else if (r < 0.85) {
      await item.nack();
    } else {
      held.push(item); // stays in flight: the kill must put it back
    }
  }
})();
