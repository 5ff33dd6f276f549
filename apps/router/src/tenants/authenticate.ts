import type { AuthFailureLimiter } from '../admin/auth-failure-limiter';
import { RouterError } from '../errors';
import { credentialOf, digestOfApiKey, type ApiKeyRole, type Limits } from './api-key';
import type { KeyLookup } from './key-directory';

/**
 * Who sent a request (docs/adr/0006, docs/security.md "Tenants"), decided in the admit stage before the
 * body is read:
 * - `none` (open mode): nobody in particular; no limits, no salt. Single-tenant and local use.
 * - `api-keys`: `Authorization: Bearer <key>` (or `x-api-key`), looked up by its SHA-256 in the key file
 *   and in Redis. A missing or unknown key is 401 and counts against the peer: past
 *   `maxAuthFailures` wrong keys in the window, the peer's unknown keys are 429 without a lookup (a
 *   flood of random keys costs no Redis call), while keys this replica already knows still pass (behind
 *   an L4 balancer every client may share one peer address).
 * - `gateway-header`: a gateway in front has authenticated the client and names its tenant in
 *   `identityHeader`; the router trusts it (only deploy this behind such a gateway). Missing: 401.
 */
export type AuthMode = 'none' | 'api-keys' | 'gateway-header';

export interface Identity {
  readonly tenant: string;
  /** The key's id (`gateway` for gateway identities). */
  readonly keyId: string;
  readonly role: ApiKeyRole;
  readonly keyLimits: Limits;
}

export interface AuthenticatorOptions {
  readonly mode: AuthMode;
  readonly keys: KeyLookup | null;
  /** Header a gateway names the tenant in (lower case). */
  readonly identityHeader: string;
  readonly failures: AuthFailureLimiter;
}

const TENANT_NAME = /^[A-Za-z0-9._:@-]{1,64}$/;

export class Authenticator {
  readonly #options: AuthenticatorOptions;

  constructor(options: AuthenticatorOptions) {
    this.#options = options;
  }

  get mode(): AuthMode {
    return this.#options.mode;
  }

  /** The request's identity; null in open mode. Throws 401, 429 or 503 RouterErrors. */
  async authenticate(
    headers: Readonly<Record<string, string | string[] | undefined>>,
    peer: string,
  ): Promise<Identity | null> {
    const { mode } = this.#options;
    if (mode === 'none') return null;
    if (mode === 'gateway-header') {
      const tenant = headers[this.#options.identityHeader];
      if (typeof tenant !== 'string' || !TENANT_NAME.test(tenant))
        throw unauthorized(`This router needs the ${this.#options.identityHeader} header its gateway sets.`);
      return { tenant, keyId: 'gateway', role: 'user', keyLimits: {} };
    }
    const blockedForSeconds = this.#options.failures.retryAfterSeconds(peer);
    const credential = credentialOf(headers);
    if (credential === null)
      return this.#refuse(peer, blockedForSeconds, 'You must send an API key (Authorization: Bearer <key>).');
    const found =
      this.#options.keys === null
        ? null
        : await this.#options.keys.lookup(digestOfApiKey(credential), blockedForSeconds !== null);
    if (found === 'unavailable') {
      if (blockedForSeconds !== null) throw rateLimited(blockedForSeconds);
      throw new RouterError('ROUTER_ERR_AUTH_UNAVAILABLE', 'API keys cannot be checked right now; retry.', {
        retryAfterSeconds: 1,
      });
    }
    if (found === null) return this.#refuse(peer, blockedForSeconds, 'Incorrect API key provided.');
    return { tenant: found.tenant, keyId: found.id, role: found.role, keyLimits: found };
  }

  #refuse(peer: string, blockedForSeconds: number | null, message: string): never {
    if (blockedForSeconds !== null) throw rateLimited(blockedForSeconds);
    this.#options.failures.recordFailure(peer);
    throw unauthorized(message);
  }
}

function unauthorized(message: string): RouterError {
  return new RouterError('ROUTER_ERR_INVALID_API_KEY', message);
}

function rateLimited(seconds: number): RouterError {
  return new RouterError(
    'ROUTER_ERR_AUTH_RATE_LIMITED',
    'Too many requests with a wrong API key from this address; retry later.',
    { retryAfterSeconds: seconds },
  );
}
