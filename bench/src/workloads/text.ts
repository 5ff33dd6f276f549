/**
 * Deterministic filler text. A "token" here is a 4-byte word (3 base-36 characters and a space), so
 * `n` tokens ≈ 4·n bytes ≈ n real BPE tokens give or take (the engine's `usage.prompt_tokens` is the
 * truth). Equal keys give equal text, so prefixes are shared exactly where the caller reuses a key.
 */
import { seededRandom } from '@kvroute/workloads';

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

/** `tokens` 4-byte words from the stream of `seed` (a prefix of the same call with more tokens). */
export function wordText(tokens: number, seed: number): string {
  const random = seededRandom(seed);
  let text = '';
  for (let i = 0; i < tokens; i++) text += `${Math.floor(random() * 46_656).toString(36).padStart(3, '0')} `;
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
