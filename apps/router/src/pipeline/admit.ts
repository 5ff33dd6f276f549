import type { Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { RouterError } from '../errors';
import type { RequestDrain } from '../http/request-drain';
import type { Authenticator, Identity } from '../tenants/authenticate';
import { ConnectionCaps, type ConnectionRefusal } from './connection-caps';
import { isPassthroughGet, passthroughRuleOf, ruleAllows, type PassthroughRule } from './passthrough-paths';

declare module 'fastify' {
  interface FastifyRequest {
    /** Who sent the request (tenants/authenticate.ts); null in open mode. Set by admit for `/v1/*`. */
    identity: Identity | null;
  }
}

/**
 * Stage 1 of the request path, **admit**: whether the router takes a request at all, decided from the
 * request line and the connection before a byte of the body is read, so refusing costs next to nothing.
 *
 * - Paths that could mean something else to a backend than to the router are refused (400): a `..` or
 *   `.` segment, an empty segment (`//`), a backslash, or an encoded dot, slash or backslash
 *   (`%2e`, `%2f`, `%5c`). The router forwards paths as they are, so it must never forward one whose
 *   meaning depends on who normalises it.
 * - Once the shutdown grace has passed, new requests are refused (503, retry elsewhere).
 * - Caps (before the body is read): at most `maxInflightRequests` proxied requests in flight (503 +
 *   `Retry-After`), and connections (connection-caps.ts): `maxConnections` in all, `maxConnectionsPerPeer`
 *   from one client address, idle keep-alive connections closed first to make room; a proxied request
 *   on a connection no cap could make room for gets 503 (the router's cap) or 429 (its client's), and
 *   that connection is closed after the answer. Probes and metrics are never capped: a busy router must
 *   still say it is alive.
 * - Identity, for every `/v1/*` request (tenants/authenticate.ts): 401 without a valid API key (or
 *   gateway identity) when `auth` is not `none`; the identity rides on the request to the limit stage.
 * - The pass-through allow-list per role (passthrough-paths.ts): engine control endpoints are for admin
 *   keys only (403 `ROUTER_ERR_ENDPOINT_NOT_ALLOWED` for anyone else, open mode included).
 * - Per caller (429 + `Retry-After`, still before the body is read): one caller (a tenant; its client
 *   address in open mode) has at most `maxInflightPerCaller` of this replica's proxied requests in flight,
 *   fewer if its tenant's or key's `concurrentRequests` says so (the limit stage holds those exactly
 *   across replicas, after parse). So a caller that opens requests and never sends their bodies holds
 *   its own share, never the whole replica.
 */
export interface AdmitOptions {
  readonly drain: RequestDrain;
  /** Proxied requests (`POST /v1/*`) in flight at once; beyond it 503. */
  readonly maxInflightRequests: number;
  /** Open client connections served; requests on later ones get 503 and `Connection: close`. */
  readonly maxConnections: number;
  /** Open connections served per client address (< maxConnections); beyond it 429 and `Connection: close`. */
  readonly maxConnectionsPerPeer: number;
  /** Called for each idle connection closed to make room under a connection cap. */
  readonly onIdleConnectionClosed?: () => void;
  readonly authenticator: Authenticator;
  /** Proxied requests in flight per caller on this replica (< maxInflightRequests). */
  readonly maxInflightPerCaller: number;
  /** A tenant's own `concurrentRequests`, if configured. */
  readonly tenantConcurrency: (tenant: string) => number | undefined;
}

/** Registers the admit stage (an `onRequest` hook, the first thing that runs for a request). */
export function registerAdmit(app: FastifyInstance, options: AdmitOptions): void {
  app.decorateRequest('identity', null);
  let inflight = 0;
  /** Requests in flight per caller (callerSlotsOf's keys); a caller with none has no entry. */
  const callers = new Map<string, number>();
  const connections = new ConnectionCaps({ ...options, onIdleClosed: options.onIdleConnectionClosed });
  app.server.on('connection', (socket: Socket) => connections.connected(socket));

  app.addHook('onRequest', (request, reply, done) => {
    // A refused request's body is never read, so its connection cannot carry another request: close it.
    const refuse = (error: RouterError): void => {
      reply.header('connection', 'close');
      done(error);
    };
    const unsafe = unsafePathReason(request.raw.url ?? '/');
    if (unsafe !== null)
      return refuse(new RouterError('ROUTER_ERR_INVALID_PATH', `The request path is not accepted: ${unsafe}.`));
    const socket = request.raw.socket;
    // What this request holds, given back by one listener when its response closes: its connection's busy
    // mark (busy connections are never closed to make room), its in-flight count, its callers' slots.
    let countsInflight = false;
    let callerSlots: readonly (readonly [string, number])[] = [];
    const holdUntilClose = (): void => {
      reply.raw.once('close', () => {
        connections.ended(socket);
        if (countsInflight) inflight--;
        for (const [caller] of callerSlots) {
          const left = (callers.get(caller) ?? 1) - 1;
          if (left === 0) callers.delete(caller);
          else callers.set(caller, left);
        }
      });
    };
    // The path's allow-list rule, once per request (undefined: not a proxied path).
    const rule = passthroughRuleOf(request.url);
    // POST, and GET pass-through (files, batches), are admitted in full; other methods only identified.
    if (rule === undefined || (request.method !== 'POST' && !isPassthroughGet(request.method, request.url))) {
      connections.started(socket, false);
      holdUntilClose();
      return rule === undefined ? done() : identify(false);
    }
    if (options.drain.phase === 'aborting')
      return refuse(
        new RouterError('ROUTER_ERR_SHUTTING_DOWN', 'This router is shutting down; retry.', { retryAfterSeconds: 1 }),
      );
    const overCap = connections.started(socket, true);
    if (overCap !== null) return refuse(connectionCapError(overCap, options));
    holdUntilClose();
    if (inflight >= options.maxInflightRequests) {
      return refuse(
        new RouterError('ROUTER_ERR_OVERLOADED', `This router has ${inflight} requests in flight, its limit; retry.`, {
          retryAfterSeconds: 1,
        }),
      );
    }
    inflight++;
    countsInflight = true;
    if (options.authenticator.mode === 'none') return takeCallerSlots(null);
    identify(true);

    function identify(proxied: boolean): void {
      if (options.authenticator.mode === 'none') return done();
      options.authenticator.authenticate(request.headers, request.raw.socket.remoteAddress ?? 'unknown').then(
        (identity) => {
          request.identity = identity;
          if (proxied) takeCallerSlots(identity);
          else done();
        },
        (error: unknown) =>
          refuse(
            error instanceof RouterError
              ? error
              : new RouterError('ROUTER_ERR_INTERNAL', 'Internal router error.', { cause: error }),
          ),
      );
    }

    /** The caller's share of the replica's in-flight requests: its tenant's and key's, or its address's. */
    function takeCallerSlots(identity: Identity | null): void {
      // Only proxied requests take slots: the rule is there (a function declaration does not keep the narrowing).
      if (!ruleAllows(rule as PassthroughRule, identity?.role ?? 'open'))
        return refuse(endpointNotAllowed(request.url));
      const slots = callerSlotsOf(identity, request.raw.socket.remoteAddress ?? 'unknown', options);
      for (const [caller, cap] of slots) {
        const held = callers.get(caller) ?? 0;
        if (held >= cap) {
          const who = caller.startsWith('p:') ? 'client address' : caller.startsWith('k:') ? 'API key' : 'tenant';
          return refuse(
            new RouterError(
              'ROUTER_ERR_CALLER_INFLIGHT',
              `This ${who} has ${held} requests in flight on this router, its limit; retry when one ends.`,
              { retryAfterSeconds: 1 },
            ),
          );
        }
      }
      for (const [caller] of slots) callers.set(caller, (callers.get(caller) ?? 0) + 1);
      callerSlots = slots;
      done();
    }
  });
}

/** A path the caller's role may not reach (passthrough-paths.ts: engine control is for admin keys). */
function endpointNotAllowed(url: string): RouterError {
  const path = url.split('?')[0]?.slice(0, 256) ?? '';
  return new RouterError('ROUTER_ERR_ENDPOINT_NOT_ALLOWED', `${path} is not available to this API key.`);
}

function connectionCapError(cap: ConnectionRefusal, options: AdmitOptions): RouterError {
  return cap === 'router'
    ? new RouterError(
        'ROUTER_ERR_OVERLOADED',
        `This router serves at most ${options.maxConnections} connections; retry.`,
        {
          retryAfterSeconds: 1,
        },
      )
    : new RouterError(
        'ROUTER_ERR_CALLER_CONNECTIONS',
        `This client address has ${options.maxConnectionsPerPeer} connections open to this router, its limit, all in use; reuse one or retry when one closes.`,
        { retryAfterSeconds: 1 },
      );
}

/** The in-flight counters a request takes (`t:` tenant, `k:` key, `p:` client address) and each one's cap. */
function callerSlotsOf(identity: Identity | null, peer: string, options: AdmitOptions): [string, number][] {
  const share = options.maxInflightPerCaller;
  if (identity === null) return [[`p:${peer}`, share]];
  const tenantCap = Math.min(share, options.tenantConcurrency(identity.tenant) ?? share);
  const slots: [string, number][] = [[`t:${identity.tenant}`, tenantCap]];
  const keyCap = identity.keyLimits.concurrentRequests;
  if (keyCap !== undefined && keyCap < tenantCap) slots.push([`k:${identity.tenant}\u0000${identity.keyId}`, keyCap]);
  return slots;
}

/** Encoded `.`, `/` or `\`: a backend that decodes before routing would see another path. */
const ENCODED_SEPARATOR = /%(?:2e|2f|5c)/i;

/** Why `url`'s path is refused, or null if it is a plain, normalised path. The query is not looked at. */
export function unsafePathReason(url: string): string | null {
  const query = url.indexOf('?');
  const path = query === -1 ? url : url.slice(0, query);
  if (!path.startsWith('/')) return 'it must start with /';
  if (path.includes('\\')) return 'it contains a backslash';
  if (ENCODED_SEPARATOR.test(path)) return 'it contains an encoded dot, slash or backslash';
  const segments = path.split('/');
  // segments[0] is the empty string before the leading slash; a trailing slash leaves one empty last segment.
  for (let index = 1; index < segments.length; index++) {
    const segment = segments[index];
    if (segment === '.' || segment === '..') return 'it contains a dot segment';
    if (segment === '' && index < segments.length - 1) return 'it contains an empty segment (//)';
  }
  return null;
}
