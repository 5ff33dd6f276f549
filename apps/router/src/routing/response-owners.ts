import type { BackendId, ResponseOwnerStore } from '@kvroute/routing';
import { withDeadline } from './with-deadline';

export interface SharedResponseOwnersOptions {
  /** A Redis call slower than this counts as failed: the local map answers instead, ms. */
  readonly timeoutMs: number;
  /** A shared call failed (for a debug log line); the request goes on with the local map. */
  readonly onError: (error: unknown) => void;
  /** Whether Redis is known to be in trouble now (the routing state is degraded): the local map answers at once, no call waits out its deadline. */
  readonly sharedDown?: () => boolean;
}

/**
 * What a lookup found out:
 * - `found`: this backend stored it (in the shared map, or in this replica's);
 * - `absent`: the whole map was asked and does not know it (expired, never stored, another scope's);
 * - `unknown`: the shared map could not be asked (Redis failed, too slow, or degraded) and this
 *   replica's map does not know it: another replica may have learnt it. Callers must not take this for
 *   `absent` where that would be a final answer (a 404).
 */
export type OwnerLookup =
  | { readonly kind: 'found'; readonly backendId: BackendId }
  | { readonly kind: 'absent' }
  | { readonly kind: 'unknown' };

/** The response-owner map as the request path uses it: a three-way lookup besides the store's calls. */
export interface ResponseOwnerMap extends ResponseOwnerStore {
  lookup(scope: string, responseId: string): Promise<OwnerLookup>;
}

const ABSENT: OwnerLookup = { kind: 'absent' };
const UNKNOWN: OwnerLookup = { kind: 'unknown' };

/** A shared call's result: its value, or that it failed (error, deadline, or not made: Redis down). */
type SharedResult<T> = { readonly ok: true; readonly value: T } | { readonly ok: false };
const NOT_ASKED: SharedResult<never> = { ok: false };

/**
 * The response-owner map a router replica uses: the shared one (Redis, every replica's) over this
 * replica's local one (libs/routing InMemoryResponseOwners), under one interface.
 *
 * - remember: local always (free, and what answers while Redis is down), and shared. It rejects when
 *   the shared write did not happen (failed, too slow, or skipped while degraded): the id is then known
 *   to this replica only, which its caller reports (a warning and a counter).
 * - lookup: shared first; unknown there or failed → local, so an id learnt while Redis was down is
 *   still found on the replica that learnt it. A shared call that failed and a local miss make
 *   `unknown`, not `absent` (OwnerLookup).
 * - forget: both.
 *
 * While the routing state is degraded (`sharedDown`) Redis is not called at all. With no Redis (local
 * state mode) `shared` is null and the local map is the whole map: a local miss is `absent`.
 */
export class SharedResponseOwners implements ResponseOwnerMap {
  constructor(
    private readonly shared: ResponseOwnerStore | null,
    private readonly local: ResponseOwnerStore,
    private readonly options: SharedResponseOwnersOptions,
  ) {}

  async remember(scope: string, responseId: string, backendId: BackendId): Promise<void> {
    await this.local.remember(scope, responseId, backendId);
    if (this.shared === null) return;
    const asked = this.usesShared();
    const written = asked ? await this.withDeadline(this.shared.remember(scope, responseId, backendId)) : NOT_ASKED;
    if (!written.ok)
      throw new Error(
        asked
          ? 'the shared response-owner map did not take the write (failed or too slow)'
          : 'the shared response-owner map is not used while the routing state is degraded',
      );
  }

  async lookup(scope: string, responseId: string): Promise<OwnerLookup> {
    const shared =
      this.shared === null
        ? null
        : this.usesShared()
          ? await this.withDeadline(this.shared.ownerOf(scope, responseId))
          : NOT_ASKED;
    if (shared?.ok === true && shared.value !== null) return { kind: 'found', backendId: shared.value };
    const local = await this.local.ownerOf(scope, responseId);
    if (local !== null) return { kind: 'found', backendId: local };
    return shared === null || shared.ok ? ABSENT : UNKNOWN;
  }

  async ownerOf(scope: string, responseId: string): Promise<BackendId | null> {
    const found = await this.lookup(scope, responseId);
    return found.kind === 'found' ? found.backendId : null;
  }

  async forget(scope: string, responseId: string): Promise<void> {
    await this.local.forget(scope, responseId);
    if (this.shared !== null && this.usesShared()) await this.withDeadline(this.shared.forget(scope, responseId));
  }

  private usesShared(): boolean {
    return this.shared !== null && this.options.sharedDown?.() !== true;
  }

  /** The call's value, or not ok (reported) when it failed or took longer than the deadline (routing/with-deadline.ts). */
  private withDeadline<T>(call: Promise<T>): Promise<SharedResult<T>> {
    return withDeadline(call, this.options.timeoutMs, 'response-owner call').then(
      (value): SharedResult<T> => ({ ok: true, value }),
      (error: unknown) => {
        this.options.onError(error);
        return NOT_ASKED;
      },
    );
  }
}
