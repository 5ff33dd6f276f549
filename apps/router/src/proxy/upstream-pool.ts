import { Pool } from 'undici';
import type { Backend } from '../backends/backend-registry';

export interface UpstreamPoolOptions {
  readonly connectTimeoutMs: number;
  readonly headersTimeoutMs: number;
  readonly idleTimeoutMs: number;
}

/**
 * One undici connection pool per backend origin: keep-alive connections reused across requests
 * (no per-request TCP handshake), pipelining off (one request per connection at a time, as engines
 * expect for streams).
 */
export class UpstreamPools {
  private readonly pools = new Map<string, Pool>();

  constructor(private readonly options: UpstreamPoolOptions) {}

  for(backend: Backend): Pool {
    let pool = this.pools.get(backend.id);
    if (!pool) {
      pool = new Pool(backend.origin, {
        connect: { timeout: this.options.connectTimeoutMs },
        headersTimeout: this.options.headersTimeoutMs,
        bodyTimeout: this.options.idleTimeoutMs,
        keepAliveTimeout: 30_000,
        pipelining: 1,
      });
      this.pools.set(backend.id, pool);
    }
    return pool;
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
