/**
 * Client API keys in Redis (docs/adr/0006-tenants-keys-limits.md), shared by every router replica. Only
 * the SHA-256 of a secret is stored: whoever reads Redis learns which tenants exist, not a key to use.
 * Records are opaque JSON here; the router validates what it reads (Redis is not trusted to be well
 * formed). Adding and revoking change two hashes, so each is one script (change-api-keys.lua).
 */
import { apiKeyKeys, type ApiKeyKeys } from './keys';
import { runScript, SCRIPTS, type RedisClient } from './scripts';

const DIGEST = /^[0-9a-f]{64}$/;

export interface ApiKeyStoreOptions {
  readonly redis: RedisClient;
  /** Key namespace (keys.ts); the default `kvr:v1`. */
  readonly keyNamespace?: string;
}

export class RedisApiKeyStore {
  readonly #redis: RedisClient;
  readonly #keys: ApiKeyKeys;

  constructor(options: ApiKeyStoreOptions) {
    this.#redis = options.redis;
    this.#keys = apiKeyKeys(options.keyNamespace);
  }

  /** The record stored for a secret's digest (64 hex), or null. */
  async lookup(digest: string): Promise<string | null> {
    return this.#redis.hget(this.#keys.byDigest, digest);
  }

  /** Stores a new key; false when its id or digest exists already. */
  async add(id: string, digest: string, recordJson: string): Promise<boolean> {
    if (!DIGEST.test(digest)) throw new RangeError('an API key digest is 64 lower-case hex characters (SHA-256)');
    return (
      Number(
        await runScript(
          this.#redis,
          SCRIPTS.changeApiKeys,
          [this.#keys.byDigest, this.#keys.byId],
          ['add', id, digest, recordJson],
        ),
      ) === 1
    );
  }

  /** Revokes a key by id; false when there was no such key. */
  async revoke(id: string): Promise<boolean> {
    return (
      Number(
        await runScript(
          this.#redis,
          SCRIPTS.changeApiKeys,
          [this.#keys.byDigest, this.#keys.byId],
          ['revoke', id, '', ''],
        ),
      ) === 1
    );
  }

  /**
   * The fleet's shared cache-salt secret: `candidate` if none was stored (SET NX; `stored: true`: this call
   * put it there), else the stored one, so that every replica started without a configured secret derives
   * the same salts. A replica calls it again with the secret it uses, so that a Redis that lost its data
   * gets that secret back rather than a new one from the next replica to start.
   */
  async sharedCacheSaltSecret(candidate: string): Promise<{ readonly secret: string; readonly stored: boolean }> {
    if ((await this.#redis.set(this.#keys.cacheSaltSecret, candidate, 'NX')) === 'OK')
      return { secret: candidate, stored: true };
    const stored = await this.#redis.get(this.#keys.cacheSaltSecret);
    // Deleted between the two calls (an operator's DEL, a flush): the next call stores it again.
    if (stored === null) throw new Error('the shared cache-salt secret vanished between SET NX and GET');
    return { secret: stored, stored: false };
  }

  /** Every stored record (JSON), in no particular order; for the admin API's list. */
  async list(): Promise<string[]> {
    return this.#redis.hvals(this.#keys.byDigest);
  }
}
