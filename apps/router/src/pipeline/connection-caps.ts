import type { Socket } from 'node:net';

/**
 * How many client connections the router serves at once (issue 30, "admission that knows the caller"):
 * `maxConnections` in all, `maxConnectionsPerPeer` from one client address (the real client behind a
 * PROXY-protocol balancer: http/proxy-protocol.ts). The per-peer cap is below the global one, so no
 * single client can reach the global cap alone.
 *
 * A connection is *served* (counted) or not. When a new connection arrives and a cap is reached, an idle
 * served connection is closed to make room: the peer's own oldest idle one for its cap, the oldest idle
 * one of anybody for the global cap. Idle: served, with no request in progress (a fresh connection that
 * has sent nothing yet is idle since it connected), ordered by when it became idle. Only when no idle
 * connection can go is the new one left unserved; a proxied request arriving on it tries once more,
 * then is refused (admit.ts: 503 for the global cap, 429 for the peer's). Finding fixed: 10 idle
 * keep-alive connections after one `GET /healthz` each turned every other client's `/v1/*` into 503
 * until keepAliveTimeoutMs (65 s) with `maxConnections` 10.
 *
 * A keep-alive connection may be closed just as its client starts another request on it (HTTP allows
 * this, and clients retry idempotent requests): the oldest idle goes first, the least likely to be in use.
 */
export interface ConnectionCapsOptions {
  readonly maxConnections: number;
  readonly maxConnectionsPerPeer: number;
  /** Called for each idle connection closed to make room (a metric). */
  readonly onIdleClosed?: () => void;
}

/** Which cap refused a request: the router's (503) or its client's (429). */
export type ConnectionRefusal = 'router' | 'peer';

interface Connection {
  readonly peer: string;
  served: boolean;
  /** Requests in progress on it (more than one only with pipelining). */
  busy: number;
}

export class ConnectionCaps {
  readonly #options: ConnectionCapsOptions;
  readonly #connections = new WeakMap<Socket, Connection>();
  #served = 0;
  /** Served connections per peer; a peer with none has no entry. */
  readonly #servedByPeer = new Map<string, number>();
  /** Served connections with no request in progress, oldest idle first (a Set keeps insertion order). */
  readonly #idle = new Set<Socket>();
  readonly #idleByPeer = new Map<string, Set<Socket>>();

  constructor(options: ConnectionCapsOptions) {
    this.#options = options;
  }

  /** Served connections now (for tests and gauges). */
  get served(): number {
    return this.#served;
  }

  /** A new client connection (its `remoteAddress` already the real client's). */
  connected(socket: Socket): void {
    const connection: Connection = { peer: socket.remoteAddress ?? 'unknown', served: false, busy: 0 };
    this.#connections.set(socket, connection);
    this.#serve(socket, connection);
    socket.once('close', () => this.#unserve(socket, connection));
  }

  /**
   * A request starts on `socket`. `capped`: the request may be refused (proxied requests; probes and
   * metrics never are). Returns the cap that refuses it, or null when it goes on (then call `ended`).
   */
  started(socket: Socket, capped: boolean): ConnectionRefusal | null {
    const connection = this.#connections.get(socket);
    if (connection === undefined) return null;
    if (!connection.served && capped) {
      const refusal = this.#serve(socket, connection);
      if (refusal !== null) return refusal;
    }
    connection.busy++;
    this.#setIdle(socket, connection, false);
    return null;
  }

  /** The request `started` let go on has been answered (or its client went away). */
  ended(socket: Socket): void {
    const connection = this.#connections.get(socket);
    if (connection === undefined || connection.busy === 0) return;
    connection.busy--;
    if (connection.busy === 0 && connection.served && !socket.destroyed) this.#setIdle(socket, connection, true);
  }

  /** Counts the connection as served, closing an idle one if a cap is reached; the cap in the way if none can go. */
  #serve(socket: Socket, connection: Connection): ConnectionRefusal | null {
    const { peer } = connection;
    if (
      (this.#servedByPeer.get(peer) ?? 0) >= this.#options.maxConnectionsPerPeer &&
      !this.#evictOldest(this.#idleByPeer.get(peer))
    )
      return 'peer';
    if (this.#served >= this.#options.maxConnections && !this.#evictOldest(this.#idle)) return 'router';
    connection.served = true;
    this.#served++;
    this.#servedByPeer.set(peer, (this.#servedByPeer.get(peer) ?? 0) + 1);
    if (connection.busy === 0) this.#setIdle(socket, connection, true);
    return null;
  }

  /** Closes the oldest connection of `idle`, if any. */
  #evictOldest(idle: Set<Socket> | undefined): boolean {
    const oldest = idle?.values().next().value;
    if (oldest === undefined) return false;
    const connection = this.#connections.get(oldest);
    if (connection !== undefined) this.#unserve(oldest, connection);
    oldest.destroy();
    this.#options.onIdleClosed?.();
    return true;
  }

  #unserve(socket: Socket, connection: Connection): void {
    if (!connection.served) return;
    connection.served = false;
    this.#setIdle(socket, connection, false);
    this.#served--;
    const left = (this.#servedByPeer.get(connection.peer) ?? 1) - 1;
    if (left === 0) this.#servedByPeer.delete(connection.peer);
    else this.#servedByPeer.set(connection.peer, left);
  }

  /** Puts the socket last in the idle order (idle) or out of it (busy or gone). */
  #setIdle(socket: Socket, connection: Connection, idle: boolean): void {
    this.#idle.delete(socket);
    const ofPeer = this.#idleByPeer.get(connection.peer);
    ofPeer?.delete(socket);
    if (idle) {
      this.#idle.add(socket);
      if (ofPeer === undefined) this.#idleByPeer.set(connection.peer, new Set([socket]));
      else ofPeer.add(socket);
    } else if (ofPeer?.size === 0) {
      this.#idleByPeer.delete(connection.peer);
    }
  }
}
