import type { IncomingHttpHeaders, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import type { FastifyBaseLogger } from 'fastify';
import { encodeSseData, SSE_DONE } from '@kvroute/protocols';
import type { Dispatcher } from 'undici';
import type { Backend } from '../backends/backend-registry';
import { RouterError } from '../errors';
import type { OneShotTimers } from '../one-shot-timers';
import type { RouterMetrics } from '../router-metrics';
import { FirstOutputWatch } from './first-output-watch';
import { clientResponseHeaders } from './header-hygiene';
import { ResponseTail } from './response-tail';
import { UpstreamErrorAnswer } from './upstream-error-answer';
import { CachedTokensRewrite } from './cached-tokens-rewrite';
import { StreamUsageStrip, type FingerprintMemory } from './usage-strip';

/**
 * How one try ended.
 * - `retry`: nothing reached the client and no engine is running the request, nor ran it for long: the
 *   backend could not be connected to, refused it at once with 429/503, or closed the connection without
 *   answering within `connectionLostRetryMs` of the request going out (`connection-lost`: the engine
 *   died or dropped it, as vLLM aborts a request whose connection closes; at most its prefill had
 *   started). Another backend takes it: a backend killed under load must not fail the requests it held.
 * - `failed`: the request went out and failed before anything reached the client after the engine may
 *   have worked on it for long: its deadline passed (the backend may still be running it; 504), or the
 *   connection was lost later than `connectionLostRetryMs` after sending (502). Never re-run elsewhere:
 *   a long generation would cost its GPU time again on every try.
 * - `done`: the response (or its error event) reached the client.
 */
export type TryOutcome =
  | {
      readonly kind: 'retry';
      /** `adapter-unavailable`: the backend could not get the request's LoRA adapter (request-path.ts): never sent. */
      readonly cause: 'connect' | 'connection-lost' | 'adapter-unavailable' | `status-${number}`;
      readonly error: Error | null;
    }
  | { readonly kind: 'failed'; readonly cause: 'timeout' | 'connection-lost'; readonly error: Error }
  | { readonly kind: 'done'; readonly clientWentAway: boolean };

/**
 * A try's deadline, counted from when its request went out on a connection (connecting is bounded by
 * `connectTimeoutMs` and retried): `first-output`: until a stream's first output event (queueing and
 * prefill; the first byte for a response that is not a relayed stream); `end`: until the whole response
 * (a non-streaming generation); `headers`: until the response's headers (a stored response's GET,
 * DELETE or cancel: a dictionary read on the engine, whose answer, if it is a stream, may run long).
 */
export interface TryDeadline {
  readonly until: 'first-output' | 'end' | 'headers';
  readonly ms: number;
}

const DEADLINE_MESSAGES: Readonly<Record<TryDeadline['until'], string>> = {
  'first-output': 'no output',
  end: 'no complete response',
  headers: 'no response headers',
};

/** What a try's deadline aborts its upstream request with. */
export class UpstreamDeadlineError extends Error {
  constructor(readonly deadline: TryDeadline) {
    super(`${DEADLINE_MESSAGES[deadline.until]} within ${deadline.ms} ms`);
  }
}

/** What the relay tells the stages after it (learn, release); it knows nothing of what they do. */
export interface RelayEvents {
  /**
   * The first generated output reached the client (or the response headers, for non-streaming responses). Once at most.
   * `streamed`: it came on an event stream (a first event); false: with a whole response's headers, i.e. with its end.
   */
  firstOutput(streamed: boolean): void;
  /**
   * The try ended, on whichever path (end, error, abort, retry). Once. `tail`: the last bytes of a
   * successful response relayed to its end (where its usage is), else null.
   */
  finished(tail: ResponseTail | null): void;
}

/**
 * What one try's relay is told of its request, set once per try by the request path (pipeline/send.ts:
 * its Shipment is this plus what goes upstream). The relay reads it where it is; nothing copies it.
 */
export interface RelayedRequest {
  readonly backend: Backend;
  /** `X-Router-Reason`, and the metrics' `reason`. */
  readonly reason: string;
  /** The metrics' `policy`. */
  readonly policyName: string;
  /** The metrics' `model`: the request's, which its pool serves ('' for a call that names none: a stored response's). */
  readonly model: string;
  /** The client's request id: logs, `X-Request-Id` on the response. */
  readonly requestId: string;
  /** performance.now() when the request arrived. */
  readonly arrivedAtMs: number;
  /** Whether a refusal (429/503) may be retried elsewhere instead of relayed. */
  readonly mayRetryStatus: boolean;
  /**
   * A 404 is a refusal too (with `mayRetryStatus`): a LoRA adapter's request sent where the router believed the
   * adapter loaded, whose engine lost it (restarted): another backend may have it, or load it.
   */
  readonly notFoundIsRefusal?: boolean;
  readonly deadline: TryDeadline;
  /** Keep a successful response's tail for its usage (generation endpoints; pass-through ones carry none worth reading). */
  readonly readsUsage: boolean;
  /** Keep also the stream's first bytes: its usage may be in its first event (an Anthropic Messages stream's `message_start`). */
  readonly readsUsageAtStart: boolean;
  /** Send `X-Router-Backend` and `X-Router-Reason` (config `routingHeaders`: to privileged keys only when tenants are on). */
  readonly showsRoutingHeaders: boolean;
  /** Headers of the router's own to add (the limit stage's `x-ratelimit-*` of an admitted tenant request); null: none. */
  readonly extraHeaders: Readonly<Record<string, string>> | null;
  /**
   * Reads a successful response's body chunks, each before it is written to the client, until it returns true (a
   * Responses id: response-id-watch.ts); null: none.
   */
  readonly headWatch?: ((chunk: Buffer) => boolean) | null;
  /**
   * The decode leg of a disaggregated request: the prefill engine's cached tokens, which replace the decode engine's
   * in a successful answer's usage (cached-tokens-rewrite.ts); null or absent: the usage goes on as it came.
   */
  readonly prefillCachedTokens?: number | null;
  readonly events: RelayEvents;
}

/** What every relay of a router shares (pipeline/send.ts SendDeps is this plus the upstream pools). */
export interface RelaySettings {
  /** A connection the backend closes without answering within this long of the request going out is retried elsewhere (config `connectionLostRetryMs`). */
  readonly connectionLostRetryMs: number;
  readonly timers: OneShotTimers;
  readonly metrics: RouterMetrics;
  readonly logger: FastifyBaseLogger;
}

export interface RelayTarget {
  readonly request: RelayedRequest;
  readonly response: ServerResponse;
  /** The request asked for a stream's usage on the client's behalf: a successful SSE response loses what that added (usage-strip.ts); null: it did not. */
  readonly streamUsageStrip: { readonly fingerprints: FingerprintMemory } | null;
  readonly settings: RelaySettings;
}

/**
 * Upstream statuses that mean "this backend did not take it": try another one. Only refusals: a 502 or
 * 504 comes from a gateway in front of the engine, which may have passed the request on and left it
 * running there; they are relayed as they are.
 */
const RETRYABLE_STATUS = new Set([429, 503]);
/**
 * Bytes of a successful response's end kept for its usage: a usage chunk or object is ~200 B, and a stream's last
 * content chunk and `[DONE]` come around it.
 */
const USAGE_TAIL_BYTES = 4096;
/**
 * undici's idle timeout between body chunks (`idleTimeoutMs`). No headers timeout can fire (send
 * disables it: the try's deadline bounds the wait), and a passed deadline is known by `deadlinePassed`.
 */
const BODY_TIMEOUT_CODE = 'UND_ERR_BODY_TIMEOUT';

/**
 * An undici dispatch handler that relays one upstream response straight into the client's response:
 * status and end-to-end headers (less `Set-Cookie` and `Server`: header-hygiene.ts) plus the routing headers, then body chunks as they arrive, with
 * backpressure (the upstream is paused while the client's buffer is full). No intermediate stream,
 * async iterator or AbortController: this runs for every request, so it is the proxy's hot path.
 *
 * - First output: the first SSE event carrying generated output of any kind (text, reasoning, a tool
 *   call: proxy/first-output-watch.ts), across chunk boundaries, or the response headers of a successful
 *   non-streaming response (`events.firstOutput`); an error response has none.
 * - Usage asked for on the client's behalf (`streamUsageStrip`): a successful stream's chunks go to
 *   the client through a StreamUsageStrip (the usage event out, the rest as the engine would have sent
 *   it without the option); the first-output watch and the tail read the engine's own chunks, so learn
 *   reads the usage the client does not get.
 * - Before anything is written, a connect error, a refusal (429/503) or a connection the backend closed
 *   without answering soon after sending resolves `retry` (a refusal's body is drained, keeping the
 *   connection reusable); the try's deadline, or a connection lost later, resolves `failed`.
 * - The deadline (TryDeadline) aborts the upstream request; once a stream's headers were relayed, it
 *   ends the stream with the router's timeout error event and `[DONE]`.
 * - After the first byte, an upstream failure ends an SSE stream with an error event and `[DONE]`
 *   (a plain response is cut); a client that went away aborts the upstream request at once.
 * - `events.finished` runs exactly once, whatever happens.
 */
export class RelayHandler implements Dispatcher.DispatchHandler {
  readonly outcome: Promise<TryOutcome>;
  private settle!: (outcome: TryOutcome) => void;
  private readonly request: RelayedRequest;
  private readonly response: ServerResponse;
  private readonly settings: RelaySettings;
  private controller: Dispatcher.DispatchController | null = null;
  /** `replace`: a 5xx answer, read to its end and answered with the router's error (upstream-error-answer.ts). */
  private mode: 'pending' | 'discard' | 'relay' | 'replace' = 'pending';
  /** The 5xx answer being replaced, and the headers the client will get with it (null: not replacing). */
  private replaced: { readonly answer: UpstreamErrorAnswer; readonly headers: OutgoingHttpHeaders } | null = null;
  private discardCause: TryOutcome | null = null;
  /** The relayed response's status (0 until its headers arrive). */
  private statusCode = 0;
  private isSse = false;
  /** Looks for the first output event of an SSE response (null: not SSE, or found already). */
  private firstOutput: FirstOutputWatch | null = null;
  /** The end of a successful response's body, for what its usage says (null: not a 2xx). */
  private tail: ResponseTail | null = null;
  /** Takes out what the router's `include_usage` added (null: nothing to take out). */
  private strip: StreamUsageStrip | null = null;
  /** Puts the prefill engine's cached tokens into the usage (null: not a disaggregated request's answer). */
  private usageMerge: CachedTokensRewrite | null = null;
  /** RelayedRequest.headWatch while a successful response's head is still wanted (null: not, or no more). */
  private headWatch: ((chunk: Buffer) => boolean) | null = null;
  private clientGone = false;
  /** The request went out on a connection (undici's onRequestStart): from here the backend may be running it. */
  private sent = false;
  /** performance.now() when the request went out (`sent`). */
  private sentAtMs = 0;
  private deadlineTimer: unknown = null;
  private deadlinePassed = false;
  private readonly onClientClose = (): void => {
    if (this.response.writableFinished) return;
    this.clientGone = true;
    this.controller?.abort(new Error('client went away'));
  };
  private readonly onDrain = (): void => this.controller?.resume();

  constructor(private readonly target: RelayTarget) {
    this.request = target.request;
    this.response = target.response;
    this.settings = target.settings;
    this.outcome = new Promise((resolve) => (this.settle = resolve));
    target.response.once('close', this.onClientClose);
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller;
    if (this.clientGone || this.response.destroyed) {
      this.clientGone = true;
      controller.abort(new Error('client went away'));
      return;
    }
    this.sent = true;
    this.sentAtMs = performance.now();
    this.deadlineTimer = this.settings.timers.set(this.onDeadline, this.request.deadline.ms);
  }

  private readonly onDeadline = (): void => {
    this.deadlineTimer = null;
    this.deadlinePassed = true;
    this.controller?.abort(new UpstreamDeadlineError(this.request.deadline));
  };

  private clearDeadline(): void {
    if (this.deadlineTimer === null) return;
    this.settings.timers.clear(this.deadlineTimer);
    this.deadlineTimer = null;
  }

  onResponseStart(_controller: Dispatcher.DispatchController, statusCode: number, headers: IncomingHttpHeaders): void {
    const request = this.request;
    if (request.deadline.until === 'headers') this.clearDeadline();
    const refused = RETRYABLE_STATUS.has(statusCode) || (statusCode === 404 && request.notFoundIsRefusal === true);
    if (refused && request.mayRetryStatus) {
      this.mode = 'discard';
      this.discardCause = { kind: 'retry', cause: `status-${statusCode}`, error: null };
      return;
    }
    this.statusCode = statusCode;
    if (statusCode >= 500) return this.startReplacing(headers);
    this.mode = 'relay';
    // clientResponseHeaders makes a new object: the router's headers go into it, no copy.
    const outgoing = this.addRouterHeaders(
      clientResponseHeaders(headers as Record<string, string | string[] | undefined>) as OutgoingHttpHeaders,
    );
    this.isSse = String(outgoing['content-type'] ?? '').startsWith('text/event-stream');
    if (this.isSse) {
      this.firstOutput = new FirstOutputWatch();
      outgoing['x-accel-buffering'] = 'no';
      outgoing['cache-control'] = 'no-cache';
    } else if (statusCode < 300) {
      // A non-streaming engine answers once generation is done: the prefill is long finished. An
      // error answer (a context-length 400, a 500) is no output: nothing was computed to learn from.
      request.events.firstOutput(false);
    }
    if (statusCode < 300) this.headWatch = request.headWatch ?? null;
    if (statusCode < 300 && request.readsUsage)
      this.tail = new ResponseTail(USAGE_TAIL_BYTES, request.readsUsageAtStart);
    if (statusCode < 300 && request.prefillCachedTokens != null)
      this.usageMerge = new CachedTokensRewrite(request.prefillCachedTokens, this.isSse);
    if (statusCode < 300 && this.isSse && this.target.streamUsageStrip !== null)
      this.strip = new StreamUsageStrip(this.target.streamUsageStrip.fingerprints);
    this.response.writeHead(statusCode, outgoing);
    if (this.isSse) this.response.flushHeaders();
  }

  /** Adds the router's own headers to `into` (routing if shown, limits, the request id) and returns it. */
  private addRouterHeaders(into: OutgoingHttpHeaders): OutgoingHttpHeaders {
    const request = this.request;
    if (request.showsRoutingHeaders) {
      into['x-router-backend'] = request.backend.id;
      into['x-router-reason'] = request.reason;
    }
    if (request.extraHeaders !== null) Object.assign(into, request.extraHeaders);
    into['x-request-id'] = request.requestId;
    return into;
  }

  /** A 5xx: nothing is written until its body ended (or failed); then the router's error goes out instead. */
  private startReplacing(headers: IncomingHttpHeaders): void {
    this.mode = 'replace';
    const retryAfter = headers['retry-after'];
    this.replaced = {
      answer: new UpstreamErrorAnswer(this.statusCode, typeof retryAfter === 'string' ? retryAfter : undefined),
      headers: this.addRouterHeaders({}),
    };
  }

  /** Answers a replaced 5xx (its body read, or failed midway) and logs what the backend said. */
  private answerReplaced(replaced: {
    readonly answer: UpstreamErrorAnswer;
    readonly headers: OutgoingHttpHeaders;
  }): void {
    const { request, settings } = this;
    settings.logger.warn(
      {
        requestId: request.requestId,
        backend: request.backend.id,
        status: this.statusCode,
        ...replaced.answer.logged(),
      },
      'upstream error answer replaced',
    );
    const { headers, body } = replaced.answer.answer(replaced.headers);
    if (!this.response.destroyed) {
      this.response.writeHead(this.statusCode, headers);
      this.response.end(body);
    }
    settings.metrics.recordRouted(
      request.backend.id,
      request.model,
      request.policyName,
      request.reason,
      this.statusCode,
    );
    this.finish({ kind: 'done', clientWentAway: this.clientGone });
  }

  onResponseData(controller: Dispatcher.DispatchController, upstreamChunk: Buffer): void {
    // A relayed stream's deadline runs to its first output event, not its first byte: Responses and
    // Anthropic streams open with events (`response.created`, `message_start`) sent before prefill.
    const streamDeadline = this.request.deadline.until === 'first-output';
    // A replaced 5xx keeps its deadline to its end: nothing reaches the client before, so it bounds the wait.
    if (streamDeadline && (this.mode === 'discard' || (this.mode === 'relay' && this.firstOutput === null)))
      this.clearDeadline();
    if (this.mode === 'replace') return this.replaced?.answer.add(upstreamChunk);
    if (this.mode !== 'relay') return;
    const chunk = this.usageMerge === null ? upstreamChunk : this.usageMerge.feed(upstreamChunk);
    if (chunk !== null) this.relayChunk(controller, chunk, streamDeadline);
  }

  /** A chunk of a relayed response, on its way to the client: watched, kept for its usage, written. */
  private relayChunk(controller: Dispatcher.DispatchController, chunk: Buffer, streamDeadline: boolean): void {
    if (this.firstOutput !== null && this.firstOutput.feed(chunk)) {
      this.firstOutput = null;
      if (streamDeadline) this.clearDeadline();
      this.request.events.firstOutput(true);
    }
    this.tail?.add(chunk);
    if (this.headWatch !== null && this.headWatch(chunk)) this.headWatch = null;
    const out = this.strip === null ? chunk : this.strip.feed(chunk);
    if (out !== null && !this.response.write(out)) {
      controller.pause();
      this.response.once('drain', this.onDrain);
    }
  }

  onResponseEnd(): void {
    if (this.mode === 'discard') return this.finish(this.discardCause as TryOutcome);
    if (this.replaced !== null) return this.answerReplaced(this.replaced);
    const merged = this.usageMerge?.end() ?? null;
    if (merged !== null && this.controller !== null)
      this.relayChunk(this.controller, merged, this.request.deadline.until === 'first-output');
    const rest = this.strip?.end() ?? null;
    if (rest === null) this.response.end();
    else this.response.end(rest);
    // The strip parsed the usage event it took out: learn need not read the tail for it again.
    const usage = this.strip?.usage ?? null;
    if (usage !== null) this.tail?.knowUsage(usage);
    const request = this.request;
    this.settings.metrics.recordRouted(
      request.backend.id,
      request.model,
      request.policyName,
      request.reason,
      this.statusCode,
    );
    this.finish({ kind: 'done', clientWentAway: this.clientGone }, this.tail);
  }

  onResponseError(_controller: Dispatcher.DispatchController, error: Error): void {
    const { request, response, settings } = this;
    const backendId = request.backend.id;
    if (this.clientGone) {
      settings.metrics.recordClientAbort(backendId);
      return this.finish({ kind: 'done', clientWentAway: true });
    }
    // A 5xx whose body failed (or outlived the deadline) midway: the backend's status was known, so answer it.
    if (this.replaced !== null) return this.answerReplaced(this.replaced);
    if (this.mode !== 'relay') {
      // Not sent: the connection could not be made (refused, connect timeout): the engine never saw it.
      if (!this.sent) return this.finish({ kind: 'retry', cause: 'connect', error });
      if (this.deadlinePassed || (error as { code?: string }).code === BODY_TIMEOUT_CODE)
        return this.finish({ kind: 'failed', cause: 'timeout', error });
      // Sent, then the connection closed or reset with no answer: the engine is not running it any more;
      // soon after sending it had barely started, later it may have run for long (no re-run then).
      const lostEarly = performance.now() - this.sentAtMs <= settings.connectionLostRetryMs;
      return this.finish({ kind: lostEarly ? 'retry' : 'failed', cause: 'connection-lost', error });
    }
    settings.metrics.recordStreamError(backendId);
    settings.logger.warn(
      { requestId: request.requestId, backend: backendId, err: error },
      'upstream failed after the first byte',
    );
    // The try's deadline passed after the headers were relayed (a stream that sent its headers, then
    // nothing): the router's timeout, not the backend's failure.
    const routerError = this.deadlinePassed
      ? new RouterError('ROUTER_ERR_UPSTREAM_TIMEOUT', `The model server sent no output in time (${error.message}).`)
      : new RouterError('ROUTER_ERR_UPSTREAM_STREAM', 'The model server failed mid-stream.');
    if (this.isSse && !response.destroyed) {
      // What the usage merge and the strip still held goes first, as it would have without them.
      const merged = this.usageMerge?.end() ?? null;
      const mergedOut = merged === null || this.strip === null ? merged : this.strip.feed(merged);
      if (mergedOut !== null) response.write(mergedOut);
      const rest = this.strip?.end() ?? null;
      if (rest !== null) response.write(rest);
      response.end(encodeSseData(JSON.stringify(routerError.toBody())) + encodeSseData(SSE_DONE));
    } else {
      response.destroy();
    }
    settings.metrics.recordRouted(backendId, request.model, request.policyName, request.reason, routerError.status);
    this.finish({ kind: 'done', clientWentAway: false });
  }

  private finish(outcome: TryOutcome, tail: ResponseTail | null = null): void {
    const request = this.request;
    this.clearDeadline();
    this.response.off('close', this.onClientClose);
    this.response.off('drain', this.onDrain);
    request.events.finished(tail);
    if (outcome.kind === 'done' && (this.mode === 'relay' || this.mode === 'replace')) {
      this.settings.metrics.recordDuration(
        request.backend.id,
        request.model,
        this.isSse,
        (performance.now() - request.arrivedAtMs) / 1000,
      );
    }
    this.settle(outcome);
  }
}
