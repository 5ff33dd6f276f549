/**
 * Addresses as the backend address guard compares them: two spellings that reach the same socket must
 * compare equal, or a denial by one spelling is bypassed by another (`[::1]:6379` for a Redis at
 * `127.0.0.1:6379`, `[::ffff:127.0.0.1]` for `127.0.0.1`, the host's own LAN address for loopback).
 *
 * - IPv4 embedded in IPv6 (`::ffff:a.b.c.d`, SIIT `::ffff:0:a.b.c.d`, NAT64 `64:ff9b::a.b.c.d`, also in the
 *   hex spelling URL normalises them to) is the IPv4 address.
 * - IPv6 is in its canonical text form (lower case, zeros compressed), as URL spells it.
 * - Every address of this host is one address, `THIS_HOST`: loopback (127.0.0.0/8, ::1), unspecified
 *   (0.0.0.0, ::: a listener bound there takes every local address) and the host's interface addresses.
 *   A service on this host may listen on any of them (Redis binds `127.0.0.1 ::1` by default), so a
 *   denial of one is a denial of all.
 */
import { BlockList, isIP } from 'node:net';

/** The canonical form of every address of this host. */
export const THIS_HOST = 'this-host';

const LOOPBACK_OR_UNSPECIFIED = (() => {
  const list = new BlockList();
  list.addSubnet('127.0.0.0', 8, 'ipv4');
  list.addSubnet('0.0.0.0', 8, 'ipv4');
  list.addAddress('::1', 'ipv6');
  list.addAddress('::', 'ipv6');
  return list;
})();

/**
 * IPv4 embedded in IPv6 → the IPv4 address: IPv4-mapped `::ffff:a.b.c.d`, SIIT `::ffff:0:a.b.c.d` and
 * NAT64 `64:ff9b::a.b.c.d`, each also in the hex spelling `…:hhhh:hhhh` (as URL normalises it). Other
 * addresses come back lower-cased.
 */
export function unmapIpv4(address: string): string {
  const dotted = /^(?:::ffff:|::ffff:0:|64:ff9b::)(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (dotted) return dotted[1] as string;
  const hex = /^(?:::ffff:|::ffff:0:|64:ff9b::)([0-9a-f]{1,4}):([0-9a-f]{1,4})$/i.exec(address);
  if (hex) {
    const high = Number.parseInt(hex[1] as string, 16);
    const low = Number.parseInt(hex[2] as string, 16);
    return `${high >> 8}.${high & 255}.${low >> 8}.${low & 255}`;
  }
  return address.toLowerCase();
}

/**
 * An IP address in one spelling: IPv4 unmapped, IPv6 as URL writes it (`0:0::1` → `::1`), without a zone
 * (`fe80::1%eth0`: URL refuses zones, and the zone names an interface, not another address). Not an IP:
 * as given, lower-cased.
 */
export function normaliseIp(address: string): string {
  const bare = address.replace(/^\[|\]$/g, '').replace(/%.*$/, '');
  if (isIP(bare) !== 6) return bare.toLowerCase();
  const spelled = new URL(`http://[${bare}]/`).hostname.replace(/^\[|\]$/g, '');
  return unmapIpv4(spelled);
}

/**
 * Compares addresses across spellings and, for this host, across interfaces.
 * `localAddresses`: the host's interface addresses (main: os.networkInterfaces()); loopback and the
 * unspecified addresses count as this host without them.
 */
export class AddressCanon {
  private readonly local: ReadonlySet<string>;

  constructor(localAddresses: readonly string[]) {
    this.local = new Set(localAddresses.map(normaliseIp));
  }

  /** The canonical form of an IP address: `THIS_HOST` for any address of this host. */
  of(address: string): string {
    const plain = normaliseIp(address);
    const family = isIP(plain);
    if (family === 0) return plain;
    if (LOOPBACK_OR_UNSPECIFIED.check(plain, family === 6 ? 'ipv6' : 'ipv4') || this.local.has(plain)) return THIS_HOST;
    return plain;
  }

  /** `canonical|port`: the key of one listening socket. */
  endpoint(address: string, port: number | string): string {
    return `${this.of(address)}|${String(port)}`;
  }
}
