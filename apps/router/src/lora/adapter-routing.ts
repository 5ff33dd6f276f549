import { backendRendezvousOrder, hashString53, type BackendId } from '@kvroute/routing';
import type { Backend, BackendRegistry } from '../backends/backend-registry';
import type { ParsedRequest } from '../pipeline/parse';
import type { AdapterLoader, LoadableAdapter } from './adapter-loader';

/**
 * LoRA adapters (issue 33): a request naming an adapter is routed in its base model's pool, where the adapter's wait
 * on each backend is priced like any other wait.
 *
 * - **Pool.** The adapter's requests share the base model's routing state (its in-flight leases, prefill backlog and
 *   prefix ownership: one engine's load is one load, whichever adapter it runs), over the backends that serve the
 *   adapter. The adapter name stays in the request's prefix hash (the routing text starts with `model`; in token
 *   mode it is every block's first extra key, as vLLM's block hash has it), so two adapters never share a
 *   predicted hit, and follow-up turns of an adapter's conversation meet their prefix on any replica.
 * - **Wait** (`adapterWaitMs`, ms, per backend; lower is better): 0 where the adapter is running; `loadMs` where a
 *   slot is free (it must be loaded, from CPU or disk); `slotWaitMs` where requests for it are already waiting (its
 *   load is under way, a slot is busy); `loadMs + slotWaitMs` where every slot runs another adapter; `loadMs` where
 *   the engine does not say (no metric yet: neither warm nor full). This gives the order running, free slot,
 *   waiting, the rest; and the cost rule keeps the adapter on its holders until their queue costs more than a load
 *   elsewhere, so a hot adapter spreads to more backends once its holders are saturated (bounded load).
 * - **Between scrapes.** The engines' residency comes from the health poller (`vllm:lora_requests_info`, through
 *   Redis, shared by every replica). A backend this replica sent the adapter to within `recentMs` counts as running
 *   it: a burst of new conversations does not load the adapter on every backend before the next scrape says where
 *   it went.
 */
export interface AdapterResidency {
  readonly running: readonly string[];
  readonly waiting: readonly string[];
  /** Adapter slots per batch (`--max-loras`); null: not said. */
  readonly maxLoras: number | null;
}

export interface AdapterPrices {
  /** An adapter load's wait, ms (`loraLoadMs`). */
  readonly loadMs: number;
  /** A wait for a busy adapter slot, ms (`loraSlotWaitMs`). */
  readonly slotWaitMs: number;
  /** How long this replica counts a backend it sent an adapter to as running it, ms (`loraRecentMs`). */
  readonly recentMs: number;
}

export interface AdapterRoutingDeps {
  readonly registry: Pick<BackendRegistry, 'baseModelOf' | 'poolFor'>;
  /** Adapters the router loads on demand (`loraAdapters`); null: none. */
  readonly loader: AdapterLoader | null;
  /** The engine's published residency, when fresh (EngineStateView); null: unknown. */
  readonly residencyOf: (engineId: string) => AdapterResidency | null;
  readonly prices: AdapterPrices;
  readonly nowMs: () => number;
}

/** Adapters and backends tracked for `recentMs`, at most (a hostile stream of names cannot grow it without bound). */
const MAX_RECENT_ADAPTERS = 4096;

export class AdapterRouting {
  /** adapter → backend → when this replica last sent it there (nowMs). */
  readonly #recent = new Map<string, Map<BackendId, number>>();

  constructor(private readonly deps: AdapterRoutingDeps) {}

  /** The on-demand loads of `loraAdapters`; null: none configured. */
  get loader(): AdapterLoader | null {
    return this.deps.loader;
  }

  /** The base model of adapter `model` (listed by a backend, or loadable); null: no adapter known by that name. */
  baseOf(model: string): string | null {
    const base = this.deps.registry.baseModelOf(model) ?? this.deps.loader?.loadable(model)?.base ?? null;
    return base === model ? null : base;
  }

  /** A loadable adapter's backends: every backend of its base model (it is loaded where it goes); null: not loadable. */
  poolFor(model: string): readonly Backend[] | null {
    const loadable = this.deps.loader?.loadable(model);
    return loadable === undefined ? null : this.deps.registry.poolFor(loadable.base);
  }

  /**
   * `parsed`, whose model is an adapter of `base` (baseOf), as routed over `backends` (those serving the adapter, or
   * able to load it): its base model's request, its adapter's wait on each of them priced (a backend that must load
   * it first: a load more).
   */
  async resolve(parsed: ParsedRequest, backends: readonly Backend[], base: string): Promise<ParsedRequest> {
    const adapter = parsed.model;
    const adapterWaitMs = this.waitsOn(adapter, backends);
    const loader = this.deps.loader;
    const loadable = loader?.loadable(adapter);
    if (loader !== null && loadable !== undefined) await this.priceLoads(loader, loadable, backends, adapterWaitMs);
    return { ...parsed, model: base, routingRequest: { ...parsed.routingRequest, adapterWaitMs } };
  }

  /**
   * A loadable adapter's waits, where it must be loaded first: a load more. Held nowhere yet, it is placed by
   * rendezvous hashing of its name (every replica agrees without talking): the first backend of that order that a
   * failed load does not keep it off is priced one load, the others a load more (`loadMs` twice), so a burst of its
   * first requests, from any replica, loads it once, and it spreads when that backend's queue costs more than a load.
   * A backend a failed load keeps it off is priced a slot wait more.
   */
  private async priceLoads(
    loader: AdapterLoader,
    adapter: LoadableAdapter,
    backends: readonly Backend[],
    waits: Map<BackendId, number>,
  ): Promise<void> {
    const { loadMs, slotWaitMs } = this.deps.prices;
    const loadedOn = await loader.loadedOn(adapter);
    const holds = (backend: Backend) => loadedOn.has(backend.id) || loader.holds(backend, adapter.name);
    const heldNowhere = !backends.some(holds);
    const order = backendRendezvousOrder(
      hashString53(adapter.name),
      backends.map((backend) => backend.info),
    );
    const placed = heldNowhere
      ? order.map((index) => backends[index] as Backend).find((backend) => !loader.isOff(backend, adapter.name))
      : undefined;
    for (const backend of backends) {
      if (holds(backend)) continue;
      const extra = loader.isOff(backend, adapter.name)
        ? loadMs + slotWaitMs
        : heldNowhere && backend !== placed
          ? 2 * loadMs
          : loadMs;
      waits.set(backend.id, (waits.get(backend.id) ?? 0) + extra);
    }
  }

  /** When this replica last sent `adapter` to `backendId` (nowMs; -Infinity: not within what it remembers). */
  lastSentMs(adapter: string, backendId: BackendId): number {
    return this.#recent.get(adapter)?.get(backendId) ?? Number.NEGATIVE_INFINITY;
  }

  /** The adapter's wait per backend, ms (the header's tiers). */
  waitsOn(adapter: string, backends: readonly Backend[]): Map<BackendId, number> {
    const { prices } = this.deps;
    const recent = this.#recent.get(adapter);
    const nowMs = this.deps.nowMs();
    const waits = new Map<BackendId, number>();
    for (const backend of backends) {
      const sentAt = recent?.get(backend.id);
      if (sentAt !== undefined && nowMs - sentAt <= prices.recentMs) {
        waits.set(backend.id, 0);
        continue;
      }
      waits.set(backend.id, waitOf(adapter, this.deps.residencyOf(backend.engineId), prices));
    }
    return waits;
  }

  /** This replica sent `adapter`'s request to `backendId` (the route stage's choice). */
  routed(adapter: string, backendId: BackendId): void {
    let recent = this.#recent.get(adapter);
    if (recent === undefined) {
      if (this.#recent.size >= MAX_RECENT_ADAPTERS) this.forgetOld();
      recent = new Map();
      this.#recent.set(adapter, recent);
    }
    recent.set(backendId, this.deps.nowMs());
  }

  /** Drops what is older than `recentMs` (and, if still full, everything: it is a hint, not state). */
  private forgetOld(): void {
    const horizon = this.deps.nowMs() - this.deps.prices.recentMs;
    for (const [adapter, backends] of this.#recent) {
      for (const [backendId, sentAt] of backends) if (sentAt < horizon) backends.delete(backendId);
      if (backends.size === 0) this.#recent.delete(adapter);
    }
    if (this.#recent.size >= MAX_RECENT_ADAPTERS) this.#recent.clear();
  }
}

/** One backend's wait for `adapter`, ms, from its engine's residency (null: unknown). */
export function waitOf(adapter: string, residency: AdapterResidency | null, prices: AdapterPrices): number {
  if (residency === null) return prices.loadMs;
  if (residency.running.includes(adapter)) return 0;
  if (residency.waiting.includes(adapter)) return prices.slotWaitMs;
  const slotFree = residency.maxLoras === null || residency.running.length < residency.maxLoras;
  return slotFree ? prices.loadMs : prices.loadMs + prices.slotWaitMs;
}
