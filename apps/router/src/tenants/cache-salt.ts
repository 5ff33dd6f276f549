import { createHmac } from 'node:crypto';

/**
 * The `cache_salt` the router forwards for a tenant (docs/adr/0006): base64url of
 * HMAC-SHA256(secret, scope ‖ 0x00 ‖ the client's own salt), 43 characters of [A-Za-z0-9_-]. The same
 * salt goes into the routing text's first block, so the router's prefix index and the engine's cache
 * are both partitioned by tenant (or team): another tenant's guess of a prompt shares no block with it.
 * A client's own `cache_salt` still partitions within its tenant. Tenants never see each other's salt
 * and cannot compute it without the secret, which every replica must share (config `cacheSaltSecret`).
 */
export class CacheSalter {
  readonly #secret: Buffer;
  /** scope → salt, for requests without a salt of their own (the common case): one HMAC per scope. */
  readonly #plain = new Map<string, string>();

  constructor(secret: Buffer) {
    if (secret.length < 16) throw new RangeError('the cache salt secret must be at least 16 bytes');
    this.#secret = secret;
  }

  saltFor(scope: string, clientSalt: string | null): string {
    if (clientSalt === null) {
      const known = this.#plain.get(scope);
      if (known !== undefined) return known;
    }
    const salt = createHmac('sha256', this.#secret)
      .update(scope, 'utf8')
      .update('\u0000' + (clientSalt ?? ''), 'utf8')
      .digest('base64url');
    // Bounded: scopes are configured tenants and teams, or tenants of stored keys.
    if (clientSalt === null && this.#plain.size < 100_000) this.#plain.set(scope, salt);
    return salt;
  }
}
