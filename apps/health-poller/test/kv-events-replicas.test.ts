import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ownerOf } from '../src/kv-events/indexer';
import { blockStored, TestKvPublisher } from './kv-events-publisher';
import { BLOCK, eventually, openIndexerEnv, stream, tokenChain, type IndexerEnv } from './kv-events-support';

/**
 * Two indexer replicas (two pollers' worth: their own leases, sockets and name maps) share eight
 * backends' streams by rendezvous; one dies without releasing anything, and the other takes its
 * streams over after their leases expire, replaying from the cursor the dead one stored: the blocks
 * stored while nobody was reading are indexed all the same.
 */
let env: IndexerEnv;
const publishers: TestKvPublisher[] = [];
beforeAll(async () => {
  env = await openIndexerEnv('kv-events-replicas');
});
afterAll(async () => {
  await env.close();
  await Promise.all(publishers.map((publisher) => publisher.close()));
});

describe('KV-event indexer replicas', { timeout: 60_000 }, () => {
  it('share the streams, and a survivor takes over a dead replica’s streams without a gap', async () => {
    const ids = Array.from({ length: 8 }, (_, i) => `backend-${i}`);
    for (const _ of ids) publishers.push(await TestKvPublisher.open());
    const streams = ids.map((id, i) =>
      stream(id, (publishers[i] as TestKvPublisher).endpoint, (publishers[i] as TestKvPublisher).replayEndpoint),
    );
    const chains = ids.map((_, i) => tokenChain(100 + i, 4));
    const one = env.startIndexer('replica-one', streams, { leaseTtlMs: 600 });
    const two = env.startIndexer('replica-two', streams, { leaseTtlMs: 600 });
    await eventually('both replicas to hold their shares', async () => {
      const held = [...one.indexer.held(), ...two.indexer.held()];
      return held.length === ids.length && new Set(held).size === ids.length;
    });
    for (const id of ids) {
      const expected = ownerOf(id, ['replica-one', 'replica-two']) === 'replica-one' ? one : two;
      expect(expected.indexer.held()).toContain(id);
    }
    // The first two blocks of each chain, through whichever replica reads it.
    await eventually('the first blocks indexed', async () => {
      const depths = await Promise.all(
        ids.map(async (id, i) => {
          const chain = chains[i] as ReturnType<typeof tokenChain>;
          if ((await env.depth('m', id, chain.names)) >= 2) return true;
          await (publishers[i] as TestKvPublisher).publish([
            blockStored(chain.hashes.slice(0, 2), null, chain.tokens.slice(0, 2 * BLOCK), BLOCK),
          ]);
          return false;
        }),
      );
      return depths.every(Boolean);
    });
    // Replica one dies (no release, no goodbye); let its cursors be stored first, as a live replica's are.
    await new Promise((resolve) => setTimeout(resolve, 300));
    const orphaned = one.indexer.held();
    await one.indexer.abandon();
    // Blocks 3-4 of every chain are stored while replica one's streams have no reader.
    await Promise.all(
      ids.map((_, i) => {
        const chain = chains[i] as ReturnType<typeof tokenChain>;
        return (publishers[i] as TestKvPublisher).publish([
          blockStored(chain.hashes.slice(2), chain.hashes[1] as bigint, chain.tokens.slice(2 * BLOCK), BLOCK),
        ]);
      }),
    );
    await eventually('replica two to hold every stream', async () => two.indexer.held().length === ids.length, 6000);
    await eventually('every chain indexed whole', async () => {
      const depths = await Promise.all(
        ids.map((id, i) => env.depth('m', id, (chains[i] as ReturnType<typeof tokenChain>).names)),
      );
      return depths.every((depth) => depth === 4);
    });
    expect(orphaned.length).toBeGreaterThan(0);
    // Taken over from the cursor: the batches before it warmed the names, none was lost or forgotten.
    expect(await two.metrics.kvCount('batches', 'named_only')).toBeGreaterThan(0);
    expect(await two.metrics.kvCount('problems', 'orphan_block')).toBe(0);
    expect(await two.metrics.kvCount('resyncs', 'gap')).toBe(0);
  });
});
