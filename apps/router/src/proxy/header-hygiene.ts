import type { IncomingMessage } from 'node:http';
import { endToEndHeaders } from './hop-by-hop';

/**
 * What crosses the proxy in each direction besides the hop-by-hop headers (hop-by-hop.ts), and why.
 *
 * Client → backend, dropped:
 * - `authorization`: the client's credential is for the router tier, not the engine; the backend gets
 *   the router's own upstream key instead (libs/platform upstream-keys.ts), or nothing;
 * - `x-api-key` and `api-key`: the same credential in the Anthropic and Azure OpenAI styles;
 * - `cookie`: browser session state of some other site or tier, meaningless to an engine;
 * - every `proxy-*` header (`proxy-authorization` is hop-by-hop already; the rest are no better);
 * - `forwarded` and `x-real-ip`: claims about the client's address that the router cannot vouch for
 *   and does not extend (it extends `x-forwarded-for` instead).
 * Client → backend, appended: `x-forwarded-for` gets the socket peer's address and
 * `x-forwarded-proto` the scheme the client used, after whatever the client sent. The last element is
 * always what the router saw itself; earlier ones are whatever the client (or a balancer in front)
 * claimed, and only a reader that trusts the hops before the router may use them.
 *
 * Backend → client, dropped: `set-cookie` (an engine or a gateway beside it must not plant state in the
 * client under the router's origin) and `server` (names the engine and its version to every client).
 */
// `x-data-parallel-rank` picks an engine rank inside a backend: the router's decision, never a client's
// (it is set again for a rank backend: pipeline/send.ts).
const DROPPED_REQUEST_HEADERS = new Set([
  'authorization',
  'x-api-key',
  'api-key',
  'cookie',
  'forwarded',
  'x-real-ip',
  'x-data-parallel-rank',
]);
const DROPPED_RESPONSE_HEADERS = new Set(['set-cookie', 'server']);

/** The hop from the client to the router, as the router's socket saw it. */
export interface ClientHop {
  /**
   * The socket peer's address (`socket.remoteAddress`), e.g. `127.0.0.1` or `::1`: behind a
   * `proxyProtocolFrom` balancer, the client its PROXY header names (http/proxy-protocol.ts).
   */
  readonly peerAddress: string;
  readonly proto: 'http' | 'https';
}

/**
 * The client's hop as the socket saw it: the peer address, never a header's claim (Fastify's
 * `request.ip` would follow `X-Forwarded-For` if `trustProxy` were ever set). A socket already closed
 * has no address: `unknown`, as RFC 7239 spells an unknown node.
 */
export function clientHopOf(request: IncomingMessage): ClientHop {
  // A TLS socket says `encrypted: true`; a plain one has no such property.
  const socket = request.socket as IncomingMessage['socket'] & { readonly encrypted?: boolean };
  return { peerAddress: socket.remoteAddress ?? 'unknown', proto: socket.encrypted === true ? 'https' : 'http' };
}

/**
 * The headers a proxied request carries upstream: the client's end-to-end headers minus the dropped
 * ones, the forwarding chain extended, and the backend's upstream key when it has one.
 * `authorization`: `Bearer <key>` or null (none).
 */
export function upstreamRequestHeaders(
  clientHeaders: Record<string, string | string[] | undefined>,
  hop: ClientHop,
  authorization: string | null,
): Record<string, string | string[]> {
  const headers = endToEndHeaders(clientHeaders, isDroppedRequestHeader);
  headers['x-forwarded-for'] = appended(headers['x-forwarded-for'], hop.peerAddress);
  headers['x-forwarded-proto'] = appended(headers['x-forwarded-proto'], hop.proto);
  if (authorization !== null) headers.authorization = authorization;
  return headers;
}

/** The upstream response headers the client gets: end-to-end ones minus the dropped ones. */
export function clientResponseHeaders(
  upstreamHeaders: Record<string, string | string[] | undefined>,
): Record<string, string | string[]> {
  return endToEndHeaders(upstreamHeaders, isDroppedResponseHeader);
}

function isDroppedRequestHeader(lowerName: string): boolean {
  return DROPPED_REQUEST_HEADERS.has(lowerName) || lowerName.startsWith('proxy-');
}

function isDroppedResponseHeader(lowerName: string): boolean {
  return DROPPED_RESPONSE_HEADERS.has(lowerName);
}

/** `earlier, last`: a comma-separated list header extended by one element (repeated headers joined first). */
function appended(earlier: string | string[] | undefined, last: string): string {
  const before = (Array.isArray(earlier) ? earlier.join(', ') : (earlier ?? '')).trim();
  return before === '' ? last : `${before}, ${last}`;
}
