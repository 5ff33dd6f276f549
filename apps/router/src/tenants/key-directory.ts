import type { FastifyBaseLogger } from 'fastify';
import { ApiKeyRecord } from './api-key';

/**
 * Where a request's key is looked up, by the SHA-256 of its secret (api-key.ts). Two sources, in order:
 * the key file (read at start, no Redis needed), then the keys in Redis (added through the admin API,
 * shared by every replica). Redis lookups are cached per replica for `cacheMs`, so a busy key costs one
 * Map read; a revoked key therefore stops working on every replica within `cacheMs`. While Redis is
 * unreachable a cached record is used past its expiry (the key was valid a moment ago), and a key never
 * seen by this replica cannot be checked: 503 with Retry-After, not 401.
 */
export interface KeyLookup {
  /**
   * The record, null for an unknown key, or `unavailable` when the key's source cannot answer now.
   * `cachedOnly`: answer from memory or not at all (`unavailable`): for peers that sent too many wrong keys.
   */
  lookup(digest: string, cachedOnly?: boolean): Promise<ApiKeyRecord | null | 'unavailable'>;
}

/** The keys of a key file: digest → record (apps/router docs/security.md, "Key file"). */
export class FileKeys implements KeyLookup {
  readonly #records: ReadonlyMap<string, ApiKeyRecord>;

  constructor(records: ReadonlyMap<string, ApiKeyRecord>) {
    this.#records = records;
  }

  async lookup(digest: string): Promise<ApiKeyRecord | null> {
    return this.#records.get(digest) ?? null;
  }

  get size(): number {
    return this.#records.size;
  }
}

/** What the Redis source needs of the store (libs/redis-store RedisApiKeyStore). */
export interface StoredKeys {
  lookup(digest: string): Promise<string | null>;
}

export interface CachedRedisKeysOptions {
  readonly store: StoredKeys;
  /** How long a looked-up record (or an unknown digest) is trusted without asking Redis again, ms. */
  readonly cacheMs: number;
  /** Most digests remembered; the oldest go first (unknown digests are hostile input: bounded). */
  readonly maxEntries: number;
  /** Monotonic ms. */
  readonly nowMs: () => number;
  readonly logger?: FastifyBaseLogger;
}

interface CacheEntry {
  readonly record: ApiKeyRecord | null;
  readonly expiresAtMs: number;
}

export class CachedRedisKeys implements KeyLookup {
  readonly #options: CachedRedisKeysOptions;
  readonly #cache = new Map<string, CacheEntry>();

  constructor(options: CachedRedisKeysOptions) {
    this.#options = options;
  }

  async lookup(digest: string, cachedOnly = false): Promise<ApiKeyRecord | null | 'unavailable'> {
    const cached = this.#cache.get(digest);
    const now = this.#options.nowMs();
    if (cached !== undefined && (cached.expiresAtMs > now || cachedOnly)) return cached.record;
    if (cachedOnly) return 'unavailable';
    let stored: string | null;
    try {
      stored = await this.#options.store.lookup(digest);
    } catch {
      // Redis is away: a key that was valid a moment ago stays valid (an unknown one stays unknown).
      return cached === undefined ? 'unavailable' : cached.record;
    }
    const record = stored === null ? null : this.#parse(stored);
    this.#remember(digest, { record, expiresAtMs: now + this.#options.cacheMs });
    return record;
  }

  /** A record Redis holds that is not a valid record (someone wrote it by hand): no key. */
  #parse(stored: string): ApiKeyRecord | null {
    try {
      const parsed = ApiKeyRecord.safeParse(JSON.parse(stored));
      if (parsed.success) return parsed.data;
    } catch {
      // fall through
    }
    this.#options.logger?.warn('an API key record in Redis is not valid; the key is refused');
    return null;
  }

  #remember(digest: string, entry: CacheEntry): void {
    this.#cache.delete(digest);
    this.#cache.set(digest, entry);
    if (this.#cache.size > this.#options.maxEntries) {
      const oldest = this.#cache.keys().next().value;
      if (oldest !== undefined) this.#cache.delete(oldest);
    }
  }
}

/** The first source that knows the key wins; `unavailable` only when no source knows it and one could not answer. */
export function keyLookupChain(sources: readonly KeyLookup[]): KeyLookup {
  return {
    async lookup(digest, cachedOnly) {
      let unavailable = false;
      for (const source of sources) {
        const found = await source.lookup(digest, cachedOnly);
        if (found === 'unavailable') unavailable = true;
        else if (found !== null) return found;
      }
      return unavailable ? 'unavailable' : null;
    },
  };
}
