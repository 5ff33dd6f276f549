import { createOpenAIErrorBody, type OpenAIErrorBody } from '@kvroute/protocols';

/**
 * Every error the router itself answers with: a stable code, its HTTP status and the OpenAI error
 * type. Upstream 4xx answers are relayed as the backend sent them; an upstream 5xx answer's body is
 * replaced (ROUTER_ERR_UPSTREAM_ERROR). Failures of the router's own making (bad input, nowhere to
 * send, transport errors) appear here. Never a 500 for bad input. No message names a backend.
 */
export const ROUTER_ERRORS = {
  ROUTER_ERR_INVALID_JSON: { status: 400, type: 'invalid_request_error' },
  ROUTER_ERR_INVALID_REQUEST: { status: 400, type: 'invalid_request_error' },
  /** A path with a dot segment, an empty segment or an encoded separator: refused, never forwarded (pipeline/admit.ts). */
  ROUTER_ERR_INVALID_PATH: { status: 400, type: 'invalid_request_error' },
  /** The HTTP framing itself is wrong (Content-Length with Transfer-Encoding, two lengths, a bad request line…): http/client-error.ts. */
  ROUTER_ERR_BAD_FRAMING: { status: 400, type: 'invalid_request_error' },
  /** Headers or body not received within `requestHeadersTimeoutMs` / `requestBodyTimeoutMs`. */
  ROUTER_ERR_REQUEST_TIMEOUT: { status: 408, type: 'invalid_request_error' },
  /** Request headers larger than `maxHeaderBytes`. */
  ROUTER_ERR_HEADERS_TOO_LARGE: { status: 431, type: 'invalid_request_error' },
  ROUTER_ERR_UNSUPPORTED_MEDIA_TYPE: { status: 415, type: 'invalid_request_error' },
  ROUTER_ERR_MODEL_NOT_FOUND: { status: 404, type: 'invalid_request_error' },
  ROUTER_ERR_NOT_FOUND: { status: 404, type: 'invalid_request_error' },
  /** A pass-through path the caller's role may not reach: engine control is for admin keys (pipeline/passthrough-paths.ts). */
  ROUTER_ERR_ENDPOINT_NOT_ALLOWED: { status: 403, type: 'invalid_request_error' },
  /** `GET`/`DELETE /v1/responses/{id}` for an id the response-owner map does not know in the caller's scope (expired, another tenant's, never stored). */
  ROUTER_ERR_RESPONSE_NOT_FOUND: { status: 404, type: 'invalid_request_error' },
  /**
   * Whose a stored response is cannot be known now: Redis (the shared response-owner map) failed, is too
   * slow or the routing state is degraded, and this replica's own map does not know the id. 503 with
   * `Retry-After`, not the 404 a client would take as final (pipeline/response-affinity.ts,
   * pipeline/stored-response.ts).
   */
  ROUTER_ERR_RESPONSE_OWNERS_UNAVAILABLE: { status: 503, type: 'service_unavailable' },
  ROUTER_ERR_METHOD_NOT_ALLOWED: { status: 405, type: 'invalid_request_error' },
  ROUTER_ERR_BODY_TOO_LARGE: { status: 413, type: 'invalid_request_error' },
  ROUTER_ERR_NO_BACKEND: { status: 503, type: 'service_unavailable' },
  /**
   * No backend has reported the model, but some backend has not yet told its models (it is not
   * listening yet, e.g. started together with the router): 503 with `Retry-After`, not a 404 that a
   * client would take as final (backends/backend-registry.ts, models pending).
   */
  ROUTER_ERR_MODELS_PENDING: { status: 503, type: 'service_unavailable' },
  /** Over `maxInflightRequests` or `maxConnections`: 503 with `Retry-After` (pipeline/admit.ts). */
  ROUTER_ERR_OVERLOADED: { status: 503, type: 'service_unavailable' },
  /**
   * One caller (a tenant; a client address in open mode) already has `maxInflightPerCaller` requests in
   * flight on this replica: 429 with `Retry-After`, before the body is read (pipeline/admit.ts), so no
   * caller alone can fill the replica's `maxInflightRequests`.
   */
  ROUTER_ERR_CALLER_INFLIGHT: { status: 429, type: 'rate_limit_error' },
  /**
   * One client address already has `maxConnectionsPerPeer` connections open to this replica, all with a
   * request in progress (idle ones are closed to make room: pipeline/connection-caps.ts): 429 with
   * `Retry-After`, and the connection is closed.
   */
  ROUTER_ERR_CALLER_CONNECTIONS: { status: 429, type: 'rate_limit_error' },
  /**
   * Flow control (flow/flow-control.ts): every backend of the model is saturated and the request cannot
   * wait (the pool's queue is full, it could not start within `flowMaxQueueWaitMs`, or it waited that
   * long): 429 with `Retry-After` and `retry-after-ms`.
   */
  ROUTER_ERR_POOL_SATURATED: { status: 429, type: 'rate_limit_error' },
  /** The client closed its request while it waited in the queue: nobody reads this answer (499, as nginx logs it). */
  ROUTER_ERR_CLIENT_GONE: { status: 499, type: 'invalid_request_error' },
  ROUTER_ERR_UPSTREAM_UNAVAILABLE: { status: 502, type: 'upstream_error' },
  ROUTER_ERR_UPSTREAM_TIMEOUT: { status: 504, type: 'upstream_error' },
  /**
   * The backend answered 5xx: the client gets the backend's status (the 502 here is nominal) with this
   * error in place of the backend's body, which is logged, truncated (proxy/upstream-error-answer.ts).
   */
  ROUTER_ERR_UPSTREAM_ERROR: { status: 502, type: 'upstream_error' },
  ROUTER_ERR_SHUTTING_DOWN: { status: 503, type: 'service_unavailable' },
  /**
   * The backend failed after the first byte: not an HTTP answer (the status was sent) but the error
   * event a stream ends with, before `data: [DONE]` (proxy/relay-handler.ts); its status is what the
   * request counts as in metrics.
   */
  ROUTER_ERR_UPSTREAM_STREAM: { status: 502, type: 'upstream_error' },
  // Admin API (/admin/backends).
  ROUTER_ERR_UNAUTHORIZED: { status: 401, type: 'invalid_request_error' },
  /** Too many wrong admin tokens from one peer (admin/auth-failure-limiter.ts): 429 with `Retry-After`. */
  ROUTER_ERR_ADMIN_AUTH_RATE_LIMITED: { status: 429, type: 'rate_limit_error' },
  /** A backend URL refused by backendAllowlist or the SSRF guard (admin/backend-address-policy.ts); nothing was connected. */
  ROUTER_ERR_BACKEND_NOT_ALLOWED: { status: 403, type: 'invalid_request_error' },
  ROUTER_ERR_BACKEND_NOT_FOUND: { status: 404, type: 'invalid_request_error' },
  ROUTER_ERR_BACKEND_EXISTS: { status: 409, type: 'invalid_request_error' },
  ROUTER_ERR_BACKEND_SET_UNAVAILABLE: { status: 503, type: 'service_unavailable' },
  // Tenants (tenants/, pipeline/limit.ts; docs/adr/0006).
  /** No API key, or not one this router knows (`auth: api-keys`), or no gateway identity (`gateway-header`). */
  ROUTER_ERR_INVALID_API_KEY: { status: 401, type: 'invalid_request_error' },
  /** Too many wrong API keys from one peer: its unknown keys are refused without a lookup, 429 with `Retry-After`. */
  ROUTER_ERR_AUTH_RATE_LIMITED: { status: 429, type: 'rate_limit_error' },
  /** The key is not in this replica's memory and Redis cannot be asked now: 503 with `Retry-After`. */
  ROUTER_ERR_AUTH_UNAVAILABLE: { status: 503, type: 'service_unavailable' },
  /** Over a tenant's or a key's limit: 429 with `Retry-After`, `retry-after-ms` and the `x-ratelimit-*` headers. */
  ROUTER_ERR_RATE_LIMITED: { status: 429, type: 'rate_limit_error' },
  /** The request alone exceeds a limit (its reserved tokens are more than a tokens-per-minute limit): it can never pass, so 400, not a 429 to retry. */
  ROUTER_ERR_REQUEST_OVER_LIMIT: { status: 400, type: 'invalid_request_error' },
  /** Admin API, `/admin/keys`: no such key; a key with that id exists; keys cannot be changed now (no Redis, or Redis away). */
  ROUTER_ERR_KEY_NOT_FOUND: { status: 404, type: 'invalid_request_error' },
  ROUTER_ERR_KEY_EXISTS: { status: 409, type: 'invalid_request_error' },
  ROUTER_ERR_KEYS_UNAVAILABLE: { status: 503, type: 'service_unavailable' },
  ROUTER_ERR_INTERNAL: { status: 500, type: 'internal_error' },
} as const satisfies Record<string, { status: number; type: string }>;

export type RouterErrorCode = keyof typeof ROUTER_ERRORS;

export class RouterError extends Error {
  constructor(
    readonly code: RouterErrorCode,
    message: string,
    readonly options: {
      param?: string;
      retryAfterSeconds?: number;
      cause?: unknown;
      headers?: Readonly<Record<string, string>>;
    } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
  }

  get status(): number {
    return ROUTER_ERRORS[this.code].status;
  }

  toBody(): OpenAIErrorBody {
    return createOpenAIErrorBody(this.message, ROUTER_ERRORS[this.code].type, {
      param: this.options.param ?? null,
      code: this.code,
    });
  }
}
