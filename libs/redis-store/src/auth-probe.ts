import { connect as connectTcp, type Socket } from 'node:net';
import { connect as connectTls } from 'node:tls';
import { redisUrlNodes } from './connection';

/**
 * Whether a Redis answers commands without authentication: one raw RESP `PING` on a connection of its
 * own that sends no credentials, to the first node the URL names (a cluster's nodes share one ACL
 * setup in practice). The router warns when it stores API keys and tenant limits there.
 *
 * - `open`: `+PONG`, anyone who reaches the port may read and write every key.
 * - `protected`: `-NOAUTH …` (requirepass, or ACL with the default user off or with a password).
 * - `unknown`: anything else (unreachable, timeout, TLS that needs a client certificate, another answer).
 */
export type RedisAuthProbe = 'open' | 'protected' | 'unknown';

export async function probeRedisAuth(url: string, timeoutMs = 1_000): Promise<RedisAuthProbe> {
  const node = redisUrlNodes(url)[0];
  if (node === undefined) return 'unknown';
  const tls = /^rediss/i.test(url);
  return new Promise((resolve) => {
    let buffered = '';
    let settled = false;
    const socket: Socket = tls
      ? connectTls({ host: node.host, port: node.port, servername: node.host })
      : connectTcp({ host: node.host, port: node.port });
    const finish = (answer: RedisAuthProbe): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(answer);
    };
    const timer = setTimeout(() => finish('unknown'), timeoutMs);
    socket.setEncoding('utf8');
    socket.once(tls ? 'secureConnect' : 'connect', () => socket.write('*1\r\n$4\r\nPING\r\n'));
    socket.on('data', (chunk: string) => {
      buffered += chunk;
      if (!buffered.includes('\r\n')) return;
      if (buffered.startsWith('+PONG')) finish('open');
      else if (buffered.startsWith('-NOAUTH')) finish('protected');
      else finish('unknown');
    });
    socket.on('error', () => finish('unknown'));
    socket.on('close', () => finish('unknown'));
  });
}
