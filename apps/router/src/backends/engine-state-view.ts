import type { BackendState, LoraAdapters } from '@kvroute/protocols';
import type { BackendId, EngineLoad } from '@kvroute/routing';

/** Where the health poller's published states come from (`RedisBackendStateStore` in production). */
export interface BackendStateSource {
  readAll(): Promise<BackendState[]>;
  subscribe(options: {
    readonly onState: (state: BackendState) => void;
    readonly onError?: (error: unknown) => void;
  }): {
    readonly ready: Promise<boolean>;
    stop(): Promise<void>;
  };
}

export interface EngineStateViewOptions {
  readonly source: BackendStateSource;
  /** A state scraped longer ago than this is unknown: neither healthy nor unhealthy, its load unread. */
  readonly maxAgeMs: number;
  /** How often the whole set is read again (pub/sub delivers at most once; this bounds a lost message). */
  readonly refreshMs: number;
  readonly nowMs: () => number;
  readonly onError?: (error: unknown) => void;
}

/** What the router knows of a backend from its engine, at one instant. */
export type EngineVerdict =
  /** No fresh state: the poller does not run, has not scraped it yet, or its last scrape is too old. */
  | { readonly kind: 'unknown' }
  | { readonly kind: 'healthy'; readonly load: EngineLoad | null }
  | { readonly kind: 'unhealthy' };

/**
 * Called once per engine restart the health poller published (`BackendState.restartedAtMs` moving
 * forward): the backend's cache is empty.
 */
export type RestartListener = (backendId: BackendId, restartedAtMs: number) => void;

const UNKNOWN: EngineVerdict = { kind: 'unknown' };
const UNHEALTHY: EngineVerdict = { kind: 'unhealthy' };

/**
 * The router's live copy of the backends' published states: read once at start, then kept current by
 * pub/sub and a periodic full read, so the request path never waits on Redis for it. Stale states are
 * unknown, not idle: a poller that stopped must not make a backend look empty or dead.
 *
 * It also tells the router of engine restarts (`followRestarts`): a state whose `restartedAtMs` is newer
 * than the last one taken for its backend is one restart, taken once whether it came by pub/sub or a
 * full read. Restarts published before this replica started following are the business of the replicas
 * that were up then, except those within `maxAgeMs` before its start (a replica starting just after a
 * restart handles it too: the forget is idempotent).
 */
export class EngineStateView {
  /** Per backend: its newest state, and the load the policies read, derived once when it arrives. */
  private readonly states = new Map<BackendId, { readonly state: BackendState; readonly load: EngineLoad | null }>();
  private subscription: { stop(): Promise<void> } | null = null;
  private timer: NodeJS.Timeout | null = null;
  /** Per backend: the newest restart taken (ms, the poller's clock). */
  private readonly restarts = new Map<BackendId, number>();
  /** Restarts at or before this are not taken (set at start: see the class comment). */
  private restartHorizonMs = Number.POSITIVE_INFINITY;
  private restartListener: RestartListener | null = null;

  constructor(private readonly options: EngineStateViewOptions) {}

  /** Subscribes (not awaited: a Redis that is down must not hold up the router's start) and reads once. */
  async start(): Promise<void> {
    this.restartHorizonMs = this.options.nowMs() - this.options.maxAgeMs;
    this.subscription = this.options.source.subscribe({
      onState: (state) => this.accept(state),
      onError: this.options.onError,
    });
    await this.refresh();
    this.timer = setInterval(() => void this.refresh(), this.options.refreshMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.subscription?.stop();
    this.subscription = null;
  }

  /** Reads every published state; a failure keeps the copy as it is (its states age into unknown). */
  async refresh(): Promise<void> {
    try {
      for (const state of await this.options.source.readAll()) this.accept(state);
    } catch (error) {
      this.options.onError?.(error);
    }
  }

  /**
   * Calls `listener` for every restart taken so far (those that arrived before it was given: the first
   * read happens at start, before the caller may be ready), then once for each new one. One listener.
   */
  followRestarts(listener: RestartListener): void {
    this.restartListener = listener;
    for (const [backendId, restartedAtMs] of this.restarts) this.tellRestart(backendId, restartedAtMs);
  }

  /** Runs on every try of every request: lookups only, nothing allocated. */
  /** When the backend's engine last restarted as the poller published it (wall ms; null: none seen). */
  lastRestartMs(backendId: BackendId): number | null {
    return this.restarts.get(backendId) ?? null;
  }

  verdict(backendId: BackendId): EngineVerdict {
    const known = this.states.get(backendId);
    if (known === undefined || this.options.nowMs() - known.state.scrapedAtMs > this.options.maxAgeMs) return UNKNOWN;
    return known.state.healthy ? { kind: 'healthy', load: known.load } : UNHEALTHY;
  }

  /** The LoRA adapters the engine runs and waits for, as last published, while fresh; null: unknown. */
  loraAdapters(backendId: BackendId): LoraAdapters | null {
    const known = this.states.get(backendId);
    if (known === undefined || this.options.nowMs() - known.state.scrapedAtMs > this.options.maxAgeMs) return null;
    return known.state.loraAdapters;
  }

  /** Keeps the newest state per backend: a late pub/sub message must not undo a fresher full read. */
  private accept(state: BackendState): void {
    const known = this.states.get(state.backendId);
    if (known !== undefined && state.scrapedAtMs < known.state.scrapedAtMs) return;
    const { kvUsage, running, waiting } = state;
    // The queue figures are the load; KV usage may be missing (llama.cpp's newer metrics) and stays null.
    const load =
      running === null || waiting === null
        ? null
        : { kvUsage, kvCapacityTokens: state.kvCapacityTokens, running, waiting };
    this.states.set(state.backendId, { state, load });
    const { restartedAtMs } = state;
    if (restartedAtMs !== null && restartedAtMs > (this.restarts.get(state.backendId) ?? this.restartHorizonMs)) {
      this.restarts.set(state.backendId, restartedAtMs);
      this.tellRestart(state.backendId, restartedAtMs);
    }
  }

  private tellRestart(backendId: BackendId, restartedAtMs: number): void {
    try {
      this.restartListener?.(backendId, restartedAtMs);
    } catch (error) {
      this.options.onError?.(error);
    }
  }
}
