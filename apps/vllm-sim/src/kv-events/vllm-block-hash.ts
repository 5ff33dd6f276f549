import { createHash, randomBytes } from 'node:crypto';
import { encode } from 'cborg';

/**
 * Block hashes as vLLM V1 computes them with `--prefix-caching-hash-algo sha256_cbor`, for the KV events
 * (the sim keeps its fast 53-bit chain for its own cache map). Read in vLLM's source
 * (`vllm/v1/core/kv_cache_utils.py`, `vllm/utils/hashing.py`; README "KV events"):
 * - `hash_block_tokens(hash_fn, parent, tokens, extra_keys)` = `hash_fn((parent or NONE_HASH, tuple(tokens),
 *   extra_keys))`, where `extra_keys` is None or a tuple (`generate_block_hash_extra_keys`: LoRA name,
 *   multimodal keys, `cache_salt` on block 0 only, prompt-embeds hashes, in that order);
 * - `sha256_cbor(x)` = SHA-256 of `cbor2.dumps(x, canonical=True)`: a tuple is a CBOR array, bytes a byte
 *   string, an int its shortest encoding, None `0xf6`, a str a text string (canonical only changes maps and
 *   floats, which never occur here);
 * - `init_none_hash`: `NONE_HASH = hash_fn(os.getenv("PYTHONHASHSEED"))` (the string, CBOR-encoded) when the
 *   variable is set, else 32 random bytes (the newest vLLM derives it from the fixed seed "vllm-none-hash"
 *   instead for sha256 algorithms: pass that string as the seed to reproduce it);
 * - `maybe_convert_block_hash`: the event carries `int.from_bytes(digest, "big") & (2^64 − 1)` (the last 8
 *   bytes, unsigned) unless `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0`, then the 32-byte digest itself.
 */

/** A 32-byte SHA-256 digest: vLLM's `BlockHash`. */
export type BlockDigest = Uint8Array;

/** How block hashes travel in events: `uint64` (vLLM's default) or the 32-byte digest (`bytes`). */
export type EventHashForm = 'uint64' | 'bytes';

/** An event's block hash: an unsigned 64-bit integer (may exceed 2^63) or 32 bytes. */
export type ExternalBlockHash = bigint | Uint8Array;

export function sha256Cbor(value: unknown): BlockDigest {
  return createHash('sha256').update(encode(value)).digest();
}

/** vLLM's NONE_HASH: sha256_cbor of the PYTHONHASHSEED string, or 32 random bytes when it is unset. */
export function noneHashFor(pythonHashSeed: string | undefined, random: (size: number) => Uint8Array = randomBytes) {
  return pythonHashSeed === undefined ? Uint8Array.from(random(32)) : sha256Cbor(pythonHashSeed);
}

/** Extra keys of block `index` (vLLM's order: LoRA name first, then `cache_salt` on block 0 only); null when none. */
export function blockExtraKeys(index: number, cacheSalt: string | undefined, loraName?: string): string[] | null {
  const keys: string[] = [];
  if (loraName) keys.push(loraName);
  if (index === 0 && cacheSalt) keys.push(cacheSalt);
  return keys.length === 0 ? null : keys;
}

export class VllmBlockHasher {
  constructor(readonly noneHash: BlockDigest) {}

  /** `hash_block_tokens` of `tokens[start, start + size)` under `parent` (null: the first block). */
  hashBlock(
    parent: BlockDigest | null,
    tokens: ArrayLike<number>,
    start: number,
    size: number,
    extraKeys: readonly string[] | null,
  ): BlockDigest {
    const blockTokens = new Array<number>(size);
    for (let i = 0; i < size; i++) blockTokens[i] = tokens[start + i] as number;
    return sha256Cbor([parent ?? this.noneHash, blockTokens, extraKeys]);
  }
}

/** `maybe_convert_block_hash`: the digest as the event carries it. */
export function externalBlockHash(digest: BlockDigest, form: EventHashForm): ExternalBlockHash {
  if (form === 'bytes') return digest;
  return Buffer.from(digest.buffer, digest.byteOffset, digest.byteLength).readBigUInt64BE(digest.byteLength - 8);
}

/** An event hash as JSON can carry it (debug endpoint): decimal for uint64 (beyond 2^53), hex for bytes. */
export function externalBlockHashText(digest: BlockDigest, form: EventHashForm): string {
  const external = externalBlockHash(digest, form);
  return typeof external === 'bigint' ? external.toString(10) : Buffer.from(external).toString('hex');
}
