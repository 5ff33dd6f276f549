/**
 * Open-loop Poisson arrivals: exponential gaps at `ratePerS`, each prompt a prefix (from a pool of P
 * shared prefixes with probability `reuseRatio`, else a fresh one no other request has) followed by a
 * suffix of its own up to the drawn prompt length. Pure and deterministic from the seed.
 * Lengths are in 4-byte word tokens (see `text.ts`).
 */
import { seededRandom } from '@kvroute/workloads';
import type { CompletionEvent } from './events';
import { mixSeed, wordText } from './text';

export type LengthDistribution =
  | { readonly kind: 'fixed'; readonly value: number }
  | { readonly kind: 'uniform'; readonly min: number; readonly max: number }
  /** Log-normal: median e^μ, spread σ; clamped to [min, max] when given. */
  | {
      readonly kind: 'lognormal';
      readonly median: number;
      readonly sigma: number;
      readonly min?: number;
      readonly max?: number;
    };

/** An integer ≥ 1 drawn from the distribution. */
export function sampleLength(distribution: LengthDistribution, random: () => number): number {
  let value: number;
  switch (distribution.kind) {
    case 'fixed':
      value = distribution.value;
      break;
    case 'uniform':
      value = distribution.min + Math.floor(random() * (distribution.max - distribution.min + 1));
      break;
    case 'lognormal': {
      // Box–Muller; 1 − u keeps the logarithm finite.
      const normal = Math.sqrt(-2 * Math.log(1 - random())) * Math.cos(2 * Math.PI * random());
      value = Math.round(distribution.median * Math.exp(distribution.sigma * normal));
      value = Math.min(distribution.max ?? Infinity, Math.max(distribution.min ?? 1, value));
      break;
    }
  }
  return Math.max(1, Math.round(value));
}

export interface PoissonOptions {
  readonly seed: number;
  readonly ratePerS: number;
  /** Number of requests. */
  readonly count: number;
  /** P: shared prefixes in the pool. */
  readonly poolSize: number;
  /** Tokens of each prefix (pool or fresh); a prompt shorter than its prefix is the prefix cut short. */
  readonly prefixTokens: LengthDistribution;
  /** Probability that a request starts with a pool prefix (uniform over the pool) rather than a fresh one. */
  readonly reuseRatio: number;
  readonly promptTokens: LengthDistribution;
  readonly outputTokens: LengthDistribution;
}

export interface PoissonWorkload {
  readonly events: CompletionEvent[];
  /** Per event: the pool index of its prefix, or -1 for a fresh one. */
  readonly prefixOf: number[];
}

export function generatePoisson(options: PoissonOptions): PoissonWorkload {
  if (!(options.ratePerS > 0)) throw new RangeError('ratePerS must be > 0');
  const random = seededRandom(mixSeed(options.seed, 10));
  const poolRandom = seededRandom(mixSeed(options.seed, 11));
  const pool = Array.from({ length: options.poolSize }, (_, index) =>
    wordText(sampleLength(options.prefixTokens, poolRandom), mixSeed(options.seed, 12, index)),
  );
  const events: CompletionEvent[] = [];
  const prefixOf: number[] = [];
  let atMs = 0;
  for (let index = 0; index < options.count; index++) {
    if (index > 0) atMs += (-Math.log(1 - random()) / options.ratePerS) * 1000;
    const reuse = pool.length > 0 && random() < options.reuseRatio;
    const prefixIndex = reuse ? Math.floor(random() * pool.length) : -1;
    const prefix = reuse
      ? (pool[prefixIndex] as string)
      : wordText(sampleLength(options.prefixTokens, random), mixSeed(options.seed, 13, index));
    const promptTokens = sampleLength(options.promptTokens, random);
    const maxTokens = sampleLength(options.outputTokens, random);
    const prefixBytes = Math.min(prefix.length, promptTokens * 4);
    const suffix = wordText(promptTokens - prefixBytes / 4, mixSeed(options.seed, 14, index));
    events.push({
      id: `p${index}`,
      atMs: Math.round(atMs * 1000) / 1000,
      kind: 'completion',
      maxTokens,
      prompt: prefix.slice(0, prefixBytes) + suffix,
    });
    prefixOf.push(prefixIndex);
  }
  return { events, prefixOf };
}
