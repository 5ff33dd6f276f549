/**
 * Deterministic filler text. A "token" here is a 4-byte word (a space and 3 letters) drawn from the words
 * that are exactly one token in the sim's tokenizer, so `n` tokens are n tokens in vllm-sim and close to
 * n in a real engine's (its `usage.prompt_tokens` is the truth). Equal keys give equal text, so prefixes
 * are shared exactly where the caller reuses a key.
 */
import { seededRandom } from '@kvroute/workloads';
import { ONE_TOKEN_WORDS } from './one-token-words';

/** Mixes integers into one 32-bit seed (murmur3-style finaliser per part): different parts, different streams. */
export function mixSeed(...parts: readonly number[]): number {
  let h = 0x9e3779b9;
  for (const part of parts) {
    // Split into two 32-bit halves so ids above 2^32 still matter.
    for (const word of [part >>> 0, Math.floor(part / 4294967296) >>> 0]) {
      h = Math.imul(h ^ word, 0x85ebca6b);
      h ^= h >>> 13;
      h = Math.imul(h, 0xc2b2ae35);
      h ^= h >>> 16;
    }
  }
  return h >>> 0;
}

/**
 * `tokens` one-token words (` abc`, 4 bytes each) from the stream of `seed`: a prefix of the same call
 * with more tokens, and texts made of several calls tokenize to the sum of their tokens.
 */
export function wordText(tokens: number, seed: number): string {
  const random = seededRandom(seed);
  let text = '';
  for (let i = 0; i < tokens; i++)
    text += ` ${ONE_TOKEN_WORDS[Math.floor(random() * ONE_TOKEN_WORDS.length)] as string}`;
  return text;
}

/** Exactly `bytes` bytes of word text (ASCII) from `seed`. */
export function wordBytes(bytes: number, seed: number): string {
  return wordText(Math.ceil(Math.max(0, bytes) / 4), seed).slice(0, Math.max(0, bytes));
}

const ALPHANUMERIC = 'abcdefghijklmnopqrstuvwxyz0123456789';

/** `bytes` pseudo-random alphanumeric characters drawn from `random`. */
export function randomChars(bytes: number, random: () => number): string {
  let text = '';
  for (let i = 0; i < bytes; i++) text += ALPHANUMERIC[Math.floor(random() * ALPHANUMERIC.length)];
  return text;
}

/** `head` padded (or cut) to exactly `bytes` bytes with `pad` repeated: the seed llm-router's filler. */
export function padTo(head: string, bytes: number, pad: string): string {
  if (head.length >= bytes) return head.slice(0, bytes);
  return head + pad.repeat(bytes - head.length);
}
