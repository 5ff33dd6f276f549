import { type AuthFailureLimiter, limitedPeerOf } from '../admin/auth-failure-limiter';
import { RouterError } from '../errors';
import { credentialOf, digestOfApiKey, type ApiKeyRole, type Limits } from './api-key';
import type { KeyLookup } from './key-directory';

/**
 * Who sent a request (docs/adr/0006, docs/security.md "Tenants"), decided in the admit stage before the
 * body is read:
 * - `none` (open mode): nobody in particular; no limits, no salt. Single-tenant and local use.
 * - `api-keys`: `Authorization: Bearer <key>` (or `x-api-key`), looked up by its SHA-256 in the key file
 *   and in Redis. A missing or unknown key is 401 and counts against the client (the real client
 *   address behind a PROXY-protocol balancer, an IPv6 client by its /64: limitedPeerOf) and the key's
 *   first `KEY_PREFIX_CHARS` characters from that client:
 *   - the same wrong key sent again (a client with a revoked or mistyped key, retrying) counts against
 *     that key prefix only: past `maxAuthFailures` that prefix from that client is 429 without a lookup,
 *     and nobody else is affected, even clients sharing the address (a balancer without PROXY protocol);
 *   - each different wrong key (guessing) also counts against the client: past `maxAuthFailures`
 *     distinct wrong keys in the window, the client's unknown keys are 429 without a lookup (a flood of
 *     random keys costs no Redis call), while keys this replica already knows still pass.
 *   Without PROXY protocol behind an L4 balancer every client shares the balancer's address, so a
 *   guesser there still locks out new keys for all: send the PROXY header (`proxyProtocolFrom`).
 * - `gateway-header`: a gateway in front has authenticated the client and names its tenant in
 *   `identityHeader`; the router trusts it (only deploy this behind such a gateway). Missing: 401.
 */
export type AuthMode = 'none' | 'api-keys' | 'gateway-header';

/** What a wrong key counts against: its client, and its key prefix from that client. */
interface CountedAs {
  readonly client: string;
  readonly keyPrefix: string;
}

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
/** A wrong key is told apart from others by its first characters: `kvr_` and 8 random ones (48 bits). */
export const KEY_PREFIX_CHARS = 12;

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
    const credential = credentialOf(headers);
    const client = limitedPeerOf(peer);
    const counted = { client, keyPrefix: `${client}\u0000${credential?.slice(0, KEY_PREFIX_CHARS) ?? ''}` };
    const blockedForSeconds = this.#blockedForSeconds(counted);
    if (credential === null)
      return this.#refuse(counted, blockedForSeconds, 'You must send an API key (Authorization: Bearer <key>).');
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
    if (found === null) return this.#refuse(counted, blockedForSeconds, 'Incorrect API key provided.');
    return { tenant: found.tenant, keyId: found.id, role: found.role, keyLimits: found };
  }

  /** Seconds until the client, or this key prefix from it, may send unknown keys again; null if neither is blocked. */
  #blockedForSeconds(counted: CountedAs): number | null {
    const { failures } = this.#options;
    const seconds = [failures.retryAfterSeconds(counted.client), failures.retryAfterSeconds(counted.keyPrefix)];
    const blocked = seconds.filter((value): value is number => value !== null);
    return blocked.length === 0 ? null : Math.max(...blocked);
  }

  #refuse(counted: CountedAs, blockedForSeconds: number | null, message: string): never {
    if (blockedForSeconds !== null) throw rateLimited(blockedForSeconds);
    // A key prefix's first failure in the window is a new wrong key: it counts against the client too.
    if (this.#options.failures.recordFailure(counted.keyPrefix) === 1)
      this.#options.failures.recordFailure(counted.client);
    throw unauthorized(message);
  }
}

function unauthorized(message: string): RouterError {
  return new RouterError('ROUTER_ERR_INVALID_API_KEY', message);
}

function rateLimited(seconds: number): RouterError {
  return new RouterError(
    'ROUTER_ERR_AUTH_RATE_LIMITED',
    'Too many requests with a wrong API key from this address (or this key); retry later.',
    { retryAfterSeconds: seconds },
  );
}
