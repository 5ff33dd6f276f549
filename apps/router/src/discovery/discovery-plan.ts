import type { BackendRole } from '../backends/backend-role';
import type { DiscoveredBackend } from './backend-source';

/** A backend of the set that a discovery source owns (its id carries the source's prefix), as the set has it now. */
export interface OwnedBackend {
  readonly id: string;
  readonly url: string;
  readonly drained: boolean;
  readonly role: BackendRole;
}

/** One change to the backend set: what the admin API would be asked to do. */
export type DiscoveryChange =
  | {
      readonly op: 'add';
      readonly id: string;
      readonly url: string;
      readonly drained: boolean;
      readonly role: BackendRole;
    }
  | { readonly op: 'drain' | 'undrain' | 'remove'; readonly id: string };

export interface DiscoveryPlanInput {
  /** The owned backends in the set now. */
  readonly current: readonly OwnedBackend[];
  /** The source's latest answer. */
  readonly discovered: readonly DiscoveredBackend[];
  /**
   * Draining flag per backend of the previous answer this applier applied in full; null = none (first
   * apply, or since it lost and took back the lease): every flag is then applied as found.
   */
  readonly previous: ReadonlyMap<string, boolean> | null;
  /** Since when (ms) each owned backend has been missing from the answers. */
  readonly absentSinceMs: ReadonlyMap<string, number>;
  readonly nowMs: number;
  /** A backend missing this long is removed; until then it is drained, and comes back if its record does. */
  readonly removeAfterMs: number;
}

export interface DiscoveryPlan {
  readonly changes: readonly DiscoveryChange[];
  readonly absentSinceMs: Map<string, number>;
}

/**
 * What to change so that the set follows the answer (pure):
 * - a new backend is added (drained if the source says it is leaving), with the role the source says (`both` else);
 *   one whose address or role changed is removed and added again;
 * - a backend missing from the answer is drained at once (its requests in flight finish, no new ones
 *   reach it) and removed after `removeAfterMs`; if its record comes back first it is undrained. An
 *   empty answer (NXDOMAIN, no records, no endpoints) is no exception: every owned backend drains;
 * - the drained flag of a backend still found follows the source when the source's flag changes (or on
 *   the first apply), so an operator's admin drain of a discovered backend holds until then.
 * Backends the source does not own (configured, added through the admin API) are never touched.
 */
export function planDiscoveryChanges(input: DiscoveryPlanInput): DiscoveryPlan {
  const changes: DiscoveryChange[] = [];
  const current = new Map(input.current.map((backend) => [backend.id, backend]));
  const found = new Set<string>();
  for (const backend of input.discovered) {
    found.add(backend.id);
    const owned = current.get(backend.id);
    const role = backend.role ?? 'both';
    const add = { op: 'add', id: backend.id, url: backend.url, drained: backend.draining, role } as const;
    if (owned === undefined) {
      changes.push(add);
      continue;
    }
    // Another address or another role is another backend (its pool, its leases): replaced.
    if (owned.url !== backend.url || owned.role !== role) {
      changes.push({ op: 'remove', id: backend.id }, add);
      continue;
    }
    const before = input.previous?.get(backend.id);
    if (before !== backend.draining && owned.drained !== backend.draining)
      changes.push({ op: backend.draining ? 'drain' : 'undrain', id: backend.id });
  }
  const absentSinceMs = new Map<string, number>();
  for (const owned of input.current) {
    if (found.has(owned.id)) continue;
    const since = input.absentSinceMs.get(owned.id) ?? input.nowMs;
    if (input.nowMs - since >= input.removeAfterMs) {
      changes.push({ op: 'remove', id: owned.id });
      continue;
    }
    absentSinceMs.set(owned.id, since);
    if (!owned.drained) changes.push({ op: 'drain', id: owned.id });
  }
  return { changes, absentSinceMs };
}
