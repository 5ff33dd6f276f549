import type { RateState } from '@kvroute/redis-store';
import { unitsPerToken } from '@kvroute/routing';
import { RouterError } from '../errors';
import type { Identity } from '../tenants/authenticate';
import type { GateTicket, LimitGate } from '../tenants/limit-gate';
import { rateLimitsOf, type TenantDirectory } from '../tenants/tenant-directory';
import type { ParsedRequest } from './parse';

/**
 * Stage 3 of the request path, **limit**: a tenant's and its key's limits (requests and tokens per
 * minute, requests in flight; docs/adr/0006), after parse because tokens are reserved from the body:
 * the prompt estimate (routing-text bytes ÷ the pool's bytes per token) plus the generation budget
 * (`max_tokens` × `n`, or `reservedCompletionTokens` without one). One admission call takes from every
 * limit or from none. Over a limit: 429 with `Retry-After`, `retry-after-ms` (what OpenAI clients wait
 * on) and the `x-ratelimit-*` headers; admitted responses carry the `x-ratelimit-*` headers too. The
 * request is settled once, when it is over (release), from its usage.
 */
export interface LimitDeps {
  readonly gate: LimitGate;
  readonly tenants: TenantDirectory;
  /** Bytes per token of a pool's routing text (learned or configured): the prompt estimate's divisor. */
  readonly bytesPerToken: (pool: string) => number;
  /** Tokens reserved for a generation that names no `max_tokens`. */
  readonly reservedCompletionTokens: number;
  /** How long a concurrency lease lives unrenewed, ms; renewed every third of it while the request runs. */
  readonly leaseTtlMs: number;
  /** Wall-clock ms (the shared state's clock). */
  readonly nowMs: () => number;
}

/** An admitted request's limits: the headers to send, and the settle that ends it. */
export interface Admission {
  readonly headers: Readonly<Record<string, string>>;
  readonly ticket: GateTicket;
  readonly reservedTokens: number;
  readonly renewTimer: NodeJS.Timeout | null;
}

/** Admits one request of `identity`; null when neither the tenant nor the key has a limit. Throws 429 (or 400). */
export async function admitLimits(
  deps: LimitDeps,
  identity: Identity,
  parsed: ParsedRequest,
  leaseId: string,
): Promise<Admission | null> {
  const tenantLimits = deps.tenants.limitsOf(identity.tenant);
  const rates = rateLimitsOf(tenantLimits, identity.keyLimits);
  const concurrency = {
    tenant: tenantLimits?.concurrentRequests ?? 0,
    key: identity.keyLimits.concurrentRequests ?? 0,
  };
  if (rates.length === 0 && concurrency.tenant === 0 && concurrency.key === 0) return null;
  const reservedTokens = reservedTokensOf(deps, parsed);
  const outcome = await deps.gate.admit({
    tenant: identity.tenant,
    keyId: identity.keyId,
    leaseId,
    nowMs: deps.nowMs(),
    leaseTtlMs: deps.leaseTtlMs,
    rates,
    reservedTokens,
    concurrency,
  });
  const headers = rateLimitHeaders(outcome.rates);
  if (!outcome.admitted) {
    if (outcome.retryAfterMs === null) {
      throw new RouterError(
        'ROUTER_ERR_REQUEST_OVER_LIMIT',
        `This request reserves ${reservedTokens} tokens, more than a tokens-per-minute limit allows; lower max_tokens or the prompt.`,
        { param: 'max_tokens', headers },
      );
    }
    const what =
      outcome.refusedBy.kind === 'rate'
        ? `${outcome.refusedBy.limit.unit} per minute of this ${outcome.refusedBy.limit.scope === 'key' ? 'API key' : 'tenant'}`
        : `requests in flight of this ${outcome.refusedBy.scope === 'key' ? 'API key' : 'tenant'}`;
    const retryAfterMs = Math.max(1, outcome.retryAfterMs);
    throw new RouterError('ROUTER_ERR_RATE_LIMITED', `Rate limit reached: ${what}. Retry in ${retryAfterMs} ms.`, {
      retryAfterSeconds: Math.max(1, Math.ceil(retryAfterMs / 1000)),
      headers: { ...headers, 'retry-after-ms': String(retryAfterMs) },
    });
  }
  const ticket = outcome.ticket as GateTicket;
  const renewTimer =
    concurrency.tenant > 0 || concurrency.key > 0
      ? setInterval(() => void deps.gate.renew(ticket, deps.nowMs()), Math.max(1_000, Math.floor(deps.leaseTtlMs / 3)))
      : null;
  renewTimer?.unref();
  return { headers, ticket, reservedTokens, renewTimer };
}

/**
 * Ends an admission: leases go, token buckets are corrected by what was used. `usedTokens`: prompt +
 * completion tokens from the response's usage; null when the response said nothing (then what was
 * reserved is kept); 0 when nothing was sent to a backend.
 */
export function settleLimits(deps: LimitDeps, admission: Admission, usedTokens: number | null): void {
  if (admission.renewTimer !== null) clearInterval(admission.renewTimer);
  void deps.gate.release(admission.ticket, usedTokens ?? admission.reservedTokens, deps.nowMs());
}

function reservedTokensOf(deps: LimitDeps, parsed: ParsedRequest): number {
  return estimatedTokensOf(parsed, deps.bytesPerToken(parsed.model), deps.reservedCompletionTokens);
}

/**
 * A request's tokens before its response: the prompt (token mode counts it; byte mode estimates it at the
 * pool's bytes per token) plus its generation budget (`max_tokens`, else `reservedCompletionTokens`).
 * A JSON pass-through (embeddings, pooling, tokenize, …) is charged by its size: its body's bytes at the
 * pool's bytes per token, plus the `max_tokens` it names; its response's usage is not read, so this is
 * also what it is settled at.
 */
export function estimatedTokensOf(
  parsed: ParsedRequest,
  bytesPerToken: number,
  reservedCompletionTokens: number,
): number {
  const charge = parsed.passthroughCharge;
  if (charge !== undefined) return Math.ceil(charge.bytes / Math.max(0.5, bytesPerToken)) + charge.maxTokens;
  const request = parsed.routingRequest;
  const prompt = Math.ceil(request.textBytes / unitsPerToken(request, Math.max(0.5, bytesPerToken)));
  return prompt + (request.maxTokens ?? reservedCompletionTokens);
}

/**
 * The `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` headers OpenAI sends (reset as a duration:
 * `1s`, `6m0s`, `120ms`), for the tightest limit of each unit (fewest remaining).
 */
export function rateLimitHeaders(rates: readonly RateState[]): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const unit of ['requests', 'tokens'] as const) {
    let tightest: RateState | null = null;
    for (const rate of rates)
      if (rate.limit.unit === unit && (tightest === null || rate.remaining < tightest.remaining)) tightest = rate;
    if (tightest === null) continue;
    headers[`x-ratelimit-limit-${unit}`] = String(tightest.limit.limit);
    headers[`x-ratelimit-remaining-${unit}`] = String(tightest.remaining);
    headers[`x-ratelimit-reset-${unit}`] = durationText(tightest.resetMs);
  }
  return headers;
}

/** ms as OpenAI writes durations: `120ms`, `1.5s`, `6m0s`. */
export function durationText(ms: number): string {
  if (ms < 1_000) return `${Math.max(0, Math.round(ms))}ms`;
  const seconds = ms / 1000;
  if (seconds < 60) return `${Number(seconds.toFixed(3))}s`;
  const minutes = Math.floor(seconds / 60);
  return `${minutes}m${Number((seconds - minutes * 60).toFixed(3))}s`;
}
