import { request, type Dispatcher } from 'undici';

/** A GET's answer, body read whole. */
export interface HttpAnswer {
  readonly status: number;
  readonly body: string;
}

/**
 * GETs a URL, with extra request headers (the backend's `authorization`); rejects with a
 * `ScrapeRequestError`. Injected into the scrape so its logic is testable without sockets.
 */
export type HttpGet = (url: string, headers?: Readonly<Record<string, string>>) => Promise<HttpAnswer>;

/** `connect`: refused, reset, unreachable, closed mid-answer; `timeout`: no full answer in time. */
export type RequestFailureKind = 'connect' | 'timeout';

export class ScrapeRequestError extends Error {
  override readonly name = 'ScrapeRequestError';

  constructor(
    readonly kind: RequestFailureKind,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

const TIMEOUT_CODES = new Set([
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
  'ETIMEDOUT',
]);

/**
 * GET through undici with one deadline for the whole exchange (connect, headers, body): `timeoutMs`
 * after the call, the request is aborted. The dispatcher keeps connections alive between scrapes.
 */
export function createHttpGet(options: { readonly dispatcher: Dispatcher; readonly timeoutMs: number }): HttpGet {
  const { dispatcher, timeoutMs } = options;
  return async (url, headers) => {
    const signal = AbortSignal.timeout(timeoutMs);
    try {
      const response = await request(url, {
        method: 'GET',
        dispatcher,
        signal,
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
        ...(headers === undefined ? {} : { headers }),
      });
      return { status: response.statusCode, body: await response.body.text() };
    } catch (error) {
      const kind: RequestFailureKind = signal.aborted || TIMEOUT_CODES.has(codeOf(error)) ? 'timeout' : 'connect';
      throw new ScrapeRequestError(
        kind,
        `GET ${url}: ${kind} (${codeOf(error) || (error instanceof Error ? error.message : String(error))})`,
        { cause: error },
      );
    }
  };
}

function codeOf(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : '';
}
