import type { BackendId } from '../types';

/**
 * Which backend holds a stored Responses API response (`store: true`): engines keep responses in their
 * own memory, so a follow-up naming it (`previous_response_id`) and `GET`/`DELETE /v1/responses/{id}`
 * must go back to that backend. Entries are per cache scope (a tenant's or team's, '' in open mode):
 * a lookup in another scope finds nothing, so no tenant can reach another's response through the
 * router. Entries expire (`ttlMs`): the engine's own store is not forever either, and a stale entry
 * costs only a prefix-routed fallback.
 */
export interface ResponseOwnerStore {
  /** Records that `backendId` stored `responseId` (overwrites). */
  remember(scope: string, responseId: string, backendId: BackendId): Promise<void>;
  /** The backend that stored `responseId` in `scope`; null when unknown or expired. */
  ownerOf(scope: string, responseId: string): Promise<BackendId | null>;
  /** Forgets `responseId` (after a successful DELETE). */
  forget(scope: string, responseId: string): Promise<void>;
}

export interface InMemoryResponseOwnersOptions {
  /** How long an entry lives after it was remembered, ms. */
  readonly ttlMs: number;
  /** Most entries kept; past it the oldest goes (a router's memory is bounded whatever clients do). */
  readonly maxEntries: number;
  readonly nowMs: () => number;
}

/**
 * The map in this replica's memory: the whole map without Redis, and the fallback while Redis is
 * down. A Map keeps insertion order, so the oldest entry is the first (remember re-inserts).
 */
export class InMemoryResponseOwners implements ResponseOwnerStore {
  private readonly entries = new Map<string, { readonly backendId: BackendId; readonly expiresAtMs: number }>();

  constructor(private readonly options: InMemoryResponseOwnersOptions) {}

  get size(): number {
    return this.entries.size;
  }

  async remember(scope: string, responseId: string, backendId: BackendId): Promise<void> {
    const key = keyOf(scope, responseId);
    this.entries.delete(key);
    this.entries.set(key, { backendId, expiresAtMs: this.options.nowMs() + this.options.ttlMs });
    while (this.entries.size > this.options.maxEntries) {
      const oldest = this.entries.keys().next().value as string;
      this.entries.delete(oldest);
    }
  }

  async ownerOf(scope: string, responseId: string): Promise<BackendId | null> {
    const key = keyOf(scope, responseId);
    const entry = this.entries.get(key);
    if (entry === undefined) return null;
    if (entry.expiresAtMs <= this.options.nowMs()) {
      this.entries.delete(key);
      return null;
    }
    return entry.backendId;
  }

  async forget(scope: string, responseId: string): Promise<void> {
    this.entries.delete(keyOf(scope, responseId));
  }
}

/** NUL cannot be in a response id (RESPONSE_ID_PATTERN), so scope and id never run together. */
function keyOf(scope: string, responseId: string): string {
  return `${scope}\u0000${responseId}`;
}
