import type { BackendId, BackendInfo } from '@kvroute/routing';
import { CircuitBreaker } from './circuit-breaker';

/** A backend as the router runs it: where it is, what it serves, whether its circuit is open. */
export interface Backend {
  readonly id: BackendId;
  /** Origin without trailing slash, e.g. `http://127.0.0.1:8001`. */
  readonly origin: string;
  /** Path prefix of the OpenAI API on that origin (`''` when the URL had no path). */
  readonly basePath: string;
  readonly info: BackendInfo;
  /** Models from config; null = discovered from the backend's GET /v1/models. */
  readonly configuredModels: readonly string[] | null;
  readonly breaker: CircuitBreaker;
}

export interface BackendSpec {
  readonly url: string;
  readonly id?: string | undefined;
  readonly models?: readonly string[] | undefined;
  readonly weight: number;
}

export interface BackendRegistryOptions {
  readonly breakerFailureThreshold: number;
  readonly breakerCooldownMs: number;
  readonly nowMs: () => number;
  /** Reads a backend's served model ids (GET /v1/models); injected so the registry does no I/O itself. */
  readonly fetchModels: (backend: Backend) => Promise<readonly string[]>;
  readonly onRefreshError?: (backend: Backend, error: unknown) => void;
}

/**
 * The configured backends and the pools they form: a pool is the backends serving one model, in
 * configuration order. Models come from config or are discovered from each backend and refreshed
 * periodically (a backend that cannot be reached keeps its last known models).
 */
export class BackendRegistry {
  readonly backends: readonly Backend[];
  private readonly modelsByBackend = new Map<BackendId, readonly string[]>();
  private pools = new Map<string, Backend[]>();
  private timer: NodeJS.Timeout | null = null;

  constructor(specs: readonly BackendSpec[], private readonly options: BackendRegistryOptions) {
    const seen = new Set<string>();
    this.backends = specs.map((spec) => {
      const url = new URL(spec.url);
      const id = spec.id ?? url.host;
      if (seen.has(id)) throw new Error(`duplicate backend id "${id}" (give backends distinct ids)`);
      seen.add(id);
      const backend: Backend = {
        id,
        origin: url.origin,
        basePath: url.pathname.replace(/\/+$/, '').replace(/\/v1$/, ''),
        info: { id, weight: spec.weight },
        configuredModels: spec.models ?? null,
        breaker: new CircuitBreaker({ failureThreshold: options.breakerFailureThreshold, cooldownMs: options.breakerCooldownMs, nowMs: options.nowMs }),
      };
      if (backend.configuredModels) this.modelsByBackend.set(id, backend.configuredModels);
      return backend;
    });
    this.rebuildPools();
  }

  /** Backends serving `model`, in configuration order (empty if none). */
  poolFor(model: string): readonly Backend[] {
    return this.pools.get(model) ?? [];
  }

  /** Every model served by at least one backend. */
  models(): string[] {
    return [...this.pools.keys()];
  }

  get(id: BackendId): Backend | undefined {
    return this.backends.find((backend) => backend.id === id);
  }

  /** Re-reads the models of every backend without configured models. Never throws. */
  async refreshModels(): Promise<void> {
    await Promise.all(
      this.backends
        .filter((backend) => backend.configuredModels === null)
        .map(async (backend) => {
          try {
            this.modelsByBackend.set(backend.id, await this.options.fetchModels(backend));
          } catch (error) {
            this.options.onRefreshError?.(backend, error);
          }
        }),
    );
    this.rebuildPools();
  }

  /** Refreshes now, then every `intervalMs` until stop(). */
  async start(intervalMs: number): Promise<void> {
    await this.refreshModels();
    this.timer = setInterval(() => void this.refreshModels(), intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  private rebuildPools(): void {
    const pools = new Map<string, Backend[]>();
    for (const backend of this.backends) {
      for (const model of this.modelsByBackend.get(backend.id) ?? []) {
        let pool = pools.get(model);
        if (!pool) {
          pool = [];
          pools.set(model, pool);
        }
        pool.push(backend);
      }
    }
    this.pools = pools;
  }
}
