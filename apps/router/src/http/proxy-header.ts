import { isIP } from 'node:net';
import { V1ProxyProtocol, V2ProxyProtocol } from 'proxy-protocol-js';

/**
 * Reads the PROXY protocol header (v1 text or v2 binary, haproxy.org/download/2.8/doc/proxy-protocol.txt)
 * at the start of a connection's bytes. Pure: the bytes in, what they say out. proxy-protocol-js parses
 * the addresses; the framing (how long the header is, when it is complete, the bounds) is done here,
 * because that library reads a v2 header's TLVs and whatever follows as one `data` tail.
 *
 * - v1: `PROXY TCP4|TCP6 <src> <dst> <sport> <dport>\r\n`, at most 107 bytes with its CRLF (the spec's
 *   bound). `PROXY UNKNOWN…\r\n` says nothing about the client: the connection's own address stands.
 * - v2: 12-byte signature, version/command, family/transport, 2-byte length, then the addresses and
 *   any TLVs (skipped). Command LOCAL (the balancer's own health checks) and families other than
 *   INET/INET6 say nothing about a client either.
 * - Longer than `MAX_PROXY_HEADER_BYTES` (v2 TLVs included): invalid.
 */
export const MAX_PROXY_HEADER_BYTES = 2_048;
const V1_MAX_BYTES = 107;
const V1_SIGNATURE = Buffer.from('PROXY ', 'latin1');
const V2_SIGNATURE = Buffer.from([0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a]);
/** Signature (12) + version/command (1) + family/transport (1) + length (2). */
const V2_FIXED_BYTES = 16;

/** The client a PROXY header names. */
export interface ProxiedClient {
  readonly address: string;
  readonly port: number;
  readonly family: 'IPv4' | 'IPv6';
}

export type ProxyHeaderReading =
  /** More bytes are needed to tell. */
  | { readonly kind: 'incomplete' }
  | { readonly kind: 'invalid'; readonly reason: string }
  /** `bytes`: the header's length (the HTTP request starts after it); `client` null: use the connection's own address. */
  | { readonly kind: 'header'; readonly bytes: number; readonly client: ProxiedClient | null };

const INCOMPLETE: ProxyHeaderReading = { kind: 'incomplete' };

/** What the first bytes of a connection say: a PROXY header, not yet, or not a valid one. */
export function readProxyHeader(bytes: Buffer): ProxyHeaderReading {
  if (startsLike(bytes, V2_SIGNATURE)) return bytes.length < V2_SIGNATURE.length ? INCOMPLETE : readV2(bytes);
  if (startsLike(bytes, V1_SIGNATURE)) return bytes.length < V1_SIGNATURE.length ? INCOMPLETE : readV1(bytes);
  return { kind: 'invalid', reason: 'no PROXY protocol header' };
}

/** Whether `bytes` and `signature` agree on their common length (a prefix of the signature is "like" it). */
function startsLike(bytes: Buffer, signature: Buffer): boolean {
  const length = Math.min(bytes.length, signature.length);
  return bytes.subarray(0, length).equals(signature.subarray(0, length));
}

function readV1(bytes: Buffer): ProxyHeaderReading {
  const end = bytes.subarray(0, V1_MAX_BYTES).indexOf('\r\n', 0, 'latin1');
  if (end === -1)
    return bytes.length >= V1_MAX_BYTES
      ? { kind: 'invalid', reason: 'v1 header without CRLF in 107 bytes' }
      : INCOMPLETE;
  const line = bytes.toString('latin1', 0, end);
  const length = end + 2;
  if (line === 'PROXY UNKNOWN' || line.startsWith('PROXY UNKNOWN '))
    return { kind: 'header', bytes: length, client: null };
  let parsed: V1ProxyProtocol;
  try {
    parsed = V1ProxyProtocol.parse(`${line}\r\n`);
  } catch {
    return { kind: 'invalid', reason: 'malformed v1 header' };
  }
  const family = parsed.inetProtocol === 'TCP4' ? 4 : 6;
  const { ipAddress, port } = parsed.source;
  if (isIP(ipAddress) !== family || !isPort(port) || !isPort(parsed.destination.port))
    return { kind: 'invalid', reason: 'malformed v1 address' };
  return { kind: 'header', bytes: length, client: clientOf(ipAddress, port, family) };
}

function readV2(bytes: Buffer): ProxyHeaderReading {
  if (bytes.length < V2_FIXED_BYTES) return INCOMPLETE;
  const versionAndCommand = bytes.readUInt8(12);
  const version = versionAndCommand >> 4;
  const command = versionAndCommand & 0x0f;
  if (version !== 2 || command > 1) return { kind: 'invalid', reason: 'v2 header with a bad version or command' };
  const length = V2_FIXED_BYTES + bytes.readUInt16BE(14);
  if (length > MAX_PROXY_HEADER_BYTES) return { kind: 'invalid', reason: 'v2 header too long' };
  if (bytes.length < length) return INCOMPLETE;
  const familyByte = bytes.readUInt8(13) >> 4;
  // LOCAL (0): the balancer speaks for itself; UNSPEC or UNIX families: no IP client to name.
  if (command === 0 || (familyByte !== 1 && familyByte !== 2)) return { kind: 'header', bytes: length, client: null };
  let parsed: V2ProxyProtocol;
  try {
    parsed = V2ProxyProtocol.parse(new Uint8Array(bytes.subarray(0, length)));
  } catch {
    return { kind: 'invalid', reason: 'malformed v2 header' };
  }
  const address = parsed.proxyAddress as unknown as {
    readonly sourceAddress: { readonly address: readonly number[] };
    readonly sourcePort: number;
  };
  const octets = address.sourceAddress.address;
  const text = familyByte === 1 ? octets.join('.') : ipv6Text(octets);
  return { kind: 'header', bytes: length, client: clientOf(text, address.sourcePort, familyByte === 1 ? 4 : 6) };
}

/** 16 bytes as Node writes an IPv6 peer (`socket.remoteAddress`): lower case, zeros compressed. */
function ipv6Text(octets: readonly number[]): string {
  const bytes = Buffer.from(octets);
  const groups: string[] = [];
  for (let index = 0; index < 16; index += 2) groups.push(bytes.readUInt16BE(index).toString(16));
  // The URL parser writes the canonical form (RFC 5952), as the socket layer does.
  return new URL(`http://[${groups.join(':')}]/`).hostname.slice(1, -1);
}

function clientOf(address: string, port: number, family: 4 | 6): ProxiedClient {
  return { address, port, family: family === 4 ? 'IPv4' : 'IPv6' };
}

function isPort(port: number): boolean {
  return Number.isInteger(port) && port >= 0 && port <= 65_535;
}
