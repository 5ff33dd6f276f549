import type { Server } from 'node:http';
import type { Socket } from 'node:net';

/**
 * Lingering close (Apache's and nginx's `lingering_close`): a connection the router ends after an answer
 * while the client may still be sending (a 413 for a body over the limit, a refusal before the body is
 * read, the last response of a draining replica) is half-closed, not destroyed. The answer and a FIN go
 * out, and what the client still sends is read and dropped for up to `lingerMs`, then the socket is
 * destroyed (at once when the client closes its side).
 *
 * Why: closing a socket with unread bytes in its receive buffer makes the kernel answer with a reset,
 * and a client still writing its body gets EPIPE/ECONNRESET before it reads the 413 it was sent (Python's
 * http.client, curl without `Expect`): a connection error instead of an answer.
 *
 * How: Node's HTTP server ends a connection after a `Connection: close` response with
 * `socket.destroySoon()` (end, then destroy once written). Each public connection's `destroySoon` is
 * this instead; the HTTP parser keeps reading, and the unread request body is discarded as Node does
 * for every answered request (IncomingMessage._dump).
 */
export const LINGER_MS = 2_000;

export function lingerBeforeClose(server: Server, lingerMs = LINGER_MS): void {
  server.on('connection', (socket: Socket) => {
    socket.destroySoon = () => lingeringClose(socket, lingerMs);
  });
}

function lingeringClose(socket: Socket, lingerMs: number): void {
  if (socket.destroyed) return;
  if (socket.writable) socket.end();
  // The client has closed its side already: nothing more will arrive.
  if (socket.readableEnded) {
    socket.destroy();
    return;
  }
  const cut = setTimeout(() => socket.destroy(), lingerMs);
  cut.unref();
  socket.once('close', () => clearTimeout(cut));
  socket.once('end', () => socket.destroy());
}
