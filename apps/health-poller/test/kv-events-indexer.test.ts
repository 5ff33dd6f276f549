import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { allBlocksCleared, blockRemoved, blockStored, blockStoredMap, TestKvPublisher } from './kv-events-publisher';
import { BLOCK, eventually, openIndexerEnv, stream, tokenChain, type IndexerEnv } from './kv-events-support';

/**
 * The KV-event indexer end to end on loopback: a vLLM-format publisher (PUB + ROUTER replay), an
 * indexer replica reading it, a real Redis, and the router's view of the owner index (snapshot of a
 * token chain hashed with hashTokenBlock53).
 */
let env: IndexerEnv;
const publishers: TestKvPublisher[] = [];
beforeAll(async () => {
  env = await openIndexerEnv('kv-events-indexer');
});
beforeEach((context) => env.beginTest(context.task.name.slice(0, 12)));
afterAll(async () => {
  await env.close();
  await Promise.all(publishers.map((publisher) => publisher.close()));
});

async function publisher(rank: number | null = null): Promise<TestKvPublisher> {
  const opened = await TestKvPublisher.open(rank);
  publishers.push(opened);
  return opened;
}

/** Publishes `events` until the indexer has seen at least one batch (a SUB joins some ms after connecting). */
async function publishUntilRead(pub: TestKvPublisher, events: unknown[], read: () => Promise<boolean>): Promise<void> {
  await eventually('the subscriber to join', async () => {
    await pub.publish(events);
    return read();
  });
}

describe('KV-event indexer', { timeout: 60_000 }, () => {
  it('indexes stored blocks under the router names and drops removed ones; both encodings, u64 and bin hashes, LoRA', async () => {
    const pub = await publisher();
    const { metrics } = env.startIndexer('solo-1', [stream('a', pub.endpoint, pub.replayEndpoint)]);
    const chain = tokenChain(1, 6);
    await publishUntilRead(
      pub,
      [blockStored(chain.hashes.slice(0, 2), null, chain.tokens.slice(0, 2 * BLOCK), BLOCK)],
      async () => (await env.depth('m', 'a', chain.names)) === 2,
    );
    // Blocks 3-4 as a map event (unknown field ignored), 5-6 with 32-byte hashes chained on a u64 one.
    const bin5 = new Uint8Array(32).fill(5);
    const bin6 = new Uint8Array(32).fill(6);
    await pub.publish(
      [
        blockStoredMap(
          chain.hashes.slice(2, 4),
          chain.hashes[1] as bigint,
          chain.tokens.slice(2 * BLOCK, 4 * BLOCK),
          BLOCK,
        ),
        blockStored([bin5, bin6], chain.hashes[3] as bigint, chain.tokens.slice(4 * BLOCK), BLOCK),
      ],
      { encoding: 'map' },
    );
    await eventually('six blocks held', async () => (await env.depth('m', 'a', chain.names)) === 6);
    await pub.publish([blockRemoved([bin6, bin5]), blockRemoved([chain.hashes[3] as bigint])]);
    await eventually('three blocks held', async () => (await env.depth('m', 'a', chain.names)) === 3);
    // A LoRA adapter's blocks: its name folded in (tokenBlockExtra), in the adapter's pool.
    const lora = tokenChain(1, 2, 'sql-lora');
    await pub.publish([blockStored([11n, 12n], null, lora.tokens, BLOCK, 'sql-lora')]);
    await eventually('the adapter pool', async () => (await env.depth('sql-lora', 'a', lora.names)) === 2);
    expect(await env.depth('m', 'a', lora.names)).toBe(0);
    await pub.publish([blockRemoved([12n])]);
    await eventually('adapter block removed', async () => (await env.depth('sql-lora', 'a', lora.names)) === 1);
    expect(await metrics.kvCount('problems', 'sequence_gap')).toBe(0);
    expect(await metrics.kvCount('blocks', 'stored')).toBeGreaterThanOrEqual(8);
  });

  it('finds a dropped batch by its sequence number and replays it', async () => {
    const pub = await publisher();
    const { metrics } = env.startIndexer('solo-2', [stream('b', pub.endpoint, pub.replayEndpoint)]);
    const chain = tokenChain(2, 4);
    await publishUntilRead(
      pub,
      [blockStored([chain.hashes[0] as bigint], null, chain.tokens.slice(0, BLOCK), BLOCK)],
      async () => (await env.depth('m', 'b', chain.names)) >= 1,
    );
    await pub.publish(
      [blockStored(chain.hashes.slice(1, 3), chain.hashes[0] as bigint, chain.tokens.slice(BLOCK, 3 * BLOCK), BLOCK)],
      {
        drop: true,
      },
    );
    await pub.publish([
      blockStored([chain.hashes[3] as bigint], chain.hashes[2] as bigint, chain.tokens.slice(3 * BLOCK), BLOCK),
    ]);
    await eventually('the replayed batch applied', async () => (await env.depth('m', 'b', chain.names)) === 4);
    expect(await metrics.kvCount('problems', 'sequence_gap')).toBe(1);
    expect(await metrics.kvCount('resyncs', 'gap')).toBe(0);
  });

  it('resynchronises when the publisher restarts (sequence backwards), and forgets at once on AllBlocksCleared', async () => {
    const pub = await publisher();
    const { metrics } = env.startIndexer('solo-3', [stream('c', pub.endpoint, pub.replayEndpoint)]);
    const before = tokenChain(3, 3);
    const after = tokenChain(4, 2);
    await publishUntilRead(
      pub,
      [blockStored(before.hashes, null, before.tokens, BLOCK)],
      async () => (await env.depth('m', 'c', before.names)) === 3,
    );
    for (let i = 0; i < 5; i++) await pub.publish([]);
    await pub.restart();
    // The restarted engine's cache is empty; it stores another chain (republished until the SUB reconnects).
    await eventually('the new chain after the restart', async () => {
      await pub.publish([blockStored(after.hashes, null, after.tokens, BLOCK)]);
      return (await env.depth('m', 'c', after.names)) === 2;
    });
    expect(await env.depth('m', 'c', before.names)).toBe(0);
    expect(await metrics.kvCount('problems', 'sequence_backwards')).toBeGreaterThanOrEqual(1);
    expect(await metrics.kvCount('resyncs', 'restart')).toBeGreaterThanOrEqual(1);

    await pub.publish([
      allBlocksCleared,
      blockStored([before.hashes[0] as bigint], null, before.tokens.slice(0, BLOCK), BLOCK),
    ]);
    await eventually('cleared', async () => (await env.depth('m', 'c', after.names)) === 0);
    expect(await env.depth('m', 'c', before.names)).toBe(1);
    expect(await metrics.kvCount('resyncs', 'cleared')).toBe(1);
  });

  it('keeps a block while the engine caches another copy of it (a recomputed last block), drops it with the last', async () => {
    const pub = await publisher();
    env.startIndexer('solo-5', [stream('e', pub.endpoint, pub.replayEndpoint)]);
    const chain = tokenChain(6, 3);
    const last = chain.hashes[2] as bigint;
    const lastBlock = () => blockStored([last], chain.hashes[1] as bigint, chain.tokens.slice(2 * BLOCK), BLOCK);
    const marker = tokenChain(7, 1);
    // Published until read: every copy is replayed, so this is a chain of its own.
    await publishUntilRead(
      pub,
      [blockStored(marker.hashes, null, marker.tokens, BLOCK)],
      async () => (await env.depth('m', 'e', marker.names)) === 1,
    );
    await pub.publish([blockStored(chain.hashes, null, chain.tokens, BLOCK)]);
    // A repeat that hit the whole prompt recomputes block 3 into a second block: stored again, same hash.
    await pub.publish([lastBlock()]);
    await pub.publish([blockRemoved([last])]);
    const applied = tokenChain(8, 1);
    await pub.publish([blockStored(applied.hashes, null, applied.tokens, BLOCK)]);
    await eventually('the batches applied', async () => (await env.depth('m', 'e', applied.names)) === 1);
    expect(await env.depth('m', 'e', chain.names)).toBe(3);
    await pub.publish([blockRemoved([last])]);
    await eventually('the last copy removed', async () => (await env.depth('m', 'e', chain.names)) === 2);
    // Two copies, then AllBlocksCleared: the counts start again, so one store and one removal drop it.
    await pub.publish([lastBlock(), lastBlock()]);
    await eventually('stored again', async () => (await env.depth('m', 'e', chain.names)) === 3);
    await pub.publish([allBlocksCleared, blockStored(chain.hashes, null, chain.tokens, BLOCK)]);
    await pub.publish([blockRemoved([last])]);
    await eventually('gone after the clear', async () => (await env.depth('m', 'e', chain.names)) === 2);
    expect(await env.depth('m', 'e', marker.names)).toBe(0);
  });

  it('counts bad input and keeps going: malformed frames and msgpack, unknown events, oversized batches, unknown hashes, orphans', async () => {
    const pub = await publisher();
    const { metrics } = env.startIndexer('solo-4', [stream('d', pub.endpoint, pub.replayEndpoint)], {
      maxBatchEvents: 8,
    });
    const chain = tokenChain(5, 2);
    await publishUntilRead(
      pub,
      [blockStored([chain.hashes[0] as bigint], null, chain.tokens.slice(0, BLOCK), BLOCK)],
      async () => (await env.depth('m', 'd', chain.names)) === 1,
    );
    await pub.send([Buffer.from('only-two-frames'), Buffer.from('x')]);
    await pub.publishPayload(Buffer.from([0xc1, 0xff, 0x00]));
    await pub.publish([
      ['BlockMoved', [1n]],
      { type: 'Teleported' },
      ['BlockStored', 'not-a-list'],
      blockRemoved([999n]),
    ]);
    await pub.publish(Array.from({ length: 9 }, () => allBlocksCleared));
    await pub.publish([blockStored([77n], 76n, chain.tokens.slice(0, BLOCK), BLOCK)]);
    await pub.publish([
      blockStored([chain.hashes[1] as bigint], chain.hashes[0] as bigint, chain.tokens.slice(BLOCK), BLOCK),
    ]);
    await eventually('the good batch after the bad ones', async () => (await env.depth('m', 'd', chain.names)) === 2);
    expect(await metrics.kvCount('problems', 'malformed_batch')).toBe(2);
    expect(await metrics.kvCount('problems', 'unknown_event')).toBe(2);
    expect(await metrics.kvCount('problems', 'malformed_event')).toBe(1);
    expect(await metrics.kvCount('problems', 'unknown_hash')).toBe(1);
    expect(await metrics.kvCount('problems', 'oversized_batch')).toBe(1);
    expect(await metrics.kvCount('problems', 'orphan_block')).toBe(1);
    // The oversized batch of clears was dropped whole: nothing was forgotten.
    expect(await metrics.kvCount('resyncs', 'cleared')).toBe(0);
    expect(await metrics.kvCount('problems', 'sequence_gap')).toBe(0);
  });
});
