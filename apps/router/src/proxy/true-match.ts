import type { BackendId } from '@kvroute/routing';
import type { Backend } from '../backends/backend-registry';
import type { UpstreamPools } from './upstream-pool';

/**
 * What each backend says it would serve from its prefix cache for a request, in prompt tokens
 * (null = it did not answer); the figures of policies with `needsTrueMatch` (the oracle).
 */
export type AskTrueMatches = (backends: readonly Backend[], body: Buffer) => Promise<ReadonlyMap<BackendId, number | null>>;

/**
 * Asks every backend's `POST /sim/match` (vllm-sim only: the request body as is, answered with
 * `{ cached_tokens, … }`) at once, over the backends' own upstream connection pools. A backend that
 * errs, answers anything but 200 with a token count, or takes longer than `timeoutMs` is null for this
 * request: the oracle then counts it as holding nothing, and the request is never failed by it.
 */
export function simMatchAsker(upstreams: UpstreamPools, timeoutMs: number): AskTrueMatches {
  return async (backends, body) => {
    const answers = await Promise.all(backends.map((backend) => askSimMatch(upstreams, backend, body, timeoutMs)));
    return new Map(backends.map((backend, index) => [backend.id, answers[index] ?? null]));
  };
}

async function askSimMatch(upstreams: UpstreamPools, backend: Backend, body: Buffer, timeoutMs: number): Promise<number | null> {
  try {
    const response = await upstreams.for(backend).request({
      method: 'POST',
      // /sim/* sits beside /v1 on the simulator, under the same base path.
      path: `${backend.basePath}/sim/match`,
      headers: { 'content-type': 'application/json' },
      body,
      signal: AbortSignal.timeout(timeoutMs),
    });
    if (response.statusCode !== 200) {
      await response.body.dump();
      return null;
    }
    const answer = (await response.body.json()) as { cached_tokens?: unknown };
    return typeof answer.cached_tokens === 'number' && Number.isFinite(answer.cached_tokens) && answer.cached_tokens >= 0 ? answer.cached_tokens : null;
  } catch {
    return null;
  }
}
