import { Pool } from 'undici';
import type { Backend } from '../backends/backend-registry';

export interface UpstreamPoolOptions {
  readonly connectTimeoutMs: number;
  readonly headersTimeoutMs: number;
  readonly idleTimeoutMs: number;
}

/**
 * One undici connection pool per backend: keep-alive connections reused across requests (no
 * per-request TCP handshake), pipelining off (one request per connection at a time, as engines expect
 * for streams). Keyed by the registry's Backend object, not its id: a backend removed and added again
 * under the same id may have another URL, and gets a pool of its own.
 */
export class UpstreamPools {
  private readonly pools = new Map<Backend, Pool>();

  constructor(private readonly options: UpstreamPoolOptions) {}

  for(backend: Backend): Pool {
    let pool = this.pools.get(backend);
    if (!pool) {
      pool = new Pool(backend.origin, {
        connect: { timeout: this.options.connectTimeoutMs },
        headersTimeout: this.options.headersTimeoutMs,
        bodyTimeout: this.options.idleTimeoutMs,
        keepAliveTimeout: 30_000,
        pipelining: 1,
      });
      this.pools.set(backend, pool);
    }
    return pool;
  }

  /**
   * A backend left the registry: its pool closes once its requests in flight have finished (undici's
   * close is graceful), and its idle connections go.
   */
  retire(backend: Backend): void {
    const pool = this.pools.get(backend);
    if (!pool) return;
    this.pools.delete(backend);
    pool.close().catch(() => undefined);
  }

  async close(): Promise<void> {
    await Promise.all([...this.pools.values()].map((pool) => pool.close()));
    this.pools.clear();
  }

  /** Aborts everything at once (shutdown deadline passed). */
  async destroy(): Promise<void> {
    await Promise.all([...this.pools.values()].map((pool) => pool.destroy()));
    this.pools.clear();
  }
}
