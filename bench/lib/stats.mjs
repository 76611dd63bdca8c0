// Small statistics helpers shared by the harness and the report.

export function median(values) {
  if (values.length === 0) return NaN;
  const s = [...values].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
}

/** Spread of repeated measurements, as (max - min) / median: the noise figure printed beside a median. */
export function spread(values) {
  if (values.length < 2) return 0;
  return (Math.max(...values) - Math.min(...values)) / median(values);
}

/** Percentile `p` (0..100) of a Float64Array or array, by nearest rank on a sorted copy. */
export function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank];
}

/** Latency samples in milliseconds, grown without per-sample allocation. */
export class Latencies {
  values = new Float64Array(1 << 16);
  length = 0;
  add(ms) {
    if (this.length === this.values.length) {
      const grown = new Float64Array(this.values.length * 2);
      grown.set(this.values);
      this.values = grown;
    }
    this.values[this.length++] = ms;
  }
  merge(other) {
    for (let i = 0; i < other.length; i++) this.add(other.values[i]);
  }
  summary() {
    const sorted = this.values.slice(0, this.length).sort();
    return { count: this.length, p50Ms: percentile(sorted, 50), p99Ms: percentile(sorted, 99), maxMs: sorted[sorted.length - 1] ?? NaN };
  }
}
