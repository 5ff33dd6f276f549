/**
 * 53-bit non-cryptographic hashing from two independent 32-bit lanes (Math.imul arithmetic), so a
 * hash is a plain JS number: exact in JSON, a cheap Map key, equal on every router replica (the
 * arithmetic is integer-only and fully specified, unlike anything built on floating point).
 *
 * Lane mixing follows MurmurHash3's word step (one lane per constant pair); the finaliser is
 * cyrb53's cross-lane avalanche, which keeps 32 bits of lane 1 and 21 bits of lane 2.
 *
 * Not for security: anyone can craft collisions. A collision only misroutes a request (the engine
 * keeps its own exact cache keys), so speed wins over strength here.
 */

const LANE1_K1 = 0xcc9e2d51;
const LANE1_K2 = 0x1b873593;
const LANE2_K1 = 0x85ebca6b;
const LANE2_K2 = 0xc2b2ae35;
const AVALANCHE_A = 2246822507;
const AVALANCHE_B = 3266489909;
const TWO_POW_32 = 4294967296;
/** 2^53: hashes lie in [0, HASH53_RANGE). */
export const HASH53_RANGE = 9007199254740992;

/** Mixes one 32-bit word into lane 1. Returns the new lane state (int32). */
export function mixLane1(lane: number, word: number): number {
  let k = Math.imul(word, LANE1_K1);
  k = (k << 15) | (k >>> 17);
  k = Math.imul(k, LANE1_K2);
  let h = lane ^ k;
  h = (h << 13) | (h >>> 19);
  return (Math.imul(h, 5) + 0xe6546b64) | 0;
}

/** Mixes one 32-bit word into lane 2 (different constants and rotations from lane 1). */
export function mixLane2(lane: number, word: number): number {
  let k = Math.imul(word, LANE2_K1);
  k = (k << 16) | (k >>> 16);
  k = Math.imul(k, LANE2_K2);
  let h = lane ^ k;
  h = (h << 17) | (h >>> 15);
  return (Math.imul(h, 9) + 0x38495ab5) | 0;
}

/**
 * Avalanches both lanes together with the input length (so zero-padded tails differ from real
 * zeros) and returns a 53-bit integer in [0, 2^53).
 */
export function finalizeLanes(lane1: number, lane2: number, length: number): number {
  let h1 = lane1 ^ length;
  let h2 = lane2 ^ Math.imul(length, 0x9e3779b1);
  h1 = Math.imul(h1 ^ (h1 >>> 16), AVALANCHE_A);
  h1 ^= Math.imul(h2 ^ (h2 >>> 13), AVALANCHE_B);
  h2 = Math.imul(h2 ^ (h2 >>> 16), AVALANCHE_A);
  h2 ^= Math.imul(h1 ^ (h1 >>> 13), AVALANCHE_B);
  return TWO_POW_32 * (h2 & 0x1fffff) + (h1 >>> 0);
}

/** Low 32 bits of a 53-bit hash, as an int32 lane seed. */
export function lowLane(hash: number): number {
  return hash | 0;
}

/** High 21 bits of a 53-bit hash, as an int32 lane seed. */
export function highLane(hash: number): number {
  return Math.floor(hash / TWO_POW_32) | 0;
}

const BYTES_LANE1_SEED = 0x243f6a88;
const BYTES_LANE2_SEED = 0x13198a2e;

/**
 * Hashes `length` bytes of `view` from `start`, with the lanes seeded by `previous` (a 53-bit hash,
 * e.g. the previous block's, which is what makes block hashes a chain). Words are read
 * little-endian whatever the platform. Lives beside the lane mixers so the hot loop calls them
 * within one module, where every runtime inlines them (a test runner's module wrapper need not).
 */
export function hashBytes53(view: DataView, start: number, length: number, previous: number): number {
  let h1 = lowLane(previous) ^ BYTES_LANE1_SEED;
  let h2 = highLane(previous) ^ BYTES_LANE2_SEED;
  const wordsEnd = start + (length - (length % 4));
  let p = start;
  for (; p < wordsEnd; p += 4) {
    const word = view.getInt32(p, true);
    h1 = mixLane1(h1, word);
    h2 = mixLane2(h2, word);
  }
  const end = start + length;
  if (p < end) {
    // 1–3 trailing bytes form one zero-padded word; the length in the finaliser tells them apart.
    let word = 0;
    for (let shift = 0; p < end; p++, shift += 8) word |= view.getUint8(p) << shift;
    h1 = mixLane1(h1, word);
    h2 = mixLane2(h2, word);
  }
  return finalizeLanes(h1, h2, length);
}

const TOKENS_LANE1_SEED = 0x452821e6;
const TOKENS_LANE2_SEED = 0x38d01377;

/**
 * The chain seed of a request's first token block: a token chain starts here (byte chains start at 0),
 * so the two kinds never share a hash.
 */
export const TOKEN_CHAIN_ROOT = 0x0b6a6c5e2f1d;

/**
 * Hashes one block of token ids, `tokens[start .. start + count)`, chained on `previous` (the block
 * before's hash, or TOKEN_CHAIN_ROOT for the first), with `extra` mixed in first: a 53-bit hash of the
 * block's extra keys as vLLM keys them (the LoRA adapter, multimodal inputs, `cache_salt` on block 0),
 * 0 for none. A token id is one 32-bit word. The router hashes a request's prompt with it and the
 * KV-event indexer an engine's stored blocks (from their `token_ids`), so both name a block the same
 * way whatever hash the engine uses.
 */
export function hashTokenBlock53(
  tokens: ArrayLike<number>,
  start: number,
  count: number,
  previous: number,
  extra = 0,
): number {
  let h1 = lowLane(previous) ^ TOKENS_LANE1_SEED;
  let h2 = highLane(previous) ^ TOKENS_LANE2_SEED;
  if (extra !== 0) {
    h1 = mixLane1(mixLane1(h1, lowLane(extra)), highLane(extra));
    h2 = mixLane2(mixLane2(h2, lowLane(extra)), highLane(extra));
  }
  const end = start + count;
  for (let i = start; i < end; i++) {
    const token = tokens[i] as number;
    h1 = mixLane1(h1, token);
    h2 = mixLane2(h2, token);
  }
  return finalizeLanes(h1, h2, count);
}

/**
 * The `extra` of hashTokenBlock53 for a block, from the keys vLLM adds to a block's hash
 * (vllm/v1/core/kv_cache_utils.py generate_block_hash_extra_keys): the LoRA adapter's name on every
 * block, the request's `cache_salt` on the chain's first block only; 0 for neither. The router (a
 * request's salt and adapter) and the KV-event indexer (a BlockStored's lora_name and block 0's extra
 * keys) compute it the same way, so a salted or adapter's block has one name on both sides.
 */
export function tokenBlockExtra(loraName: string | null, cacheSalt: string | null, firstBlock: boolean): number {
  const lora = loraName === null || loraName === '' ? 0 : hashString53(loraName, LORA_EXTRA_SEED);
  if (!firstBlock || cacheSalt === null || cacheSalt === '') return lora;
  const salt = hashString53(cacheSalt, SALT_EXTRA_SEED);
  return lora === 0 ? salt : combineHash53(lora, salt);
}

const LORA_EXTRA_SEED = 0x1f83d9abfb41;
const SALT_EXTRA_SEED = 0x5be0cd19137e;

/** Hashes two 53-bit values into one (order matters): rendezvous weights, ring points. */
export function combineHash53(a: number, b: number): number {
  let h1 = mixLane1(lowLane(a), lowLane(b));
  h1 = mixLane1(h1, highLane(b));
  let h2 = mixLane2(highLane(a), highLane(b));
  h2 = mixLane2(h2, lowLane(b));
  return finalizeLanes(h1, h2, 16);
}

/**
 * Hashes a string's UTF-16 code units (not its UTF-8 bytes: this keys identifiers such as backend
 * ids and session keys, never prefix blocks). Two code units form one 32-bit word.
 */
export function hashString53(text: string, seed = 0): number {
  let h1 = lowLane(seed) ^ 0x2f6b1a9d;
  let h2 = highLane(seed) ^ 0x6c8e9cf5;
  const length = text.length;
  let i = 0;
  for (; i + 1 < length; i += 2) {
    const word = text.charCodeAt(i) | (text.charCodeAt(i + 1) << 16);
    h1 = mixLane1(h1, word);
    h2 = mixLane2(h2, word);
  }
  if (i < length) {
    const word = text.charCodeAt(i);
    h1 = mixLane1(h1, word);
    h2 = mixLane2(h2, word);
  }
  return finalizeLanes(h1, h2, length);
}

/**
 * Weighted rendezvous hashing's score of one (key, choice) pair whose combined hash is `hash`:
 * `-weight / ln(u)` with u = hashToUnitInterval(hash), uniform in (0, 1). The highest score wins, and
 * each choice wins a share of the keys proportional to its weight; changing one choice's weight moves
 * only keys to or from that choice. Higher is better, unitless.
 */
export function weightedRendezvousScore(hash: number, weight: number): number {
  return -weight / Math.log(hashToUnitInterval(hash));
}

const TWO_POW_42 = 4398046511104;

/**
 * Maps a 53-bit hash to a uniform number strictly inside (0, 1), e.g. for `-w / ln(u)`. Uses the top
 * 42 bits so `(bits + 0.5) / 2^42` is exact: never 0 and never rounds up to 1.
 */
export function hashToUnitInterval(hash: number): number {
  return (Math.floor(hash / 2048) + 0.5) / TWO_POW_42;
}
