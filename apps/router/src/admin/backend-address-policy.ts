/**
 * Which backend URLs the router may be told to send requests to (SSRF guard for the admin API and the
 * configured backends). Checked before anything connects: a refused URL never gets a connection attempt.
 *
 * Rules, for a URL's host (an IP literal, or a name resolved with the injected resolver; every resolved
 * address must pass, so one bad A record refuses the name):
 * - always-denied ranges: link-local (169.254.0.0/16, fe80::/10), cloud metadata (169.254.169.254,
 *   fd00:ec2::254, and the names metadata.google.internal / metadata), the unspecified addresses
 *   (0.0.0.0/8, ::, which connect to this host), and the router's own Redis: every host:port its URL
 *   names (one server, or a cluster URL's seed nodes; a cluster node the URL does not name is not known
 *   here, so name every node in the URL, or keep them out with `backendAllowlist`). Only an allowlist
 *   entry that names the address or a range inside the denied one lifts this (`169.254.20.10/32` does,
 *   `0.0.0.0/0` does not). A metadata address (169.254.169.254, fd00:ec2::254, Alibaba's 100.100.100.200)
 *   is lifted only by an entry of exactly that address: `169.254.0.0/16`, allowed for a node-local DNS
 *   cache say, does not open it. Redis is lifted only by an entry spelling its `host:port`.
 *   IPv4 embedded in IPv6 (::ffff:, ::ffff:0:, the NAT64 prefix 64:ff9b::/96) is checked as IPv4.
 * - `backendAllowlist` empty: everything else is accepted (single-operator default, as before).
 *   Non-empty: the host must be listed by name, or every resolved address must lie in a listed IP/CIDR.
 *
 * DNS rebinding: a name whose DNS an attacker controls could pass the check and answer differently
 * when a connection is made. So the connection pools (proxy/upstream-pool.ts) connect through
 * `connectLookup`: every new connection resolves the name once, checks those addresses by the same
 * rules, and connects to exactly them (pinned: no second resolution between check and connect). A
 * denied answer fails that connection before any socket opens.
 * Matching uses Node's net.BlockList; IPv4-mapped IPv6 (::ffff:a.b.c.d) is matched as IPv4.
 */
import type { LookupAddress, LookupOptions } from 'node:dns';
import { BlockList, isIP } from 'node:net';
import { redisUrlNodes } from '@kvroute/redis-store';
import { AddressCanon, unmapIpv4 } from './canonical-address';

export interface ResolvedAddress {
  readonly address: string;
  readonly family: 4 | 6;
}

/** net.connect's `lookup` option: one address, or all of them when `options.all` (Node's happy eyeballs asks for all). */
export type ConnectLookup = (
  hostname: string,
  options: LookupOptions,
  callback: (error: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void,
) => void;

/** Resolves a host name to all its addresses (main.ts: dns.promises.lookup with `all: true`). */
export type ResolveHost = (hostname: string) => Promise<readonly ResolvedAddress[]>;

export type AddressVerdict =
  | { readonly allowed: true; readonly hostname: string; readonly addresses: readonly ResolvedAddress[] }
  /** `unresolved`: the name did not resolve (DNS not ready yet, or a typo), rather than a denial. */
  | { readonly allowed: false; readonly reason: string; readonly unresolved?: true };

export interface BackendAddressPolicyOptions {
  /** Host names, IP addresses and CIDRs (`10.0.0.0/8`, `fd00::/8`), and `host:port` for the Redis exception. */
  readonly allowlist: readonly string[];
  /** The router's Redis URL, if any: every host:port it names is denied as a backend. */
  readonly redisUrl: string | undefined;
  readonly resolve: ResolveHost;
  /**
   * This host's interface addresses (wiring: os.networkInterfaces()): with loopback and the unspecified
   * addresses they are one address, this host, when compared with Redis and the router's own listeners.
   */
  readonly localAddresses?: readonly string[];
  /** The router's own listeners known before listen (configured ports; port 0 is skipped): a loop, always denied. */
  readonly ownListeners?: readonly Listener[];
}

/** A listening socket: the address it is bound to and its port. */
export interface Listener {
  readonly address: string;
  readonly port: number;
}

const DENIED_NAMES = new Set(['metadata.google.internal', 'metadata', 'metadata.goog']);
const DENIED_RANGES: ReadonlyArray<readonly [string, number, 'ipv4' | 'ipv6', string]> = [
  ['169.254.0.0', 16, 'ipv4', 'link-local'],
  ['fe80::', 10, 'ipv6', 'link-local'],
  ['fd00:ec2::254', 128, 'ipv6', 'cloud metadata'],
  ['0.0.0.0', 8, 'ipv4', 'unspecified (this host)'],
  ['::', 128, 'ipv6', 'unspecified (this host)'],
];
/** Cloud metadata services' addresses: refused unless allowlisted one by one (an exact /32 or /128). */
const METADATA = (() => {
  const list = new BlockList();
  for (const address of ['169.254.169.254', '100.100.100.200']) list.addAddress(address, 'ipv4');
  list.addAddress('fd00:ec2::254', 'ipv6');
  return list;
})();

function isMetadataAddress(address: string): boolean {
  return METADATA.check(address, isIP(address) === 6 ? 'ipv6' : 'ipv4');
}

export class BackendAddressPolicy {
  private readonly allowedNames = new Set<string>();
  private readonly allowedHostPorts = new Set<string>();
  /** Every IP / CIDR entry of the allowlist. */
  private readonly allowed = new BlockList();
  /** The entries that lie inside a denied range, and so lift it. */
  private readonly allowedInsideDenied = new BlockList();
  /** The entries of one address (a /32 or /128): the only ones that lift a metadata address. */
  private readonly allowedExactly = new BlockList();
  private readonly hasAllowlist: boolean;
  /** The router's Redis nodes as its URL names them (none without Redis). */
  private readonly redisNodes: ReadonlyArray<{ readonly host: string; readonly port: string }>;
  private readonly canon: AddressCanon;
  /** `canonical|port` of each of the router's own listeners (public, admin): never a backend, whatever the allowlist. */
  private readonly ownEndpoints = new Set<string>();

  constructor(private readonly options: BackendAddressPolicyOptions) {
    this.hasAllowlist = options.allowlist.length > 0;
    this.canon = new AddressCanon(options.localAddresses ?? []);
    this.denyOwnListeners(options.ownListeners ?? []);
    for (const raw of options.allowlist) {
      const entry = raw.trim().toLowerCase();
      const cidr = parseCidr(entry);
      if (cidr !== null) {
        this.allowed.addSubnet(cidr.address, cidr.prefix, cidr.type);
        if (cidr.prefix === (cidr.type === 'ipv4' ? 32 : 128)) this.allowedExactly.addAddress(cidr.address, cidr.type);
        if (deniedRangeOf(cidr.address) !== null && cidr.prefix >= deniedPrefixOf(cidr.address))
          this.allowedInsideDenied.addSubnet(cidr.address, cidr.prefix, cidr.type);
      } else if (/^[a-z0-9.-]+:\d+$/.test(entry) || /^\[[0-9a-f:.]+\]:\d+$/.test(entry)) {
        this.allowedHostPorts.add(entry);
      } else {
        this.allowedNames.add(entry.replace(/\.$/, ''));
      }
    }
    this.redisNodes =
      options.redisUrl === undefined
        ? []
        : redisUrlNodes(options.redisUrl).map((node) => ({ host: node.host, port: String(node.port) }));
  }

  /**
   * The router's own listeners, once bound (wiring, after listen: the ports 0 chose): a backend there
   * would send the router its own requests, a loop. Port 0 (not bound yet) is skipped.
   */
  denyOwnListeners(listeners: readonly Listener[]): void {
    for (const listener of listeners)
      if (listener.port !== 0) this.ownEndpoints.add(this.canon.endpoint(listener.address, listener.port));
  }

  /** Checks one backend URL; resolves names, connects to nothing. */
  async check(rawUrl: string): Promise<AddressVerdict> {
    let url: URL;
    try {
      url = new URL(rawUrl);
    } catch {
      return { allowed: false, reason: 'not a URL' };
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:')
      return { allowed: false, reason: 'only http and https backends' };
    if (url.username !== '' || url.password !== '')
      return { allowed: false, reason: 'credentials in a backend URL are not accepted' };
    const hostname = url.hostname
      .replace(/^\[|\]$/g, '')
      .toLowerCase()
      .replace(/\.$/, '');
    const port = url.port || (url.protocol === 'https:' ? '443' : '80');
    const hostPort = `${isIP(hostname) === 6 ? `[${hostname}]` : hostname}:${port}`;
    const namedInAllowlist = this.allowedNames.has(hostname) || this.allowedHostPorts.has(hostPort);
    if (DENIED_NAMES.has(hostname) && !namedInAllowlist)
      return { allowed: false, reason: `${hostname} is a cloud metadata service` };

    let addresses: readonly ResolvedAddress[];
    const literal = isIP(hostname);
    if (literal !== 0) {
      addresses = [{ address: hostname, family: literal as 4 | 6 }];
    } else {
      try {
        addresses = await this.options.resolve(hostname);
      } catch (error) {
        return {
          allowed: false,
          reason: `${hostname} does not resolve (${(error as NodeJS.ErrnoException).code ?? 'error'})`,
          unresolved: true,
        };
      }
      if (addresses.length === 0) return { allowed: false, reason: `${hostname} does not resolve`, unresolved: true };
    }

    const redisAddresses = await this.redisAddressesOn(port);
    for (const { address } of addresses) {
      const plain = unmapIpv4(address);
      const type = isIP(plain) === 6 ? 'ipv6' : 'ipv4';
      const canonical = this.canon.of(plain);
      if (this.ownEndpoints.has(this.canon.endpoint(plain, port)))
        return { allowed: false, reason: `${hostPort} is this router's own listener (a loop)` };
      if (redisAddresses.has(canonical) && !this.allowedHostPorts.has(hostPort)) {
        return { allowed: false, reason: `${hostPort} is the router's own Redis` };
      }
      const denied = deniedRangeOf(plain);
      const lifted = isMetadataAddress(plain)
        ? this.allowedExactly.check(plain, type)
        : this.allowedInsideDenied.check(plain, type);
      if (denied !== null && !lifted) {
        return {
          allowed: false,
          reason: `${hostname === plain ? plain : `${hostname} resolves to ${plain}, which`} is ${denied}`,
        };
      }
      if (this.hasAllowlist && !namedInAllowlist && !this.allowed.check(plain, type)) {
        return {
          allowed: false,
          reason: `${hostname === plain ? plain : `${hostname} (${plain})`} is not in backendAllowlist`,
        };
      }
    }
    return { allowed: true, hostname, addresses };
  }

  /**
   * A `lookup` for net.connect (undici's `connect.lookup`) of connections to `backendUrl`: resolves and
   * checks the name now, as `check` does, and hands the socket only the addresses it checked. A denial
   * (or a failed resolution) is the connection's error, code `ROUTER_BACKEND_ADDRESS_DENIED`; nothing
   * connects. IP literals never reach a lookup (net connects to them directly; `check` passed them).
   */
  connectLookup(backendUrl: string): ConnectLookup {
    return (_hostname, options, callback) => {
      this.check(backendUrl)
        .then(
          (verdict) => {
            if (!verdict.allowed) {
              callback(
                Object.assign(new Error(`backend address refused at connect: ${verdict.reason}`), {
                  code: 'ROUTER_BACKEND_ADDRESS_DENIED',
                }),
                '',
                0,
              );
              return;
            }
            const family = options.family === 'IPv4' ? 4 : options.family === 'IPv6' ? 6 : options.family;
            const usable =
              family === 4 || family === 6
                ? verdict.addresses.filter((entry) => entry.family === family)
                : verdict.addresses;
            const first = usable[0];
            if (first === undefined) {
              callback(
                Object.assign(new Error(`backend ${verdict.hostname} has no IPv${String(family)} address`), {
                  code: 'ENOTFOUND',
                }),
                '',
                0,
              );
            } else if (options.all === true) {
              callback(
                null,
                usable.map((entry): LookupAddress => ({ address: entry.address, family: entry.family })),
              );
            } else {
              callback(null, first.address, first.family);
            }
          },
          (error: unknown) => callback(error instanceof Error ? error : new Error(String(error)), '', 0),
        )
        // A callback that throws (net's never does) must not become an unhandled rejection, which would end
        // the process; the connection it belonged to is the socket's business then.
        .catch(() => undefined);
    };
  }

  /**
   * The canonical addresses of the Redis nodes listening on `port` (a name is resolved at every check: it
   * may move). Any address of this host stands for all of them (canonical-address.ts).
   */
  private async redisAddressesOn(port: string): Promise<ReadonlySet<string>> {
    const addresses = new Set<string>();
    for (const node of this.redisNodes) {
      if (node.port !== port) continue;
      if (isIP(node.host) !== 0) {
        addresses.add(this.canon.of(node.host));
        continue;
      }
      try {
        for (const entry of await this.options.resolve(node.host)) addresses.add(this.canon.of(entry.address));
      } catch {
        // A Redis name that does not resolve now denies nothing: the backend's own addresses are still checked.
      }
    }
    return addresses;
  }
}

const DENIED = (() => {
  const lists = DENIED_RANGES.map(([address, prefix, type, label]) => {
    const list = new BlockList();
    list.addSubnet(address, prefix, type);
    return { list, type, prefix, label };
  });
  return lists;
})();

/** The label of the denied range an address lies in (metadata before link-local), or null. */
function deniedRangeOf(address: string): string | null {
  if (isMetadataAddress(address)) return 'the cloud metadata service';
  const type = isIP(address) === 6 ? 'ipv6' : 'ipv4';
  for (const range of DENIED) if (range.type === type && range.list.check(address, type)) return `${range.label}`;
  return null;
}

function deniedPrefixOf(address: string): number {
  const type = isIP(address) === 6 ? 'ipv6' : 'ipv4';
  return DENIED.find((range) => range.type === type && range.list.check(address, type))?.prefix ?? 0;
}

function parseCidr(entry: string): { address: string; prefix: number; type: 'ipv4' | 'ipv6' } | null {
  const [address, prefixText] = entry.split('/') as [string, string | undefined];
  const plain = unmapIpv4(address.replace(/^\[|\]$/g, ''));
  const family = isIP(plain);
  if (family === 0) return null;
  const max = family === 4 ? 32 : 128;
  const prefix = prefixText === undefined ? max : Number(prefixText);
  if (!Number.isInteger(prefix) || prefix < 0 || prefix > max)
    throw new Error(`backendAllowlist: bad prefix length in ${entry}`);
  return { address: plain, prefix, type: family === 4 ? 'ipv4' : 'ipv6' };
}
