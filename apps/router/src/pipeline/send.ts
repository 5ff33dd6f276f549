import type { ServerResponse } from 'node:http';
import type { FastifyBaseLogger } from 'fastify';
import type { Backend } from '../backends/backend-registry';
import { upstreamRequestHeaders, type ClientHop } from '../proxy/header-hygiene';
import type { OneShotTimers } from '../one-shot-timers';
import { RelayHandler, type RelayEvents, type TryOutcome } from '../proxy/relay-handler';
import type { UpstreamPools } from '../proxy/upstream-pool';
import type { RouterMetrics } from '../router-metrics';

/**
 * Stage 4 of the request path, **send**: one try's request to one backend, its response relayed to the
 * client (proxy/relay-handler.ts: an undici dispatch handler, backpressure, client abort → upstream
 * abort). It knows nothing of routing: it is told where, and labels to show, and tells `events` what
 * happened. The backend's circuit breaker counts the try's outcome here, where it is seen.
 */
export interface SendDeps {
  readonly upstreams: UpstreamPools;
  /** A stream's time to its first output event once sent, ms (config `streamFirstByteTimeoutMs`). */
  readonly streamFirstByteTimeoutMs: number;
  /** A non-streaming request's time to its whole response once sent, ms (config `generationTimeoutMs`). */
  readonly generationTimeoutMs: number;
  /** A connection lost without an answer within this long of sending is retried (config `connectionLostRetryMs`). */
  readonly connectionLostRetryMs: number;
  readonly timers: OneShotTimers;
  readonly metrics: RouterMetrics;
  readonly logger: FastifyBaseLogger;
}

export interface Shipment {
  readonly backend: Backend;
  /** `X-Router-Reason`, and the metrics' `reason`. */
  readonly reason: string;
  /** The metrics' `policy`. */
  readonly policyName: string;
  /** The metrics' `model`. */
  readonly model: string;
  /** Path after the backend's base path, e.g. `/v1/chat/completions` (with query string). */
  readonly path: string;
  /** The client's headers (hop-by-hop ones, credentials and cookies are dropped here: proxy/header-hygiene.ts). */
  readonly headers: Record<string, string | string[] | undefined>;
  /** The client's connection, for `X-Forwarded-For` and `X-Forwarded-Proto`. */
  readonly clientHop: ClientHop;
  readonly body: Buffer;
  /** The client's request id: logs, the relay, `X-Request-Id` on the response. */
  readonly requestId: string;
  /**
   * The `X-Request-Id` sent to the backend in place of `requestId` (absent: `requestId`). A tenant's
   * Responses request gets one the router made: an engine may take the header as the request's id,
   * and ids there must not be the client's to choose (request-path.ts).
   */
  readonly upstreamRequestId?: string | undefined;
  /** performance.now() when the request arrived. */
  readonly arrivedAtMs: number;
  /** Whether a refusal (429/503) may be retried elsewhere instead of relayed. */
  readonly mayRetryStatus: boolean;
  /** The request asks for a stream (`stream: true`): its deadline is its first output, else its whole response. */
  readonly streams: boolean;
  /** Whether learn reads the response's usage (chat and text completions). */
  readonly readsUsage: boolean;
  /** Its usage may be in the stream's first event (an Anthropic Messages stream). */
  readonly readsUsageAtStart: boolean;
  /** The body asked for a stream's usage on the client's behalf: the relay removes what that adds (proxy/usage-strip.ts). */
  readonly stripsStreamUsage: boolean;
  /** Send the `X-Router-*` headers. */
  readonly showsRoutingHeaders: boolean;
  /** Router headers to add to the response (the limit stage's `x-ratelimit-*`); null: none. */
  readonly extraHeaders: Readonly<Record<string, string>> | null;
  /** Reads a successful response's first chunks (RelayTarget.headWatch); null: none. */
  readonly headWatch?: ((chunk: Buffer) => boolean) | null;
  readonly events: RelayEvents;
}

/** Sends one try; resolves how it ended (`retry`: nothing reached the client). */
export async function send(deps: SendDeps, shipment: Shipment, response: ServerResponse): Promise<TryOutcome> {
  const { backend } = shipment;
  const headers = upstreamRequestHeaders(shipment.headers, shipment.clientHop, deps.upstreams.authorizationOf(backend));
  headers['x-request-id'] = shipment.upstreamRequestId ?? shipment.requestId;
  const handler = new RelayHandler({
    response,
    events: shipment.events,
    backendId: backend.id,
    model: shipment.model,
    policyName: shipment.policyName,
    reason: shipment.reason,
    requestId: shipment.requestId,
    arrivedAtMs: shipment.arrivedAtMs,
    mayRetryStatus: shipment.mayRetryStatus,
    readsUsage: shipment.readsUsage,
    readsUsageAtStart: shipment.readsUsageAtStart,
    streamUsageStrip: shipment.stripsStreamUsage ? { fingerprints: deps.upstreams.fingerprintMemoryOf(backend) } : null,
    showsRoutingHeaders: shipment.showsRoutingHeaders,
    extraHeaders: shipment.extraHeaders,
    deadline: shipment.streams
      ? { until: 'first-output', ms: deps.streamFirstByteTimeoutMs }
      : { until: 'end', ms: deps.generationTimeoutMs },
    connectionLostRetryMs: deps.connectionLostRetryMs,
    timers: deps.timers,
    headWatch: shipment.headWatch ?? null,
    metrics: deps.metrics,
    logger: deps.logger,
  });
  backend.breaker.onAttempt();
  // No undici headers timeout: the try's deadline bounds it (a non-streaming answer's headers come with its end).
  deps.upstreams
    .for(backend)
    .dispatch(
      { method: 'POST', path: backend.basePath + shipment.path, headers, body: shipment.body, headersTimeout: 0 },
      handler,
    );
  const outcome = await handler.outcome;
  if (outcome.kind !== 'done') backend.breaker.onFailure();
  else if (!outcome.clientWentAway) {
    const status = response.statusCode;
    if (status >= 500 || status === 429) backend.breaker.onFailure();
    else backend.breaker.onSuccess();
  }
  return outcome;
}
