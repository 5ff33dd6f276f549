import type { UpstreamKeys } from '@kvroute/platform';
import { Pool } from 'undici';
import type { ConnectLookup } from '../admin/backend-address-policy';
import type { Backend } from '../backends/backend-registry';
import type { FingerprintMemory } from './usage-strip';

export interface UpstreamPoolOptions {
  readonly connectTimeoutMs: number;
  /**
   * Time to the response headers of a call that sets no bound of its own, ms. Every call today sets one:
   * a relayed try disables it (its deadline, relay-handler.ts TryDeadline, bounds it: up to a whole
   * non-streaming generation, or the headers of a stored response's call), model discovery has its own.
   */
  readonly headersTimeoutMs: number;
  /** Silence allowed between response body chunks, ms (undici's bodyTimeout). */
  readonly idleTimeoutMs: number;
  /** The API keys the backends get (`Authorization: Bearer`), by their URL. */
  readonly keys: UpstreamKeys;
  /**
   * How a backend's connections resolve its name (BackendAddressPolicy.connectLookup: checked and
   * pinned at every connect, against DNS rebinding); the system resolver when absent.
   */
  readonly lookupFor?: (backend: Backend) => ConnectLookup;
}

/**
 * One undici connection pool per backend: keep-alive connections reused across requests (no
 * per-request TCP handshake), pipelining off (one request per connection at a time, as engines expect
 * for streams). Keyed by the registry's Backend object, not its id: a backend removed and added again
 * under the same id may have another URL, and gets a pool of its own.
 */
export class UpstreamPools {
  private readonly pools = new Map<Backend, Pool>();
  /** Per backend, what its streams' usage events said of its fingerprint (usage-strip.ts); goes with its pool. */
  private readonly fingerprints = new Map<Backend, FingerprintMemory>();
  /** Per backend, its `Authorization` value (null: none), looked up once: the lookup parses its URL. */
  private readonly authorizations = new WeakMap<Backend, string | null>();
  private closed = false;

  constructor(private readonly options: UpstreamPoolOptions) {}

  for(backend: Backend): Pool {
    let pool = this.pools.get(backend);
    if (!pool) {
      const lookup = this.options.lookupFor?.(backend);
      pool = new Pool(backend.origin, {
        connect: { timeout: this.options.connectTimeoutMs, ...(lookup === undefined ? {} : { lookup }) },
        headersTimeout: this.options.headersTimeoutMs,
        bodyTimeout: this.options.idleTimeoutMs,
        // Below vLLM's own keep-alive (uvicorn's timeout_keep_alive, VLLM_HTTP_TIMEOUT_KEEP_ALIVE, 5 s by
        // default): an idle connection is let go before the engine closes it, so a request is never
        // written onto a connection closing under it, a failure that is not retried (the request went out).
        keepAliveTimeout: 4_000,
        pipelining: 1,
      });
      // After close/destroy nothing new goes out: a request sent now fails at once on its closed pool
      // (a transport error, which releases its lease), rather than opening a connection at shutdown.
      if (this.closed) pool.destroy().catch(() => undefined);
      this.pools.set(backend, pool);
    }
    return pool;
  }

  /** What the relays remember of `backend`'s fingerprint between its streams. */
  fingerprintMemoryOf(backend: Backend): FingerprintMemory {
    let memory = this.fingerprints.get(backend);
    if (!memory) {
      memory = { last: null };
      this.fingerprints.set(backend, memory);
    }
    return memory;
  }

  /** The `Authorization` header value the router sends `backend` (its upstream key), or null. Never log it. */
  authorizationOf(backend: Backend): string | null {
    let authorization = this.authorizations.get(backend);
    if (authorization === undefined) {
      authorization = this.options.keys.authorizationFor(backend.url);
      this.authorizations.set(backend, authorization);
    }
    return authorization;
  }

  /**
   * A backend left the registry: its pool closes once its requests in flight have finished (undici's
   * close is graceful), and its idle connections go. Resolves once they have (at once without a pool).
   */
  async retire(backend: Backend): Promise<void> {
    this.fingerprints.delete(backend);
    const pool = this.pools.get(backend);
    if (!pool) return;
    this.pools.delete(backend);
    await pool.close().catch(() => undefined);
  }

  /** Lets the requests in flight finish, then closes every connection; nothing new is sent afterwards. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all(
      [...this.pools.values()].map((pool) => (pool.closed || pool.destroyed ? undefined : pool.close())),
    );
  }

  /**
   * Aborts everything at once (shutdown deadline passed): each request in flight ends with an error in
   * its handler (a stream gets the router's error event and `[DONE]`, the lease is released).
   */
  async destroy(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.pools.values()].map((pool) => (pool.destroyed ? undefined : pool.destroy())));
  }
}
