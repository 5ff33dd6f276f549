import type { BackendId, ResponseOwnerStore } from '@kvroute/routing';

export interface SharedResponseOwnersOptions {
  /** A Redis call slower than this counts as failed: the local map answers instead, ms. */
  readonly timeoutMs: number;
  /** A shared call failed (for a debug log line); the request goes on with the local map. */
  readonly onError: (error: unknown) => void;
  /** Whether Redis is known to be in trouble now (the routing state is degraded): the local map answers at once, no call waits out its deadline. */
  readonly sharedDown?: () => boolean;
}

/**
 * The response-owner map a router replica uses: the shared one (Redis, every replica's) over this
 * replica's local one (libs/routing InMemoryResponseOwners), under one interface.
 *
 * - remember: local always (free, and what answers while Redis is down), and shared.
 * - ownerOf: shared first; unknown there or failed → local, so an id learnt while Redis was down is
 *   still found on the replica that learnt it.
 * - forget: both.
 *
 * A shared call never fails a request: an error or a call slower than `timeoutMs` is reported and
 * treated as "not known" (the request is prefix-routed: the fallback the map always has); while the
 * routing state is degraded (`sharedDown`) Redis is not called at all. With no Redis (local state
 * mode) `shared` is null and the local map is the whole map. A response remembered while Redis was
 * down stays in this replica's map only: other replicas prefix-route its follow-ups.
 */
export class SharedResponseOwners implements ResponseOwnerStore {
  constructor(
    private readonly shared: ResponseOwnerStore | null,
    private readonly local: ResponseOwnerStore,
    private readonly options: SharedResponseOwnersOptions,
  ) {}

  async remember(scope: string, responseId: string, backendId: BackendId): Promise<void> {
    await this.local.remember(scope, responseId, backendId);
    if (this.usesShared()) await this.withDeadline((this.shared as ResponseOwnerStore).remember(scope, responseId, backendId));
  }

  async ownerOf(scope: string, responseId: string): Promise<BackendId | null> {
    const shared = this.usesShared() ? await this.withDeadline((this.shared as ResponseOwnerStore).ownerOf(scope, responseId)) : null;
    return shared ?? (await this.local.ownerOf(scope, responseId));
  }

  async forget(scope: string, responseId: string): Promise<void> {
    await this.local.forget(scope, responseId);
    if (this.usesShared()) await this.withDeadline((this.shared as ResponseOwnerStore).forget(scope, responseId));
  }

  private usesShared(): boolean {
    return this.shared !== null && this.options.sharedDown?.() !== true;
  }

  /** The call's value, or undefined (reported) when it failed or took longer than the deadline. */
  private withDeadline<T>(call: Promise<T>): Promise<T | undefined> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.options.onError(new Error(`response-owner call took longer than ${this.options.timeoutMs} ms`));
        resolve(undefined);
      }, this.options.timeoutMs);
      call.then(
        (value) => {
          clearTimeout(timer);
          resolve(value);
        },
        (error: unknown) => {
          clearTimeout(timer);
          this.options.onError(error);
          resolve(undefined);
        },
      );
    });
  }
}
