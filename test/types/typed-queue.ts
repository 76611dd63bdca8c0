// Compile-time checks of the typed queue API: `npx tsc -p test/types` must pass, and each
// `@ts-expect-error` line must be an error (an unused one fails the build). Checked by
// test/core/typed-queue-types.test.ts; this file is never run.
import {
  Builder,
  MemStore,
  type Consumer,
  type Producer,
  type RemoteProducer,
  type Reserved,
  type StandardSchemaV1,
  connect,
  json,
  structured,
  text,
  validated,
} from 'persistent-queue';

type Equal<A, B> = (<X>() => X extends A ? 1 : 2) extends <X>() => X extends B ? 1 : 2 ? true : false;
function assertType<T extends true>(_: T): void {}

interface Order {
  id: number;
  sku: string;
}

export async function typedQueues(): Promise<void> {
  // The default queue is a byte queue: values are bytes, pushes take bytes or strings.
  const [btx, brx] = await new Builder(new MemStore()).open();
  assertType<Equal<typeof btx, Producer<Uint8Array>>>(true);
  await btx.push('text is fine');
  await btx.push(new Uint8Array(1));
  // @ts-expect-error a byte queue does not take an object
  await btx.push({ id: 1 });
  const b = brx.tryReserve();
  if (b) assertType<Equal<typeof b.value, Uint8Array>>(true);

  // A JSON queue of orders: push takes an Order, item.value is one.
  const [tx, rx] = await new Builder(new MemStore()).codec(json<Order>()).open();
  assertType<Equal<typeof rx, Consumer<Order>>>(true);
  await tx.push({ id: 1, sku: 'a' });
  await tx.pushMany([{ id: 2, sku: 'b' }]);
  // @ts-expect-error a missing field
  await tx.push({ id: 1 });
  // @ts-expect-error a field of the wrong type
  await tx.push({ id: '1', sku: 'a' });
  // @ts-expect-error a string is not an Order (only a byte queue takes strings)
  await tx.push('{"id":1,"sku":"a"}');
  const item = await rx.reserve();
  if (item) {
    assertType<Equal<typeof item, Reserved<Order>>>(true);
    const id: number = item.value.id;
    // @ts-expect-error no such field
    void item.value.price;
    void id;
  }
  await rx.process(async (it) => {
    assertType<Equal<typeof it.value, Order>>(true);
    // @ts-expect-error sku is a string
    const n: number = it.value.sku;
    void n;
  });
  for await (const it of rx.fork()) assertType<Equal<typeof it.value, Order>>(true);

  // The value type of a schema-validated codec is the schema's output.
  const schema = {} as StandardSchemaV1<unknown, { ok: boolean }>;
  const [vtx, vrx] = await new Builder(new MemStore()).codec(json(schema)).open();
  await vtx.push({ ok: true });
  // @ts-expect-error the schema's output has no `n`
  await vtx.push({ n: 1 });
  const v = vrx.tryReserve();
  if (v) assertType<Equal<typeof v.value, { ok: boolean }>>(true);
  const [, wrx] = await new Builder(new MemStore()).codec(validated(structured(), schema)).open();
  assertType<Equal<typeof wrx, Consumer<{ ok: boolean }>>>(true);

  // text() is a string queue.
  const [ttx, trx] = await new Builder(new MemStore()).codec(text()).open();
  await ttx.push('s');
  // @ts-expect-error a text queue takes strings only
  await ttx.push(new Uint8Array(1));
  const t = trx.tryReserve();
  if (t) assertType<Equal<typeof t.value, string>>(true);

  // Batches are typed too.
  const batch = await rx.reserveMany(10);
  assertType<Equal<typeof batch, Reserved<Order>[]>>(true);
  await rx.ackMany(batch);
  // @ts-expect-error the items of another queue's type
  await rx.ackMany(await brx.reserveMany(1));
  await rx.process(
    async (items) => {
      assertType<Equal<typeof items, Reserved<Order>[]>>(true);
    },
    { batch: { size: 64, waitMs: 5 } },
  );

  // A queue of `any` takes anything, as `any` does.
  const [atx] = await new Builder(new MemStore()).codec(json<any>()).open();
  await atx.push({ anything: true });

  // Builder options keep the type through the chain.
  const chained = new Builder(new MemStore())
    .codec(json<Order>())
    .capacity(10)
    .capacityBytes(1 << 20)
    .leaseMs(1000);
  assertType<Equal<typeof chained, Builder<Order>>>(true);

  // Dead letters decode to the queue's type.
  const letter = await rx.deadLetters.peek();
  if (letter) {
    const decoded = rx.deadLetters.decode(letter);
    assertType<Equal<typeof decoded, Order>>(true);
    // @ts-expect-error a dead letter of an Order queue is no string
    const wrong: string = rx.deadLetters.decode(letter);
    void wrong;
  }
  const byteLetter = await brx.deadLetters.peek();
  if (byteLetter) assertType<Equal<ReturnType<typeof brx.deadLetters.decode>, Uint8Array>>(true);
}

export async function remoteProducers(): Promise<void> {
  // connect() is typed by its codec as the builder is: a byte producer without one.
  const bytesOut = await connect('/var/lib/app/queue');
  assertType<Equal<typeof bytesOut, RemoteProducer<Uint8Array>>>(true);
  await bytesOut.push('text is fine');
  // @ts-expect-error a byte producer does not take an object
  await bytesOut.push({ id: 1 });
  const orders = await connect('/var/lib/app/queue', { codec: json<Order>(), durability: 'sync' });
  assertType<Equal<typeof orders, RemoteProducer<Order>>>(true);
  const seq: number = await orders.push({ id: 1, sku: 'a' }, { priority: 1, key: 'order-1' });
  const seqs: number[] = await orders.pushMany([{ id: 2, sku: 'b' }], { keys: ['order-2'] });
  void [seq, seqs];
  // @ts-expect-error an order producer does not take a string
  await orders.push('not an order');
  // @ts-expect-error not a durability policy
  await connect('/var/lib/app/queue', { durability: 'fast' });
  await using disposed = await connect('/var/lib/app/queue');
  void disposed;
}
