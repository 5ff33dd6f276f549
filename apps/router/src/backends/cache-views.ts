import type { BackendId } from '@kvroute/routing';

/**
 * How the router knows what a backend's KV cache holds (`/readyz` `cacheView`,
 * `kvroute_router_cache_view`):
 * - `events`: the engine publishes its KV events and the health poller's indexer follows them into the
 *   shared index (stored and evicted blocks as they happen);
 * - `closed-loop`: the index is the router's own record, corrected by every response's `cached_tokens`;
 * - `open-loop`: the router's own record, unchecked (the engine reports no cached tokens).
 * The learn stage checks `cached_tokens` against the predictions in every view, so precision stays measured.
 */
export type CacheView = 'events' | 'closed-loop' | 'open-loop';

export const CACHE_VIEWS: readonly CacheView[] = ['events', 'closed-loop', 'open-loop'];

export interface EventStreamsWatchOptions {
  /** The backends (rank ids) whose streams the indexer follows now, of those asked (a Redis read). */
  readonly read: (backendIds: readonly BackendId[]) => Promise<ReadonlySet<BackendId>>;
  /** The backends to ask about: the registry's, now. */
  readonly backendIds: () => readonly BackendId[];
  /** How often the streams are read again, ms. */
  readonly intervalMs: number;
  readonly onError?: (error: unknown) => void;
}

/**
 * Which backends' KV events reach the shared index, read from Redis every `intervalMs` (the indexer's
 * subscriptions: readFollowedKvEventStreams). A failed read keeps the last answer.
 */
export class EventStreamsWatch {
  private followed: ReadonlySet<BackendId> = new Set();
  private timer: NodeJS.Timeout | null = null;

  constructor(private readonly options: EventStreamsWatchOptions) {}

  isFollowed(backendId: BackendId): boolean {
    return this.followed.has(backendId);
  }

  /** Reads once, then every intervalMs until stop(). */
  async start(): Promise<void> {
    await this.refresh();
    this.timer = setInterval(() => void this.refresh(), this.options.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }

  async refresh(): Promise<void> {
    try {
      this.followed = await this.options.read(this.options.backendIds());
    } catch (error) {
      this.options.onError?.(error);
    }
  }
}

/** A backend's cache view from what the router knows of it. */
export function cacheViewOf(eventsFollowed: boolean, reportsCachedTokens: boolean): CacheView {
  if (eventsFollowed) return 'events';
  return reportsCachedTokens ? 'closed-loop' : 'open-loop';
}
