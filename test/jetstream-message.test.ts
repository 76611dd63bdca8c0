/** The reply subject of a JetStream delivery, parsed (src/jetstream/message.ts): no server needed. */
import { expect, test } from 'vitest';
import { parseReply } from '../src/jetstream/message.js';

test('theReplySubjectOfA29ServerGivesStreamConsumerDeliveriesSeqAndTime', () => {
  expect(parseReply('$JS.ACK.ORDERS.pq.3.42.40.1796174225091330463.7')).toEqual({
    stream: 'ORDERS',
    consumer: 'pq',
    deliveries: 3,
    streamSeq: 42,
    storedAt: 1796174225091,
  });
});

test('theLongerReplySubjectWithADomainAndAnAccountHashParsesTheSame', () => {
  const expected = { stream: 'ORDERS', consumer: 'pq', deliveries: 1, streamSeq: 9, storedAt: 1796174225091 };
  expect(parseReply('$JS.ACK._.AHASH.ORDERS.pq.1.9.9.1796174225091330463.0.RANDOM')).toEqual(expected);
  expect(parseReply('$JS.ACK.hub.AHASH.ORDERS.pq.1.9.9.1796174225091330463.0')).toEqual(expected);
});

test('aSubjectThatIsNotADeliveryIsNotParsed', () => {
  for (const reply of [undefined, '', '_INBOX.abc', '$JS.ACK.ORDERS.pq.1.9', '$JS.ACK.ORDERS.pq.0.9.9.1.0', '$JS.ACK.ORDERS.pq.1.x.9.1.0', '$JS.API.CONSUMER.INFO.X.Y.Z.A.B']) {
    expect(parseReply(reply), String(reply)).toBeUndefined();
  }
});
