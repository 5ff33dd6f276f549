import { BACKEND_ROLES, type BackendRole } from '../backends/backend-role';
import { isIP } from 'node:net';
import { capBackends, discoveredId, discoveredUrl, type DiscoveredBackend } from './backend-source';

/**
 * Kubernetes EndpointSlices (discovery.k8s.io/v1), parsed (pure): the list and watch bodies the API
 * server sends, and the backends a Service's slices name. Whatever does not have the documented shape
 * is skipped, never thrown on: the API server is trusted to be the API server, not to be bug-free.
 */

/** What is kept of one slice: its endpoints' addresses, conditions and the chosen port. */
export interface SliceSummary {
  readonly name: string;
  /** Its endpoints' prefill/decode role, from the slice's `llm-d.ai/role` label (llm-d's role label); null: none. */
  readonly role: BackendRole | null;
  readonly addressType: string;
  readonly ports: ReadonlyArray<{ readonly name: string | null; readonly port: number }>;
  readonly endpoints: ReadonlyArray<{
    readonly address: string;
    readonly ready: boolean;
    readonly serving: boolean;
    readonly terminating: boolean;
  }>;
}

/** A watch event: a slice added, changed or deleted; a bookmark (a newer resourceVersion); `expired` (410 Gone: list again). */
export type WatchEvent =
  | {
      readonly type: 'ADDED' | 'MODIFIED' | 'DELETED';
      readonly slice: SliceSummary;
      readonly resourceVersion: string | null;
    }
  | { readonly type: 'BOOKMARK'; readonly resourceVersion: string }
  | { readonly type: 'expired' }
  | { readonly type: 'error'; readonly message: string };

/** llm-d's label naming a serving pod's part in prefill/decode disaggregation. */
export const ROLE_LABEL = 'llm-d.ai/role';

const isObject = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === 'object' && !Array.isArray(value);

/** A slice as the API server sends it, reduced to what discovery uses; null if it is not one. */
export function summarizeSlice(value: unknown): SliceSummary | null {
  if (!isObject(value) || !isObject(value.metadata) || typeof value.metadata.name !== 'string') return null;
  const ports = (Array.isArray(value.ports) ? value.ports : []).flatMap((port: unknown) => {
    if (
      !isObject(port) ||
      typeof port.port !== 'number' ||
      !Number.isInteger(port.port) ||
      port.port < 1 ||
      port.port > 65_535
    )
      return [];
    if (port.protocol !== undefined && port.protocol !== 'TCP') return [];
    return [{ name: typeof port.name === 'string' && port.name !== '' ? port.name : null, port: port.port }];
  });
  const endpoints = (Array.isArray(value.endpoints) ? value.endpoints : []).flatMap((endpoint: unknown) => {
    if (!isObject(endpoint) || !Array.isArray(endpoint.addresses)) return [];
    // Consumers use the first address (the API's rule: the others are for special cases).
    const address = endpoint.addresses[0];
    if (typeof address !== 'string' || isIP(address) === 0) return [];
    const conditions = isObject(endpoint.conditions) ? endpoint.conditions : {};
    // Unknown (absent) conditions, as the API documents them: ready → true; serving → as ready; terminating → false.
    const ready = typeof conditions.ready === 'boolean' ? conditions.ready : true;
    const serving = typeof conditions.serving === 'boolean' ? conditions.serving : ready;
    const terminating = typeof conditions.terminating === 'boolean' ? conditions.terminating : false;
    return [{ address, ready, serving, terminating }];
  });
  const roleLabel = isObject(value.metadata.labels) ? value.metadata.labels[ROLE_LABEL] : undefined;
  return {
    name: value.metadata.name,
    role: (BACKEND_ROLES as readonly unknown[]).includes(roleLabel) ? (roleLabel as BackendRole) : null,
    addressType: typeof value.addressType === 'string' ? value.addressType : '',
    ports,
    endpoints,
  };
}

/** A list body: its slices and the resourceVersion to watch from; null if it is not an EndpointSliceList. */
export function parseSliceList(body: unknown): { slices: SliceSummary[]; resourceVersion: string } | null {
  if (
    !isObject(body) ||
    !Array.isArray(body.items) ||
    !isObject(body.metadata) ||
    typeof body.metadata.resourceVersion !== 'string'
  )
    return null;
  return {
    slices: body.items.map(summarizeSlice).filter((slice): slice is SliceSummary => slice !== null),
    resourceVersion: body.metadata.resourceVersion,
  };
}

/** One line of a watch stream; null for a line that is not an event discovery knows (skipped). */
export function parseWatchLine(line: string): WatchEvent | null {
  let event: unknown;
  try {
    event = JSON.parse(line);
  } catch {
    return null;
  }
  if (!isObject(event) || !isObject(event.object)) return null;
  const object = event.object;
  const resourceVersion =
    isObject(object.metadata) && typeof object.metadata.resourceVersion === 'string'
      ? object.metadata.resourceVersion
      : null;
  switch (event.type) {
    case 'ADDED':
    case 'MODIFIED':
    case 'DELETED': {
      const slice = summarizeSlice(object);
      return slice === null ? null : { type: event.type, slice, resourceVersion };
    }
    case 'BOOKMARK':
      return resourceVersion === null ? null : { type: 'BOOKMARK', resourceVersion };
    case 'ERROR':
      // A Status: 410 (Expired, Gone) = the resourceVersion is too old to watch from.
      if (object.code === 410) return { type: 'expired' };
      return { type: 'error', message: typeof object.message === 'string' ? object.message : 'watch error' };
    default:
      return null;
  }
}

export interface SliceBackendsOptions {
  readonly sourceName: string;
  readonly scheme: 'http' | 'https';
  /** The Service port's name (k8s://…:PORT_NAME); null = the slice's only port, else one named `http`, else its first. */
  readonly portName: string | null;
  readonly maxBackends: number;
}

/**
 * The backends the slices name: a ready endpoint is a backend; a terminating one still serving is a
 * draining backend (its requests finish, no new ones); any other (not ready, not serving) is none.
 */
export function backendsFromSlices(
  slices: Iterable<SliceSummary>,
  options: SliceBackendsOptions,
): { backends: DiscoveredBackend[]; dropped: number } {
  const found: DiscoveredBackend[] = [];
  for (const slice of slices) {
    if (slice.addressType !== 'IPv4' && slice.addressType !== 'IPv6') continue;
    const port = portOf(slice, options.portName);
    if (port === null) continue;
    for (const endpoint of slice.endpoints) {
      const eligible = endpoint.ready && !endpoint.terminating;
      const draining = endpoint.terminating && endpoint.serving;
      if (!eligible && !draining) continue;
      found.push({
        id: discoveredId(options.sourceName, endpoint.address, port),
        url: discoveredUrl(options.scheme, endpoint.address, port),
        draining: !eligible,
        ...(slice.role === null ? {} : { role: slice.role }),
      });
    }
  }
  return capBackends(found, options.maxBackends);
}

function portOf(slice: SliceSummary, portName: string | null): number | null {
  if (portName !== null) return slice.ports.find((port) => port.name === portName)?.port ?? null;
  if (slice.ports.length === 1) return (slice.ports[0] as { port: number }).port;
  return (slice.ports.find((port) => port.name === 'http') ?? slice.ports[0])?.port ?? null;
}
