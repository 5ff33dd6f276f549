import type { FastifyInstance } from 'fastify';
import type { KvBlock } from '../engine/block-pool';
import type { Engine } from '../engine/engine';
import { BLOCK_SIZE_TOKENS } from '../engine/profiles';
import { externalBlockHashText, type EventHashForm } from '../kv-events/vllm-block-hash';

export interface KvCacheDebugRoutesOptions {
  /** One per data-parallel rank, in rank order. */
  readonly engines: readonly Engine[];
  /** How KV events name blocks; null when events are off. */
  readonly hashForm: EventHashForm | null;
}

/**
 * - `GET /debug/kv-cache`: every block each rank's prefix cache holds right now (what a hit or an eviction
 *   can touch, duplicates included), so a test can compare a KV-event index with the cache block by block:
 *   `{block_size, kv_events, ranks: [{data_parallel_rank, num_blocks, blocks: [{block_id, block_hash,
 *   parent_block_hash, token_ids, ref_count}]}]}`. Hashes are the events' (uint64 in decimal, bytes in hex);
 *   with events off only `block_id` and `ref_count` are known (`block_hash` null, `token_ids` empty). Blocks
 *   are listed in block-id order. `?rank=R` lists one rank.
 * - `POST /reset_prefix_cache`: vLLM's dev-mode endpoint (`VLLM_SERVER_DEV_MODE=1`): forgets every cached
 *   prefix on every rank and answers 200 with an empty body. vLLM refuses (logs, still 200) while blocks
 *   are in use unless `reset_running_requests=true`; the sim always resets, as `/sim/reset-cache` does,
 *   and publishes AllBlocksCleared at once.
 */
export async function kvCacheDebugRoutes(app: FastifyInstance, options: KvCacheDebugRoutesOptions): Promise<void> {
  app.get('/debug/kv-cache', async (request) => {
    const rankParam = (request.query as { rank?: string } | undefined)?.rank;
    const only = rankParam === undefined ? null : Number(rankParam);
    return {
      block_size: BLOCK_SIZE_TOKENS,
      kv_events: options.hashForm !== null,
      ranks: options.engines
        .map((engine, rank) => ({ engine, rank }))
        .filter(({ rank }) => only === null || rank === only)
        .map(({ engine, rank }) => {
          const blocks = [...engine.pool.cachedBlocks()].sort((a, b) => a.id - b.id);
          return { data_parallel_rank: rank, num_blocks: blocks.length, blocks: blocks.map(describeBlock) };
        }),
    };
  });

  app.post('/reset_prefix_cache', async (_request, reply) => {
    for (const engine of options.engines) engine.resetPrefixCache();
    return reply.code(200).send();
  });

  function describeBlock(block: KvBlock) {
    const event = block.event;
    const form = options.hashForm;
    return {
      block_id: block.id,
      block_hash: event && form ? externalBlockHashText(event.digest, form) : null,
      parent_block_hash: event?.parent && form ? externalBlockHashText(event.parent, form) : null,
      token_ids: event ? event.tokens : [],
      ref_count: block.refCount,
    };
  }
}
