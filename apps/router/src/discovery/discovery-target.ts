/**
 * The `discovery` option, parsed (pure): where the backend list comes from.
 *
 * - `dns://NAME:PORT`: the A and AAAA records of NAME (a headless Service's name), one backend per
 *   address, on PORT;
 * - `dns+srv://_SERVICE._PROTO.NAME`: its SRV records, one backend per target address and port;
 * - `k8s://[NAMESPACE/]SERVICE[,SERVICE…][:PORT_NAME]`: the Services' EndpointSlices, watched through the API
 *   server with the pod's service account (NAMESPACE: the pod's own; PORT_NAME: the slice's only port,
 *   or the one so named). Several Services: one watch over all their slices (a set-based label selector), e.g. a
 *   prefill and a decode Service, whose `llm-d.ai/role` labels give each backend its role.
 */
export type DiscoveryTarget =
  | { readonly kind: 'dns'; readonly host: string; readonly port: number; readonly name: string }
  | { readonly kind: 'dns+srv'; readonly service: string; readonly name: string }
  | {
      readonly kind: 'k8s';
      readonly namespace: string | null;
      /** The first of `services` (the default id prefix). */
      readonly service: string;
      readonly services: readonly string[];
      readonly portName: string | null;
      readonly name: string;
    };

/** A DNS name: labels of letters, digits, `-` and `_` (SRV labels), dots between, an optional final dot. */
const DNS_NAME =
  /^(?=.{1,253}\.?$)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9])?)*\.?$/;
/** A Kubernetes object name (RFC 1123 label; Services and namespaces both are). */
const K8S_NAME = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;
/** Services one `k8s://` target may watch (one label selector; a fleet has a role or two per model). */
const MAX_K8S_SERVICES = 16;
/** A backend id prefix: what backend ids allow, short. */
const SOURCE_NAME = /^[A-Za-z0-9._-]{1,63}$/;

/** Parses a `discovery` value; throws an Error that says what is wrong. `name` overrides the id prefix. */
export function parseDiscoveryTarget(value: string, name?: string): DiscoveryTarget {
  if (name !== undefined && !SOURCE_NAME.test(name))
    throw new Error(`discoveryName ${JSON.stringify(name)}: letters, digits and ._- only (1-63)`);
  const match = /^([a-z0-9+]+):\/\/(.*)$/.exec(value);
  if (!match)
    throw new Error(
      `${JSON.stringify(value)} is not dns://NAME:PORT, dns+srv://_SERVICE._PROTO.NAME or k8s://[NAMESPACE/]SERVICE[,SERVICE…][:PORT_NAME]`,
    );
  const [, scheme, rest] = match as unknown as [string, string, string];
  if (scheme === 'dns') {
    const hostPort = /^([^:/]+):(\d{1,5})$/.exec(rest);
    if (!hostPort || !DNS_NAME.test(hostPort[1] as string))
      throw new Error(`dns://NAME:PORT expected, got ${JSON.stringify(value)} (the port is required)`);
    const port = Number(hostPort[2]);
    if (port < 1 || port > 65_535) throw new Error(`port ${port} out of range`);
    const host = hostPort[1] as string;
    return { kind: 'dns', host, port, name: name ?? firstLabel(host) };
  }
  if (scheme === 'dns+srv') {
    if (!DNS_NAME.test(rest) || !/^_[^.]+\._[^.]+\.[^.]/.test(rest))
      throw new Error(`dns+srv://_SERVICE._PROTO.NAME expected, got ${JSON.stringify(value)}`);
    // `_http._tcp.vllm.default.svc.cluster.local` → `vllm`.
    return { kind: 'dns+srv', service: rest, name: name ?? firstLabel(rest.split('.').slice(2).join('.')) };
  }
  if (scheme === 'k8s') {
    const parts = /^(?:([^/]+)\/)?([^/:]+)(?::([^/:]+))?$/.exec(rest);
    const namespace = parts?.[1] ?? null;
    const services = parts?.[2]?.split(',') ?? [];
    const service = services[0];
    const portName = parts?.[3] ?? null;
    if (
      !parts ||
      service === undefined ||
      services.length > MAX_K8S_SERVICES ||
      !services.every((each) => K8S_NAME.test(each)) ||
      (namespace !== null && !K8S_NAME.test(namespace)) ||
      (portName !== null && !K8S_NAME.test(portName))
    ) {
      throw new Error(
        `k8s://[NAMESPACE/]SERVICE[,SERVICE…][:PORT_NAME] expected (lower-case names, at most ${MAX_K8S_SERVICES} Services), got ${JSON.stringify(value)}`,
      );
    }
    return { kind: 'k8s', namespace, service, services: [...new Set(services)], portName, name: name ?? service };
  }
  throw new Error(`unknown discovery scheme ${JSON.stringify(scheme)}: dns, dns+srv or k8s`);
}

function firstLabel(host: string): string {
  const label = host.split('.')[0] as string;
  return label.replace(/[^A-Za-z0-9._-]/g, '-').slice(0, 63) || 'discovered';
}
