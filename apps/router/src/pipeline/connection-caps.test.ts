import { EventEmitter, once } from 'node:events';
import { createServer, type Server } from 'node:http';
import { type AddressInfo, connect, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { RouterConfig } from '../config';
import { createRouterServer, type RouterServer } from '../create-router';
import { ConnectionCaps } from './connection-caps';

/**
 * Connection caps (connection-caps.ts) on a real router, with raw sockets from distinct loopback
 * addresses (127.0.0.x: distinct client addresses). The backend answers every chat request at once,
 * except a body holding `"hold"`, which it never answers.
 */
describe('connection caps', () => {
  let backend: Server;
  let router: RouterServer;
  let port: number;
  const sockets: Socket[] = [];

  async function start(overrides: Partial<RouterConfig>): Promise<void> {
    backend = createServer((request, response) => {
      let body = '';
      request.on('data', (chunk: Buffer) => {
        body += chunk.toString('utf8');
      });
      request.on('end', () => {
        if (body.includes('"hold"')) return;
        response.setHeader('content-type', 'application/json');
        response.end('{"id":"c","object":"chat.completion","model":"m","choices":[]}');
      });
    });
    backend.listen(0, '127.0.0.1');
    await once(backend, 'listening');
    const url = `http://127.0.0.1:${(backend.address() as AddressInfo).port}`;
    router = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        opsPort: 0,
        backends: [{ url, id: 'b0', models: ['m'] }],
        ...overrides,
      }),
      { logger: false },
    );
    port = Number(new URL(await router.listen()).port);
  }

  afterEach(async () => {
    for (const socket of sockets.splice(0)) socket.destroy();
    backend.closeAllConnections();
    await router.close({ graceMs: 10 });
    await new Promise((resolve) => backend.close(resolve));
  });

  /** A keep-alive connection from `localAddress` that has been answered one `GET /healthz` and stays open, idle. */
  async function idleAfterHealthz(localAddress: string): Promise<Socket> {
    const socket = await open(localAddress);
    socket.write('GET /healthz HTTP/1.1\r\nHost: router\r\n\r\n');
    expect(await answerOn(socket)).toMatch(/^HTTP\/1\.1 200/);
    return socket;
  }

  async function open(localAddress: string): Promise<Socket> {
    const socket = connect({ port, host: '127.0.0.1', localAddress });
    sockets.push(socket);
    socket.on('error', () => undefined);
    await once(socket, 'connect');
    return socket;
  }

  /** Sends a chat request on a new connection from `localAddress` and returns the start of the answer. */
  async function chatFrom(localAddress: string, content = 'hi'): Promise<string> {
    const socket = await open(localAddress);
    const body = JSON.stringify({ model: 'm', messages: [{ role: 'user', content }] });
    socket.write(
      'POST /v1/chat/completions HTTP/1.1\r\nHost: router\r\nContent-Type: application/json\r\n' +
        `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    return content === 'hold' ? '' : answerOn(socket);
  }

  it('closes idle keep-alive connections so another client is served (finding: 10 idle sockets → 503 for 65 s)', async () => {
    await start({ maxConnections: 10 });
    // Ten clients each leave one idle connection: the router is at its cap.
    const idle: Socket[] = [];
    for (let host = 10; host < 20; host++) idle.push(await idleAfterHealthz(`127.0.0.${host}`));
    expect(await chatFrom('127.0.0.2')).toMatch(/^HTTP\/1\.1 200/);
    // The oldest idle connection made room; the others are still open.
    await waitUntil(() => idle[0]?.destroyed === true || idle[0]?.readableEnded === true);
    expect(idle.slice(1).every((socket) => !socket.readableEnded && !socket.destroyed)).toBe(true);
    const metrics = await router.metrics.registry.metrics();
    expect(metrics).toMatch(/kvroute_router_client_connections_closed_total\{reason="idle_for_room"\} 1\b/);
  });

  it('lets one client address hold only its share of connections: its own idle ones make room first', async () => {
    await start({ maxConnections: 10 });
    // One client with ten idle connections holds at most a quarter of the cap (2); the rest were closed.
    for (let index = 0; index < 10; index++) await idleAfterHealthz('127.0.0.1');
    await waitUntil(() => sockets.filter((socket) => !socket.readableEnded && !socket.destroyed).length <= 2);
    expect(await chatFrom('127.0.0.2')).toMatch(/^HTTP\/1\.1 200/);
    expect(await chatFrom('127.0.0.1')).toMatch(/^HTTP\/1\.1 200/);
  });

  it('refuses a client whose connections are all busy with 429 and closes it, while another client is served', async () => {
    await start({ maxConnections: 10 });
    await chatFrom('127.0.0.1', 'hold');
    await chatFrom('127.0.0.1', 'hold');
    await waitUntil(() => router.inflightRequests === 2);
    const refused = await chatFrom('127.0.0.1');
    expect(refused).toMatch(/^HTTP\/1\.1 429/);
    expect(refused).toContain('ROUTER_ERR_CALLER_CONNECTIONS');
    expect(refused.toLowerCase()).toContain('connection: close');
    expect(await chatFrom('127.0.0.2')).toMatch(/^HTTP\/1\.1 200/);
  });

  it('answers 503 when every connection of the router is busy (no idle one to close)', async () => {
    await start({ maxConnections: 2 });
    await chatFrom('127.0.0.1', 'hold');
    await chatFrom('127.0.0.2', 'hold');
    await waitUntil(() => router.inflightRequests === 2);
    const refused = await chatFrom('127.0.0.3');
    expect(refused).toMatch(/^HTTP\/1\.1 503/);
    expect(refused).toContain('ROUTER_ERR_OVERLOADED');
    // Probes are never capped.
    const probe = await open('127.0.0.3');
    probe.write('GET /healthz HTTP/1.1\r\nHost: router\r\n\r\n');
    expect(await answerOn(probe)).toMatch(/^HTTP\/1\.1 200/);
  });
});

/** The next answer on `socket` (what arrives until a short quiet period, or its close). */
function answerOn(socket: Socket): Promise<string> {
  return new Promise((resolve) => {
    let text = '';
    let quiet: NodeJS.Timeout | undefined;
    const finish = (): void => {
      clearTimeout(quiet);
      socket.removeListener('data', onData);
      resolve(text);
    };
    const onData = (chunk: Buffer): void => {
      text += chunk.toString('utf8');
      clearTimeout(quiet);
      quiet = setTimeout(finish, 30);
    };
    socket.on('data', onData);
    socket.once('close', finish);
  });
}

async function waitUntil(check: () => boolean, timeoutMs = 2_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** The counting alone, on stand-in sockets (an emitter with an address that records being destroyed). */
describe('ConnectionCaps', () => {
  class FakeSocket extends EventEmitter {
    destroyed = false;
    constructor(readonly remoteAddress: string) {
      super();
    }
    destroy(): void {
      this.destroyed = true;
      this.emit('close');
    }
  }
  const socketFrom = (address: string): Socket => new FakeSocket(address) as unknown as Socket;

  it('serves a connection left out once room frees, and never closes a busy one', () => {
    const caps = new ConnectionCaps({ maxConnections: 2, maxConnectionsPerPeer: 2 });
    const [a, b, c] = [socketFrom('10.0.0.1'), socketFrom('10.0.0.2'), socketFrom('10.0.0.3')] as [
      Socket,
      Socket,
      Socket,
    ];
    caps.connected(a);
    caps.connected(b);
    expect(caps.started(a, true)).toBeNull();
    expect(caps.started(b, true)).toBeNull();
    // Both busy: the third is left out, and a proxied request on it is refused by the router's cap.
    caps.connected(c);
    expect(caps.served).toBe(2);
    expect(caps.started(c, true)).toBe('router');
    // A probe on it is not capped.
    expect(caps.started(c, false)).toBeNull();
    caps.ended(c);
    // a's request ends: a is idle, so c's next proxied request closes a and is served.
    caps.ended(a);
    expect(caps.started(c, true)).toBeNull();
    expect(a.destroyed).toBe(true);
    expect(b.destroyed).toBe(false);
    expect(caps.served).toBe(2);
  });

  it('closes the peer’s own oldest idle connection at its cap, not another peer’s', () => {
    let closedForRoom = 0;
    const caps = new ConnectionCaps({
      maxConnections: 10,
      maxConnectionsPerPeer: 2,
      onIdleClosed: () => closedForRoom++,
    });
    const other = socketFrom('10.0.0.9');
    caps.connected(other);
    const mine = [socketFrom('10.0.0.1'), socketFrom('10.0.0.1'), socketFrom('10.0.0.1')] as [Socket, Socket, Socket];
    for (const socket of mine) caps.connected(socket);
    expect(mine.map((socket) => socket.destroyed)).toEqual([true, false, false]);
    expect(other.destroyed).toBe(false);
    expect(closedForRoom).toBe(1);
    // The peer's two are busy now: a fourth of its connections is left out; its proxied request gets the peer's cap.
    caps.started(mine[1], true);
    caps.started(mine[2], true);
    const fourth = socketFrom('10.0.0.1');
    caps.connected(fourth);
    expect(caps.started(fourth, true)).toBe('peer');
  });
});
