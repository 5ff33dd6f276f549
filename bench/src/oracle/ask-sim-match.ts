import type { Dispatcher } from 'undici';

/** What one backend says about one request: vllm-sim's `POST /sim/match` answer, in prompt tokens. */
export interface SimMatch {
  readonly promptTokens: number;
  readonly cachedTokens: number;
}

export interface AskSimMatchInput {
  /** The backend's connection pool. */
  readonly upstream: Dispatcher;
  /** The backend URL's path prefix ('' or e.g. '/engine'): /sim/* sits beside /v1 under it. */
  readonly basePath: string;
  /** The request body exactly as the client sent it (a chat or completion request). */
  readonly body: Buffer;
  readonly timeoutMs: number;
  /** Aborted when the client went away: nothing to ask for any more. */
  readonly signal?: AbortSignal;
}

/**
 * Asks one backend what it would serve from its prefix cache for this request right now. null when
 * it errs, answers anything but 200 with token counts, or takes longer than `timeoutMs`: the oracle
 * then counts it as holding nothing, and the request is never failed by it.
 */
export async function askSimMatch(input: AskSimMatchInput): Promise<SimMatch | null> {
  const timeout = AbortSignal.timeout(input.timeoutMs);
  try {
    const response = await input.upstream.request({
      method: 'POST',
      path: `${input.basePath}/sim/match`,
      headers: { 'content-type': 'application/json' },
      body: input.body,
      signal: input.signal ? AbortSignal.any([input.signal, timeout]) : timeout,
    });
    if (response.statusCode !== 200) {
      await response.body.dump();
      return null;
    }
    const answer = (await response.body.json()) as { prompt_tokens?: unknown; cached_tokens?: unknown };
    const cachedTokens = tokenCount(answer.cached_tokens);
    if (cachedTokens === null) return null;
    return { cachedTokens, promptTokens: tokenCount(answer.prompt_tokens) ?? cachedTokens };
  } catch {
    return null;
  }
}

function tokenCount(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? value : null;
}
