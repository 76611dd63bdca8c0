// The one binary search: the first index of a sorted range at which a condition stops holding.
// Every sorted list of the engine and the core (segments by base seq, ack ranges, dead letters,
// due times, a rate window's hand-outs) is searched through it, so a boundary case is got right,
// or wrong, in one place.

/**
 * The first index `i` in `[lo, hi)` with `before(i)` false, or `hi` when it holds everywhere;
 * `before` must hold on a prefix of the range and nowhere after it.
 */
export function lowerBound(lo: number, hi: number, before: (i: number) => boolean): number {
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (before(mid)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
