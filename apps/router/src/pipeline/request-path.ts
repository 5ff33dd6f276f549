import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Backend } from '../backends/backend-registry';
import { answerHijackedError } from '../http/error-handler';
import { clientHopOf } from '../proxy/header-hygiene';
import type { RouterMetrics } from '../router-metrics';
import type { Identity } from '../tenants/authenticate';
import type { TenantDirectory } from '../tenants/tenant-directory';
import type { Learner } from './learn';
import { admitLimits, type Admission, type LimitDeps } from './limit';
import { parseRequest, type Endpoint, type ParsedRequest, type ParseOptions } from './parse';
import { releaseLease, releaseLimits } from './release';
import { previousResponseOwner, responseIdWatch, type ResponseAffinityDeps } from './response-affinity';
import { withRetryBeforeFirstByte, type RetryOptions } from './retry-before-first-byte';
import { poolOf, route, type RouteDeps, type Ticket } from './route';
import { send, type SendDeps, type Shipment, type TryDeadlines } from './send';

/**
 * The request path of every proxied request, in order: each stage one file with one job.
 *
 * | # | stage   | file                  | job |
 * |---|---------|-----------------------|-----|
 * | 1 | admit   | admit.ts              | `onRequest`: path, shutdown, caps, identity (API key), before the body is read |
 * | 2 | parse   | parse.ts              | bounded JSON, limits, validation → the routing request (tenant's salt) |
 * | 3 | limit   | limit.ts              | the tenant's and key's limits: tokens reserved, one admission call |
 * | 4 | route   | route.ts              | eligible backends (a Responses follow-up's owner first) → decide (the policy once) + lease → a ticket |
 * | 5 | send    | send.ts               | the ticket's request relayed to its backend |
 * | 6 | learn   | learn.ts              | what the response says: first output (TTFT, prefill done, ownership); a stored Responses id (response-affinity.ts) |
 * | 7 | release | release.ts            | the ticket's lease, once per try; the request's limits settled from its usage, once |
 *
 * Route and send are retried before the first byte by retry-before-first-byte.ts. Admit runs as a
 * hook (app.ts registers it first); this file runs stages 2–7 for one request. This list is the one
 * the stage files' headers (`Stage N of the request path, **name**`), the router README and
 * docs/architecture.md number: request-path-doc.test.ts holds them to it.
 */
export const REQUEST_PATH_STAGES = ['admit', 'parse', 'limit', 'route', 'send', 'learn', 'release'] as const;

/** Who sees `X-Router-Backend` and `X-Router-Reason` (config `routingHeaders`). */
export type RoutingHeaders = 'auto' | 'all' | 'privileged';

export interface RequestPathDeps {
  readonly parse: ParseOptions;
  readonly route: RouteDeps;
  readonly send: SendDeps;
  /** Each try's deadline by what the request waits for (built once from config). */
  readonly deadlines: TryDeadlines;
  readonly learn: Learner;
  readonly retry: Omit<RetryOptions, 'metrics' | 'logger'>;
  readonly metrics: RouterMetrics;
  /** Tenant limits (null: none, open mode). */
  readonly limit: LimitDeps | null;
  /** Tenants' cache partitions (teams). */
  readonly tenants: TenantDirectory;
  /** `auto`: everyone in open mode, privileged keys (admin, bench) with tenants; `all`; `privileged`. */
  readonly routingHeaders: RoutingHeaders;
  /** The Responses API's response-owner map (pipeline/response-affinity.ts). */
  readonly responses: ResponseAffinityDeps;
}

/** One request between parse and the end of its response. */
interface InFlight {
  readonly request: FastifyRequest;
  readonly parsed: ParsedRequest;
  readonly backends: readonly Backend[];
  readonly body: Buffer;
  readonly response: ServerResponse;
  readonly showsRoutingHeaders: boolean;
  readonly admission: Admission | null;
  /** The identity's cache scope ('' in open mode): where its Responses ids are remembered. */
  readonly scope: string;
  /** The backend holding the response this request continues (`previous_response_id`); null: none known. */
  readonly owner: string | null;
  /** The `X-Request-Id` the backends get instead of the client's (send.ts Shipment.upstreamRequestId); undefined: the client's. */
  readonly upstreamRequestId: string | undefined;
  /** Prompt + completion tokens of the response's usage (−1: no response with usage yet). */
  usedTokens: number;
  /** A try reached a backend (its tokens count even without usage). */
  sent: boolean;
}

/** A Fastify handler per endpoint that runs the request path. */
export function createRequestPath(
  deps: RequestPathDeps,
): (endpoint: Endpoint) => (request: FastifyRequest, reply: FastifyReply) => Promise<void> {
  const routeAndSend = withRetryBeforeFirstByte<InFlight>(
    { ...deps.retry, metrics: deps.metrics, logger: deps.send.logger },
    (of, tried, attempt) => route(deps.route, of.parsed, of.backends, tried, attempt, of.request.id, of.owner),
    (of, ticket, mayRetryStatus) => send(deps.send, shipmentOf(deps, of, ticket, mayRetryStatus), of.response),
  );
  return (endpoint) => async (request, reply) => {
    const identity = request.identity;
    const cacheScope = identity === null ? null : deps.tenants.cacheScopeOf(identity.tenant);
    const parsed = await parseRequest(endpoint, request, deps.parse, cacheScope);
    const backends = poolOf(deps.route.registry, parsed.model);
    const scope = cacheScope ?? '';
    // Only a Responses follow-up looks its owner up: no await on every other request's path.
    const owner =
      parsed.responses?.previousResponseId == null
        ? null
        : await previousResponseOwner(deps.responses, parsed, scope, cacheScope !== null);
    const admission =
      identity !== null && deps.limit !== null ? await admitLimits(deps.limit, identity, parsed, randomUUID()) : null;
    // A tenant's Responses request: the engine may make the client's X-Request-Id the stored response's
    // id (as it does a body's `request_id`, refused in parse), where it could replace another tenant's.
    // The backend gets an id of the router's own; logs and the client's response keep the client's.
    const upstreamRequestId = cacheScope !== null && endpoint === 'responses' ? `kvroute-${randomUUID()}` : undefined;
    reply.hijack();
    const of: InFlight = {
      request,
      parsed,
      backends,
      body: parsed.body,
      response: reply.raw,
      showsRoutingHeaders: showsRoutingHeaders(deps.routingHeaders, identity),
      admission,
      scope,
      owner,
      upstreamRequestId,
      usedTokens: -1,
      sent: false,
    };
    try {
      await routeAndSend(of, { model: parsed.model, backends }, request.id, reply.raw);
    } catch (error) {
      answerHijackedError(reply, error, deps.metrics, of.showsRoutingHeaders);
    } finally {
      if (admission !== null && deps.limit !== null) releaseLimits(deps.limit, admission, of.usedTokens, of.sent);
    }
  };
}

/** One try of `of` as the send stage takes it: the ticket's backend and labels, and what the later stages hear. */
function shipmentOf(deps: RequestPathDeps, of: InFlight, ticket: Ticket, mayRetryStatus: boolean): Shipment {
  const { parsed, request } = of;
  return {
    backend: ticket.backend,
    method: 'POST',
    reason: ticket.decision.reason,
    policyName: ticket.policyName,
    model: parsed.model,
    path: request.url,
    headers: request.headers,
    clientHop: clientHopOf(request.raw),
    body: of.body,
    requestId: request.id,
    upstreamRequestId: of.upstreamRequestId,
    arrivedAtMs: request.arrivedAtMs,
    // Pinned to the owner of `previous_response_id`: no other engine holds the conversation, so a
    // refusal (429/503) is not retried elsewhere but relayed as the owner sent it, with its body
    // and Retry-After (a retry could only end in the router's own 503, or another engine's 404).
    mayRetryStatus: mayRetryStatus && ticket.backend.id !== of.owner,
    deadline: parsed.stream ? deps.deadlines.stream : deps.deadlines.whole,
    readsUsage: parsed.kind === 'generation',
    readsUsageAtStart: parsed.usageAtStreamStart,
    stripsStreamUsage: parsed.stripsStreamUsage,
    showsRoutingHeaders: of.showsRoutingHeaders,
    extraHeaders: of.admission?.headers ?? null,
    headWatch: responseIdWatch(deps.responses, parsed, of.scope, ticket.backend.id),
    events: {
      // The response's framing, not the request's flag: an engine may answer either way.
      firstOutput: (streamed) => deps.learn.firstOutput(ticket, request.arrivedAtMs, streamed),
      finished: (tail) => {
        releaseLease(ticket);
        deps.learn.responseEnded(ticket, tail);
        of.sent = true;
        if (of.admission !== null && tail !== null) {
          const usage = tail.usage();
          if (usage !== null) of.usedTokens = usage.promptTokens + (usage.completionTokens ?? 0);
        }
      },
    },
  };
}

function showsRoutingHeaders(mode: RoutingHeaders, identity: Identity | null): boolean {
  if (mode === 'all') return true;
  if (identity === null) return mode === 'auto';
  return identity.role === 'admin' || identity.role === 'bench';
}
