import type { KvBlock } from '../engine/block-pool';
import type { KvCacheEventSink, Sequence } from '../engine/engine';
import { BLOCK_SIZE_TOKENS } from '../engine/profiles';
import type { KvEvent } from './kv-event-encoding';
import {
  blockExtraKeys,
  externalBlockHash,
  type BlockDigest,
  type EventHashForm,
  type VllmBlockHasher,
} from './vllm-block-hash';

/** Where a step's events go (kv-event-publisher.ts): one EventBatch per call. */
export interface EventBatchSink {
  publish(batch: { readonly ts: number; readonly events: readonly KvEvent[] }): void;
}

export interface KvEventRecorderOptions {
  readonly hasher: VllmBlockHasher;
  readonly hashForm: EventHashForm;
  /** Put the triggering request's id in BlockStored's `session_id` (vllm#51381). */
  readonly sessionId: boolean;
  readonly sink: EventBatchSink;
  /** Wall clock, unix seconds (the batch's `ts`, Python's `time.time()`). */
  readonly nowUnixSeconds: () => number;
}

/**
 * One engine's KV events, as vLLM's BlockPool queues them and its scheduler publishes them
 * (`vllm/v1/core/block_pool.py`, README "KV events"):
 * - `cache_full_blocks` → one BlockStored per registration call: the hashes of the newly cached blocks, the
 *   parent = hash of the block before the range (null when the range starts at block 0), `token_ids` = the
 *   range's tokens, `block_size`, `lora_id`/`lora_name` the request's adapter (null for the base model), medium "GPU";
 * - `_maybe_evict_cached_block` → one BlockRemoved per evicted block (a duplicate of a prefix evicted while
 *   the other copy stays cached still sends it, as vLLM does);
 * - `reset_prefix_cache` → AllBlocksCleared;
 * - `take_events` once per step → one EventBatch (nothing sent for a step without events).
 */
export class KvEventRecorder implements KvCacheEventSink {
  private pending: KvEvent[] = [];

  constructor(private readonly options: KvEventRecorderOptions) {}

  blocksStored(sequence: Sequence, first: number, end: number): void {
    if (end <= first) return;
    this.extendDigests(sequence, end);
    const hashes = [];
    const extraKeys = [];
    for (let index = first; index < end; index++) {
      const block = sequence.blocks[index];
      // A block that is missing or already cached (a hit) is skipped, as vLLM skips it.
      if (!block || block.hash === null || block.event !== null) continue;
      const digest = sequence.eventDigests[index] as BlockDigest;
      const start = index * BLOCK_SIZE_TOKENS;
      block.event = {
        digest,
        parent: index === 0 ? null : (sequence.eventDigests[index - 1] as BlockDigest),
        tokens: sequence.tokens.slice(start, start + BLOCK_SIZE_TOKENS),
      };
      hashes.push(externalBlockHash(digest, this.options.hashForm));
      extraKeys.push(blockExtraKeys(index, sequence.spec.cacheSalt, sequence.spec.lora?.name));
    }
    if (hashes.length === 0) return;
    const parent = first === 0 ? null : (sequence.eventDigests[first - 1] as BlockDigest);
    this.pending.push({
      type: 'BlockStored',
      blockHashes: hashes,
      parentBlockHash: parent === null ? null : externalBlockHash(parent, this.options.hashForm),
      tokenIds: sequence.tokens.slice(first * BLOCK_SIZE_TOKENS, end * BLOCK_SIZE_TOKENS),
      blockSize: BLOCK_SIZE_TOKENS,
      extraKeys,
      ...(sequence.spec.lora === undefined ? {} : { lora: sequence.spec.lora }),
      ...(this.options.sessionId ? { sessionId: sequence.id } : {}),
    });
  }

  blockEvicted(block: KvBlock): void {
    if (block.event === null) return;
    this.pending.push({
      type: 'BlockRemoved',
      blockHashes: [externalBlockHash(block.event.digest, this.options.hashForm)],
    });
  }

  cacheCleared(): void {
    this.pending.push({ type: 'AllBlocksCleared' });
  }

  flush(): void {
    if (this.pending.length === 0) return;
    const events = this.pending;
    this.pending = [];
    this.options.sink.publish({ ts: this.options.nowUnixSeconds(), events });
  }

  /**
   * Extends the sequence's vLLM digests to its first `end` blocks. A block it holds from the cache (a hit)
   * already carries its digest; the others are hashed from their parent, tokens and extra keys.
   */
  private extendDigests(sequence: Sequence, end: number): void {
    const digests = sequence.eventDigests;
    for (let index = digests.length; index < end; index++) {
      const known = sequence.blocks[index]?.event?.digest;
      digests.push(
        known ??
          this.options.hasher.hashBlock(
            index === 0 ? null : (digests[index - 1] as BlockDigest),
            sequence.tokens,
            index * BLOCK_SIZE_TOKENS,
            BLOCK_SIZE_TOKENS,
            blockExtraKeys(index, sequence.spec.cacheSalt, sequence.spec.lora?.name),
          ),
      );
    }
  }
}
