// A binary min-heap by a caller's order: the not-due items of the schedule, the items a group's
// limit set aside, and the next fire of each schedule all leave best first while arriving in near
// order, which a heap serves in O(log n) with no sorting of what stays behind.

export class Heap<T> {
  readonly #heap: T[] = [];
  readonly #before: (a: T, b: T) => boolean;

  /** `before(a, b)`: `a` leaves before `b`. */
  constructor(before: (a: T, b: T) => boolean) {
    this.#before = before;
  }

  get size(): number {
    return this.#heap.length;
  }

  peek(): T | undefined {
    return this.#heap[0];
  }

  push(value: T): void {
    const heap = this.#heap;
    const before = this.#before;
    let i = heap.length;
    heap.push(value);
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!before(value, heap[parent]!)) break;
      heap[i] = heap[parent]!;
      i = parent;
    }
    heap[i] = value;
  }

  /** The best value, taken out; undefined when empty. */
  pop(): T | undefined {
    const heap = this.#heap;
    const before = this.#before;
    const top = heap[0];
    const last = heap.pop();
    if (top === undefined || last === undefined || heap.length === 0) return top;
    let i = 0;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= heap.length) break;
      const right = left + 1;
      const child = right < heap.length && before(heap[right]!, heap[left]!) ? right : left;
      if (!before(heap[child]!, last)) break;
      heap[i] = heap[child]!;
      i = child;
    }
    heap[i] = last;
    return top;
  }

  /** Every value, in heap order (not sorted); the heap's own array, not to be changed. */
  values(): readonly T[] {
    return this.#heap;
  }

  clear(): void {
    this.#heap.length = 0;
  }
}
