/**
 * node:fs with pauses, for forcing one interleaving of the lock protocol between processes.
 * PQ_PAUSE is a JSON list of { fn, match, when: 'before'|'after', name, nth? }: when the nth (1 by
 * default) call of `fn` whose first two string arguments contain one that includes `match`
 * reaches `when` (after: only when it returned), the process writes <PQ_BARRIER>/<name>.at and
 * blocks until <PQ_BARRIER>/<name>.go exists.
 */
import * as real from 'node:fs';
export * from 'node:fs';
const rules = JSON.parse(process.env.PQ_PAUSE ?? '[]');
const barrier = process.env.PQ_BARRIER ?? '.';
const seen = new Map();
const cell = new Int32Array(new SharedArrayBuffer(4));
function check(fn, args, when) {
  for (const r of rules) {
    if (r.fn !== fn || r.when !== when) continue;
    if (!args.slice(0, 2).some((a) => typeof a === 'string' && a.includes(r.match))) continue;
    const n = (seen.get(r) ?? 0) + 1;
    seen.set(r, n);
    if (n !== (r.nth ?? 1)) continue;
    real.writeFileSync(`${barrier}/${r.name}.at`, String(process.pid));
    while (!real.existsSync(`${barrier}/${r.name}.go`)) Atomics.wait(cell, 0, 0, 5);
  }
}
const wrap =
  (fn) =>
  (...args) => {
    check(fn, args, 'before');
    // biome-ignore lint/performance/noDynamicNamespaceImportAccess: every node:fs function is wrapped by its name; nothing here is bundled.
    const out = real[fn](...args);
    check(fn, args, 'after');
    return out;
  };
export const linkSync = wrap('linkSync');
export const renameSync = wrap('renameSync');
export const openSync = wrap('openSync');
export const readFileSync = wrap('readFileSync');
export const rmSync = wrap('rmSync');
export const unlinkSync = wrap('unlinkSync');
export const statSync = wrap('statSync');
export const existsSync = wrap('existsSync');
