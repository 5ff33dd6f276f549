import { adapterLoadKeys, DEFAULT_KEY_NAMESPACE } from './keys';
import { RedisStoreError } from './redis-store-error';
import { runScript, SCRIPTS, type RedisClient } from './scripts';

/**
 * The router fleet's on-demand LoRA adapter loads in Redis (issue 33; src/lua/adapter-load.lua): which replica loads
 * an adapter onto a backend (a claim, expiring at the load timeout), the spacing of loads per backend, adapters kept
 * off a backend after a failed load, and where routers loaded each adapter (so every replica routes to it there).
 */
export type AdapterLoadClaim = 'loaded' | 'unavailable' | 'busy' | 'spaced' | 'claimed';

const CLAIMS: ReadonlySet<string> = new Set<AdapterLoadClaim>(['loaded', 'unavailable', 'busy', 'spaced', 'claimed']);

export interface AdapterLoadTimes {
  /** A claim lasts this long (the load's timeout), ms. */
  readonly claimMs: number;
  /** Least time between two loads on one backend, ms (0: none). */
  readonly spacingMs: number;
  /** A failed load keeps the adapter off the backend this long, ms. */
  readonly unavailableMs: number;
  /** Where an adapter was loaded is remembered this long after its last load, ms. */
  readonly loadedTtlMs: number;
}

/**
 * Where the fleet's adapter loads are kept: RedisAdapterLoads here; a router without Redis keeps its own
 * (apps/router lora/adapter-loader.ts LocalAdapterLoads), by the same rules.
 */
export interface AdapterLoadBook {
  /** Claims the load of `adapter` onto `backendId` for `token` (a replica's), unless it is there, off, busy or spaced. */
  claim(
    base: string,
    adapter: string,
    backendId: string,
    token: string,
    times: AdapterLoadTimes,
  ): Promise<AdapterLoadClaim>;
  /** The claimed load ended: `loaded` records it, `failed` keeps the adapter off the backend for a while. */
  settle(
    base: string,
    adapter: string,
    backendId: string,
    token: string,
    outcome: 'loaded' | 'failed',
    nowMs: number,
    times: AdapterLoadTimes,
  ): Promise<void>;
  /** `adapter` left `backendId` (a router unloaded it, or the engine lost it). */
  unloaded(base: string, adapter: string, backendId: string): Promise<void>;
  /** The backends `adapter` was loaded onto, or is being loaded onto now. */
  loadedOn(base: string, adapter: string): Promise<ReadonlySet<string>>;
}

export class RedisAdapterLoads implements AdapterLoadBook {
  readonly #redis: RedisClient;
  readonly #namespace: string;

  constructor(options: { readonly redis: RedisClient; readonly keyNamespace?: string }) {
    this.#redis = options.redis;
    this.#namespace = options.keyNamespace ?? DEFAULT_KEY_NAMESPACE;
  }

  /** Claims the load of `adapter` onto `backendId` for `token` (a replica's), unless it is there, off, busy or spaced. */
  async claim(
    base: string,
    adapter: string,
    backendId: string,
    token: string,
    times: AdapterLoadTimes,
  ): Promise<AdapterLoadClaim> {
    const reply = await this.#run(base, adapter, backendId, [
      'claim',
      backendId,
      token,
      times.claimMs,
      times.spacingMs,
      times.loadedTtlMs,
    ]);
    if (typeof reply !== 'string' || !CLAIMS.has(reply))
      throw new RedisStoreError(
        'REDIS_STORE_ERR_BAD_REPLY',
        'adapter-load',
        `adapter-load.lua claim replied ${String(reply)}`,
      );
    return reply as AdapterLoadClaim;
  }

  /** The claimed load ended: `loaded` records it, `failed` keeps the adapter off the backend for a while. */
  async settle(
    base: string,
    adapter: string,
    backendId: string,
    token: string,
    outcome: 'loaded' | 'failed',
    nowMs: number,
    times: AdapterLoadTimes,
  ): Promise<void> {
    const figures = outcome === 'loaded' ? [nowMs, times.loadedTtlMs, 0] : [times.unavailableMs, 0, 0];
    await this.#run(base, adapter, backendId, [outcome, backendId, token, ...figures]);
  }

  /** A router unloaded `adapter` from `backendId`. */
  async unloaded(base: string, adapter: string, backendId: string): Promise<void> {
    await this.#run(base, adapter, backendId, ['unloaded', backendId, '', 0, 0, 0]);
  }

  /** The backends routers loaded `adapter` onto, or are loading it onto now (and did not unload it from since). */
  async loadedOn(base: string, adapter: string): Promise<ReadonlySet<string>> {
    const loaded = await this.#redis.hkeys(adapterLoadKeys(base, this.#namespace).loaded(adapter));
    return new Set(loaded);
  }

  #run(base: string, adapter: string, backendId: string, args: readonly (string | number)[]): Promise<unknown> {
    const keys = adapterLoadKeys(base, this.#namespace);
    return runScript(
      this.#redis,
      SCRIPTS.adapterLoad,
      [
        keys.claim(backendId, adapter),
        keys.spacing(backendId),
        keys.unavailable(backendId, adapter),
        keys.loaded(adapter),
      ],
      args,
    );
  }
}
