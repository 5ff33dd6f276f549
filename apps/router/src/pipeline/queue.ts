import { randomUUID } from 'node:crypto';
import type { FlowCapacity, FlowEntry } from '@kvroute/redis-store';
import type { FastifyRequest } from 'fastify';
import type { Backend } from '../backends/backend-registry';
import type { EngineStateView } from '../backends/engine-state-view';
import type { FlowSettings } from '../flow/flow-config';
import type { FlowControl, FlowSlot } from '../flow/flow-control';
import { poolSaturationScore } from '../flow/pool-saturation';
import { FLOW_PRIORITIES, type FlowPriority } from '../tenants/api-key';
import type { Identity } from '../tenants/authenticate';
import type { TenantDirectory } from '../tenants/tenant-directory';
import { estimatedTokensOf } from './limit';
import type { ParsedRequest } from './parse';

/**
 * Stage 4 of the request path, **queue**: with flow control on (`flowControl`), whether the request's pool
 * can take it now. When it can, it goes on at once; when every backend of the model is saturated (the
 * in-flight capacity `flowMaxInflightPerBackend` per backend, or the engines' reported waiting and KV
 * usage), it waits in the router, in the pool's shared queue (flow/flow-control.ts): its priority class
 * first, then its tenant's fair share of tokens. A request that cannot start in time is shed (429).
 *
 * - The flow is the tenant (a client address in open mode); its weight and class are the key's, else the
 *   tenant's (`priority`, `weight`), else normal and 1. A privileged key (admin, bench) may set its class
 *   with `X-Kvroute-Priority: high|normal|low`; anyone else's header is ignored.
 * - The cost is the request's tokens as the limit stage reserves them: the prompt (counted in token mode,
 *   else estimated) plus its generation budget.
 * - The slot is held until the request is over (release), whatever its tries.
 */
export interface QueueDeps {
  readonly flow: FlowControl;
  readonly settings: FlowSettings;
  /** The poller's view of the engines (waiting, KV usage); null without one. */
  readonly engineStates: EngineStateView | null;
  readonly tenants: TenantDirectory;
  readonly bytesPerToken: (pool: string) => number;
  readonly reservedCompletionTokens: number;
}

/** The header a privileged key names its priority class in. */
export const PRIORITY_HEADER = 'x-kvroute-priority';

const CLASS_OF: Readonly<Record<FlowPriority, 0 | 1 | 2>> = { high: 0, normal: 1, low: 2 };

/** Waits for the request's turn in its pool; throws a 429 RouterError when it is shed. */
export async function queueRequest(
  deps: QueueDeps,
  request: FastifyRequest,
  identity: Identity | null,
  parsed: ParsedRequest,
  backends: readonly Backend[],
  signal: AbortSignal,
): Promise<FlowSlot> {
  const tenantLimits = identity === null ? undefined : deps.tenants.limitsOf(identity.tenant);
  const entry: FlowEntry = {
    // Made here, never the client's X-Request-Id (request.id): the queue is shared by every tenant, and a
    // chosen id could take or release another request's place.
    id: randomUUID(),
    flow: identity === null ? `peer:${request.raw.socket.remoteAddress ?? 'unknown'}` : `tenant:${identity.tenant}`,
    costTokens: estimatedTokensOf(parsed, deps.bytesPerToken(parsed.model), deps.reservedCompletionTokens),
    weight: identity?.keyLimits.weight ?? tenantLimits?.weight ?? 1,
    priorityClass: CLASS_OF[priorityOf(request, identity, identity?.keyLimits.priority ?? tenantLimits?.priority)],
  };
  return deps.flow.admit(parsed.model, entry, parsed.body.length, () => capacityOf(deps, backends), signal);
}

function priorityOf(
  request: FastifyRequest,
  identity: Identity | null,
  configured: FlowPriority | undefined,
): FlowPriority {
  const privileged = identity !== null && (identity.role === 'admin' || identity.role === 'bench');
  const header = request.headers[PRIORITY_HEADER];
  if (privileged && typeof header === 'string' && (FLOW_PRIORITIES as readonly string[]).includes(header))
    return header as FlowPriority;
  return configured ?? 'normal';
}

/** No in-flight cap: the engines' saturation alone holds requests back. */
const UNCAPPED = 1_000_000_000;

function capacityOf(deps: QueueDeps, backends: readonly Backend[]): FlowCapacity {
  const { settings, engineStates } = deps;
  const loads =
    engineStates === null
      ? []
      : backends.map((backend) => {
          const verdict = engineStates.verdict(backend.id);
          return verdict.kind === 'healthy' ? verdict.load : null;
        });
  const score = poolSaturationScore(loads, {
    waiting: settings.saturationWaiting,
    kvUsage: settings.saturationKvUsage,
  });
  const capacity = settings.maxInflightPerBackend > 0 ? backends.length * settings.maxInflightPerBackend : UNCAPPED;
  return {
    capacity,
    enginesSaturated: score >= 1,
    leaseTtlMs: settings.leaseTtlMs,
    // Without an in-flight cap there is nothing to go beyond: the engines' saturation alone holds back.
    expressSlots: capacity === UNCAPPED ? 0 : Math.ceil(capacity * settings.expressShare),
  };
}
