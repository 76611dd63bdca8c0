// A progress display for long runs: one status line on stderr (rewritten in place on a TTY,
// one line per step otherwise), with elapsed time and an estimate of what is left.

const fmt = (s) => `${Math.floor(s / 60)}:${String(Math.floor(s % 60)).padStart(2, '0')}`;

export class Progress {
  constructor(totalWeight) {
    this.totalWeight = totalWeight;
    this.doneWeight = 0;
    this.t0 = performance.now();
    this.tty = process.stderr.isTTY;
  }
  start(label, weight = 1) {
    this.label = label;
    this.weight = weight;
    this.#print('');
  }
  done(summary = '') {
    this.doneWeight += this.weight;
    this.#print(summary, true);
  }
  #print(summary, final = false) {
    const elapsed = (performance.now() - this.t0) / 1000;
    const frac = Math.min(1, this.doneWeight / this.totalWeight);
    const left = frac > 0.02 ? (elapsed / frac) * (1 - frac) : NaN;
    const line = `[${String(Math.round(frac * 100)).padStart(3)}% ${fmt(elapsed)}${Number.isFinite(left) ? ` ~${fmt(left)} left` : ''}] ${this.label}${summary ? ` … ${summary}` : ''}`;
    if (this.tty) process.stderr.write(`\r\x1b[K${line}${final ? '\n' : ''}`);
    else if (final) process.stderr.write(`${line}\n`);
  }
}
