import type { Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

/**
 * The public server's client connections, for the shutdown: a keep-alive connection is closed only
 * when no request is on it and nothing has arrived on it for `quietMs`, never under a client sending.
 *
 * Why not Node's own: `server.close()` closes every idle connection at once (closeIdleConnections), and
 * "idle" there means no request parsed yet. A client whose next request is on the wire, or in the
 * socket's buffer while the event loop is busy, has its connection closed under it: it sees "other side
 * closed" (undici UND_ERR_SOCKET) and, for a POST, cannot know whether the request ran. That happens to
 * the connection a stream started before the shutdown leaves behind: its client sends the next request
 * on it the moment the stream ends. Here the listener closes alone; a request that arrives on an open
 * connection is served with `Connection: close` (RequestDrain) and the client closes the connection;
 * one that stays quiet is closed (half-closed first: lingering-close.ts) once `quietMs` has passed.
 *
 * The remaining race is a client that picks a connection it left quiet for `quietMs` at the instant it
 * is closed; `quietMs` is chosen above the gap between a response and the next request of a busy client.
 */
export const QUIET_BEFORE_CLOSE_MS = 1_000;

interface ConnectionState {
  /** Requests on it whose responses have not closed. */
  requests: number;
  /** performance.now() of its last request start or response end. */
  lastActivityMs: number;
  /** Bytes read as of the last look: more since means something is arriving. */
  bytesRead: number;
  /** Half-closed by `closeQuiet` already (it lingers until the client closes or the linger ends). */
  closing: boolean;
}

export class ClientConnections {
  private readonly states = new Map<Socket, ConnectionState>();

  /** Tracks `server`'s connections; from now on its close() closes the listener only (the idle ones are `closeQuiet`'s). */
  attach(server: Server): void {
    server.on('connection', (socket: Socket) => {
      this.states.set(socket, { requests: 0, lastActivityMs: performance.now(), bytesRead: 0, closing: false });
      socket.once('close', () => this.states.delete(socket));
    });
    server.closeIdleConnections = () => undefined;
  }

  /** A request arrived on its connection (every request: the app's first onRequest hook); counted until its response closes. */
  track(response: ServerResponse): void {
    const state = this.states.get(response.socket as Socket);
    if (state === undefined) return;
    state.requests += 1;
    state.lastActivityMs = performance.now();
    response.once('close', () => {
      state.requests -= 1;
      state.lastActivityMs = performance.now();
    });
  }

  /** Open client connections. */
  get size(): number {
    return this.states.size;
  }

  /**
   * Half-closes every connection with no request on it, nothing read since the last look, and no
   * activity for `quietMs`; returns how many connections are left open.
   */
  closeQuiet(quietMs = QUIET_BEFORE_CLOSE_MS): number {
    const now = performance.now();
    for (const [socket, state] of this.states) {
      const bytesRead = socket.bytesRead;
      if (bytesRead !== state.bytesRead) {
        state.bytesRead = bytesRead;
        state.lastActivityMs = now;
      }
      if (state.closing || state.requests > 0 || now - state.lastActivityMs < quietMs) continue;
      state.closing = true;
      // destroySoon: the lingering close where it is installed (lingering-close.ts), else end then destroy.
      socket.destroySoon();
    }
    return this.states.size;
  }

  /** `closeQuiet` every `everyMs` until no connection is open (true) or `timeoutMs` passed (false). */
  async closeWhenQuiet(timeoutMs: number, quietMs = QUIET_BEFORE_CLOSE_MS, everyMs = 50): Promise<boolean> {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      if (this.closeQuiet(quietMs) === 0) return true;
      const left = deadline - performance.now();
      if (left <= 0) return false;
      await new Promise((resolve) => setTimeout(resolve, Math.min(everyMs, left)));
    }
  }
}
