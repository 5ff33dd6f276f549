import type { Identity } from './authenticate';
import type { TenantDirectory } from './tenant-directory';

/**
 * Which models a caller may name (issue 30, "Tenants' reach"): its tenant's `models` and its key's
 * `models` (config `tenants`, the key file, the admin API's keys), each absent for "every model". A model
 * passes when every list that is set holds it or, for an adapter (a LoRA a backend lists with a `parent`),
 * its base model: an adapter is allowed with its base. A model that does not pass is answered exactly as
 * a model no backend serves (404 `ROUTER_ERR_MODEL_NOT_FOUND`, same body), and `/v1/models` leaves it
 * out, so a tenant cannot tell a model it may not use from one that does not exist. Open mode (no
 * identity): every model.
 */
export class ModelAccess {
  readonly #tenants: TenantDirectory;
  readonly #baseModelOf: (model: string) => string | null;

  constructor(tenants: TenantDirectory, baseModelOf: (model: string) => string | null) {
    this.#tenants = tenants;
    this.#baseModelOf = baseModelOf;
  }

  /** Whether `identity` may use `model`. */
  allows(identity: Identity | null, model: string): boolean {
    if (identity === null) return true;
    const lists = this.#listsOf(identity);
    if (lists.length === 0) return true;
    const base = this.#baseModelOf(model);
    return lists.every((list) => list.includes(model) || (base !== null && list.includes(base)));
  }

  /** The models of `models` that `identity` may use, in their order. */
  visible(identity: Identity | null, models: readonly string[]): string[] {
    if (identity === null || this.#listsOf(identity).length === 0) return [...models];
    return models.filter((model) => this.allows(identity, model));
  }

  #listsOf(identity: Identity): (readonly string[])[] {
    const lists: (readonly string[])[] = [];
    const tenant = this.#tenants.limitsOf(identity.tenant)?.models;
    if (tenant !== undefined) lists.push(tenant);
    if (identity.keyLimits.models !== undefined) lists.push(identity.keyLimits.models);
    return lists;
  }
}
