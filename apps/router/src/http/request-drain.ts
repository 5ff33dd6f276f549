import type { ServerResponse } from 'node:http';

/**
 * Where a replica is in its shutdown:
 * - `serving`: normal;
 * - `draining`: /readyz fails so that load balancers take the replica out of rotation, but requests are
 *   still served, each response with `Connection: close`, so a keep-alive client opens its next
 *   connection through the balancer, to another replica;
 * - `closing`: the listener is closed (idle connections with it); requests already on a connection are
 *   served to their end, still with `Connection: close`;
 * - `aborting`: the grace deadline passed; what still runs is aborted and new requests are refused.
 */
export type ShutdownPhase = 'serving' | 'draining' | 'closing' | 'aborting';

/**
 * The HTTP side of a graceful shutdown: the phase, and the requests in flight (every response not yet
 * finished, or whose connection has not closed). `track` runs for every request (a Fastify `onRequest`
 * hook), so it costs one Set insertion and one listener.
 *
 * Why `Connection: close` rather than closing connections: an HTTP/1.1 server cannot close an idle
 * keep-alive connection without racing a client that is sending on it at that moment (the request is
 * lost: for a POST the client cannot tell whether it ran). A response that says `Connection: close`
 * ends the connection at a point both sides agree on. During the drain every connection in use gets
 * one; connections idle through the whole drain are the only ones closed under the client.
 */
export class RequestDrain {
  private current: ShutdownPhase = 'serving';
  private readonly open = new Set<ServerResponse>();
  private readonly idleWaiters = new Set<() => void>();

  get phase(): ShutdownPhase {
    return this.current;
  }

  /** True from the drain on: readiness fails. */
  get isShuttingDown(): boolean {
    return this.current !== 'serving';
  }

  /** Requests in flight (responses not finished and not closed). */
  get inflight(): number {
    return this.open.size;
  }

  /** Counts a request until its response ends (or its connection closes); marks it `Connection: close` once draining. */
  track(response: ServerResponse): void {
    if (this.current !== 'serving') markLastOnConnection(response);
    this.open.add(response);
    response.once('close', () => {
      this.open.delete(response);
      if (this.open.size === 0) for (const wake of [...this.idleWaiters]) wake();
    });
  }

  /** Readiness fails from now on, and every response not yet started carries `Connection: close`. Idempotent. */
  beginDraining(): void {
    if (this.current !== 'serving') return;
    this.current = 'draining';
    for (const response of this.open) markLastOnConnection(response);
  }

  /** The listener closes (the caller closes it); requests on open connections are still served. */
  beginClosing(): void {
    this.beginDraining();
    if (this.current === 'draining') this.current = 'closing';
  }

  /** The grace deadline passed: new requests are refused (the caller aborts what runs). */
  beginAborting(): void {
    this.beginDraining();
    this.current = 'aborting';
  }

  /**
   * Resolves true once no request is in flight, false if some still are when `timeoutMs` passes. (Connections
   * quiet at shutdown are closed by http/client-connections.ts, which sees each connection's own activity.)
   */
  waitUntilIdle(timeoutMs: number): Promise<boolean> {
    return this.nextIdle(timeoutMs);
  }

  /** True when the in-flight set empties within `timeoutMs`. */
  private nextIdle(timeoutMs: number): Promise<boolean> {
    if (this.open.size === 0) return Promise.resolve(true);
    if (timeoutMs <= 0) return Promise.resolve(false);
    return new Promise((resolve) => {
      const wake = (): void => {
        clearTimeout(timer);
        this.idleWaiters.delete(wake);
        resolve(true);
      };
      const timer = setTimeout(() => {
        this.idleWaiters.delete(wake);
        resolve(false);
      }, timeoutMs);
      this.idleWaiters.add(wake);
    });
  }
}

/** The response's connection closes after it (headers already sent cannot change: that connection stays open). */
function markLastOnConnection(response: ServerResponse): void {
  if (!response.headersSent && !response.destroyed) response.setHeader('connection', 'close');
}
