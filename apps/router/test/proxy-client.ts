import { once } from 'node:events';
import { connect, type Socket } from 'node:net';
import {
  Command,
  INETProtocol,
  IPv4Address,
  IPv4ProxyAddress,
  Peer,
  TransportProtocol,
  V1ProxyProtocol,
  V2ProxyProtocol,
} from 'proxy-protocol-js';

/**
 * A client that speaks as a balancer with PROXY protocol would (issue 30): raw sockets from a chosen
 * loopback address, a v1 or v2 header naming the client, then HTTP/1.1 bytes.
 */

export function v1Header(client: string, port: number): Buffer {
  return Buffer.from(new V1ProxyProtocol(INETProtocol.TCP4, new Peer(client, port), new Peer('127.0.0.1', 1)).build());
}

/** A v2 header naming the IPv4 `client` (`a.b.c.d`); `LOCAL`: a balancer's own health check. */
export function v2Header(client: string, port: number, command = Command.PROXY): Buffer {
  const octets = client.split('.').map(Number);
  const address = new IPv4ProxyAddress(IPv4Address.createFrom(octets), port, IPv4Address.createFrom([127, 0, 0, 1]), 1);
  return Buffer.from(new V2ProxyProtocol(command, TransportProtocol.STREAM, address).build());
}

/** An HTTP/1.1 chat request that closes its connection once answered. */
export function chatRequest(options: { readonly apiKey?: string; readonly model?: string } = {}): Buffer {
  const body = JSON.stringify({ model: options.model ?? 'm', messages: [{ role: 'user', content: 'hi' }] });
  const auth = options.apiKey === undefined ? '' : `Authorization: Bearer ${options.apiKey}\r\n`;
  return Buffer.from(
    `POST /v1/chat/completions HTTP/1.1\r\nHost: router\r\nContent-Type: application/json\r\n${auth}` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}

/**
 * Connects from `localAddress`, writes `pieces` (30 ms apart) and returns everything read until the
 * router closes the connection (at most 5 s).
 */
export async function exchange(port: number, localAddress: string, pieces: readonly Buffer[]): Promise<string> {
  const socket: Socket = connect({ port, host: '127.0.0.1', localAddress });
  socket.on('error', () => undefined);
  await once(socket, 'connect');
  const chunks: Buffer[] = [];
  socket.on('data', (chunk: Buffer) => chunks.push(chunk));
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  for (const [index, piece] of pieces.entries()) {
    if (index > 0) await new Promise((resolve) => setTimeout(resolve, 30));
    socket.write(piece);
  }
  const timer = setTimeout(() => socket.destroy(), 5_000);
  await closed;
  clearTimeout(timer);
  return Buffer.concat(chunks).toString('utf8');
}

/** The status code of a raw HTTP/1.1 answer (NaN for none). */
export function statusOf(answer: string): number {
  return Number(answer.slice(9, 12));
}
