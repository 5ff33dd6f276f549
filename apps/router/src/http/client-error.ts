import { STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import { RouterError, type RouterErrorCode } from '../errors';
import type { RouterMetrics } from '../router-metrics';

/**
 * Answers what Node's HTTP parser refuses before Fastify sees a request (framing errors, oversized
 * headers, a request not received in time) in the OpenAI error shape with a `ROUTER_ERR_*` code, then
 * closes the connection: after a framing error nothing more on it can be trusted. The request never
 * reaches a route, so nothing is forwarded.
 */
export function createClientErrorHandler(
  metrics: RouterMetrics,
): (error: Error & { code?: string }, socket: Socket) => void {
  return (error, socket) => {
    if (error.code === 'ECONNRESET' || socket.destroyed) return;
    const routerError = toRouterError(error.code);
    metrics.recordRejected(routerError.code);
    // A response already under way on this socket (keep-alive) cannot be followed by another: just close.
    const busy = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage?.headersSent === true;
    if (!socket.writable || busy) {
      socket.destroy();
      return;
    }
    const body = JSON.stringify(routerError.toBody());
    socket.end(
      `HTTP/1.1 ${routerError.status} ${STATUS_CODES[routerError.status] ?? ''}\r\n` +
        'content-type: application/json; charset=utf-8\r\n' +
        `content-length: ${Buffer.byteLength(body)}\r\n` +
        'x-router-backend: none\r\nx-router-reason: rejected\r\nconnection: close\r\n\r\n' +
        body,
    );
    // A client that does not read its answer does not keep the socket.
    const cut = setTimeout(() => socket.destroy(), CLOSE_AFTER_ANSWER_MS).unref();
    socket.once('close', () => clearTimeout(cut));
  };
}

/** How long a refused connection may take to read its answer before it is cut. */
const CLOSE_AFTER_ANSWER_MS = 1_000;

const MESSAGES: Record<string, [RouterErrorCode, string]> = {
  ERR_HTTP_REQUEST_TIMEOUT: ['ROUTER_ERR_REQUEST_TIMEOUT', 'The request was not received in time.'],
  HPE_HEADER_OVERFLOW: ['ROUTER_ERR_HEADERS_TOO_LARGE', 'The request headers are larger than this router accepts.'],
};

function toRouterError(code: string | undefined): RouterError {
  const known = code === undefined ? undefined : MESSAGES[code];
  if (known) return new RouterError(known[0], known[1]);
  return new RouterError(
    'ROUTER_ERR_BAD_FRAMING',
    `The HTTP request is malformed${code?.startsWith('HPE_') ? ` (${code})` : ''}.`,
  );
}
