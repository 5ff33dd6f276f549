import { randomUUID } from 'node:crypto';
import type { FastifyBaseLogger } from 'fastify';
import type { AdapterLoadBook, AdapterLoadClaim, AdapterLoadTimes } from '@kvroute/redis-store';
import type { Backend } from '../backends/backend-registry';
import type { UpstreamPools } from '../proxy/upstream-pool';

/**
 * Loading LoRA adapters on demand (issue 33; opt-in: the adapters an operator lists in `loraAdapters`). An adapter of
 * that list may be sent to any backend of its base model: where the chosen backend does not have it, one router
 * replica loads it there first (`POST /v1/load_lora_adapter`, vLLM's runtime endpoint, on with
 * `VLLM_ALLOW_RUNTIME_LORA_UPDATING`), the others wait for that load instead of making their own (a claim in Redis:
 * adapter-load.lua). Loads on one backend are spaced (`spacingMs`); a load that fails or times out keeps the adapter
 * off that backend for `unavailableMs`, and the request's try goes to another backend (or, none left, 503 with
 * Retry-After). With `maxAdaptersPerBackend`, a backend holding that many adapters first unloads its coldest one
 * (not running, sent nothing for longest). Tenants never reach the engines' load endpoints: the request path refuses
 * them (pipeline/passthrough-paths.ts ENGINE_CONTROL_PATHS).
 */
export interface LoadableAdapter {
  readonly name: string;
  /** Where the engine reads it (`lora_path`). */
  readonly path: string;
  /** Its base model: the pool that serves it. */
  readonly base: string;
}

export interface AdapterLoaderDeps {
  readonly adapters: readonly LoadableAdapter[];
  readonly book: AdapterLoadBook;
  readonly upstreams: Pick<UpstreamPools, 'for' | 'authorizationOf'>;
  readonly times: AdapterLoadTimes;
  /** A backend holding this many adapters unloads its coldest before a load (0: never unloads). */
  readonly maxAdaptersPerBackend: number;
  /** The adapters a backend serves now as far as this replica knows (its /v1/models, and this replica's loads). */
  readonly adaptersOn: (backend: Backend) => readonly string[];
  /** Reads the backend's /v1/models again now (adaptersOn follows). */
  readonly refreshModelsOf: (backend: Backend) => Promise<void>;
  /** Whether the engine runs `adapter` now (the poller's residency). */
  readonly runs: (backend: Backend, adapter: string) => boolean;
  /** When this replica last sent `adapter` to `backend` (nowMs; -Infinity: never). */
  readonly lastSentMs: (adapter: string, backend: Backend) => number;
  readonly nowMs: () => number;
  readonly sleep: (ms: number) => Promise<void>;
  readonly logger: FastifyBaseLogger;
  readonly metrics: { recordAdapterLoad(backendId: string, outcome: AdapterLoadOutcome): void };
}

export type AdapterLoadOutcome = 'loaded' | 'failed' | 'unloaded';

/** The share of a claim's time its unload and load may take (the rest: settling it before it expires). */
const CLAIM_WORK_SHARE = 0.9;
/** How often a replica waiting for another's load looks again, ms. */
const CLAIM_POLL_MS = 50;
/** A replica told by the fleet's book that an adapter is off a backend avoids it this long before asking again, ms. */
const CLAIM_OFF_HINT_MS = 5_000;

export class AdapterLoader {
  readonly #byName: ReadonlyMap<string, LoadableAdapter>;
  /** backend id → adapters this replica loaded there (until it unloads them). */
  readonly #loadedHere = new Map<string, Set<string>>();
  /** adapter \0 backend id → until when (nowMs) a failed load keeps it off there, as this replica learnt it. */
  readonly #offUntil = new Map<string, number>();

  constructor(private readonly deps: AdapterLoaderDeps) {
    this.#byName = new Map(deps.adapters.map((adapter) => [adapter.name, adapter]));
  }

  /** The adapter of that name the router may load; undefined: none. */
  loadable(name: string): LoadableAdapter | undefined {
    return this.#byName.get(name);
  }

  /** Every loadable adapter. */
  get adapters(): readonly LoadableAdapter[] {
    return this.deps.adapters;
  }

  /** Whether `backend` has `adapter` as far as this replica knows without asking (its models, its own loads). */
  holds(backend: Backend, adapter: string): boolean {
    return this.#loadedHere.get(backend.id)?.has(adapter) === true || this.deps.adaptersOn(backend).includes(adapter);
  }

  /** Whether a failed load keeps `adapter` off `backend` now, as far as this replica knows. */
  isOff(backend: Backend, adapter: string): boolean {
    const key = `${adapter}\u0000${backend.id}`;
    const until = this.#offUntil.get(key);
    if (until === undefined) return false;
    if (until > this.deps.nowMs()) return true;
    this.#offUntil.delete(key);
    return false;
  }

  /** The backends any replica loaded `adapter` onto, or is loading it onto (Redis); empty when the book cannot say. */
  async loadedOn(adapter: LoadableAdapter): Promise<ReadonlySet<string>> {
    try {
      return await this.deps.book.loadedOn(adapter.base, adapter.name);
    } catch (error) {
      this.deps.logger.warn({ err: error, adapter: adapter.name }, 'where adapters are loaded could not be read');
      return new Set();
    }
  }

  /**
   * Makes sure `backend` has `adapter` before a request goes there: true when it has it (already, or loaded now by
   * this replica or another); false when it cannot have it now (a failed load, loads too close, a claim that outlived
   * the timeout, the client gone): the try goes elsewhere.
   */
  async ensureOn(adapter: LoadableAdapter, backend: Backend, signal: AbortSignal): Promise<boolean> {
    if (this.holds(backend, adapter.name)) return true;
    const { book, times } = this.deps;
    const token = randomUUID();
    const deadline = this.deps.nowMs() + times.claimMs;
    for (;;) {
      let claim: AdapterLoadClaim;
      try {
        claim = await book.claim(adapter.base, adapter.name, backend.id, token, times);
      } catch (error) {
        this.deps.logger.warn({ err: error, adapter: adapter.name, backend: backend.id }, 'adapter load claim failed');
        return false;
      }
      if (claim === 'loaded') return true;
      if (claim === 'unavailable')
        this.#offUntil.set(`${adapter.name}\u0000${backend.id}`, this.deps.nowMs() + CLAIM_OFF_HINT_MS);
      if (claim === 'claimed') return this.load(adapter, backend, token);
      if (claim !== 'busy' || signal.aborted || this.deps.nowMs() >= deadline) return false;
      await this.deps.sleep(CLAIM_POLL_MS);
    }
  }

  /**
   * `backend` answered 404 to `adapter`'s request, which the router believed it had (it restarted, or someone
   * unloaded it). Its models are read again: only when they do not list the adapter (a 404 about something else,
   * a stored response's id, must not unload anything) this replica and the fleet's book forget it there, so the next
   * request loads it again.
   */
  async verifyLost(adapter: LoadableAdapter, backend: Backend): Promise<void> {
    await this.deps.refreshModelsOf(backend);
    if (this.deps.adaptersOn(backend).includes(adapter.name)) return;
    this.#loadedHere.get(backend.id)?.delete(adapter.name);
    this.deps.logger.warn(
      { adapter: adapter.name, backend: backend.id },
      'the engine does not have an adapter the router loaded there: forgotten, the next request loads it again',
    );
    await this.deps.book
      .unloaded(adapter.base, adapter.name, backend.id)
      .catch((error: unknown) => this.deps.logger.warn({ err: error }, 'adapter unload could not be recorded'));
  }

  /** This replica's claimed load: the coldest adapter unloaded first if the backend is full, then the load. */
  private async load(adapter: LoadableAdapter, backend: Backend, token: string): Promise<boolean> {
    const { book, times } = this.deps;
    // The unload and the load end before the claim does (another replica may take it over then).
    const deadlineMs = this.deps.nowMs() + times.claimMs * CLAIM_WORK_SHARE;
    await this.unloadColdest(adapter, backend, deadlineMs);
    const loaded = await this.post(
      backend,
      '/v1/load_lora_adapter',
      { lora_name: adapter.name, lora_path: adapter.path },
      deadlineMs,
    );
    this.deps.metrics.recordAdapterLoad(backend.id, loaded ? 'loaded' : 'failed');
    if (loaded) {
      setOf(this.#loadedHere, backend.id).add(adapter.name);
    } else {
      this.#offUntil.set(`${adapter.name}\u0000${backend.id}`, this.deps.nowMs() + times.unavailableMs);
      this.deps.logger.warn(
        { adapter: adapter.name, backend: backend.id, offForMs: times.unavailableMs },
        'adapter load failed: the adapter is kept off this backend for a while',
      );
    }
    await book
      .settle(adapter.base, adapter.name, backend.id, token, loaded ? 'loaded' : 'failed', this.deps.nowMs(), times)
      .catch((error: unknown) => this.deps.logger.warn({ err: error }, 'adapter load could not be recorded'));
    // What the backend lists now (the adapter in, the unloaded one out), not at the next periodic refresh.
    void this.deps.refreshModelsOf(backend);
    return loaded;
  }

  /** With `maxAdaptersPerBackend` reached on `backend`: unloads the loadable adapter there that is coldest. */
  private async unloadColdest(adapter: LoadableAdapter, backend: Backend, deadlineMs: number): Promise<void> {
    const max = this.deps.maxAdaptersPerBackend;
    if (max === 0) return;
    const listed = this.deps.adaptersOn(backend);
    // Already there (a load answered 404 by mistake, or another replica's): nothing to make room for.
    if (listed.includes(adapter.name)) return;
    const held = new Set([...listed, ...(this.#loadedHere.get(backend.id) ?? [])]);
    if (held.size < max) return;
    // Only adapters this router may load again, and none the engine is running.
    const candidates = [...held].filter((name) => this.#byName.has(name) && !this.deps.runs(backend, name));
    candidates.sort((a, b) => this.deps.lastSentMs(a, backend) - this.deps.lastSentMs(b, backend));
    const coldest = candidates[0];
    if (coldest === undefined) return;
    const unloaded = await this.post(backend, '/v1/unload_lora_adapter', { lora_name: coldest }, deadlineMs);
    if (!unloaded) return;
    this.#loadedHere.get(backend.id)?.delete(coldest);
    this.deps.metrics.recordAdapterLoad(backend.id, 'unloaded');
    await this.deps.book
      .unloaded(adapter.base, coldest, backend.id)
      .catch((error: unknown) => this.deps.logger.warn({ err: error }, 'adapter unload could not be recorded'));
  }

  /** POSTs an engine control call by `deadlineMs`; true on 200 (a load of an adapter already there answers 400 "already loaded": true). */
  private async post(backend: Backend, path: string, body: object, deadlineMs: number): Promise<boolean> {
    const authorization = this.deps.upstreams.authorizationOf(backend);
    try {
      const response = await this.deps.upstreams.for(backend).request({
        method: 'POST',
        path: backend.basePath + path,
        headers: { 'content-type': 'application/json', ...(authorization === null ? {} : { authorization }) },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(Math.max(1, deadlineMs - this.deps.nowMs())),
      });
      const text = await response.body.text();
      return (
        response.statusCode === 200 || (response.statusCode === 400 && /already been loaded|already loaded/i.test(text))
      );
    } catch (error) {
      this.deps.logger.warn({ err: error, backend: backend.id, path }, 'engine control call failed');
      return false;
    }
  }
}

/**
 * The book of a replica without Redis: its own claims, spacing and failures (one replica, so no other one to agree
 * with).
 */
export class LocalAdapterLoads implements AdapterLoadBook {
  readonly #claims = new Map<string, { token: string; untilMs: number }>();
  readonly #spacedUntil = new Map<string, number>();
  readonly #offUntil = new Map<string, number>();
  readonly #loaded = new Map<string, Set<string>>();
  /** base \0 adapter → backends a claimed load runs on. */
  readonly #loading = new Map<string, Set<string>>();

  constructor(private readonly nowMs: () => number) {}

  async claim(
    base: string,
    adapter: string,
    backendId: string,
    token: string,
    times: AdapterLoadTimes,
  ): Promise<AdapterLoadClaim> {
    const now = this.nowMs();
    const adapterKey = keyOf(base, adapter);
    const key = keyOf(base, adapter, backendId);
    if (this.#loaded.get(adapterKey)?.has(backendId)) return 'loaded';
    if ((this.#offUntil.get(key) ?? 0) > now) return 'unavailable';
    if ((this.#claims.get(key)?.untilMs ?? 0) > now) return 'busy';
    if (times.spacingMs > 0) {
      if ((this.#spacedUntil.get(backendId) ?? 0) > now) return 'spaced';
      this.#spacedUntil.set(backendId, now + times.spacingMs);
    }
    this.#claims.set(key, { token, untilMs: now + times.claimMs });
    setOf(this.#loading, adapterKey).add(backendId);
    return 'claimed';
  }

  async settle(
    base: string,
    adapter: string,
    backendId: string,
    token: string,
    outcome: 'loaded' | 'failed',
    nowMs: number,
    times: AdapterLoadTimes,
  ): Promise<void> {
    const adapterKey = keyOf(base, adapter);
    const key = keyOf(base, adapter, backendId);
    if (this.#claims.get(key)?.token === token) this.#claims.delete(key);
    this.#loading.get(adapterKey)?.delete(backendId);
    if (outcome === 'failed') {
      this.#offUntil.set(key, nowMs + times.unavailableMs);
      return;
    }
    this.#offUntil.delete(key);
    setOf(this.#loaded, adapterKey).add(backendId);
  }

  async unloaded(base: string, adapter: string, backendId: string): Promise<void> {
    this.#loaded.get(keyOf(base, adapter))?.delete(backendId);
  }

  async loadedOn(base: string, adapter: string): Promise<ReadonlySet<string>> {
    const key = keyOf(base, adapter);
    return new Set([...(this.#loaded.get(key) ?? []), ...(this.#loading.get(key) ?? [])]);
  }
}

/** The local book's map key of an adapter of a base model, or of its load on one backend (NUL-separated). */
function keyOf(...parts: string[]): string {
  return parts.join('\u0000');
}

function setOf<Value>(sets: Map<string, Set<Value>>, key: string): Set<Value> {
  let set = sets.get(key);
  if (set === undefined) sets.set(key, (set = new Set()));
  return set;
}
