import type { IncomingHttpHeaders, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import Fastify, { type FastifyInstance } from 'fastify';
import { Pool, type Dispatcher } from 'undici';

/**
 * The floor of any Node L7 proxy, for the proxy-overhead benchmark: Fastify 5 in front, one undici
 * Pool (keep-alive, no pipelining, as the router's) behind. No routing, no validation, no body
 * parsing, no logging: every request goes to the one upstream, the request body is streamed up as
 * it arrives and the response body streamed back chunk by chunk (pool.stream into the raw
 * response, so SSE events are relayed as the upstream writes them). Hop-by-hop headers are dropped
 * both ways; everything else is copied.
 */
export interface BareProxyOptions {
  /** Origin of the one upstream, e.g. http://127.0.0.1:8000. */
  readonly upstream: string;
  readonly host?: string;
  readonly port?: number;
}

export interface BareProxy {
  readonly url: string;
  readonly app: FastifyInstance;
  close(): Promise<void>;
}

/** RFC 9110 §7.6.1 connection-specific headers, plus `host` (undici sets the upstream's) and `expect`. */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);
export const NOT_FORWARDED_UP = new Set([...HOP_BY_HOP, 'host', 'expect']);

/** Copies headers except those in `drop` and those named by the message's own `Connection` header. */
export function endToEndHeaders(
  headers: IncomingHttpHeaders | Record<string, string | string[] | undefined>,
  drop: ReadonlySet<string> = HOP_BY_HOP,
): Record<string, string | string[]> {
  const connection = headers.connection;
  const named =
    connection === undefined
      ? []
      : String(connection)
          .toLowerCase()
          .split(',')
          .map((token) => token.trim());
  const result: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined) continue;
    const lower = name.toLowerCase();
    if (drop.has(lower) || named.includes(lower)) continue;
    result[lower] = value;
  }
  return result;
}

export async function startBareProxy(options: BareProxyOptions): Promise<BareProxy> {
  const pool = new Pool(options.upstream, { pipelining: 1, keepAliveTimeout: 30_000 });
  const app = Fastify({ logger: false });
  // Leave every request body unread: it is piped upstream as it arrives.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (_request, _payload, done) => done(null));

  app.all('/*', (request, reply) => {
    reply.hijack();
    const response = reply.raw;
    const hasBody = request.method !== 'GET' && request.method !== 'HEAD';
    const upstreamRequest: Dispatcher.RequestOptions<ServerResponse> = {
      method: request.method as Dispatcher.HttpMethod,
      path: request.url,
      headers: endToEndHeaders(request.headers, NOT_FORWARDED_UP),
      body: hasBody ? request.raw : null,
      opaque: response,
    };
    pool.stream(
      upstreamRequest,
      ({ statusCode, headers, opaque }) => {
        opaque.writeHead(statusCode, endToEndHeaders(headers) as OutgoingHttpHeaders);
        return opaque;
      },
      (error) => {
        if (!error) return;
        if (response.headersSent) {
          response.destroy(error);
        } else {
          response.writeHead(502, { 'content-type': 'application/json' });
          response.end(
            JSON.stringify({
              error: { message: `bare proxy: upstream failed: ${error.message}`, type: 'bad_gateway' },
            }),
          );
        }
      },
    );
  });

  const address = await app.listen({ host: options.host ?? '127.0.0.1', port: options.port ?? 0 });
  return {
    url: address,
    app,
    async close() {
      await app.close();
      await pool.close();
    },
  };
}
