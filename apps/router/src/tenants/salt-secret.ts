import type { FastifyBaseLogger } from 'fastify';
import { CacheSalter } from './cache-salt';

/** CacheSalter's least secret length. */
const MIN_SECRET_BYTES = 16;

/** Where the fleet shares its cache-salt secret (RedisApiKeyStore.sharedCacheSaltSecret). */
export interface SharedSaltSecret {
  /** The stored secret, or `candidate` stored now (SET NX) when there was none (`stored: true`). */
  sharedCacheSaltSecret(candidate: string): Promise<{ readonly secret: string; readonly stored: boolean }>;
}

export interface SaltSecretKeeperDeps {
  readonly shared: SharedSaltSecret;
  /** A new random secret, used only when neither Redis nor this replica has one. */
  readonly mint: () => string;
  readonly logger: FastifyBaseLogger;
}

/**
 * The cache-salt secret of a replica configured with none (no `cacheSaltSecret`, no `cacheSaltSecretFile`),
 * shared through Redis, where it is the only copy: a Redis restarted without persistence loses it, and the
 * next replica to start would mint another, so that one tenant's requests get two salts, two prefix
 * caches, and half their hits (docs/security.md "Rotating keys and the salt secret").
 *
 * - At start: the stored secret, or a new one stored (warned: either the fleet's first replica, or a
 *   Redis that lost its data while no replica had written it back yet).
 * - Every `check` (a timer in tenants-wiring.ts): a Redis that lost it gets this replica's back (SET NX),
 *   so replicas started afterwards salt as the running ones do.
 * - Redis holding another secret than this replica's (a replica that started in the window after a data
 *   loss and minted one; a replica that started while Redis was away): an error, once per change, and
 *   this replica adopts Redis's. Keeping its own would keep the fleet split for as long as this replica
 *   runs, and every replica started later would take Redis's anyway; adopting costs this replica's
 *   tenants one cold prefix each, once, and the fleet is back to one salt per tenant.
 */
export class SaltSecretKeeper {
  #secret: string | null = null;
  #salter: CacheSalter | null = null;
  #checking = false;
  /** A secret in Redis too short to use, already reported (logged once, not every check). */
  #refused: string | null = null;

  constructor(private readonly deps: SaltSecretKeeperDeps) {}

  /** The salter of the secret in use (null before `start`). */
  get salter(): CacheSalter | null {
    return this.#salter;
  }

  async start(): Promise<void> {
    const own = this.deps.mint();
    try {
      const { secret, stored } = await this.deps.shared.sharedCacheSaltSecret(own);
      if (stored)
        this.deps.logger.warn(
          'cache salts: no secret in Redis, this replica minted one and stored it there (expected for the ' +
            "fleet's first replica; otherwise Redis lost its data, and replicas still holding the old secret " +
            'will adopt this one: one cold cache per tenant). Set cacheSaltSecretFile to keep it out of Redis',
        );
      this.#use(secret);
    } catch (error) {
      // Redis away, or holding a secret too short to use (CacheSalter refuses it): this replica's own.
      this.deps.logger.warn(
        { err: error },
        'cache salts: Redis could not share the secret at start; this replica uses its own until Redis ' +
          'answers, then the shared one (set cacheSaltSecretFile to avoid this)',
      );
      this.#use(own);
    }
  }

  /** Puts this replica's secret back into a Redis that lost it, or adopts the one Redis holds. Never throws. */
  async check(): Promise<void> {
    const current = this.#secret;
    if (current === null || this.#checking) return;
    this.#checking = true;
    try {
      const { secret, stored } = await this.deps.shared.sharedCacheSaltSecret(current);
      if (stored) {
        this.deps.logger.warn(
          'cache salts: the secret was missing from Redis (restarted without persistence?); wrote this ' +
            "replica's back, so replicas started from now on salt as this one does",
        );
      } else if (secret !== current && Buffer.byteLength(secret, 'utf8') < MIN_SECRET_BYTES) {
        if (this.#refused !== secret)
          this.deps.logger.error(
            `cache salts: Redis holds a secret under ${MIN_SECRET_BYTES} bytes, which no replica can use; keeping this replica's`,
          );
        this.#refused = secret;
      } else if (secret !== current) {
        this.deps.logger.error(
          'cache salts: Redis holds another secret than this replica (one minted by a replica started after ' +
            "Redis lost its data, or while it was away); adopting Redis's: this replica's tenants start one cold " +
            'cache each. Set cacheSaltSecretFile, or run Redis with persistence, to avoid this',
        );
        this.#use(secret);
      }
    } catch {
      // Redis away: the secret in use stands, and the next check tries again.
    } finally {
      this.#checking = false;
    }
  }

  #use(secret: string): void {
    this.#secret = secret;
    this.#salter = new CacheSalter(Buffer.from(secret, 'utf8'));
  }
}
