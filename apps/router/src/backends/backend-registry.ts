import type { BackendRole } from './backend-role';
import type { BackendKvEvents } from '@kvroute/redis-store';
import type { BackendId, BackendInfo } from '@kvroute/routing';
import { CircuitBreaker } from './circuit-breaker';
import { type DataParallel, type DataParallelRank, rankIdOf, ranksOf, sameDataParallel } from './data-parallel';
import { NODE_TIMERS, type OneShotTimers } from '../one-shot-timers';
import { DEFAULT_MODELS_RETRY_BACKOFF, modelsRetryDelayMs, type ModelsRetryBackoff } from './models-retry-backoff';

/** A backend as the router runs it: where it is, what it serves, whether its circuit is open. */
export interface Backend {
  readonly id: BackendId;
  /** The URL it was given as (config, admin API or shared set). */
  readonly url: string;
  /** Origin without trailing slash, e.g. `http://127.0.0.1:8001`. */
  readonly origin: string;
  /** Path prefix of the OpenAI API on that origin (`''` when the URL had no path). */
  readonly basePath: string;
  readonly info: BackendInfo;
  /** Models from config; null = discovered from the backend's GET /v1/models. */
  readonly configuredModels: readonly string[] | null;
  readonly breaker: CircuitBreaker;
  /**
   * The engine's id as configured: what the health poller and the shared set know it by. The backend's
   * own `id` unless it is one rank of a data-parallel backend (`<engineId>@<rank>`, data-parallel.ts).
   */
  readonly engineId: BackendId;
  /** The data-parallel ranks its URL serves (every rank's backend carries it); null: one engine. */
  readonly dataParallel: DataParallel | null;
  /** The rank this backend is, sent as `X-data-parallel-rank`; null: the URL's only engine. */
  readonly dataParallelRank: DataParallelRank | null;
  /** Where its engine publishes KV events, as configured (carried to the poller in the shared set); null: not said. */
  readonly kvEvents: BackendKvEvents | null;
  /** Its part in prefill/decode disaggregation (backend-role.ts). */
  readonly role: BackendRole;
  /** SGLang prefill engines: the bootstrap server's port (`--disaggregation-bootstrap-port`); null: 8998. */
  readonly bootstrapPort: number | null;
}

export interface BackendSpec {
  readonly url: string;
  readonly id?: string | undefined;
  readonly models?: readonly string[] | undefined;
  readonly weight: number;
  /** Data-parallel ranks behind the URL: the backend is routed as one backend per rank (data-parallel.ts). */
  readonly dataParallel?: DataParallel | undefined;
  /** Where its engine publishes KV events (for the poller: the router only carries it). */
  readonly kvEvents?: BackendKvEvents | undefined;
  /** Prefill/decode role (Backend.role); absent: `both`. */
  readonly role?: BackendRole | undefined;
  /** SGLang prefill engines' bootstrap port (Backend.bootstrapPort). */
  readonly bootstrapPort?: number | undefined;
}

/** One backend of a whole set handed to `replaceAll` (the fleet's shared set): its spec, id resolved, and whether it is drained. */
export interface BackendSetMember {
  readonly spec: BackendSpec & { readonly id: string };
  readonly drained: boolean;
}

/**
 * Why a backend object left the registry: `removed` (no longer in the set), `moved` (its id now names
 * another URL: another engine), `updated` (same id and URL, new weight or models: the same engine).
 */
export type BackendDeparture = 'removed' | 'moved' | 'updated';

export interface BackendRegistryOptions {
  readonly breakerFailureThreshold: number;
  readonly breakerCooldownMs: number;
  readonly nowMs: () => number;
  /** Reads a backend's served model ids (GET /v1/models), with adapters' bases; injected so the registry does no I/O itself. */
  readonly fetchModels: (backend: Backend) => Promise<readonly string[] | ModelListing>;
  /**
   * A read of a backend's models failed. `modelsReadFailures`: how many reads of a backend whose models
   * are still pending have failed in a row, this one included (0: the refresh of a backend whose models
   * are known failed; it keeps them). Lets the owner log the first and then only now and then, since a
   * pending backend is read again every few seconds.
   */
  readonly onRefreshError?: (backend: Backend, error: unknown, modelsReadFailures: number) => void;
  /**
   * A backend object left the registry (see BackendDeparture). Its requests in flight hold their own
   * reference and finish; this is the place to let go of what only new requests would use (its upstream
   * connection pool; what it was believed to cache, unless the same engine stays).
   */
  readonly onRemoved?: (backend: Backend, models: readonly string[], departure: BackendDeparture) => void;
  /** Jitter of the retries of pending backends' models (models-retry-backoff.ts); Math.random by default. */
  readonly random?: () => number;
  /** Where those retries wait; the global timers by default. */
  readonly timers?: OneShotTimers;
  /** Delays of those retries; 250 ms doubling to 4 s by default. */
  readonly modelsRetryBackoff?: ModelsRetryBackoff;
  /**
   * How long after it was added a backend whose models are pending holds back unknown models (503 +
   * Retry-After instead of 404); 60 s by default. Past it the backend is still asked on its backoff,
   * but a model nobody reported is a 404 again: a mistyped URL or a crash-looping pod must not turn
   * every unknown model into an endless retry for clients.
   */
  readonly modelsPendingMaxMs?: number;
}

export const DEFAULT_MODELS_PENDING_MAX_MS = 60_000;

/** A backend's GET /v1/models: its model ids, and each adapter's base model (vLLM's `parent` of a LoRA entry). */
export interface ModelListing {
  readonly ids: readonly string[];
  /** adapter id → its base model's id. */
  readonly parents: ReadonlyMap<string, string>;
}

/** A backend whose models are pending, as /readyz shows it. */
export interface PendingModelsBackend {
  readonly backend: Backend;
  /** Since it was added (registry's clock), ms. */
  readonly ageMs: number;
  /** Still within modelsPendingMaxMs and not drained: unknown models get 503 because of it. */
  readonly holdsUnknownModels: boolean;
}

/** A pending backend's retries: how many reads of its models failed so far, and the next retry (null: none). */
interface ModelsRetry {
  failures: number;
  timer: unknown;
}

/** The id a spec gets: its own, else the URL's host:port. */
export function backendIdOf(spec: BackendSpec): BackendId {
  return spec.id ?? new URL(spec.url).host;
}

/**
 * The backends this replica routes over, and the pools they form: a pool is the backends serving one
 * model, in registration order (configuration order, then backends added at run time). The set can
 * change while requests run (admin API, the fleet's shared set in Redis): every change builds new
 * arrays instead of editing the old ones, so a request keeps the pool it started with.
 *
 * A drained backend stays registered (its circuit, models and in-flight requests are still tracked) but
 * is in no pool, so no new request is routed to it. Models come from config or are discovered from
 * each backend and refreshed periodically (a backend that cannot be reached keeps its last known
 * models); a backend added without models is read at once.
 *
 * Models pending: a backend without configured models has its models *pending* until it has answered
 * GET /v1/models once. Until then it is asked again on a short, growing backoff
 * (models-retry-backoff.ts), not only on the periodic refresh: a router started together with its
 * backends finds them within a fraction of a second of their listening. While an undrained backend's
 * models are pending, for at most `modelsPendingMaxMs` after it was added, a model no backend has
 * reported may still exist (`modelsPending`): the request path answers 503 + Retry-After for it, not
 * 404. After that window the backend is still asked on its backoff, but no longer holds back 404s (it
 * is more likely mistyped or crash-looping than starting); a drained backend never holds them back
 * (no request would be routed to it anyway).
 */
export class BackendRegistry {
  private all: readonly Backend[] = [];
  private readonly drained = new Set<BackendId>();
  private readonly modelsByBackend = new Map<BackendId, readonly string[]>();
  /** model → its undrained backends. */
  private pools = new Map<string, readonly Backend[]>();
  /** Models served by any backend, drained ones included. */
  private served = new Set<string>();
  /** adapter → its base model, as the backends that serve it said (GET /v1/models `parent`). */
  private readonly parentsByBackend = new Map<BackendId, ReadonlyMap<string, string>>();
  private bases = new Map<string, string>();
  private timer: NodeJS.Timeout | null = null;
  /** Backend objects (not ids: a replaced backend starts over) that answered GET /v1/models at least once. */
  private readonly answeredModels = new WeakSet<Backend>();
  /** Pending backends whose read failed: their retry schedule. */
  private readonly modelsRetries = new Map<Backend, ModelsRetry>();
  /** When each backend object was added (nowMs), for the pending window; an `updated` one keeps its predecessor's. */
  private readonly addedAtMs = new WeakMap<Backend, number>();
  private stopped = false;

  constructor(
    specs: readonly BackendSpec[],
    private readonly options: BackendRegistryOptions,
  ) {
    const seen = new Set<string>();
    for (const spec of specs) {
      for (const id of [backendIdOf(spec), ...routedIdsOf(spec)]) {
        if (seen.has(id)) throw new Error(`duplicate backend id "${id}" (give backends distinct ids)`);
        seen.add(id);
      }
    }
    this.all = specs.flatMap((spec) => this.createBackends(spec));
    this.rebuildPools();
  }

  /** Every registered backend, drained ones included, in registration order. */
  get backends(): readonly Backend[] {
    return this.all;
  }

  /** The base model of adapter `model` (a LoRA its backends list with a `parent`); null: not an adapter known as one. */
  baseModelOf(model: string): string | null {
    return this.bases.get(model) ?? null;
  }

  /** The undrained backends serving `model`, in registration order (empty if none). */
  poolFor(model: string): readonly Backend[] {
    return this.pools.get(model) ?? [];
  }

  /** Whether any backend, drained or not, serves `model` (unknown model vs. nowhere to send it right now). */
  servesModel(model: string): boolean {
    return this.served.has(model);
  }

  /**
   * Whether some undrained backend added less than `modelsPendingMaxMs` ago has not yet told its models
   * (not configured, never answered GET /v1/models): a model unknown now may be one it serves.
   */
  modelsPending(): boolean {
    const nowMs = this.options.nowMs();
    return this.all.some((backend) => this.holdsUnknownModels(backend, nowMs));
  }

  /** Registered backends that have not yet told their models (still asked on their backoff), in registration order. */
  backendsWithModelsPending(): readonly Backend[] {
    return this.all.filter((backend) => !this.modelsKnown(backend));
  }

  /** The backends of backendsWithModelsPending, with their ages and whether they still hold back unknown models. */
  pendingModelsReport(): readonly PendingModelsBackend[] {
    const nowMs = this.options.nowMs();
    return this.backendsWithModelsPending().map((backend) => ({
      backend,
      ageMs: Math.max(0, nowMs - (this.addedAtMs.get(backend) ?? nowMs)),
      holdsUnknownModels: this.holdsUnknownModels(backend, nowMs),
    }));
  }

  /** Every model served by at least one undrained backend. */
  models(): string[] {
    return [...this.pools.keys()];
  }

  /** The models a backend serves as far as this replica knows (configured or last discovered). */
  modelsOf(id: BackendId): readonly string[] {
    return this.modelsByBackend.get(id) ?? [];
  }

  get(id: BackendId): Backend | undefined {
    return this.all.find((backend) => backend.id === id);
  }

  /** The backends of the engine `engineId`: itself, or each of its data-parallel ranks. */
  ofEngine(engineId: BackendId): readonly Backend[] {
    return this.all.filter((backend) => backend.engineId === engineId);
  }

  /** The backend at `url` (same origin and API path), whatever its id. */
  findByUrl(url: string): Backend | undefined {
    const parsed = new URL(url);
    const basePath = basePathOf(parsed);
    return this.all.find((backend) => backend.origin === parsed.origin && backend.basePath === basePath);
  }

  isDrained(id: BackendId): boolean {
    return this.drained.has(id);
  }

  /**
   * Registers a backend (undrained), as one backend per data-parallel rank if it has them; its models are
   * read at once if not given. Returns the backends registered. Throws if an id is taken.
   */
  add(spec: BackendSpec): readonly Backend[] {
    for (const id of [backendIdOf(spec), ...routedIdsOf(spec)]) {
      if (this.get(id) || this.ofEngine(id).length > 0)
        throw new Error(`duplicate backend id "${id}" (give backends distinct ids)`);
    }
    const added = this.createBackends(spec);
    this.all = [...this.all, ...added];
    this.rebuildPools();
    void this.readModels(added);
    return added;
  }

  /**
   * Unregisters a backend (by its id or its engine's: every rank of a data-parallel one): no new
   * requests; those in flight finish. False if there is none with that id.
   */
  remove(id: BackendId): boolean {
    const leaving = this.matching(id);
    if (leaving.length === 0) return false;
    this.all = this.all.filter((other) => !leaving.includes(other));
    for (const backend of leaving) this.forget(backend, 'removed');
    this.rebuildPools();
    return true;
  }

  /**
   * Drains (no new requests; those in flight finish) or undrains a backend, by its id or its engine's
   * (every rank). False if there is none with that id.
   */
  setDrained(id: BackendId, drained: boolean): boolean {
    const matched = this.matching(id);
    if (matched.length === 0) return false;
    for (const backend of matched) {
      if (drained) this.drained.add(backend.id);
      else this.drained.delete(backend.id);
    }
    this.rebuildPools();
    return true;
  }

  /** The backend `id`, or the backends of the engine `id`. */
  private matching(id: BackendId): readonly Backend[] {
    const exact = this.get(id);
    return exact === undefined ? this.ofEngine(id) : [exact];
  }

  /**
   * Makes the registry hold exactly `members` (the fleet's shared set). A backend whose URL, weight and
   * models are unchanged keeps its object and circuit; one that changed gets a new object in its place;
   * new ones go last, in the order given. Backends without configured models are read at once.
   */
  replaceAll(engines: readonly BackendSetMember[]): void {
    const members = engines.flatMap(routedMembersOf);
    const wanted = new Map(members.map((member) => [member.spec.id, member]));
    const next: Backend[] = [];
    const created: Backend[] = [];
    const create = (member: BackendSetMember, addedAtMs?: number): void => {
      const backend = this.createBackend(member.spec, addedAtMs);
      next.push(backend);
      created.push(backend);
    };
    for (const backend of this.all) {
      const member = wanted.get(backend.id);
      wanted.delete(backend.id);
      if (!member) this.forget(backend, 'removed');
      else if (isSameBackend(backend, member.spec)) next.push(backend);
      else if (isSamePlace(backend, member.spec)) {
        this.forget(backend, 'updated');
        create(member, this.addedAtMs.get(backend));
      } else {
        this.forget(backend, 'moved');
        create(member);
      }
    }
    for (const member of wanted.values()) create(member);
    this.all = next;
    this.drained.clear();
    for (const member of members) if (member.drained) this.drained.add(member.spec.id);
    this.rebuildPools();
    void this.readModels(created);
  }

  /** Re-reads the models of every backend without configured models. Never throws. */
  async refreshModels(): Promise<void> {
    await this.readModels(this.all);
  }

  /** Re-reads one backend's models now (a LoRA adapter loaded, unloaded or lost there). Never throws. */
  async refreshModelsOf(backend: Backend): Promise<void> {
    await this.readModels([backend]);
  }

  /** Refreshes now, then every `intervalMs` until stop(). */
  async start(intervalMs: number): Promise<void> {
    await this.refreshModels();
    this.timer = setInterval(() => void this.refreshModels(), intervalMs);
    this.timer.unref();
  }

  /** Stops the refresh and every retry of pending models; nothing is read afterwards. */
  stop(): void {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    for (const backend of [...this.modelsRetries.keys()]) this.cancelModelsRetry(backend);
  }

  private modelsKnown(backend: Backend): boolean {
    return backend.configuredModels !== null || this.answeredModels.has(backend);
  }

  private holdsUnknownModels(backend: Backend, nowMs: number): boolean {
    if (this.modelsKnown(backend) || this.drained.has(backend.id)) return false;
    const addedAtMs = this.addedAtMs.get(backend) ?? nowMs;
    return nowMs - addedAtMs < (this.options.modelsPendingMaxMs ?? DEFAULT_MODELS_PENDING_MAX_MS);
  }

  /** The backends a spec is routed as: itself, or one per data-parallel rank. */
  private createBackends(spec: BackendSpec): Backend[] {
    return routedMembersOf({ spec: { ...spec, id: backendIdOf(spec) }, drained: false }).map((member) =>
      this.createBackend(member.spec),
    );
  }

  /** `addedAtMs`: when its predecessor was added, for a backend replaced in place (new weight): the same engine, whose window goes on. */
  private createBackend(spec: RoutedSpec, addedAtMs?: number): Backend {
    const url = new URL(spec.url);
    const id = backendIdOf(spec);
    const backend: Backend = {
      id,
      engineId: spec.engineId ?? id,
      dataParallel: spec.dataParallel ?? null,
      dataParallelRank: spec.rank ?? null,
      kvEvents: spec.kvEvents ?? null,
      role: spec.role ?? 'both',
      bootstrapPort: spec.bootstrapPort ?? null,
      url: spec.url,
      origin: url.origin,
      basePath: basePathOf(url),
      info: { id, weight: spec.weight },
      configuredModels: spec.models ? [...spec.models] : null,
      breaker: new CircuitBreaker({
        failureThreshold: this.options.breakerFailureThreshold,
        cooldownMs: this.options.breakerCooldownMs,
        nowMs: this.options.nowMs,
      }),
    };
    if (backend.configuredModels) this.modelsByBackend.set(id, backend.configuredModels);
    else this.modelsByBackend.delete(id);
    this.parentsByBackend.delete(id);
    this.addedAtMs.set(backend, addedAtMs ?? this.options.nowMs());
    return backend;
  }

  /** Drops what the registry keeps about a backend that left, then tells the owner (onRemoved). */
  private forget(backend: Backend, departure: BackendDeparture): void {
    const models = this.modelsByBackend.get(backend.id) ?? [];
    this.modelsByBackend.delete(backend.id);
    this.parentsByBackend.delete(backend.id);
    this.drained.delete(backend.id);
    this.cancelModelsRetry(backend);
    this.options.onRemoved?.(backend, models, departure);
  }

  private async readModels(backends: readonly Backend[]): Promise<void> {
    const discovered = backends.filter((backend) => backend.configuredModels === null);
    if (discovered.length === 0) return;
    await Promise.all(
      discovered.map(async (backend) => {
        try {
          const listing = await this.options.fetchModels(backend);
          const models = 'ids' in listing ? listing.ids : listing;
          // The backend may have left (or been replaced) while its models were being read.
          if (this.get(backend.id) === backend) {
            this.modelsByBackend.set(backend.id, models);
            if ('parents' in listing) this.parentsByBackend.set(backend.id, listing.parents);
            this.answeredModels.add(backend);
            this.cancelModelsRetry(backend);
          }
        } catch (error) {
          if (this.answeredModels.has(backend)) this.options.onRefreshError?.(backend, error, 0);
          else {
            this.scheduleModelsRetry(backend);
            this.options.onRefreshError?.(backend, error, this.modelsRetries.get(backend)?.failures ?? 1);
          }
        }
      }),
    );
    this.rebuildPools();
  }

  /**
   * Asks a pending backend again after the backoff, unless a retry is already pending (the
   * periodic refresh may fail for it too), it left, or the registry stopped.
   */
  private scheduleModelsRetry(backend: Backend): void {
    if (this.stopped || this.get(backend.id) !== backend) return;
    let retry = this.modelsRetries.get(backend);
    if (retry === undefined) {
      retry = { failures: 0, timer: null };
      this.modelsRetries.set(backend, retry);
    }
    if (retry.timer !== null) return;
    retry.failures += 1;
    const pending = retry;
    const delayMs = modelsRetryDelayMs(
      retry.failures,
      this.options.random ?? Math.random,
      this.options.modelsRetryBackoff ?? DEFAULT_MODELS_RETRY_BACKOFF,
    );
    retry.timer = (this.options.timers ?? NODE_TIMERS).set(() => {
      pending.timer = null;
      void this.readModels([backend]);
    }, delayMs);
  }

  private cancelModelsRetry(backend: Backend): void {
    const retry = this.modelsRetries.get(backend);
    if (retry === undefined) return;
    if (retry.timer !== null) (this.options.timers ?? NODE_TIMERS).clear(retry.timer);
    this.modelsRetries.delete(backend);
  }

  private rebuildPools(): void {
    const pools = new Map<string, Backend[]>();
    const served = new Set<string>();
    for (const backend of this.all) {
      for (const model of this.modelsByBackend.get(backend.id) ?? []) {
        served.add(model);
        if (this.drained.has(backend.id)) continue;
        let pool = pools.get(model);
        if (!pool) {
          pool = [];
          pools.set(model, pool);
        }
        pool.push(backend);
      }
    }
    this.pools = pools;
    this.served = served;
    const bases = new Map<string, string>();
    for (const backend of this.all)
      for (const [adapter, base] of this.parentsByBackend.get(backend.id) ?? []) bases.set(adapter, base);
    this.bases = bases;
  }
}

function basePathOf(url: URL): string {
  return url.pathname.replace(/\/+$/, '').replace(/\/v1$/, '');
}

/** Whether a spec points where the backend runs (same origin and API path). */
function isSamePlace(backend: Backend, spec: BackendSpec): boolean {
  const url = new URL(spec.url);
  return url.origin === backend.origin && basePathOf(url) === backend.basePath;
}

/** Whether a spec describes the backend as it runs: same place, weight, configured models and ranks. */
function isSameBackend(backend: Backend, spec: BackendSpec): boolean {
  const models = spec.models ?? null;
  return (
    isSamePlace(backend, spec) &&
    sameDataParallel(backend.dataParallel, spec.dataParallel) &&
    JSON.stringify(backend.kvEvents) === JSON.stringify(spec.kvEvents ?? null) &&
    backend.role === (spec.role ?? 'both') &&
    backend.bootstrapPort === (spec.bootstrapPort ?? null) &&
    spec.weight === backend.info.weight &&
    (models === null
      ? backend.configuredModels === null
      : backend.configuredModels !== null && models.join('\u0000') === backend.configuredModels.join('\u0000'))
  );
}

/** A spec as the registry holds it: one backend, or one rank of a data-parallel engine. */
interface RoutedSpec extends BackendSpec {
  readonly id: string;
  readonly engineId?: BackendId;
  readonly rank?: DataParallelRank;
}

/** A member of the set as the backends it is routed as: itself, or one per data-parallel rank. */
function routedMembersOf(member: BackendSetMember): { spec: RoutedSpec; drained: boolean }[] {
  const ranks = ranksOf(member.spec.dataParallel);
  if (ranks === null) return [member];
  return ranks.map((rank) => ({
    spec: { ...member.spec, id: rankIdOf(member.spec.id, rank.global), engineId: member.spec.id, rank },
    drained: member.drained,
  }));
}

/** The ids a spec's ranks take (none without data parallelism). */
function routedIdsOf(spec: BackendSpec): BackendId[] {
  const engineId = backendIdOf(spec);
  return (ranksOf(spec.dataParallel) ?? []).map((rank) => rankIdOf(engineId, rank.global));
}
