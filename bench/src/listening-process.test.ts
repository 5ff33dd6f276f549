import { existsSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { describe, expect, it } from 'vitest';
import { listeningSocketInodes, processListeningOn } from './listening-process';

describe('listeningSocketInodes', () => {
  const header = '  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode';
  it('picks the sockets in LISTEN state on the port, IPv4 and IPv6', () => {
    const tcp = [
      header,
      '   0: 0100007F:18EB 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0000000000000000 100 0 0 10 0',
      // same port, established (st 01): a connection, not the listener
      '   1: 0100007F:18EB 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0000000000000000 20 4 30 10 -1',
      // another port
      '   2: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 333 1 0000000000000000 100 0 0 10 0',
    ].join('\n');
    expect(listeningSocketInodes(tcp, 0x18eb)).toEqual(['111']);
    const tcp6 = [
      header,
      '   0: 00000000000000000000000001000000:18EB 00000000000000000000000000000000:0000 0A 00000000:00000000 ' +
        '00:00000000 00000000     0        0 444 1 0 100 0 0 10 0',
    ].join('\n');
    expect(listeningSocketInodes(tcp6, 0x18eb)).toEqual(['444']);
    expect(listeningSocketInodes('', 6379)).toEqual([]);
  });
});

describe.skipIf(!existsSync('/proc/net/tcp'))('processListeningOn', () => {
  it('finds this process behind a port it listens on, and nothing behind a closed port', async () => {
    const server: Server = createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as { port: number };
    try {
      const found = processListeningOn(port, [process.pid]);
      expect(found?.pid).toBe(process.pid);
      expect(found?.command.length).toBeGreaterThan(0);
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
    expect(processListeningOn(port, [process.pid])).toBeUndefined();
  });
});
