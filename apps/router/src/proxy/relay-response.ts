import { once } from 'node:events';
import type { ServerResponse } from 'node:http';
import type { FastifyBaseLogger } from 'fastify';
import { encodeSseData, SSE_DONE } from '@kvroute/protocols';
import type { Dispatcher } from 'undici';
import type { RouterMetrics } from '../router-metrics';
import type { Lease } from '../routing/route-request';
import { endToEndHeaders } from './hop-by-hop';

export interface RelayDeps {
  readonly metrics: RouterMetrics;
  readonly logger: FastifyBaseLogger;
}

export interface RelayInput {
  readonly upstream: Dispatcher.ResponseData;
  readonly response: ServerResponse;
  readonly lease: Lease;
  readonly backendId: string;
  readonly policyName: string;
  readonly reason: string;
  readonly requestId: string;
  readonly arrivedAtMs: number;
  readonly clientAborted: () => boolean;
}

/** A content delta that carries text (the role chunk's `"content":""` does not count). */
const CONTENT_EVENT = /"(?:content|text)":"(?!")/;

/**
 * Relays an upstream response: status and end-to-end headers unchanged plus the routing headers, then
 * the body bytes as they arrive (no buffering; SSE gets `X-Accel-Buffering: no`). TTFT is the first
 * upstream content event of a stream, or the response headers otherwise. If the upstream fails after
 * the first byte, a stream ends with an SSE error event and `[DONE]` (never a hang); the lease is
 * released exactly once whatever happens.
 */
export async function relayResponse(deps: RelayDeps, input: RelayInput): Promise<void> {
  const { upstream, response, lease } = input;
  const headers = endToEndHeaders(upstream.headers);
  const isSse = String(headers['content-type'] ?? '').startsWith('text/event-stream');
  headers['x-router-backend'] = input.backendId;
  headers['x-router-reason'] = input.reason;
  headers['x-request-id'] = input.requestId;
  if (isSse) {
    headers['x-accel-buffering'] = 'no';
    headers['cache-control'] = 'no-cache';
  }
  let sawContent = !isSse;
  if (!isSse) {
    // Non-streaming engines answer when generation is done: the prefill is long finished.
    lease.markPrefillDone();
    deps.metrics.recordTtft(input.backendId, (performance.now() - input.arrivedAtMs) / 1000);
  }
  try {
    response.writeHead(upstream.statusCode, headers);
    if (isSse) response.flushHeaders();
    for await (const chunk of upstream.body as AsyncIterable<Buffer>) {
      if (!sawContent && CONTENT_EVENT.test(chunk.toString('utf8'))) {
        sawContent = true;
        lease.markPrefillDone();
        deps.metrics.recordTtft(input.backendId, (performance.now() - input.arrivedAtMs) / 1000);
      }
      if (!response.write(chunk)) await waitForDrain(response);
    }
    response.end();
    deps.metrics.recordRouted(input.backendId, input.policyName, input.reason, upstream.statusCode);
  } catch (error) {
    if (input.clientAborted() || response.destroyed) {
      deps.metrics.recordClientAbort(input.backendId);
      upstream.body.destroy();
      return;
    }
    deps.metrics.recordStreamError(input.backendId);
    deps.logger.warn({ requestId: input.requestId, backend: input.backendId, err: error }, 'upstream failed after the first byte');
    if (isSse) {
      const message = `Upstream backend ${input.backendId} failed mid-stream.`;
      response.end(encodeSseData(JSON.stringify({ error: { message, type: 'upstream_error', param: null, code: 'ROUTER_ERR_UPSTREAM_STREAM' } })) + encodeSseData(SSE_DONE));
    } else {
      response.destroy();
    }
    deps.metrics.recordRouted(input.backendId, input.policyName, input.reason, 502);
  } finally {
    lease.release();
    deps.metrics.recordDuration(input.backendId, isSse, (performance.now() - input.arrivedAtMs) / 1000);
  }
}

/** Waits for the client to drain its buffer, or rejects if the client goes away first. */
async function waitForDrain(response: ServerResponse): Promise<void> {
  await Promise.race([
    once(response, 'drain'),
    once(response, 'close').then(() => {
      throw new Error('client closed');
    }),
  ]);
}
