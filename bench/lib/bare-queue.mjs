// The MemStore baseline: a minimal array-backed async queue with the same API shape, and the same
// capacity rule (a push waits while `capacity` items are unacked).
// Shared by bench/memstore.mjs and bench/run.mjs.

export class BareQueue {
  items = [];
  head = 0;
  waiters = [];
  unacked = 0;
  slotWaiters = [];

  constructor(capacity = Infinity) {
    this.capacity = capacity;
  }

  // One shared function: an ack frees a slot, handing it straight to a waiting push if any.
  ack = () => {
    const next = this.slotWaiters.shift();
    if (next) next();
    else this.unacked--;
    return Promise.resolve();
  };

  push(bytes) {
    if (this.unacked >= this.capacity) return new Promise((resolve) => this.slotWaiters.push(resolve)).then(() => this.pushNow(bytes));
    this.unacked++;
    return this.pushNow(bytes);
  }

  /** Store one item in a slot already counted in `unacked`. */
  pushNow(bytes) {
    const copy = bytes.slice();
    const w = this.waiters.shift();
    if (w) w({ bytes: copy, ack: this.ack });
    else this.items.push(copy);
    return Promise.resolve(this.head + this.items.length);
  }

  pushMany(list) {
    return Promise.all(list.map((b) => this.push(b)));
  }
  tryReserve() {
    if (this.head === this.items.length) return null;
    const bytes = this.items[this.head++];
    if (this.head === this.items.length) {
      this.items = [];
      this.head = 0;
    }
    return { bytes, ack: this.ack };
  }
  reserve(options) {
    const item = this.tryReserve();
    if (item) return Promise.resolve(item);
    return new Promise((resolve, reject) => {
      this.waiters.push(resolve);
      options?.signal?.addEventListener(
        'abort',
        () => {
          const i = this.waiters.indexOf(resolve);
          if (i >= 0) this.waiters.splice(i, 1);
          reject(options.signal.reason);
        },
        { once: true },
      );
    });
  }
  close() {
    return Promise.resolve();
  }
}
