/**
 * The oracle router: a small HTTP server, for benchmarks only, that routes every completion by what
 * the backends themselves say they hold. It is not kvroute: no Redis, no health poller, no prefix
 * index, one process. The bench starts it where a scenario's policy is `oracle` or `oracle-cost`
 * (runner/local-cluster.ts), with one of two rules:
 * - `oracle` (oracle-choice.ts): the largest true hit, load only as a tie-break. Greedy and load-blind:
 *   a reference, not an upper bound (a load-aware policy can beat its hit rate: it keeps conversations
 *   apart instead of piling them where a shared prefix is, and sheds less to eviction);
 * - `oracle-cost` (oracle-cost-choice.ts): cacheaware's cost rule fed those true matches, with the
 *   in-flight counts and prefill backlog this process keeps itself: cacheaware without index error.
 *
 * Per `POST /v1/chat/completions` or `/v1/completions`:
 *   1. read the body (bounded by `bodyLimitBytes`), unparsed (oracle-cost also parses it once for
 *      the router's head hash and max_tokens);
 *   2. ask every backend's `POST /sim/match` at once (ask-sim-match.ts; a backend silent for
 *      `matchTimeoutMs` holds nothing, and never fails the request);
 *   3. choose by the rule from the answers and this process's own in-flight counts and backlog;
 *   4. relay the body byte for byte to the chosen backend and its response back, streamed with
 *      backpressure (SSE events as the backend writes them), with `X-Router-Backend` and
 *      `X-Router-Reason` added; a client that goes away aborts the upstream request;
 *   5. release the in-flight count when the response ends, errs or is aborted (once).
 *
 * Also what the bench reads from a router: `GET /v1/models` (the first backend's answer), `/healthz`,
 * `/readyz` (some backend answers its /health), plus `GET /oracle/state` (counts, for tests).
 */
import { createServer, type IncomingMessage, type OutgoingHttpHeaders, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pipeline } from 'node:stream/promises';
import { ChatCompletionRequest, CompletionRequest, createOpenAIErrorBody } from '@kvroute/protocols';
import { buildRoutingRequest, type CacheAwareParams } from '@kvroute/routing';
import { Pool } from 'undici';
import { endToEndHeaders, NOT_FORWARDED_UP } from '../bare-proxy';
import { askSimMatch, type SimMatch } from './ask-sim-match';
import { chooseOracleBackend, type OracleCandidate } from './oracle-choice';
import { oracleCostParams, type OracleConfig } from './oracle-config';
import { chooseOracleCostBackend } from './oracle-cost-choice';

export type OracleRouterOptions = Pick<OracleConfig, 'backends'> & Partial<Omit<OracleConfig, 'backends'>>;

export interface OracleBackendState {
  readonly id: string;
  readonly url: string;
  readonly inflight: number;
  readonly pendingPrefillTokens: number;
}

export interface OracleState {
  readonly backends: readonly OracleBackendState[];
  readonly rule: OracleConfig['rule'];
  /** Requests routed, by reason (`X-Router-Reason`). */
  readonly decisions: Readonly<Record<string, number>>;
  /** /sim/match questions that got no usable answer in time. */
  readonly unansweredMatches: number;
}

export interface OracleRouter {
  readonly url: string;
  state(): OracleState;
  /** Stops accepting, lets requests in flight finish for up to `deadlineMs`, then cuts them; closes the pools. */
  close(deadlineMs?: number): Promise<void>;
}

/** Paths the oracle routes; everything else it answers itself or with 404. */
const COMPLETION_PATHS = new Set(['/v1/chat/completions', '/v1/completions']);

/** Longer than any client's keep-alive (the bench's agent: 10 s), so the server never closes a socket a client is about to reuse. */
const KEEP_ALIVE_TIMEOUT_MS = 65_000;
/** /v1/models and /health questions to backends. */
const PROBE_TIMEOUT_MS = 2_000;

/** Every error the oracle answers itself, in the OpenAI shape. */
const ORACLE_ERRORS = {
  ORACLE_ERR_NOT_FOUND: { status: 404, type: 'invalid_request_error' },
  ORACLE_ERR_METHOD_NOT_ALLOWED: { status: 405, type: 'invalid_request_error' },
  ORACLE_ERR_BODY_TOO_LARGE: { status: 413, type: 'invalid_request_error' },
  ORACLE_ERR_UPSTREAM_UNAVAILABLE: { status: 502, type: 'upstream_error' },
  ORACLE_ERR_NOT_READY: { status: 503, type: 'service_unavailable' },
} as const;
type OracleErrorCode = keyof typeof ORACLE_ERRORS;

class BodyTooLarge extends Error {}

/** One backend: its pool and what this process has in flight there. */
class OracleBackend {
  readonly id: string;
  readonly basePath: string;
  readonly pool: Pool;
  inflight = 0;
  pendingPrefillTokens = 0;

  constructor(readonly url: string) {
    const parsed = new URL(url);
    this.id = parsed.host;
    this.basePath = parsed.pathname.replace(/\/+$/, '');
    this.pool = new Pool(parsed.origin, {
      pipelining: 1,
      keepAliveTimeout: 30_000,
      headersTimeout: 600_000,
      bodyTimeout: 600_000,
    });
  }

  /** Counts one request until `release`; its uncached prompt tokens count as prefill backlog until `firstByte`. */
  acquire(prefillTokens: number): { firstByte(): void; release(): void } {
    this.inflight++;
    this.pendingPrefillTokens += prefillTokens;
    let pending = prefillTokens;
    let released = false;
    const firstByte = (): void => {
      this.pendingPrefillTokens -= pending;
      pending = 0;
    };
    return {
      firstByte,
      release: () => {
        if (released) return;
        released = true;
        firstByte();
        this.inflight--;
      },
    };
  }
}

export async function startOracleRouter(options: OracleRouterOptions): Promise<OracleRouter> {
  const matchTimeoutMs = options.matchTimeoutMs ?? 500;
  const bodyLimitBytes = options.bodyLimitBytes ?? 64 * 1024 * 1024;
  const backends = options.backends.map((url) => new OracleBackend(url));
  if (new Set(backends.map((backend) => backend.id)).size !== backends.length)
    throw new Error('oracle: two backends share a host:port');
  const rule = options.rule ?? 'oracle';
  // oracle-cost: cacheaware's parameters, checked by its table now (a bad value fails at start, not per request).
  const costParams = rule === 'oracle-cost' ? oracleCostParams(options) : undefined;
  const blockSizeBytes = options.blockSizeBytes ?? 256;
  const decisions: Record<string, number> = rule === 'oracle' ? { 'cache-hit': 0, 'least-loaded': 0 } : {};
  let unansweredMatches = 0;
  let closing = false;

  async function route(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const abort = new AbortController();
    response.once('close', () => {
      if (!response.writableFinished) abort.abort();
    });
    let body: Buffer;
    try {
      body = await readBody(request, bodyLimitBytes);
    } catch (error) {
      if (error instanceof BodyTooLarge)
        sendError(response, 'ORACLE_ERR_BODY_TOO_LARGE', `request body over ${bodyLimitBytes} bytes`, { close: true });
      return; // else the client went away mid-body
    }

    const matches = await Promise.all(
      backends.map((backend) =>
        askSimMatch({
          upstream: backend.pool,
          basePath: backend.basePath,
          body,
          timeoutMs: matchTimeoutMs,
          signal: abort.signal,
        }),
      ),
    );
    if (abort.signal.aborted) return;
    unansweredMatches += matches.filter((match) => match === null).length;
    const candidates: OracleCandidate[] = backends.map((backend, index) => ({
      backendId: backend.id,
      trueMatchTokens: matches[index]?.cachedTokens ?? null,
      inflight: backend.inflight,
      pendingPrefillTokens: backend.pendingPrefillTokens,
    }));
    const choice = costParams
      ? chooseByCost(body, matches, candidates, costParams, blockSizeBytes)
      : chooseOracleBackend(candidates);
    if (!choice) return sendError(response, 'ORACLE_ERR_NOT_READY', 'no backend');
    const index = backends.findIndex((backend) => backend.id === choice.backendId);
    const backend = backends[index] as OracleBackend;
    const match = matches[index];
    const lease = backend.acquire(match ? Math.max(0, match.promptTokens - match.cachedTokens) : 0);
    // Not closed yet (checked above, nothing awaited since): released when it is, whichever way.
    response.once('close', lease.release);
    decisions[choice.reason] = (decisions[choice.reason] ?? 0) + 1;

    try {
      const upstream = await backend.pool.request({
        method: 'POST',
        path: `${backend.basePath}${request.url ?? '/'}`,
        headers: endToEndHeaders(request.headers, NOT_FORWARDED_UP),
        body,
        signal: abort.signal,
      });
      response.writeHead(upstream.statusCode, {
        ...(endToEndHeaders(upstream.headers) as OutgoingHttpHeaders),
        'x-router-backend': backend.id,
        'x-router-reason': choice.reason,
      });
      upstream.body.once('data', lease.firstByte);
      await pipeline(upstream.body, response);
    } catch (error) {
      if (abort.signal.aborted) return; // the client went away: nothing to answer
      if (response.headersSent) response.destroy(error as Error);
      else
        sendError(
          response,
          'ORACLE_ERR_UPSTREAM_UNAVAILABLE',
          `backend ${backend.id} failed: ${(error as Error).message}`,
        );
    }
  }

  async function handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const path = new URL(request.url ?? '/', 'http://oracle').pathname;
    if (COMPLETION_PATHS.has(path)) {
      if (request.method !== 'POST')
        return sendError(response, 'ORACLE_ERR_METHOD_NOT_ALLOWED', `${request.method} ${path}: use POST`);
      if (closing) return sendError(response, 'ORACLE_ERR_NOT_READY', 'shutting down', { close: true });
      return route(request, response);
    }
    if (request.method !== 'GET')
      return sendError(response, 'ORACLE_ERR_NOT_FOUND', `${request.method} ${path} does not exist here`);
    switch (path) {
      case '/healthz':
        return sendJson(response, 200, { status: 'ok' });
      case '/readyz':
        if (!closing && (await someBackendAnswers(backends, '/health')))
          return sendJson(response, 200, { status: 'ready' });
        return sendError(response, 'ORACLE_ERR_NOT_READY', closing ? 'shutting down' : 'no backend answers /health');
      case '/v1/models':
        return relayModels(backends, response);
      case '/oracle/state':
        return sendJson(response, 200, state());
      default:
        return sendError(response, 'ORACLE_ERR_NOT_FOUND', `GET ${path} does not exist here`);
    }
  }

  function state(): OracleState {
    return {
      backends: backends.map((backend) => ({
        id: backend.id,
        url: backend.url,
        inflight: backend.inflight,
        pendingPrefillTokens: backend.pendingPrefillTokens,
      })),
      rule,
      decisions: { ...decisions },
      unansweredMatches,
    };
  }

  const server = createServer({ keepAliveTimeout: KEEP_ALIVE_TIMEOUT_MS }, (request, response) => {
    handle(request, response).catch((error: unknown) => {
      if (!response.headersSent) sendError(response, 'ORACLE_ERR_UPSTREAM_UNAVAILABLE', (error as Error).message);
      else response.destroy();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;

  return {
    url: `http://${host}:${address.port}`,
    state,
    async close(deadlineMs = 5_000) {
      closing = true;
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      const cut = setTimeout(() => server.closeAllConnections(), deadlineMs);
      await closed;
      clearTimeout(cut);
      await Promise.all(backends.map((backend) => backend.pool.destroy()));
    },
  };
}

/** oracle-cost's choice: the prompt's token count from the sims' answers, the head hash and max_tokens as the router reads them. */
function chooseByCost(
  body: Buffer,
  matches: readonly (SimMatch | null)[],
  candidates: readonly OracleCandidate[],
  params: CacheAwareParams,
  blockSizeBytes: number,
) {
  const promptTokens = Math.max(0, ...matches.map((match) => match?.promptTokens ?? 0));
  const routing = routingFacts(body, blockSizeBytes);
  return chooseOracleCostBackend(
    { model: routing.model, promptTokens, headHash: routing.headHash, maxTokens: routing.maxTokens, blockSizeBytes },
    candidates,
    params,
  );
}

/** The router's head hash (its first routing block) and max_tokens of a body; 0 and null for a body the router would not parse. */
function routingFacts(
  body: Buffer,
  blockSizeBytes: number,
): { model: string; headHash: number; maxTokens: number | null } {
  let json: unknown;
  try {
    json = JSON.parse(body.toString('utf8'));
  } catch {
    return { model: '', headHash: 0, maxTokens: null };
  }
  const parsed =
    json !== null && typeof json === 'object' && 'messages' in json
      ? ChatCompletionRequest.safeParse(json)
      : CompletionRequest.safeParse(json);
  if (!parsed.success) return { model: '', headHash: 0, maxTokens: null };
  const request = buildRoutingRequest(parsed.data, { blockSizeBytes, maxBlocks: 1 });
  return { model: request.model, headHash: request.headHash, maxTokens: request.maxTokens ?? null };
}

async function readBody(request: IncomingMessage, limitBytes: number): Promise<Buffer> {
  if (Number(request.headers['content-length'] ?? 0) > limitBytes) throw new BodyTooLarge();
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of request) {
    size += (chunk as Buffer).length;
    if (size > limitBytes) throw new BodyTooLarge();
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

/** True if some backend answers `path` with 2xx within the probe timeout. */
async function someBackendAnswers(backends: readonly OracleBackend[], path: string): Promise<boolean> {
  const answers = await Promise.all(
    backends.map(async (backend) => {
      try {
        const response = await backend.pool.request({
          method: 'GET',
          path: `${backend.basePath}${path}`,
          signal: AbortSignal.timeout(PROBE_TIMEOUT_MS),
        });
        await response.body.dump();
        return response.statusCode >= 200 && response.statusCode < 300;
      } catch {
        return false;
      }
    }),
  );
  return answers.includes(true);
}

/** The first backend's `GET /v1/models` that answers 200, as it answered (every sim of a cluster serves the same model). */
async function relayModels(backends: readonly OracleBackend[], response: ServerResponse): Promise<void> {
  for (const backend of backends) {
    try {
      const upstream = await backend.pool.request({
        method: 'GET',
        path: `${backend.basePath}/v1/models`,
        signal: AbortSignal.timeout(PROBE_TIMEOUT_MS),
      });
      const text = await upstream.body.text();
      if (upstream.statusCode === 200) {
        response.writeHead(200, { 'content-type': 'application/json' });
        response.end(text);
        return;
      }
    } catch {
      // try the next backend
    }
  }
  sendError(response, 'ORACLE_ERR_UPSTREAM_UNAVAILABLE', 'no backend answers GET /v1/models');
}

function sendJson(response: ServerResponse, status: number, value: unknown, headers: OutgoingHttpHeaders = {}): void {
  const text = JSON.stringify(value);
  response.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
    ...headers,
  });
  response.end(text);
}

function sendError(
  response: ServerResponse,
  code: OracleErrorCode,
  message: string,
  options: { close?: boolean } = {},
): void {
  const { status, type } = ORACLE_ERRORS[code];
  sendJson(
    response,
    status,
    createOpenAIErrorBody(`oracle: ${message}`, type, { code }),
    options.close ? { connection: 'close' } : {},
  );
}
