// The MemStore baseline: the least an async queue with the same API shape can do.
// Shared by bench/memstore.mjs and bench/run.mjs.

export class BareQueue {
  items = [];
  head = 0;
  waiters = [];
  push(bytes) {
    const copy = bytes.slice();
    const w = this.waiters.shift();
    if (w) w({ bytes: copy, ack: () => Promise.resolve() });
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
    return { bytes, ack: () => Promise.resolve() };
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
