import type { Backend } from '../backends/backend-registry';
import { servesDecode, servesPrefill } from '../backends/backend-role';
import { RouterError } from '../errors';
import type { Identity } from '../tenants/authenticate';
import type { Endpoint, ParsedRequest } from './parse';
import { prefillLeg, type PdSettings, type PrefillDeps, type PrefillOutcome, type PrefillRequest } from './prefill';
import type { Ticket } from './route';

/**
 * How the request path splits a disaggregated model's requests (issue 32): which backends a try routes over, and the
 * prefill leg run once per request between route (the decode backend) and send (the decode leg).
 *
 * A model is disaggregated when it has a backend of role `prefill` (`both` serves either leg). Its chat and
 * text-completion requests route over the decode-capable backends and may get a prefill leg; its other requests
 * (Responses, Messages, pass-through) go whole to a decode-capable backend (with SGLang, a `both` one: its decode-mode
 * engines cannot prefill), since a prefill-only engine is not meant to decode.
 */
export interface SplitPool {
  /** Where a try routes: the decode-capable backends (the whole pool when the model is not disaggregated). */
  readonly routed: readonly Backend[];
  /** The prefill-capable backends, when this request may get a prefill leg; null otherwise. */
  readonly prefill: readonly Backend[] | null;
}

export function splitPool(
  backends: readonly Backend[],
  endpoint: Endpoint,
  protocol: PdSettings['protocol'],
): SplitPool {
  // A prefill-only engine never serves a whole request, disaggregated model or not (a decode backend drained, or
  // none configured, leaves it only prefill legs to serve).
  const hasPrefillOnly = backends.some((backend) => backend.role === 'prefill');
  if (!hasPrefillOnly) return { routed: backends, prefill: null };
  const split = endpoint === 'chat' || endpoint === 'completions';
  // SGLang's decode-mode engines cannot prefill on their own: a request that is not split goes to a `both` backend.
  const routed = backends.filter((backend) =>
    split || protocol !== 'sglang' ? servesDecode(backend.role) : backend.role === 'both',
  );
  return { routed, prefill: split ? backends.filter((backend) => servesPrefill(backend.role)) : null };
}

/**
 * Refuses a client's own `kv_transfer_params` / `bootstrap_*` (400) unless its key is privileged (admin, bench): they
 * name engines and transfers, and a tenant could make an engine pull or free another tenant's blocks.
 */
export function refuseClientDisaggregationFields(parsed: ParsedRequest, identity: Identity | null): void {
  const fields = parsed.disaggregationFields ?? [];
  if (fields.length === 0) return;
  if (identity !== null && (identity.role === 'admin' || identity.role === 'bench')) return;
  throw new RouterError(
    'ROUTER_ERR_INVALID_REQUEST',
    `\`${fields[0]}\` is set by the router for prefill/decode disaggregation; a request may not set it.`,
    { param: fields[0] as string },
  );
}

/**
 * One request's prefill leg, run at its first decode try and kept for the next ones: a decode try that failed before
 * its first byte goes to another decode backend with the same prefill (the params name the prefill engine's blocks,
 * which any decode engine can pull), unless it lost its connection mid-request (`forget`: it may have pulled them).
 */
export class RequestPrefill {
  #outcome: Promise<PrefillOutcome> | null = null;

  constructor(
    private readonly deps: PrefillDeps,
    private readonly request: PrefillRequest,
  ) {}

  /** The prefill leg's outcome for `decodeTicket` (it runs at the first call): the decode leg's body, the prefill backend. */
  async outcomeFor(decodeTicket: Ticket): Promise<PrefillOutcome> {
    this.#outcome ??= prefillLeg(this.deps, this.request, decodeTicket);
    return this.#outcome;
  }

  /** The next decode try runs a prefill leg again (the blocks of this one may be gone). */
  forget(): void {
    this.#outcome = null;
  }
}
