import type { BackendId } from '@kvroute/routing';
import type { Backend, BackendRegistry } from '../backends/backend-registry';
import type { ParsedRequest } from '../pipeline/parse';

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
  readonly registry: Pick<BackendRegistry, 'baseModelOf'>;
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

  /**
   * `parsed` as its adapter's request routed over `backends` (those serving the adapter): its base model's, its
   * adapter's wait on each of them priced; null when its model is no adapter (a base model, or not known as one).
   */
  resolve(parsed: ParsedRequest, backends: readonly Backend[]): ParsedRequest | null {
    const adapter = parsed.model;
    const base = this.deps.registry.baseModelOf(adapter);
    if (base === null || base === adapter) return null;
    const adapterWaitMs = this.waitsOn(adapter, backends);
    return { ...parsed, model: base, routingRequest: { ...parsed.routingRequest, adapterWaitMs } };
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
