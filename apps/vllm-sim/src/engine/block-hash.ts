import { BLOCK_SIZE_TOKENS } from './profiles';

/**
 * Chained block hashes, as vLLM's prefix cache keys blocks: hash_i = H(hash_{i-1}, tokens of block i),
 * so equal hash at position i means the whole prefix up to and including block i is equal.
 * vLLM uses sha256; the simulator only needs equality, so it uses a fast 53-bit mix (two 32-bit
 * lanes, cyrb53-style) that stays a plain JS number (a cheap Map key). Collision odds with 10^5
 * cached blocks are ~10^-6.
 */

/**
 * Parent hash of a request's first block. Unsalted: one constant, so every unsalted request shares
 * blocks. Salted: a hash of the salt instead. vLLM adds `cache_salt` as an extra key of the first
 * block only (`generate_block_hash_extra_keys` in vllm/v1/core/kv_cache_utils.py, when
 * start_token_idx == 0); every later block chains from it, so requests with different salts share
 * no block and requests with the same salt share as usual. Feeding the salt into block 0's hash
 * through its parent is that same partition. An empty salt counts as none (vLLM's truthiness test;
 * the API refuses it before it gets here).
 *
 * A LoRA adapter partitions the cache the same way: vLLM puts the adapter's name first among the extra
 * keys of every block, so the same tokens under two adapters (or an adapter and the base model) share no
 * block. Folding the name into the root gives the same partition, since every later hash chains from it.
 */
export function rootHash(salt?: string, loraName?: string): number {
  const hasSalt = salt !== undefined && salt !== '';
  const hasLora = loraName !== undefined && loraName !== '';
  if (!hasSalt && !hasLora) return 0x1b873593;
  // NUL cannot occur in an adapter name taken from a flag or a JSON body, so the two parts never collide.
  const key = hasLora ? `lora\u0000${loraName}\u0000${hasSalt ? salt : ''}` : (salt as string);
  let h1 = 0x9e3779b1;
  let h2 = 0x85ebca6b;
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i);
    h1 = Math.imul(h1 ^ c, 2654435761);
    h2 = Math.imul(h2 ^ c, 1597334677);
  }
  return finalize(h1, h2);
}

export function hashBlock(parent: number, tokens: ArrayLike<number>, start: number): number {
  let h1 = (parent >>> 0) ^ 0xdeadbeef;
  let h2 = Math.floor(parent / 4294967296) ^ 0x41c6ce57;
  for (let i = start; i < start + BLOCK_SIZE_TOKENS; i++) {
    const token = tokens[i] as number;
    h1 = Math.imul(h1 ^ token, 2654435761);
    h2 = Math.imul(h2 ^ token, 1597334677);
  }
  return finalize(h1, h2);
}

/** Hashes of every full block of `tokens` (a trailing partial block has no hash). */
export function hashFullBlocks(
  tokens: ArrayLike<number>,
  salt?: string,
  maxBlocks = Infinity,
  loraName?: string,
): number[] {
  const count = Math.min(Math.floor(tokens.length / BLOCK_SIZE_TOKENS), maxBlocks);
  const hashes = new Array<number>(count);
  let parent = rootHash(salt, loraName);
  for (let block = 0; block < count; block++) {
    parent = hashBlock(parent, tokens, block * BLOCK_SIZE_TOKENS);
    hashes[block] = parent;
  }
  return hashes;
}

function finalize(a: number, b: number): number {
  let h1 = a;
  let h2 = b;
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);
  return 4294967296 * (2097151 & h2) + (h1 >>> 0);
}
