import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import { settlesWithin, type ShutdownStack } from '@kvroute/platform';
import type { UpstreamPools } from '../proxy/upstream-pool';
import type { HeldLeases } from '../routing/held-leases';
import type { ClientConnections } from './client-connections';
import type { RequestDrain } from './request-drain';

export interface RouterCloseOptions {
  /** How long to go on serving, draining, before the listener closes (main.ts: `shutdownDrainDelayMs`). Default 0. */
  readonly drainDelayMs?: number;
  /** How long in-flight requests may take once the listener is closed. Default `shutdownGraceMs`. */
  readonly graceMs?: number;
}

export interface RouterCloseReport {
  /** Requests in flight when the listener closed, after the drain delay. */
  readonly inflightAtClose: number;
  /** Requests aborted at the grace deadline (0: every request finished). */
  readonly aborted: number;
  /** Leases the shutdown itself released (requests aborted before their own release ran). */
  readonly leasesReleasedAtDeadline: number;
  /** False if some lease release calls had not ended when the connections to the state store closed. */
  readonly releasesSettled: boolean;
  readonly elapsedMs: number;
}

/** What a replica's shutdown closes, in the order `closeGracefully` says. */
export interface ClosingParts {
  readonly app: FastifyInstance;
  readonly drain: RequestDrain;
  /** The public app's client connections: closed once quiet, never under a client sending. */
  readonly connections: ClientConnections;
  readonly upstreams: UpstreamPools;
  readonly heldLeases: HeldLeases;
  /** Background loops, pools, the admin listener, Redis: everything the wiring opened. */
  readonly closers: ShutdownStack;
  /** `graceMs` when the caller gives none (config `shutdownGraceMs`). */
  readonly defaultGraceMs: number;
  readonly logger: FastifyBaseLogger | undefined;
}

/** After the last request: how long the release calls under way may take before Redis closes anyway. */
const RELEASE_SETTLE_MS = 2_000;
/** After the deadline's abort: how long aborted streams get to write their error event before their connections are cut. */
const ABORT_FLUSH_MS = 250;
/** After the last connection closed: how long the listener's close may take to report it. */
const LISTENER_CLOSE_MS = 200;
/** What the background loops and connections get to close, after the requests (see CLOSE_TAIL_MS). */
export const RESOURCES_CLOSE_MS = 2_500;

/**
 * Upper bound of what `closeGracefully` takes after its drain delay and grace (abort and flush, lease
 * releases, the closers stack: ABORT_FLUSH_MS + RELEASE_SETTLE_MS + RESOURCES_CLOSE_MS and room).
 * main.ts gives the shutdown stack drain + grace + this.
 */
export const CLOSE_TAIL_MS = 5_000;

/**
 * The graceful shutdown, in order:
 * 1. drain: /readyz answers 503 at once and every response carries `Connection: close`, while
 *    requests are still served for `drainDelayMs`, long enough for the balancer's health check to take
 *    the replica out and for active keep-alive clients to move to other replicas;
 * 2. the listener closes; requests under way, and any a client sends on a connection still open, are
 *    served to their end (with `Connection: close`) for up to `graceMs`; a connection is closed once
 *    no request is on it and nothing arrived on it for a while (client-connections.ts), never under a
 *    client that is sending;
 * 3. at that deadline, what still runs is aborted (streams end with the router's error event and
 *    `[DONE]`) and every lease left is released;
 * 4. the lease releases under way are awaited (bounded), then the closers stack runs: background
 *    loops stop, connection pools close, Redis last (QUIT), so no in-flight count is left behind.
 */
export async function closeGracefully(parts: ClosingParts, options: RouterCloseOptions): Promise<RouterCloseReport> {
  const { app, drain, heldLeases, logger } = parts;
  const startedAt = performance.now();
  const drainDelayMs = options.drainDelayMs ?? 0;
  const graceMs = options.graceMs ?? parts.defaultGraceMs;
  drain.beginDraining();
  if (drainDelayMs > 0) await new Promise((resolve) => setTimeout(resolve, drainDelayMs));
  drain.beginClosing();
  const inflightAtClose = drain.inflight;
  // The listener only: the open connections are ClientConnections', closed as they fall quiet.
  const serverClosed = app.close();
  const graceEndsAt = performance.now() + graceMs;
  let finished = await parts.connections.closeWhenQuiet(graceMs);
  if (finished)
    finished = await settlesWithin(serverClosed, Math.max(graceEndsAt - performance.now(), LISTENER_CLOSE_MS));
  let aborted = 0;
  let leasesReleasedAtDeadline = 0;
  if (!finished) {
    aborted = drain.inflight;
    drain.beginAborting();
    logger?.warn({ requests: aborted, graceMs }, 'shutdown grace passed: aborting the requests still in flight');
    await parts.upstreams.destroy();
    leasesReleasedAtDeadline = heldLeases.releaseAll();
    await drain.waitUntilIdle(ABORT_FLUSH_MS);
    app.server.closeAllConnections();
  }
  await serverClosed;
  leasesReleasedAtDeadline += heldLeases.releaseAll();
  const releasesSettled = await heldLeases.settled(RELEASE_SETTLE_MS);
  await parts.closers.closeAll({ deadlineMs: RESOURCES_CLOSE_MS, ...(logger ? { logger } : {}) });
  const elapsedMs = Math.round(performance.now() - startedAt);
  return { inflightAtClose, aborted, leasesReleasedAtDeadline, releasesSettled, elapsedMs };
}
