import type { Server } from 'node:http';
import { BlockList, isIP, type Socket } from 'node:net';
import { MAX_PROXY_HEADER_BYTES, type ProxiedClient, readProxyHeader } from './proxy-header';

/**
 * PROXY protocol on the public listener (issue 30): behind an L4 balancer every connection comes from the
 * balancer, so the client's address must come from the balancer's PROXY header (proxy-header.ts).
 *
 * - A connection from a `proxyProtocolFrom` address (CIDRs: the balancers) MUST start with a PROXY
 *   header within `timeoutMs`; without one (other bytes, too long, too slow) it is closed before HTTP
 *   sees a byte. Its real client's address then stands in for the socket's own: `socket.remoteAddress`
 *   (and `remotePort`, `remoteFamily`) become the client's, so every reader of the peer address (admit's
 *   per-caller caps and connection caps, the auth-failure limiter, `X-Forwarded-For`, Fastify's
 *   `request.ip`) reads the real client. The balancer's own address stays readable (`balancerAddressOf`).
 * - A connection from any other address is served as it is: a PROXY header from it is not trusted,
 *   only bad HTTP (400).
 *
 * How: the HTTP server's own `connection` listeners (Node's parser, the connection caps) are taken off
 * the server and called once the header is read, with the bytes after it put back (`unshift`) for the
 * parser. The socket is paused in between so nothing reaches the parser twice or out of order.
 */
export interface ProxyProtocolOptions {
  /** CIDRs or addresses of the balancers (`10.0.0.0/8`, `fd00::/8`, `127.0.0.1`). Empty: PROXY protocol off. */
  readonly trustedFrom: readonly string[];
  /** A trusted connection's header must be complete within this long, ms. */
  readonly timeoutMs: number;
  /** Called for each trusted connection closed for its header (missing, malformed, slow). */
  readonly onRefused?: (reason: string, balancer: string) => void;
}

const BALANCER = Symbol('kvroute.balancerAddress');
type ProxiedSocket = Socket & { [BALANCER]?: string };

/** Installs PROXY protocol handling on `server` (after its other `connection` listeners are added). No-op when none is trusted. */
export function acceptProxyProtocol(server: Server, options: ProxyProtocolOptions): void {
  if (options.trustedFrom.length === 0) return;
  const trusted = blockListOf(options.trustedFrom);
  const listeners = server.listeners('connection') as ((socket: Socket) => void)[];
  server.removeAllListeners('connection');
  const handOver = (socket: Socket): void => {
    for (const listener of listeners) listener.call(server, socket);
  };
  server.on('connection', (socket: Socket) => {
    const peer = socket.remoteAddress;
    if (peer === undefined || !isTrustedPeer(trusted, peer)) return handOver(socket);
    readHeaderThen(socket, options.timeoutMs, (outcome) => {
      if (outcome.kind === 'refused') {
        options.onRefused?.(outcome.reason, peer);
        socket.destroy();
        return;
      }
      if (outcome.client !== null) standIn(socket, outcome.client, peer);
      if (outcome.rest.length > 0) socket.unshift(outcome.rest);
      handOver(socket);
      socket.resume();
    });
  });
}

/** The balancer a proxied connection came through, or null for a direct one. */
export function balancerAddressOf(socket: Socket): string | null {
  return (socket as ProxiedSocket)[BALANCER] ?? null;
}

/** Whether `entry` is an IP address or a CIDR (`10.0.0.0/8`, `fd00::/8`): config validation. */
export function isAddressOrCidr(entry: string): boolean {
  return parseCidr(entry) !== null;
}

type HeaderOutcome =
  | { readonly kind: 'refused'; readonly reason: string }
  | { readonly kind: 'read'; readonly client: ProxiedClient | null; readonly rest: Buffer };

/** Collects the socket's first bytes until they hold a whole PROXY header (bounded in bytes and time), then pauses it. */
function readHeaderThen(socket: Socket, timeoutMs: number, then: (outcome: HeaderOutcome) => void): void {
  let received: Buffer = Buffer.alloc(0);
  const finish = (outcome: HeaderOutcome): void => {
    clearTimeout(timer);
    socket.removeListener('data', onData);
    socket.removeListener('error', onEnded);
    socket.removeListener('end', onEnded);
    socket.removeListener('close', onEnded);
    socket.pause();
    then(outcome);
  };
  const onData = (chunk: Buffer): void => {
    received = received.length === 0 ? chunk : Buffer.concat([received, chunk]);
    const reading = readProxyHeader(received);
    if (reading.kind === 'header')
      return finish({ kind: 'read', client: reading.client, rest: received.subarray(reading.bytes) });
    if (reading.kind === 'invalid') return finish({ kind: 'refused', reason: reading.reason });
    if (received.length >= MAX_PROXY_HEADER_BYTES) finish({ kind: 'refused', reason: 'header too long' });
  };
  const onEnded = (): void => finish({ kind: 'refused', reason: 'closed before its PROXY header' });
  const timer = setTimeout(() => finish({ kind: 'refused', reason: 'no complete PROXY header in time' }), timeoutMs);
  socket.on('data', onData);
  socket.once('error', onEnded);
  socket.once('end', onEnded);
  socket.once('close', onEnded);
}

/** Makes the socket report the proxied client as its peer (own properties shadow net.Socket's getters). */
function standIn(socket: Socket, client: ProxiedClient, balancer: string): void {
  (socket as ProxiedSocket)[BALANCER] = balancer;
  for (const [name, value] of [
    ['remoteAddress', client.address],
    ['remotePort', client.port],
    ['remoteFamily', client.family],
  ] as const) {
    Object.defineProperty(socket, name, { value, configurable: true, enumerable: true });
  }
}

function blockListOf(entries: readonly string[]): BlockList {
  const list = new BlockList();
  for (const entry of entries) {
    const cidr = parseCidr(entry);
    if (cidr === null) throw new Error(`proxyProtocolFrom: not an address or CIDR: ${entry}`);
    list.addSubnet(cidr.address, cidr.prefix, cidr.type);
  }
  return list;
}

/** IPv4-mapped IPv6 peers (`::ffff:a.b.c.d`, a dual-stack listener's view of IPv4) match IPv4 entries. */
function isTrustedPeer(list: BlockList, peer: string): boolean {
  return list.check(peer, isIP(peer) === 6 ? 'ipv6' : 'ipv4');
}

function parseCidr(entry: string): { address: string; prefix: number; type: 'ipv4' | 'ipv6' } | null {
  const [address, prefixText, extra] = entry.trim().split('/');
  if (extra !== undefined || address === undefined) return null;
  const family = isIP(address);
  if (family === 0) return null;
  const max = family === 4 ? 32 : 128;
  const prefix = prefixText === undefined ? max : Number(prefixText);
  if (!/^\d+$/.test(prefixText ?? String(max)) || prefix > max) return null;
  return { address, prefix, type: family === 4 ? 'ipv4' : 'ipv6' };
}
