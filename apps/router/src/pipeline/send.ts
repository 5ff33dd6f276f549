import type { ServerResponse } from 'node:http';
import { upstreamRequestHeaders, type ClientHop } from '../proxy/header-hygiene';
import {
  RelayHandler,
  type RelayedRequest,
  type RelaySettings,
  type TryDeadline,
  type TryOutcome,
} from '../proxy/relay-handler';
import type { UpstreamPools } from '../proxy/upstream-pool';

/**
 * Stage 6 of the request path, **send**: one try's request to one backend, its response relayed to the
 * client (proxy/relay-handler.ts: an undici dispatch handler, backpressure, client abort → upstream
 * abort). It knows nothing of routing: it is told where, and labels to show, and tells `events` what
 * happened. The backend's circuit breaker counts the try's outcome here, where it is seen. Every call
 * the router makes to a backend on a client's behalf goes out here: generation, pass-through, and a
 * stored response's GET, DELETE or cancel (pipeline/stored-response.ts).
 */
export interface SendDeps extends RelaySettings {
  readonly upstreams: UpstreamPools;
}

/** Each try's deadline by what its request waits for, built once from config (wiring/request-path-wiring.ts). */
export interface TryDeadlines {
  /** A stream's: its first output (config `streamFirstByteTimeoutMs`). */
  readonly stream: TryDeadline;
  /** A non-streaming response's: its end (config `generationTimeoutMs`). */
  readonly whole: TryDeadline;
  /** A stored response's GET, DELETE or cancel: its headers (pipeline/stored-response.ts). */
  readonly storedResponse: TryDeadline;
}

/** One try as the request path hands it over: what the relay reads (RelayedRequest), plus what goes upstream. */
export interface Shipment extends RelayedRequest {
  readonly method: 'POST' | 'GET' | 'DELETE';
  /** Path after the backend's base path, e.g. `/v1/chat/completions` (with query string). */
  readonly path: string;
  /** The client's headers (hop-by-hop ones, credentials and cookies are dropped here: proxy/header-hygiene.ts). */
  readonly headers: Record<string, string | string[] | undefined>;
  /** The client's connection, for `X-Forwarded-For` and `X-Forwarded-Proto` (header-hygiene.ts clientHopOf). */
  readonly clientHop: ClientHop;
  /** Forwarded as it came; null: none (a GET or DELETE). */
  readonly body: Buffer | null;
  /**
   * The `X-Request-Id` sent to the backend in place of `requestId` (absent: `requestId`). A request whose
   * id the client chose, and a tenant's Responses request, get one the router made: an engine takes the
   * header as the request's id, and ids there must not be the client's to choose (request-path.ts).
   */
  readonly upstreamRequestId?: string | undefined;
  /** The body asked for a stream's usage on the client's behalf: the relay removes what that adds (proxy/usage-strip.ts). */
  readonly stripsStreamUsage: boolean;
}

/** Sends one try; resolves how it ended (`retry`: nothing reached the client). */
export async function send(deps: SendDeps, shipment: Shipment, response: ServerResponse): Promise<TryOutcome> {
  const { backend } = shipment;
  const headers = upstreamRequestHeaders(shipment.headers, shipment.clientHop, deps.upstreams.authorizationOf(backend));
  headers['x-request-id'] = shipment.upstreamRequestId ?? shipment.requestId;
  if (backend.dataParallelRank !== null) headers['x-data-parallel-rank'] = String(backend.dataParallelRank.header);
  const handler = new RelayHandler({
    request: shipment,
    response,
    streamUsageStrip: shipment.stripsStreamUsage ? { fingerprints: deps.upstreams.fingerprintMemoryOf(backend) } : null,
    settings: deps,
  });
  backend.breaker.onAttempt();
  // No undici headers timeout: the try's deadline bounds it (a non-streaming answer's headers come with its end).
  deps.upstreams.for(backend).dispatch(
    {
      method: shipment.method,
      path: backend.basePath + shipment.path,
      headers,
      body: shipment.body,
      headersTimeout: 0,
    },
    handler,
  );
  const outcome = await handler.outcome;
  if (outcome.kind !== 'done') backend.breaker.onFailure();
  else if (outcome.clientWentAway) backend.breaker.onAbandoned();
  else {
    const status = response.statusCode;
    if (status >= 500 || status === 429) backend.breaker.onFailure();
    else backend.breaker.onSuccess();
  }
  return outcome;
}
