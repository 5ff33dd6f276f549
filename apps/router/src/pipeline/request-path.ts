import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Backend } from '../backends/backend-registry';
import { answerHijackedError } from '../http/error-handler';
import { clientHopOf, type ClientHop } from '../proxy/header-hygiene';
import type { RouterMetrics } from '../router-metrics';
import type { FlowSlot } from '../flow/flow-control';
import type { Identity } from '../tenants/authenticate';
import type { ModelAccess } from '../tenants/model-access';
import type { TenantDirectory } from '../tenants/tenant-directory';
import type { Learner } from './learn';
import { admitLimits, type Admission, type LimitDeps } from './limit';
import type { AdapterLoader, LoadableAdapter } from '../lora/adapter-loader';
import type { AdapterRouting } from '../lora/adapter-routing';
import { refuseClientDisaggregationFields, RequestPrefill, splitPool } from './disaggregation';
import { parseRequest, type Endpoint, type ParsedRequest, type ParseOptions } from './parse';
import type { PrefillDeps } from './prefill';
import type { TryOutcome } from '../proxy/relay-handler';
import { releaseLease, releaseLimits } from './release';
import type { RequestLine, RequestLineStarter } from './request-log';
import { queueRequest, type QueueDeps } from './queue';
import { previousResponseOwner, responseIdWatch, type ResponseAffinityDeps } from './response-affinity';
import { withRetryBeforeFirstByte, type RetryOptions } from './retry-before-first-byte';
import { poolOf, route, unknownModelError, type RouteDeps, type Ticket } from './route';
import { send, type SendDeps, type Shipment, type TryDeadlines } from './send';

/**
 * The request path of every proxied request, in order: each stage one file with one job.
 *
 * | # | stage   | file                  | job |
 * |---|---------|-----------------------|-----|
 * | 1 | admit   | admit.ts              | `onRequest`: path, shutdown, caps, identity (API key), before the body is read |
 * | 2 | parse   | parse.ts              | bounded JSON, limits, validation → the routing request (tenant's salt) |
 * | 3 | limit   | limit.ts              | the tenant's and key's limits: tokens reserved, one admission call |
 * | 4 | queue   | queue.ts              | flow control: a saturated pool's requests wait in a fair, shared queue, or are shed (429) |
 * | 5 | route   | route.ts              | eligible backends (a Responses follow-up's owner first) → decide (the policy once) + lease → a ticket |
 * | 6 | send    | send.ts               | the ticket's request relayed to its backend |
 * | 7 | learn   | learn.ts              | what the response says: first output (TTFT, prefill done, ownership); a stored Responses id (response-affinity.ts) |
 * | 8 | release | release.ts            | the ticket's lease, once per try; the request's limits settled and its queue slot freed, once |
 *
 * Route and send are retried before the first byte by retry-before-first-byte.ts. Admit runs as a
 * hook (app.ts registers it first); this file runs stages 2–8 for one request. This list is the one
 * the stage files' headers (`Stage N of the request path, **name**`), the router README and
 * docs/architecture.md number: request-path-doc.test.ts holds them to it.
 */
export const REQUEST_PATH_STAGES = ['admit', 'parse', 'limit', 'queue', 'route', 'send', 'learn', 'release'] as const;

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
  /** Flow control (null: off, `flowControl`). */
  readonly queue: QueueDeps | null;
  /** Tenants' cache partitions (teams). */
  readonly tenants: TenantDirectory;
  /** The models each caller may name (tenants/model-access.ts): another is answered as a model that does not exist. */
  readonly models: ModelAccess;
  /** `auto`: everyone in open mode, privileged keys (admin, bench) with tenants; `all`; `privileged`. */
  readonly routingHeaders: RoutingHeaders;
  /** The Responses API's response-owner map (pipeline/response-affinity.ts). */
  readonly responses: ResponseAffinityDeps;
  /** A disaggregated model's prefill legs (pipeline/prefill.ts, disaggregation.ts). */
  readonly prefill: PrefillDeps;
  /** LoRA adapters routed in their base model's pool (lora/adapter-routing.ts); null: adapter-blind (`loraRouting` off). */
  readonly adapters: AdapterRouting | null;
  /** Starts each request's info line (request-log.ts); null: off (`logRequests: false`, or a level above info). */
  readonly requestLine: RequestLineStarter | null;
}

/** One request between parse and the end of its response. */
interface InFlight {
  readonly request: FastifyRequest;
  readonly parsed: ParsedRequest;
  readonly backends: readonly Backend[];
  /** What the next try sends: the parsed body, or the decode leg's once a prefill leg ran. */
  body: Buffer;
  /** The client's hop, read once for every try and leg (header-hygiene.ts). */
  readonly clientHop: ClientHop;
  /** The request's prefill leg, when its model is disaggregated (disaggregation.ts); null: none. */
  readonly prefill: RequestPrefill | null;
  /**
   * Its prefill leg, once run and split off: the backend it went to (`X-Router-Prefill-Backend`) and the cached
   * tokens it reported (for the decode leg's usage); null: the request is not (or not yet) split.
   */
  prefilled: { readonly backendId: string; readonly cachedTokens: number | null } | null;
  /** The LoRA adapter the request names, when routed as one (lora/adapter-routing.ts); null: none. */
  readonly adapter: string | null;
  /** A loadable adapter: each try's backend gets it first where it lacks it (lora/adapter-loader.ts); null: not loadable. */
  readonly adapterLoad: {
    readonly adapter: LoadableAdapter;
    readonly loader: AdapterLoader;
    readonly signal: AbortSignal;
  } | null;
  readonly response: ServerResponse;
  readonly showsRoutingHeaders: boolean;
  readonly admission: Admission | null;
  /** The identity's cache scope ('' in open mode): where its Responses ids are remembered. */
  readonly scope: string;
  /** The backend holding the response this request continues (`previous_response_id`); null: none known. */
  readonly owner: string | null;
  /**
   * The `X-Request-Id` the backends get instead of `request.id` (send.ts Shipment.upstreamRequestId;
   * upstreamRequestIdOf); undefined: `request.id`, the router's own.
   */
  readonly upstreamRequestId: string | undefined;
  /** Prompt + completion tokens of the response's usage (−1: no response with usage yet). */
  usedTokens: number;
  /** A try reached a backend (its tokens count even without usage). */
  sent: boolean;
  /** The request's log line, filled in by each try (null: request lines off). */
  readonly line: RequestLine | null;
}

/** A Fastify handler per endpoint that runs the request path. */
export function createRequestPath(
  deps: RequestPathDeps,
): (endpoint: Endpoint) => (request: FastifyRequest, reply: FastifyReply) => Promise<void> {
  const routeAndSend = withRetryBeforeFirstByte<InFlight>(
    { ...deps.retry, metrics: deps.metrics, logger: deps.send.logger },
    async (of, tried, attempt) => {
      const ticket = await route(
        deps.route,
        of.parsed,
        of.backends,
        triedWithPrefill(of, tried),
        attempt,
        of.request.id,
        of.owner,
      );
      if (ticket !== null && of.adapter !== null) deps.adapters?.routed(of.adapter, ticket.backend.id);
      return ticket;
    },
    async (of, ticket, mayRetryStatus) => {
      if (of.adapterLoad !== null && !(await adapterReady(of.adapterLoad, ticket))) return ADAPTER_NOT_READY;
      if (of.prefill !== null) await prefilled(of, of.prefill, ticket);
      const outcome = await send(deps.send, shipmentOf(deps, of, ticket, mayRetryStatus), of.response);
      // A 404 to a loadable adapter's request, retried elsewhere or relayed: the engine may have lost it (restarted).
      if (of.adapterLoad !== null && answeredNotFound(outcome, of.response))
        await of.adapterLoad.loader.verifyLost(of.adapterLoad.adapter, ticket.backend);
      // A decode engine that lost its connection mid-request may have pulled the blocks (and had them freed): the
      // next decode try gets a prefill leg of its own.
      if (of.prefill !== null && outcome.kind === 'retry' && outcome.cause === 'connection-lost') of.prefill.forget();
      return outcome;
    },
  );
  return (endpoint) => async (request, reply) => {
    const identity = request.identity;
    // Started first, so that a request refused at parse, limit or queue leaves its line too.
    const line = deps.requestLine?.(request.id, identity, request.arrivedAtMs, reply.raw) ?? null;
    const cacheScope = identity === null ? null : deps.tenants.cacheScopeOf(identity.tenant);
    const asParsed = await parseRequest(endpoint, request, parseOptionsOf(deps, identity), cacheScope);
    if (line !== null) {
      line.model = asParsed.model;
      line.stream = asParsed.stream;
    }
    if (!deps.models.allows(identity, asParsed.model)) throw unknownModelError(deps.route.registry, asParsed.model);
    refuseClientDisaggregationFields(asParsed, identity);
    // The backends serving the model; an adapter's request is its base model's from here on, over the backends that
    // serve the adapter.
    const pool = deps.adapters?.poolFor(asParsed.model) ?? poolOf(deps.route.registry, asParsed.model);
    // Only an adapter's request waits here (its waits may be read from Redis): the others go on at once.
    const base = deps.adapters?.baseOf(asParsed.model) ?? null;
    const adapter = base === null ? null : await (deps.adapters as AdapterRouting).resolve(asParsed, pool, base);
    const parsed = adapter ?? asParsed;
    const split = splitPool(pool, endpoint, deps.prefill.settings.protocol);
    const backends = split.routed;
    const scope = cacheScope ?? '';
    // Only a Responses follow-up looks its owner up: no await on every other request's path.
    const owner =
      parsed.responses?.previousResponseId == null
        ? null
        : await previousResponseOwner(deps.responses, parsed, scope, cacheScope !== null);
    const admission =
      identity !== null && deps.limit !== null ? await admitLimits(deps.limit, identity, parsed, randomUUID()) : null;
    const slot =
      deps.queue === null ? null : await queued(deps, deps.queue, request, reply, parsed, backends, admission);
    const upstreamRequestId = upstreamRequestIdOf(request, cacheScope !== null && endpoint === 'responses');
    reply.hijack();
    const clientHop = clientHopOf(request.raw);
    const of: InFlight = {
      request,
      parsed,
      backends,
      body: parsed.body,
      clientHop,
      prefill:
        split.prefill === null
          ? null
          : new RequestPrefill(deps.prefill, {
              parsed,
              prefillPool: split.prefill,
              body: parsed.body,
              path: request.url,
              headers: request.headers,
              clientHop,
              upstreamRequestId: upstreamRequestId ?? request.id,
              requestId: request.id,
              arrivedAtMs: request.arrivedAtMs,
              signal: closedSignalOf(reply.raw),
            }),
      prefilled: null,
      adapter: adapter === null ? null : asParsed.model,
      adapterLoad: adapter === null ? null : adapterLoadOf(deps, asParsed.model, reply),
      response: reply.raw,
      showsRoutingHeaders: showsRoutingHeaders(deps.routingHeaders, identity),
      admission,
      scope,
      owner,
      upstreamRequestId,
      usedTokens: -1,
      sent: false,
      line,
    };
    try {
      await routeAndSend(of, { model: parsed.model, backends }, request.id, reply.raw);
    } catch (error) {
      answerHijackedError(reply, error, deps.metrics, of.showsRoutingHeaders);
    } finally {
      if (admission !== null && deps.limit !== null) releaseLimits(deps.limit, admission, of.usedTokens, of.sent);
      slot?.release();
    }
  };
}

/**
 * The `X-Request-Id` the backends get, when not the request's own id (undefined: `request.id`, which the
 * router made). The engine takes that header as its request's id, so it is never the client's choice:
 * vLLM releases before Nov 2025 fail, hang or crash on a duplicate id, which a client could send on
 * purpose or by retrying with the same id; and a tenant's Responses request's id may become the stored
 * response's id, where it could replace another tenant's (so those always get one of the router's own).
 * Logs and the client's response keep the client's id.
 */
function upstreamRequestIdOf(request: FastifyRequest, always: boolean): string | undefined {
  const clientChose = request.headers['x-request-id'] === request.id;
  return always || clientChose ? `kvroute-${randomUUID()}` : undefined;
}

/** The parse options for `identity`: a request naming no model takes the only one it may use (request-model.ts). */
function parseOptionsOf(deps: RequestPathDeps, identity: Identity | null): ParseOptions {
  const served = deps.parse.servedModels;
  if (identity === null || served === undefined) return deps.parse;
  return { ...deps.parse, servedModels: () => deps.models.visible(identity, served()) };
}

/** The queue stage, for a request already admitted by its limits: shed, it gives its admission back. */
async function queued(
  deps: RequestPathDeps,
  queue: QueueDeps,
  request: FastifyRequest,
  reply: FastifyReply,
  parsed: ParsedRequest,
  backends: readonly Backend[],
  admission: Admission | null,
): Promise<FlowSlot> {
  const gone = new AbortController();
  const onClose = (): void => gone.abort();
  reply.raw.once('close', onClose);
  try {
    return await queueRequest(queue, request, request.identity, parsed, backends, gone.signal);
  } catch (error) {
    if (admission !== null && deps.limit !== null) releaseLimits(deps.limit, admission, -1, false);
    throw error;
  } finally {
    reply.raw.off('close', onClose);
  }
}

/** One try of `of` as the send stage takes it: the ticket's backend and labels, and what the later stages hear. */
function shipmentOf(deps: RequestPathDeps, of: InFlight, ticket: Ticket, mayRetryStatus: boolean): Shipment {
  const { parsed, request, line } = of;
  if (line !== null) {
    line.backend = ticket.backend.id;
    line.reason = ticket.decision.reason;
    line.tries += 1;
  }
  return {
    backend: ticket.backend,
    method: request.method === 'GET' ? 'GET' : 'POST',
    reason: ticket.decision.reason,
    policyName: ticket.policyName,
    model: parsed.model,
    path: request.url,
    headers: request.headers,
    clientHop: of.clientHop,
    // A pass-through GET has no body (and must not send one: Content-Length 0 on a GET upsets some servers).
    body: request.method === 'GET' ? null : of.body,
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
    extraHeaders: extraHeadersOf(of),
    headWatch: responseIdWatch(deps.responses, parsed, of.scope, ticket.backend.id),
    prefillCachedTokens: of.prefilled?.cachedTokens ?? null,
    // Not a Responses follow-up: its engine answers 404 for a stored response it does not hold, a 404 to relay.
    notFoundIsRefusal: of.adapterLoad !== null && parsed.responses?.previousResponseId == null,
    events: {
      // The response's framing, not the request's flag: an engine may answer either way.
      firstOutput: (streamed) => {
        if (streamed && line !== null) line.ttftMs = performance.now() - request.arrivedAtMs;
        deps.learn.firstOutput(ticket, request.arrivedAtMs, streamed);
      },
      finished: (tail) => {
        releaseLease(ticket);
        deps.learn.responseEnded(ticket, tail, of.prefilled !== null);
        of.sent = true;
        if (of.admission !== null && tail !== null) {
          const usage = tail.usage();
          if (usage !== null) of.usedTokens = usage.promptTokens + (usage.completionTokens ?? 0);
        }
      },
    },
  };
}

/**
 * The decode try's body, after the request's prefill leg (run at its first try): a prefill that fails on the client's
 * account (it went away) gives the decode try's lease back before the error travels on.
 */
async function prefilled(of: InFlight, prefill: RequestPrefill, ticket: Ticket): Promise<void> {
  try {
    const outcome = await prefill.outcomeFor(ticket);
    of.body = outcome.body;
    of.prefilled =
      outcome.kind === 'disaggregated'
        ? { backendId: outcome.prefillBackend.id, cachedTokens: outcome.prefillCachedTokens }
        : null;
  } catch (error) {
    releaseLease(ticket);
    throw error;
  }
}

/** A try whose backend could not get the request's adapter: routed elsewhere (retry-before-first-byte.ts). */
const ADAPTER_NOT_READY: TryOutcome = { kind: 'retry', cause: 'adapter-unavailable', error: null };

/** The try's backend answered 404: refused (and retried elsewhere), or relayed to the client. */
function answeredNotFound(outcome: TryOutcome, response: ServerResponse): boolean {
  if (outcome.kind === 'retry') return outcome.cause === 'status-404';
  return outcome.kind === 'done' && !outcome.clientWentAway && response.statusCode === 404;
}

/** A loadable adapter's request: its loader, and a signal of the client going away. */
function adapterLoadOf(deps: RequestPathDeps, adapter: string, reply: FastifyReply): InFlight['adapterLoad'] {
  const loader = deps.adapters?.loader ?? null;
  const loadable = loader?.loadable(adapter);
  if (loader === null || loadable === undefined) return null;
  return { adapter: loadable, loader, signal: closedSignalOf(reply.raw) };
}

/** The try's backend has the request's adapter (loaded now if need be); false: its lease is given back. */
async function adapterReady(load: NonNullable<InFlight['adapterLoad']>, ticket: Ticket): Promise<boolean> {
  const ready = await load.loader.ensureOn(load.adapter, ticket.backend, load.signal);
  if (!ready) releaseLease(ticket);
  return ready;
}

/**
 * The backends a decode retry leaves out: those tried, and the request's prefill backend (a `both` backend may be
 * both): its decode leg would pull the blocks from itself.
 */
function triedWithPrefill(of: InFlight, tried: ReadonlySet<string>): ReadonlySet<string> {
  return of.prefilled === null ? tried : new Set([...tried, of.prefilled.backendId]);
}

/** Aborted once the client's response closes (the client went away, or the response ended). */
function closedSignalOf(response: ServerResponse): AbortSignal {
  const closed = new AbortController();
  response.once('close', () => closed.abort());
  return closed.signal;
}

/**
 * The router's own response headers: an admitted tenant request's `x-ratelimit-*`, and where the routing
 * headers are shown, in token mode, `X-Router-Prompt-Tokens` (the prompt's tokens as the router counted them), and
 * for a disaggregated request `X-Router-Prefill-Backend` (where its prefill leg went).
 */
function extraHeadersOf(of: InFlight): Readonly<Record<string, string>> | null {
  const limits = of.admission?.headers ?? null;
  if (!of.showsRoutingHeaders) return limits;
  const routed = of.parsed.routingRequest;
  const tokens = routed.unit === 'tokens' ? { 'x-router-prompt-tokens': String(routed.textBytes) } : null;
  const prefill = of.prefilled === null ? null : { 'x-router-prefill-backend': of.prefilled.backendId };
  if (tokens === null && prefill === null) return limits;
  return { ...limits, ...tokens, ...prefill };
}

function showsRoutingHeaders(mode: RoutingHeaders, identity: Identity | null): boolean {
  if (mode === 'all') return true;
  if (identity === null) return mode === 'auto';
  return identity.role === 'admin' || identity.role === 'bench';
}
