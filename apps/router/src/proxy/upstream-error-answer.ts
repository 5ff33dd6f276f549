import type { OutgoingHttpHeaders } from 'node:http';
import { RouterError } from '../errors';

/**
 * An upstream 5xx answer, replaced (proxy/relay-handler.ts): an engine's 500 body may be a Python
 * traceback (file paths, library versions, pieces of the request), which is the operator's to read, not
 * the client's. The client gets the upstream status with an OpenAI-shaped error, code
 * `ROUTER_ERR_UPSTREAM_ERROR`, that names no backend; the log gets the first `LOGGED_BYTES` of the
 * original. Only answers not yet started: a stream that failed after its 200 ends with an error event.
 */
export const LOGGED_BYTES = 1024;

export class UpstreamErrorAnswer {
  private readonly kept: Buffer[] = [];
  private keptBytes = 0;
  /** Every byte the upstream sent (kept or not). */
  private totalBytes = 0;

  constructor(
    /** The upstream status (≥ 500), which the client gets too. */
    readonly status: number,
    /** `Retry-After` of the upstream answer (a 503's hint is the client's to use); undefined: none. */
    private readonly retryAfter: string | undefined,
  ) {}

  /** Keeps a body chunk's bytes up to LOGGED_BYTES; the rest is read and dropped (the connection stays reusable). */
  add(chunk: Buffer): void {
    this.totalBytes += chunk.length;
    const room = LOGGED_BYTES - this.keptBytes;
    if (room <= 0) return;
    const part = chunk.length <= room ? chunk : chunk.subarray(0, room);
    this.kept.push(part);
    this.keptBytes += part.length;
  }

  /**
   * What the log line carries: the start of the original body (not under `body`, which the logger
   * redacts: that key holds requests, with prompts), and its full length in bytes.
   */
  logged(): { readonly upstreamError: string; readonly upstreamErrorBytes: number; readonly truncated: boolean } {
    return {
      upstreamError: Buffer.concat(this.kept).toString('utf8'),
      upstreamErrorBytes: this.totalBytes,
      truncated: this.totalBytes > this.keptBytes,
    };
  }

  /** The client's answer: `headers` (the router's own: request id, routing and limit headers) plus the JSON error. */
  answer(headers: OutgoingHttpHeaders): { readonly headers: OutgoingHttpHeaders; readonly body: string } {
    const error = new RouterError(
      'ROUTER_ERR_UPSTREAM_ERROR',
      `The model server failed to answer the request (HTTP ${this.status}). Retry later, or ask the operator to check the router's logs.`,
    );
    const body = JSON.stringify(error.toBody());
    return {
      headers: {
        ...headers,
        ...(this.retryAfter === undefined ? {} : { 'retry-after': this.retryAfter }),
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(body),
      },
      body,
    };
  }
}
