import { Unpackr } from 'msgpackr';

/**
 * vLLM's KV-event wire format (vllm/distributed/kv_events.py, ZmqEventPublisher, read at v@0181ea31):
 * each PUB message is three frames, `[topic utf-8, sequence number u64 big-endian (from 0 per
 * publisher), msgpack EventBatch]`; a replay ROUTER answers `[empty, seq, payload]` per buffered
 * batch from the requested sequence on, then `[empty, 0xFFFF_FFFF_FFFF_FFFF, empty]` (END_SEQ).
 *
 * The payload, in both encodings vLLM has used (msgspec structs, `tag=True`):
 * - positional tagged arrays (`array_like`, until vllm#42892): the batch `[ts, events, dp_rank]`
 *   (0.9: `[ts, events]`), an event `["BlockStored", block_hashes, parent_block_hash, token_ids,
 *   block_size, lora_id, medium, lora_name, extra_keys, group_idx, kv_cache_spec_kind,
 *   kv_cache_spec_sliding_window]`, `["BlockRemoved", block_hashes, medium, group_idx]`,
 *   `["AllBlocksCleared"]`, trailing defaults dropped (`omit_defaults`);
 * - maps: the batch `{ts, events, data_parallel_rank}`, an event `{type: "BlockStored", …}` by field name.
 * Unknown fields are ignored, unknown event types counted and skipped. A block hash is the low 64 bits
 * of the engine's digest as an unsigned int (may exceed 2^63: decoded as a BigInt) or, with
 * VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0, the 32-byte digest as msgpack bin.
 */

/** An engine block hash as a Map key: `i<decimal>` for an integer, `b<hex>` for bytes. */
export type EngineHash = string;

export interface StoredEvent {
  readonly kind: 'stored';
  readonly hashes: readonly EngineHash[];
  readonly parent: EngineHash | null;
  /** block_size × hashes.length token ids, block by block. */
  readonly tokens: readonly number[];
  readonly blockSize: number;
  readonly loraName: string | null;
  /**
   * The `cache_salt` among the first block's extra keys (vLLM puts it last, on a chain's block 0 only,
   * after lora_name and multimodal keys); null: none, or an encoding without extra keys (arrays).
   */
  readonly cacheSalt: string | null;
}

export interface RemovedEvent {
  readonly kind: 'removed';
  readonly hashes: readonly EngineHash[];
}

export interface ClearedEvent {
  readonly kind: 'cleared';
}

export type KvEvent = StoredEvent | RemovedEvent | ClearedEvent;

/** What a batch held: its usable events in order, and what was left out (counted by the caller). */
export interface DecodedBatch {
  readonly events: readonly KvEvent[];
  /** EventBatch.data_parallel_rank (null when absent: vLLM 0.9, or a publisher without DP). */
  readonly rank: number | null;
  /** Events of a type this indexer does not know. */
  readonly unknown: number;
  /** Events of a known type whose fields are not what vLLM sends (wrong types, token count ≠ blocks × size). */
  readonly malformed: number;
  /** Events about another medium than the GPU cache (CPU offload tiers) or another KV-cache group than 0. */
  readonly ignored: number;
}

/** The payload is not a msgpack EventBatch, or holds more than the caps allow: the whole batch is dropped. */
export class KvEventsWireError extends Error {
  constructor(
    readonly problem: 'malformed_batch' | 'oversized_batch',
    message: string,
  ) {
    super(message);
    this.name = 'KvEventsWireError';
  }
}

export interface WireLimits {
  /** Events in one batch at most (a bigger batch is dropped whole: its cost is bounded before any work). */
  readonly maxBatchEvents: number;
  /** Blocks over a batch's events at most (BlockStored and BlockRemoved together). */
  readonly maxBatchBlocks: number;
  /**
   * A batch payload's bytes at most, checked before unpacking. The sockets refuse bigger frames with
   * the same bound (zeromq maxMessageSize: the peer is cut off), so this guards the decoder itself.
   * Absent: unbounded (benchmarks).
   */
  readonly maxBatchBytes?: number;
}

/**
 * The largest block_size accepted, tokens (vLLM's is 16 by default, at most a few hundred with some
 * attention backends): a bigger one is malformed, so a block's hash never runs over a huge token run.
 */
export const MAX_BLOCK_SIZE = 4096;

/** vLLM's replay end marker: the sequence number (-1).to_bytes(8, signed=True). */
export const END_SEQ = 0xffff_ffff_ffff_ffffn;

/** A sequence frame: 8 bytes, big-endian unsigned; null when it is not 8 bytes. */
export function readSequence(frame: Uint8Array | undefined): bigint | null {
  if (frame === undefined || frame.length !== 8) return null;
  return Buffer.from(frame.buffer, frame.byteOffset, 8).readBigUInt64BE(0);
}

export function sequenceFrame(seq: bigint): Buffer {
  const frame = Buffer.alloc(8);
  frame.writeBigUInt64BE(seq);
  return frame;
}

// u64 values as BigInt (a hash above 2^53 must not lose bits), maps as plain objects, no msgpackr records.
const unpackr = new Unpackr({ useRecords: false, mapsAsObjects: true, int64AsType: 'bigint' });

/** Decodes one EventBatch payload. Throws KvEventsWireError for anything that is not one. */
export function decodeBatch(payload: Uint8Array, limits: WireLimits): DecodedBatch {
  if (limits.maxBatchBytes !== undefined && payload.length > limits.maxBatchBytes)
    throw new KvEventsWireError('oversized_batch', `${payload.length} bytes > ${limits.maxBatchBytes}`);
  let batch: unknown;
  try {
    batch = unpackr.unpack(payload);
  } catch (error) {
    throw new KvEventsWireError('malformed_batch', `not msgpack: ${(error as Error).message}`);
  }
  let rawEvents: unknown;
  let rank: unknown = null;
  if (Array.isArray(batch)) {
    [, rawEvents, rank = null] = batch;
  } else if (isRecord(batch)) {
    rawEvents = batch['events'];
    rank = batch['data_parallel_rank'] ?? null;
  }
  if (!Array.isArray(rawEvents)) throw new KvEventsWireError('malformed_batch', 'no events list in the batch');
  if (rawEvents.length > limits.maxBatchEvents)
    throw new KvEventsWireError('oversized_batch', `${rawEvents.length} events > ${limits.maxBatchEvents}`);
  const events: KvEvent[] = [];
  let unknown = 0;
  let malformed = 0;
  let ignored = 0;
  let blocks = 0;
  for (const raw of rawEvents) {
    const fields = eventFields(raw);
    if (fields === null) {
      malformed += 1;
      continue;
    }
    const event = readEvent(fields);
    if (event === 'unknown') unknown += 1;
    else if (event === 'malformed') malformed += 1;
    else if (event === 'ignored') ignored += 1;
    else {
      if (event.kind !== 'cleared') blocks += event.hashes.length;
      if (blocks > limits.maxBatchBlocks)
        throw new KvEventsWireError('oversized_batch', `more than ${limits.maxBatchBlocks} blocks`);
      events.push(event);
    }
  }
  return { events, rank: typeof rank === 'number' ? rank : null, unknown, malformed, ignored };
}

/** Field order of each tagged-array event after its tag (kv_events.py struct field order). */
const POSITIONAL_FIELDS: Record<string, readonly string[]> = {
  BlockStored: [
    'block_hashes',
    'parent_block_hash',
    'token_ids',
    'block_size',
    'lora_id',
    'medium',
    'lora_name',
    'extra_keys',
    'group_idx',
  ],
  BlockRemoved: ['block_hashes', 'medium', 'group_idx'],
  AllBlocksCleared: [],
};

/** An event as `{ type, …fields }` whichever encoding it came in; null when it is neither. */
function eventFields(raw: unknown): Record<string, unknown> | null {
  if (isRecord(raw)) return typeof raw['type'] === 'string' ? raw : null;
  if (!Array.isArray(raw) || typeof raw[0] !== 'string') return null;
  const fields: Record<string, unknown> = { type: raw[0] };
  const names = POSITIONAL_FIELDS[raw[0]] ?? [];
  names.forEach((name, index) => {
    if (index + 1 < raw.length) fields[name] = raw[index + 1];
  });
  return fields;
}

function readEvent(fields: Record<string, unknown>): KvEvent | 'unknown' | 'malformed' | 'ignored' {
  switch (fields['type']) {
    case 'AllBlocksCleared':
      return { kind: 'cleared' };
    case 'BlockRemoved': {
      const hashes = readHashes(fields['block_hashes']);
      if (hashes === null) return 'malformed';
      return otherCache(fields) ? 'ignored' : { kind: 'removed', hashes };
    }
    case 'BlockStored':
      return readStored(fields);
    default:
      return 'unknown';
  }
}

function readStored(fields: Record<string, unknown>): StoredEvent | 'malformed' | 'ignored' {
  const hashes = readHashes(fields['block_hashes']);
  const parentRaw = fields['parent_block_hash'] ?? null;
  const parent = parentRaw === null ? null : engineHashOf(parentRaw);
  const tokens = fields['token_ids'];
  const blockSize = fields['block_size'];
  const loraName = fields['lora_name'] ?? null;
  if (
    hashes === null ||
    hashes.length === 0 ||
    (parentRaw !== null && parent === null) ||
    typeof blockSize !== 'number' ||
    !Number.isInteger(blockSize) ||
    blockSize <= 0 ||
    blockSize > MAX_BLOCK_SIZE ||
    !Array.isArray(tokens) ||
    tokens.length !== hashes.length * blockSize ||
    !tokens.every((token) => typeof token === 'number' && Number.isInteger(token)) ||
    (loraName !== null && typeof loraName !== 'string')
  )
    return 'malformed';
  if (otherCache(fields)) return 'ignored';
  const cacheSalt = parent === null ? saltOf(fields['extra_keys'], loraName) : null;
  return { kind: 'stored', hashes, parent, tokens: tokens as number[], blockSize, loraName, cacheSalt };
}

/** The salt in the first block's extra keys: their last string, unless that is the adapter's name in first place. */
function saltOf(extraKeys: unknown, loraName: string | null): string | null {
  const first: unknown = Array.isArray(extraKeys) ? extraKeys[0] : null;
  if (!Array.isArray(first) || first.length === 0) return null;
  const last: unknown = first[first.length - 1];
  if (typeof last !== 'string') return null;
  return loraName !== null && first.length === 1 ? null : last;
}

/** An event about a CPU (offloading) tier or a KV-cache group other than the first: not the GPU prefix cache routed on. */
function otherCache(fields: Record<string, unknown>): boolean {
  const medium = fields['medium'] ?? null;
  const group = fields['group_idx'] ?? null;
  return (medium !== null && medium !== 'GPU') || (group !== null && group !== 0);
}

function readHashes(raw: unknown): EngineHash[] | null {
  if (!Array.isArray(raw)) return null;
  const hashes: EngineHash[] = [];
  for (const value of raw) {
    const hash = engineHashOf(value);
    if (hash === null) return null;
    hashes.push(hash);
  }
  return hashes;
}

/** An engine hash's key; null for anything but a non-negative integer or bytes. */
export function engineHashOf(value: unknown): EngineHash | null {
  if (typeof value === 'bigint') return value >= 0n ? `i${value}` : null;
  if (typeof value === 'number') return Number.isSafeInteger(value) && value >= 0 ? `i${value}` : null;
  if (value instanceof Uint8Array)
    return `b${Buffer.from(value.buffer, value.byteOffset, value.length).toString('hex')}`;
  return null;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && !(value instanceof Uint8Array);
}
