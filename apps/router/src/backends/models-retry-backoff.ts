/**
 * How long a backend whose models are pending (it has not yet answered GET /v1/models) waits before it is
 * asked again. A router started together with its backends finds them not listening yet; asking again
 * only on the models refresh (30 s) would answer 404 for that long. So: soon, then less and less often,
 * capped at a few seconds so that a backend that takes minutes to load its weights costs a request every
 * few seconds, not a busy loop.
 *
 * Equal jitter: the delay is uniform in [cap/2, cap), cap = firstMs · 2^(failures−1) up to maxMs. Half
 * of it random so that replicas started together do not ask in lock step; half of it fixed so that a
 * random draw near 0 never turns the retry into a tight loop.
 */
export interface ModelsRetryBackoff {
  /** Cap of the first retry's delay, ms. */
  readonly firstMs: number;
  /** Largest cap, ms. */
  readonly maxMs: number;
}

export const DEFAULT_MODELS_RETRY_BACKOFF: ModelsRetryBackoff = { firstMs: 250, maxMs: 4_000 };

/** Delay before the next attempt after `failures` (≥ 1) failed ones, ms; `random` in [0, 1). */
export function modelsRetryDelayMs(
  failures: number,
  random: () => number,
  backoff: ModelsRetryBackoff = DEFAULT_MODELS_RETRY_BACKOFF,
): number {
  // The exponent is bounded before the power: 2^1000 is finite, 2^1100 is not.
  const exponent = Math.min(Math.max(failures, 1) - 1, 30);
  const capMs = Math.min(backoff.maxMs, backoff.firstMs * 2 ** exponent);
  return capMs / 2 + (random() * capMs) / 2;
}
