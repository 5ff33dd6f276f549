import type { BackendRole } from '../backends/backend-role';
/**
 * Backend discovery: a source (DNS records, Kubernetes EndpointSlices) tells which backends exist now;
 * the applier (discovery-applier.ts) turns its answers into the same changes the admin API makes.
 */

/** One backend a source found. Its id is `<source name>@<address>:<port>`, the same on every replica. */
export interface DiscoveredBackend {
  readonly id: string;
  /** Base URL (an address, never a name: nothing re-resolves it on connect). */
  readonly url: string;
  /** Still serving its requests but leaving (a terminating pod): no new requests, those in flight finish. */
  readonly draining: boolean;
  /** Its prefill/decode role, when the source says it (an EndpointSlice's `llm-d.ai/role` label); absent: `both`. */
  readonly role?: BackendRole;
}

/**
 * What one look at the source came to:
 * - `backends`: the complete current set (possibly empty: the name exists no more or has no records);
 * - `failed`: the source could not be read (SERVFAIL, timeout, API server away): says nothing about the
 *   backends, so the applier keeps what it applied last.
 */
export type DiscoveryAnswer =
  | {
      readonly kind: 'backends';
      readonly backends: readonly DiscoveredBackend[] /** Found beyond the cap, left out. */;
      readonly dropped: number;
    }
  | { readonly kind: 'failed'; readonly error: unknown };

/** A source of the backend list: pushes a whole answer whenever it has one (each refresh, each watch event). */
export interface BackendSource {
  /** `dns`, `dns+srv` or `k8s`: the `source` label of the failure metric. */
  readonly kind: string;
  /** Prefix of the ids of the backends it finds (`<name>@`): the backends it owns in the set. */
  readonly name: string;
  /** Starts looking; resolves after the first answer was handed to `onAnswer` (or the first look failed). */
  start(onAnswer: (answer: DiscoveryAnswer) => Promise<void>): Promise<void>;
  stop(): Promise<void>;
}

/** The id of a backend found at `address:port` (IPv6 without brackets: ids allow `:` but not `[]`). */
export function discoveredId(sourceName: string, address: string, port: number): string {
  return `${sourceName}@${address}:${port}`;
}

/** The base URL of a backend at `address:port`. */
export function discoveredUrl(scheme: 'http' | 'https', address: string, port: number): string {
  return `${scheme}://${address.includes(':') ? `[${address}]` : address}:${port}`;
}

/**
 * Keeps the first `max` backends in id order (ids sort the same on every replica, so every replica
 * keeps the same ones), dropping duplicates of an id.
 */
export function capBackends(
  backends: readonly DiscoveredBackend[],
  max: number,
): { backends: DiscoveredBackend[]; dropped: number } {
  const byId = new Map<string, DiscoveredBackend>();
  for (const backend of backends) {
    const seen = byId.get(backend.id);
    // The same address twice (two SRV targets, two slices): eligible wins over draining.
    if (!seen || (seen.draining && !backend.draining)) byId.set(backend.id, backend);
  }
  const sorted = [...byId.values()].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  return { backends: sorted.slice(0, max), dropped: Math.max(0, sorted.length - max) };
}
