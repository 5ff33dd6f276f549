import {
  Command,
  INETProtocol,
  IPv4Address,
  IPv4ProxyAddress,
  IPv6Address,
  IPv6ProxyAddress,
  Peer,
  TransportProtocol,
  V1ProxyProtocol,
  V2ProxyProtocol,
} from 'proxy-protocol-js';
import { describe, expect, it } from 'vitest';
import { MAX_PROXY_HEADER_BYTES, readProxyHeader } from './proxy-header';

const REQUEST = Buffer.from('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');

function v2(command: Command, address: IPv4ProxyAddress | IPv6ProxyAddress): Buffer {
  return Buffer.from(new V2ProxyProtocol(command, TransportProtocol.STREAM, address).build());
}

const v4Address = new IPv4ProxyAddress(
  IPv4Address.createFrom([203, 0, 113, 7]),
  40_000,
  IPv4Address.createFrom([10, 0, 0, 1]),
  8080,
);

describe('readProxyHeader', () => {
  it('reads a v1 header and says where the request starts', () => {
    const header = new V1ProxyProtocol(
      INETProtocol.TCP4,
      new Peer('203.0.113.7', 40_000),
      new Peer('10.0.0.1', 8080),
    ).build();
    const bytes = Buffer.concat([Buffer.from(header), REQUEST]);
    expect(readProxyHeader(bytes)).toEqual({
      kind: 'header',
      bytes: header.length,
      client: { address: '203.0.113.7', port: 40_000, family: 'IPv4' },
    });
  });

  it('reads v1 TCP6 and UNKNOWN (no client: the connection speaks for itself)', () => {
    const tcp6 = Buffer.from('PROXY TCP6 2001:db8::7 2001:db8::1 40000 8080\r\n');
    expect(readProxyHeader(tcp6)).toMatchObject({ client: { address: '2001:db8::7', family: 'IPv6' } });
    expect(readProxyHeader(Buffer.from('PROXY UNKNOWN\r\nGET'))).toEqual({ kind: 'header', bytes: 15, client: null });
  });

  it('reads a v2 header (IPv4 and IPv6), skipping nothing of the request after it', () => {
    const header = v2(Command.PROXY, v4Address);
    expect(readProxyHeader(Buffer.concat([header, REQUEST]))).toEqual({
      kind: 'header',
      bytes: header.length,
      client: { address: '203.0.113.7', port: 40_000, family: 'IPv4' },
    });
    const six = [0x20, 0x01, 0x0d, 0xb8, ...new Array<number>(11).fill(0), 7];
    const v6 = v2(
      Command.PROXY,
      new IPv6ProxyAddress(IPv6Address.createFrom(six), 1234, IPv6Address.createFrom(six), 80),
    );
    expect(readProxyHeader(v6)).toMatchObject({ client: { address: '2001:db8::7', port: 1234, family: 'IPv6' } });
  });

  it('takes a v2 LOCAL header (the balancer’s health check) as naming no client', () => {
    const header = v2(Command.LOCAL, v4Address);
    expect(readProxyHeader(header)).toEqual({ kind: 'header', bytes: header.length, client: null });
  });

  it('asks for more bytes while a header may still complete', () => {
    const header = v2(Command.PROXY, v4Address);
    for (const cut of [1, 5, 12, 15, header.length - 1])
      expect(readProxyHeader(header.subarray(0, cut)).kind, String(cut)).toBe('incomplete');
    expect(readProxyHeader(Buffer.from('PRO')).kind).toBe('incomplete');
    expect(readProxyHeader(Buffer.from('PROXY TCP4 203.0.113.7 10.0')).kind).toBe('incomplete');
  });

  it('refuses what is not a PROXY header, a malformed one and one past its bounds', () => {
    expect(readProxyHeader(REQUEST)).toMatchObject({ kind: 'invalid' });
    expect(readProxyHeader(Buffer.from('PROXY TCP4 not-an-ip 10.0.0.1 1 2\r\n'))).toMatchObject({ kind: 'invalid' });
    expect(readProxyHeader(Buffer.from('PROXY TCP4 ::1 10.0.0.1 1 2\r\n'))).toMatchObject({ kind: 'invalid' });
    expect(readProxyHeader(Buffer.from('PROXY TCP4 1.2.3.4 10.0.0.1 99999 2\r\n'))).toMatchObject({ kind: 'invalid' });
    expect(readProxyHeader(Buffer.from(`PROXY TCP4 ${'1'.repeat(120)}`))).toMatchObject({ kind: 'invalid' });
    const long = v2(Command.PROXY, v4Address);
    long.writeUInt16BE(MAX_PROXY_HEADER_BYTES, 14);
    expect(readProxyHeader(long)).toMatchObject({ kind: 'invalid', reason: 'v2 header too long' });
    const badVersion = v2(Command.PROXY, v4Address);
    badVersion[12] = 0x11;
    expect(readProxyHeader(badVersion)).toMatchObject({ kind: 'invalid' });
  });
});
