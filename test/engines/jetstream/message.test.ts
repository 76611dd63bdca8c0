/**
 * What the JetStream queue reads from subjects, with no server: the reply subject of a delivery
 * (src/engines/jetstream/message.ts) and whether a stream's or a consumer's subject filter takes the
 * queue's subject (src/engines/jetstream/setup.ts).
 */
import { expect, test } from 'vitest';
import { parseReply } from '../../../src/engines/jetstream/message.js';
import { subjectMatches } from '../../../src/engines/jetstream/setup.js';

test('aSubjectFilterTakesTheSubjectsItsTokensAndWildcardsMatch', () => {
  const rows: [string, string, boolean][] = [
    ['pq.orders', 'pq.orders', true],
    ['pq.*', 'pq.orders', true],
    ['pq.>', 'pq.orders.dead', true],
    ['>', 'pq', true],
    ['pq.orders', 'pq.orders.dead', false],
    ['pq.*', 'pq.orders.dead', false],
    ['pq.>', 'pq', false],
    ['pq.orders.dead', 'pq.orders', false],
    ['*.orders', 'pq.jobs', false],
  ];
  for (const [filter, subject, expected] of rows) expect(subjectMatches(filter, subject), `${filter} takes ${subject}`).toBe(expected);
});

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
  for (const reply of [
    undefined,
    '',
    '_INBOX.abc',
    '$JS.ACK.ORDERS.pq.1.9',
    '$JS.ACK.ORDERS.pq.0.9.9.1.0',
    '$JS.ACK.ORDERS.pq.1.x.9.1.0',
    '$JS.API.CONSUMER.INFO.X.Y.Z.A.B',
  ]) {
    expect(parseReply(reply), String(reply)).toBeUndefined();
  }
});
