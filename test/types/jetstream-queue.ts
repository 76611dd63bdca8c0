// Compile-time checks of the JetStream queue's types: the codec's type flows to push, reserve,
// tryReserve, process and for-await, as in the embedded queue. Checked with typed-queue.ts by
// test/core/typed-queue-types.test.ts; this file is never run.
import type { NatsConnection } from '@nats-io/transport-node';
import { json } from 'persistent-queue';
import { JetStreamBuilder, type JetStreamConsumer, type JetStreamProducer, type JetStreamReserved } from 'persistent-queue/jetstream';

type Equal<A, B> = (<X>() => X extends A ? 1 : 2) extends <X>() => X extends B ? 1 : 2 ? true : false;
function assertType<T extends true>(_: T): void {}

interface Order {
  id: number;
  sku: string;
}

export async function jetStreamQueues(nc: NatsConnection): Promise<void> {
  const [btx, brx] = await new JetStreamBuilder(nc, { stream: 'BYTES' }).open();
  assertType<Equal<typeof btx, JetStreamProducer<Uint8Array>>>(true);
  await btx.push('text is fine');
  // @ts-expect-error a byte queue does not take an object
  await btx.push({ id: 1 });
  const b = await brx.tryReserve();
  if (b) assertType<Equal<typeof b.value, Uint8Array>>(true);

  const [tx, rx] = await new JetStreamBuilder(nc, { stream: 'ORDERS' }).codec(json<Order>()).maxDeliveries(3).leaseMs(1000).open();
  assertType<Equal<typeof rx, JetStreamConsumer<Order>>>(true);
  const seq: number = await tx.push({ id: 1, sku: 'a' });
  const seqs: number[] = await tx.pushMany([{ id: 2, sku: 'b' }]);
  // @ts-expect-error a JetStream order is missing its sku
  await tx.push({ id: 1 });
  // tryReserve answers with a promise: the server holds the items.
  const maybe = rx.tryReserve();
  assertType<Equal<typeof maybe, Promise<JetStreamReserved<Order> | null>>>(true);
  const item = await rx.reserve();
  if (item) {
    const id: number = item.value.id;
    // @ts-expect-error no such field
    void item.value.price;
    void [id, seq, seqs];
  }
  await rx.process(async (order) => {
    assertType<Equal<typeof order, JetStreamReserved<Order>>>(true);
  });
  for await (const order of rx) assertType<Equal<typeof order.value, Order>>(true);
  const stats = await rx.stats();
  const ready: number = stats.ready;
  void ready;
}
