import { Packr } from 'msgpackr';
import type { ExternalBlockHash } from './vllm-block-hash';

/** A KV event as the engine records it, before it is given one of the two wire shapes. */
export type KvEvent =
  | {
      readonly type: 'BlockStored';
      readonly blockHashes: readonly ExternalBlockHash[];
      readonly parentBlockHash: ExternalBlockHash | null;
      readonly tokenIds: readonly number[];
      readonly blockSize: number;
      /** One entry per stored block: its extra keys (`cache_salt` on block 0), or null. */
      readonly extraKeys: ReadonlyArray<readonly string[] | null>;
      /** The triggering request's id (vllm#51381), when enabled. */
      readonly sessionId?: string;
      /** The request's LoRA adapter (`lora_id` = its int id, `lora_name`); absent: the base model. */
      readonly lora?: { readonly name: string; readonly id: number };
    }
  | { readonly type: 'BlockRemoved'; readonly blockHashes: readonly ExternalBlockHash[] }
  | { readonly type: 'AllBlocksCleared' };

/**
 * `array`: msgspec structs with `array_like=True`, as vLLM encoded them before vllm#42892: a tagged
 * positional array, trailing fields at their defaults dropped (the 0.11-era field set, without
 * `extra_keys`/`group_idx`). `map`: after vllm#42892, a map with the tag under `"type"` and the newer
 * fields (`extra_keys`, `group_idx`, `kv_cache_spec_kind`), fields left at a default omitted. The
 * EventBatch itself stays a positional `[ts, events, data_parallel_rank]` in both.
 */
export type KvEventEncoding = 'array' | 'map';

export const MEDIUM_GPU = 'GPU';

// BigInt hashes: ≥ 2^63 as msgpack uint64 (0xcf), below as int64; 32-byte digests as bin 8.
const packr = new Packr({ useRecords: false, variableMapSize: true });

function wireEvent(event: KvEvent, encoding: KvEventEncoding): unknown {
  if (encoding === 'array') {
    switch (event.type) {
      case 'BlockStored':
        return [
          'BlockStored',
          event.blockHashes,
          event.parentBlockHash,
          event.tokenIds,
          event.blockSize,
          event.lora?.id ?? null,
          MEDIUM_GPU,
        ];
      case 'BlockRemoved':
        return ['BlockRemoved', event.blockHashes, MEDIUM_GPU];
      case 'AllBlocksCleared':
        return ['AllBlocksCleared'];
    }
  }
  switch (event.type) {
    case 'BlockStored':
      return {
        type: 'BlockStored',
        block_hashes: event.blockHashes,
        parent_block_hash: event.parentBlockHash,
        token_ids: event.tokenIds,
        block_size: event.blockSize,
        lora_id: event.lora?.id ?? null,
        medium: MEDIUM_GPU,
        lora_name: event.lora?.name ?? null,
        extra_keys: event.extraKeys,
        group_idx: 0,
        kv_cache_spec_kind: 'full_attention',
        ...(event.sessionId === undefined ? {} : { session_id: event.sessionId }),
      };
    case 'BlockRemoved':
      return { type: 'BlockRemoved', block_hashes: event.blockHashes, medium: MEDIUM_GPU, group_idx: 0 };
    case 'AllBlocksCleared':
      return { type: 'AllBlocksCleared' };
  }
}

/**
 * The msgpack EventBatch `[ts, events, data_parallel_rank]`. `ts` is written as a float64 by hand (msgspec
 * encodes a Python float so; msgpackr would write an integral number as an int).
 */
export function encodeEventBatch(
  batch: { readonly ts: number; readonly events: readonly KvEvent[] },
  dataParallelRank: number,
  encoding: KvEventEncoding,
): Buffer {
  const head = Buffer.alloc(10);
  head[0] = 0x93; // fixarray of 3
  head[1] = 0xcb; // float 64
  head.writeDoubleBE(batch.ts, 2);
  const events = packr.pack(batch.events.map((event) => wireEvent(event, encoding)));
  return Buffer.concat([head, events, packr.pack(dataParallelRank)]);
}
