import type { ServerResponse } from 'node:http';
import type { FastifyBaseLogger } from 'fastify';

/** Levels at which the request line (info) is written; below them the line is not even gathered. */
const INFO_OR_FINER = new Set(['info', 'debug', 'trace']);

/**
 * The one info line a proxied request leaves at its end (config `logRequests`): what an operator needs to
 * find it again and see where it went, with no prompt, no body and no credential. The stages fill it in
 * as they learn each part (parse: the model; route and send: the backend and reason of each try; learn:
 * the first output); the response's `close` writes it, on whichever path the request ended (answered,
 * refused before routing, failed, or left by its client).
 */
export class RequestLine {
  model: string | null = null;
  /** The last try's backend and the decision's reason (null: never routed). */
  backend: string | null = null;
  reason: string | null = null;
  /** Tries sent to a backend (more than 1: retried elsewhere before the first byte). */
  tries = 0;
  stream: boolean | null = null;
  /** A stream's time to its first output event, ms from arrival (null: not a stream, or no output). */
  ttftMs: number | null = null;
}

/**
 * A function that starts a request's line and writes it when its response closes; null when request lines
 * are off (`logRequests: false`) or the level hides info, so a busy router pays nothing for them.
 */
export type RequestLineStarter = (
  requestId: string,
  /** Who sent it (null: open mode): the tenant, and the key's id (never the key), which a key rotation watches. */
  caller: { readonly tenant: string; readonly keyId: string } | null,
  arrivedAtMs: number,
  response: ServerResponse,
) => RequestLine;

export function requestLineStarter(logger: FastifyBaseLogger, enabled: boolean): RequestLineStarter | null {
  if (!enabled || !INFO_OR_FINER.has(logger.level)) return null;
  return (requestId, caller, arrivedAtMs, response) => {
    const line = new RequestLine();
    response.once('close', () => {
      logger.info(
        {
          requestId,
          tenant: caller?.tenant ?? null,
          keyId: caller?.keyId ?? null,
          model: line.model,
          backend: line.backend,
          reason: line.reason,
          tries: line.tries,
          status: response.statusCode,
          stream: line.stream,
          ttftMs: line.ttftMs === null ? null : Math.round(line.ttftMs),
          durationMs: Math.round(performance.now() - arrivedAtMs),
          // The client left before the whole response was written (a cut stream keeps its 200).
          ...(response.writableFinished ? {} : { clientWentAway: true }),
        },
        'request',
      );
    });
    return line;
  };
}
