import type { FastifyBaseLogger } from 'fastify';
import type { Dispatcher } from 'undici';
import {
  bootstrapRoom,
  nixlDecodeBody,
  nixlPrefillBody,
  prefillCachedTokensOf,
  prefillParamsOf,
  SGLANG_DEFAULT_BOOTSTRAP_PORT,
  sglangBootstrapBody,
  type JsonObject,
} from '@kvroute/protocols';
import { estimatePrefillTokens, type BackendId } from '@kvroute/routing';
import type { Backend } from '../backends/backend-registry';
import { RouterError } from '../errors';
import type { ClientHop } from '../proxy/header-hygiene';
import { upstreamRequestHeaders } from '../proxy/header-hygiene';
import type { UpstreamPools } from '../proxy/upstream-pool';
import type { Learner } from './learn';
import type { ParsedRequest } from './parse';
import { releaseLease } from './release';
import { route, type RouteDeps, type Ticket } from './route';

/**
 * The prefill leg of a disaggregated request (issue 32; protocols: @kvroute/protocols pd/disaggregated-legs.ts). It
 * runs after route chose the decode backend and before send relays the decode leg: it decides whether to
 * disaggregate, chooses and leases a prefill backend, and gives back the body the decode leg sends.
 *
 * - Disaggregate only when the decode backend lacks at least `minUncachedTokens` of the prompt (llm-d's prefix-based
 *   decider): a decode backend that holds nearly all of it prefills the rest itself, which beats a transfer.
 * - vLLM (NixlConnector): leg 1 to the prefill backend, awaited (bounded by `prefillTimeoutMs`, its answer by
 *   `maxAnswerBytes`); its `kv_transfer_params` go to the decode leg untouched. A failure before its answer (refused
 *   connection, 5xx, 429, timeout) tries another prefill backend, up to `prefillTries` in all, then the decode backend
 *   serves the whole request (`decode-only`, reason `prefill-failed`). A 4xx is the request's own fault: the decode
 *   backend answers it as it would answer the client. Malformed params count as none (the decode backend prefills
 *   locally) and are counted, never relayed.
 * - SGLang: the same body to both with the prefill backend's bootstrap address and a fresh room; leg 1 is not awaited
 *   (the engines meet in the room), its lease released when its answer ends.
 *
 * The prefill lease is released when leg 1 ends; the prefix is recorded as the prefill backend's when leg 1 answered
 * (its blocks stay in its cache), and as the decode backend's at the decode leg's first output, as for any request.
 * The decode leg's usage reports the prefill engine's cached tokens (vLLM: read from leg 1's usage).
 */
export interface PdSettings {
  readonly protocol: 'vllm-nixl' | 'sglang';
  /** Prompt tokens the decode backend must lack for the request to be disaggregated. */
  readonly minUncachedTokens: number;
  /** Leg 1's deadline, ms: connection, prefill and answer. */
  readonly prefillTimeoutMs: number;
  /** Prefill backends tried before the decode backend serves the request whole (≥ 1). */
  readonly prefillTries: number;
  /** Largest leg-1 answer read, bytes. */
  readonly maxAnswerBytes: number;
  /** Bytes mode: a pool's routing-text bytes per engine token, to count the tokens the decode backend lacks. */
  readonly bytesPerToken: (pool: string) => number;
}

export interface PrefillDeps {
  readonly settings: PdSettings;
  /** Route's dependencies, with the prefill policy as `policyFor` (cache-aware, or cache-blind for comparison). */
  readonly route: RouteDeps;
  readonly upstreams: UpstreamPools;
  readonly learn: Learner;
  readonly metrics: PrefillMetricsSink;
  readonly logger: FastifyBaseLogger;
  readonly random: () => number;
}

/** What the prefill leg tells the metrics (router-metrics.ts implements it). */
export interface PrefillMetricsSink {
  recordDisaggregation(model: string, outcome: PrefillOutcome['kind'], reason: string): void;
  recordPrefillFailure(backendId: BackendId, cause: PrefillFailureCause): void;
  recordMalformedPrefillParams(backendId: BackendId): void;
}

export type PrefillFailureCause = 'connect' | 'timeout' | 'status' | 'too-large' | 'invalid-json';

/** One disaggregated request as the prefill leg takes it. */
export interface PrefillRequest {
  readonly parsed: ParsedRequest;
  /** The prefill-capable backends of the request's model (the decode backend is left out). */
  readonly prefillPool: readonly Backend[];
  /** The body as the decode backend would get it whole (salted, usage asked for). */
  readonly body: Buffer;
  /** Path after the backend's base path. */
  readonly path: string;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly clientHop: ClientHop;
  /** The `X-Request-Id` both legs carry (made by the router). */
  readonly upstreamRequestId: string;
  readonly requestId: string;
  readonly arrivedAtMs: number;
  /** Aborted when the client went away. */
  readonly signal: AbortSignal;
}

export type PrefillOutcome =
  | { readonly kind: 'decode-only'; readonly reason: DecodeOnlyReason; readonly body: Buffer }
  | {
      readonly kind: 'disaggregated';
      readonly prefillBackend: Backend;
      /** The decode leg's body. */
      readonly body: Buffer;
      /**
       * The prompt tokens the prefill engine found cached (its answer's usage): they replace the decode engine's in
       * the usage the client gets and the router learns from. Null: not known (no usage, or SGLang's unawaited leg).
       */
      readonly prefillCachedTokens: number | null;
    };

export type DecodeOnlyReason =
  | 'cached-enough'
  | 'not-splittable'
  | 'no-prefill-backend'
  | 'prefill-failed'
  | 'prefill-refused';

/** Runs the prefill leg for `request`, whose decode try is `decodeTicket`. */
export async function prefillLeg(
  deps: PrefillDeps,
  request: PrefillRequest,
  decodeTicket: Ticket,
): Promise<PrefillOutcome> {
  const outcome = await decideAndRun(deps, request, decodeTicket);
  deps.metrics.recordDisaggregation(
    request.parsed.model,
    outcome.kind,
    outcome.kind === 'decode-only' ? outcome.reason : 'disaggregated',
  );
  return outcome;
}

async function decideAndRun(deps: PrefillDeps, request: PrefillRequest, decodeTicket: Ticket): Promise<PrefillOutcome> {
  const { settings } = deps;
  const client = JSON.parse(request.body.toString('utf8')) as JsonObject;
  // SGLang's decode-mode engines cannot prefill: their requests are always split (a `both` backend may serve whole).
  const mustSplit = settings.protocol === 'sglang' && decodeTicket.backend.role === 'decode';
  // vLLM answers one set of params for the request: a batch of prompts or n > 1 choices would pull one prompt's KV
  // for all of them. Served whole.
  if (!mustSplit && (isPromptBatch(client.prompt) || (typeof client.n === 'number' && client.n > 1)))
    return { kind: 'decode-only', reason: 'not-splittable', body: request.body };
  const lacking = estimatePrefillTokens(
    request.parsed.routingRequest,
    decodeTicket.prediction.matchBlocks,
    settings.bytesPerToken(request.parsed.model),
  );
  if (!mustSplit && lacking < settings.minUncachedTokens)
    return { kind: 'decode-only', reason: 'cached-enough', body: request.body };
  const pool = request.prefillPool.filter((backend) => backend.id !== decodeTicket.backend.id);
  const tried = new Set<BackendId>();
  for (let attempt = 0; attempt < Math.max(1, settings.prefillTries); attempt++) {
    const ticket = await route(deps.route, request.parsed, pool, tried, attempt, request.requestId);
    if (ticket === null) break;
    tried.add(ticket.backend.id);
    if (settings.protocol === 'sglang') return sglangLegs(deps, request, ticket, client);
    const leg = await sendPrefillLeg(deps, request, ticket, nixlPrefillBody(client));
    if (leg.kind === 'answered') {
      const { params, malformed } = prefillParamsOf(leg.answer);
      if (malformed) deps.metrics.recordMalformedPrefillParams(ticket.backend.id);
      return {
        kind: 'disaggregated',
        prefillBackend: ticket.backend,
        body: Buffer.from(JSON.stringify(nixlDecodeBody(client, params))),
        prefillCachedTokens: prefillCachedTokensOf(leg.answer),
      };
    }
    if (leg.kind === 'refused') return { kind: 'decode-only', reason: 'prefill-refused', body: request.body };
    deps.metrics.recordPrefillFailure(ticket.backend.id, leg.cause);
    deps.logger.warn(
      { requestId: request.requestId, backend: ticket.backend.id, cause: leg.cause, attempt },
      'prefill leg failed',
    );
  }
  if (mustSplit)
    throw new RouterError('ROUTER_ERR_NO_BACKEND', 'No prefill backend is available for this model right now.', {
      retryAfterSeconds: 1,
    });
  return {
    kind: 'decode-only',
    reason: tried.size === 0 ? 'no-prefill-backend' : 'prefill-failed',
    body: request.body,
  };
}

/** A completion's `prompt` that is several prompts: strings, or token-id lists, in a list (one token-id list is one prompt). */
function isPromptBatch(prompt: unknown): boolean {
  return Array.isArray(prompt) && prompt.length > 1 && prompt.some((item) => typeof item !== 'number');
}

/** SGLang: the decode leg's body names the room; leg 1 runs beside it and releases its lease when it ends. */
function sglangLegs(deps: PrefillDeps, request: PrefillRequest, ticket: Ticket, client: JsonObject): PrefillOutcome {
  const backend = ticket.backend;
  const bootstrap = {
    host: new URL(backend.origin).hostname.replace(/^\[|\]$/g, ''),
    port: backend.bootstrapPort ?? SGLANG_DEFAULT_BOOTSTRAP_PORT,
    room: bootstrapRoom(deps.random),
  };
  // The prefill engine's answer is not relayed: asked without a stream, it is one JSON body read and dropped.
  const { stream: _stream, stream_options: _options, ...unstreamed } = client;
  const prefillBody = { ...sglangBootstrapBody(unstreamed, bootstrap), stream: false };
  // Not awaited: a client gone meanwhile ends it (its lease released), which is no failure of the engine.
  sendPrefillLeg(deps, request, ticket, prefillBody).then(
    (leg) => {
      if (leg.kind === 'failed') deps.metrics.recordPrefillFailure(backend.id, leg.cause);
    },
    () => undefined,
  );
  return {
    kind: 'disaggregated',
    prefillBackend: backend,
    body: Buffer.from(JSON.stringify(sglangBootstrapBody(client, bootstrap))),
    prefillCachedTokens: null,
  };
}

type LegResult =
  | { readonly kind: 'answered'; readonly answer: unknown }
  | { readonly kind: 'refused' }
  | { readonly kind: 'failed'; readonly cause: PrefillFailureCause };

/**
 * Leg 1 to `ticket`'s backend, its lease released whatever happens (its prefix recorded when it answered). A client
 * gone meanwhile throws ROUTER_ERR_CLIENT_GONE.
 */
async function sendPrefillLeg(
  deps: PrefillDeps,
  request: PrefillRequest,
  ticket: Ticket,
  body: JsonObject,
): Promise<LegResult> {
  const backend = ticket.backend;
  const headers = upstreamRequestHeaders(request.headers, request.clientHop, deps.upstreams.authorizationOf(backend));
  headers['x-request-id'] = request.upstreamRequestId;
  headers['content-type'] = 'application/json';
  if (backend.dataParallelRank !== null) headers['x-data-parallel-rank'] = String(backend.dataParallelRank.header);
  const signal = AbortSignal.any([request.signal, AbortSignal.timeout(deps.settings.prefillTimeoutMs)]);
  backend.breaker.onAttempt();
  let result: LegResult;
  try {
    const response = await deps.upstreams.for(backend).request({
      method: 'POST',
      path: backend.basePath + request.path,
      headers,
      body: JSON.stringify(body),
      signal,
      headersTimeout: 0,
      bodyTimeout: 0,
    });
    result = await readLegAnswer(response.statusCode, response.body, deps.settings.maxAnswerBytes);
  } catch (error) {
    if (request.signal.aborted) {
      // Neither success nor failure of the engine (a half-open breaker's probe ends here too).
      backend.breaker.onAbandoned();
      releaseLease(ticket);
      throw new RouterError('ROUTER_ERR_CLIENT_GONE', 'The client closed the request during its prefill.');
    }
    result = { kind: 'failed', cause: signal.aborted ? 'timeout' : 'connect' };
    void error;
  }
  if (result.kind === 'answered') {
    backend.breaker.onSuccess();
    // A non-streaming answer: its prefill is done and the prefix is this backend's (recorded with the release).
    deps.learn.firstOutput(ticket, request.arrivedAtMs, false);
  } else if (result.kind === 'failed') {
    backend.breaker.onFailure();
  } else {
    backend.breaker.onSuccess();
  }
  releaseLease(ticket);
  return result;
}

/** Reads a leg-1 answer of at most `maxBytes`: JSON on 200; 4xx but 429 refused; anything else failed. */
async function readLegAnswer(
  status: number,
  body: Dispatcher.ResponseData['body'],
  maxBytes: number,
): Promise<LegResult> {
  // undici reports a body destroyed before its end as an error event: expected here, so heard and dropped.
  body.on('error', () => undefined);
  if (status !== 200) {
    body.destroy();
    return status >= 400 && status < 500 && status !== 429 ? { kind: 'refused' } : { kind: 'failed', cause: 'status' };
  }
  const chunks: Buffer[] = [];
  let bytes = 0;
  for await (const chunk of body as AsyncIterable<Buffer>) {
    bytes += chunk.length;
    if (bytes > maxBytes) {
      body.destroy();
      return { kind: 'failed', cause: 'too-large' };
    }
    chunks.push(chunk);
  }
  try {
    return { kind: 'answered', answer: JSON.parse(Buffer.concat(chunks).toString('utf8')) };
  } catch {
    return { kind: 'failed', cause: 'invalid-json' };
  }
}
