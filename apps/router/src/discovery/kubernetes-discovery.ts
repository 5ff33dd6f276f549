import { setTimeout as delay } from 'node:timers/promises';
import type { FastifyBaseLogger } from 'fastify';
import { request, type Dispatcher } from 'undici';
import type { BackendSource, DiscoveryAnswer } from './backend-source';
import type { DiscoveryTarget } from './discovery-target';
import { backendsFromSlices, parseSliceList, parseWatchLine, type SliceSummary } from './endpoint-slices';

export interface KubernetesApi {
  /** `https://HOST:PORT` of the API server (no trailing slash). */
  readonly url: string;
  /** Carries the CA the API server's certificate is checked against. Owned by the caller. */
  readonly dispatcher: Dispatcher;
  /** The service account token, read again for every request (the kubelet rotates it); null = none sent. */
  readonly token: () => Promise<string | null>;
}

export interface EndpointSliceSourceOptions {
  readonly target: Extract<DiscoveryTarget, { kind: 'k8s' }>;
  /** Where the Service is (k8s://NAMESPACE/…, else the pod's own). */
  readonly namespace: string;
  readonly api: KubernetesApi;
  readonly scheme: 'http' | 'https';
  readonly maxBackends: number;
  /** How long the API server keeps one watch open before ending it (a new one starts from the last resourceVersion), s. */
  readonly watchTimeoutSeconds: number;
  /** Headers of a list or watch request, ms. */
  readonly requestTimeoutMs: number;
  /** Wait before retrying after the `attempt`-th failure in a row (0-based), ms; also after the `attempt`-th watch in a row that ended at once. */
  readonly retryDelayMs: (attempt: number) => number;
  /** A watch that ends (or expires) sooner than this after it started counts as ending at once, ms; 1 s by default. */
  readonly minWatchMs?: number;
  /** Largest list response body read, bytes; 8 MiB by default. */
  readonly maxListBytes?: number;
  /** Clock of minWatchMs; performance.now by default. */
  readonly nowMs?: () => number;
  readonly logger?: FastifyBaseLogger | undefined;
}

/** Slices kept at once: a Service has one per ~100 endpoints; beyond this, new slices are ignored (bounded memory). */
const MAX_SLICES = 1_000;
/** Longest watch event line, bytes: one slice of 100 endpoints is ~30 KiB. */
const MAX_EVENT_BYTES = 4 * 1024 * 1024;
/**
 * Largest list body, bytes: MAX_SLICES slices of ~30 KiB would be ~30 MiB, but the list is read whole into memory; 8
 * MiB is ~270 full slices (~27k endpoints).
 */
const DEFAULT_MAX_LIST_BYTES = 8 * 1024 * 1024;
/** A watch shorter than this ended at once: the next one waits (a proxy ending every watch at once would be a hot loop). */
const DEFAULT_MIN_WATCH_MS = 1_000;

/** How a watch ended: the server closed it (normal, every watchTimeoutSeconds), 410 Gone (list again), or a failure. */
type WatchEnd =
  | { readonly kind: 'ended' | 'failed'; readonly resourceVersion: string; readonly error?: unknown }
  | { readonly kind: 'expired' };

/**
 * Follows a Service's EndpointSlices through the API server: list them (labelSelector
 * `kubernetes.io/service-name=SERVICE`), then watch from the list's resourceVersion; every event hands
 * the whole current set to the applier. A 410 Gone (the resourceVersion is too old) lists again; a
 * watch the server ends is started again from the last resourceVersion seen; failures (API server
 * away, 401/403: RBAC) are reported and retried with a backoff, the last good answer standing.
 */
export class EndpointSliceSource implements BackendSource {
  readonly kind = 'k8s';
  readonly name: string;
  private readonly slices = new Map<string, SliceSummary>();
  private readonly abort = new AbortController();
  private onAnswer: (answer: DiscoveryAnswer) => Promise<void> = async () => undefined;
  private loop: Promise<void> = Promise.resolve();
  private loggedFull = false;

  constructor(private readonly options: EndpointSliceSourceOptions) {
    this.name = options.target.name;
  }

  async start(onAnswer: (answer: DiscoveryAnswer) => Promise<void>): Promise<void> {
    this.onAnswer = onAnswer;
    const resourceVersion = await this.list();
    this.loop = this.follow(resourceVersion);
  }

  async stop(): Promise<void> {
    this.abort.abort();
    await this.loop;
  }

  private get stopped(): boolean {
    return this.abort.signal.aborted;
  }

  private async follow(first: string | null): Promise<void> {
    let resourceVersion = first;
    let failures = first === null ? 1 : 0;
    // Watches in a row that ended (or expired) at once: each waits longer before the next one.
    let quickEnds = 0;
    const nowMs = this.options.nowMs ?? (() => performance.now());
    while (!this.stopped) {
      if (resourceVersion === null) {
        if (failures > 0 && !(await this.sleep(this.options.retryDelayMs(failures - 1)))) return;
        resourceVersion = await this.list();
        failures = resourceVersion === null ? failures + 1 : 0;
        continue;
      }
      const startedAtMs = nowMs();
      const end = await this.watch(resourceVersion);
      if (end.kind !== 'failed') {
        // A normal end (or 410) comes after minutes; at once, again and again, it is a misbehaving
        // proxy or API server, which must not get a list or watch request in a tight loop.
        if (nowMs() - startedAtMs < (this.options.minWatchMs ?? DEFAULT_MIN_WATCH_MS)) {
          if (!(await this.sleep(this.options.retryDelayMs(quickEnds++)))) return;
        } else quickEnds = 0;
      }
      if (end.kind === 'expired') {
        resourceVersion = null;
        continue;
      }
      resourceVersion = end.resourceVersion;
      if (end.kind === 'ended') {
        failures = 0;
        continue;
      }
      if (this.stopped) return;
      await this.report(end.error);
      if (!(await this.sleep(this.options.retryDelayMs(failures++)))) return;
    }
  }

  /** Lists the slices and hands the answer over; the resourceVersion to watch from, or null (reported). */
  private async list(): Promise<string | null> {
    try {
      const response = await request(this.urlOf({}), await this.requestOptions());
      if (response.statusCode !== 200) {
        const text = await response.body.text().catch(() => '');
        throw new Error(`listing EndpointSlices answered ${response.statusCode}: ${text.slice(0, 300)}`);
      }
      const list = parseSliceList(
        JSON.parse(await readCapped(response.body, this.options.maxListBytes ?? DEFAULT_MAX_LIST_BYTES)),
      );
      if (list === null) throw new Error('listing EndpointSlices: not an EndpointSliceList');
      this.slices.clear();
      for (const slice of list.slices.slice(0, MAX_SLICES)) this.slices.set(slice.name, slice);
      await this.answer();
      return list.resourceVersion;
    } catch (error) {
      if (!this.stopped) await this.report(error);
      return null;
    }
  }

  private async watch(resourceVersion: string): Promise<WatchEnd> {
    let current = resourceVersion;
    try {
      const response = await request(
        this.urlOf({
          watch: '1',
          resourceVersion: current,
          allowWatchBookmarks: 'true',
          timeoutSeconds: String(this.options.watchTimeoutSeconds),
        }),
        // Bookmarks come about once a minute; the server ends the watch after timeoutSeconds: silence beyond both is a dead connection.
        { ...(await this.requestOptions()), bodyTimeout: (this.options.watchTimeoutSeconds + 60) * 1000 },
      );
      if (response.statusCode === 410) {
        await response.body.dump();
        return { kind: 'expired' };
      }
      if (response.statusCode !== 200) {
        const text = await response.body.text().catch(() => '');
        throw new Error(`watching EndpointSlices answered ${response.statusCode}: ${text.slice(0, 300)}`);
      }
      let buffered = '';
      for await (const chunk of response.body) {
        buffered += (chunk as Buffer).toString('utf8');
        let newline: number;
        while ((newline = buffered.indexOf('\n')) >= 0) {
          const line = buffered.slice(0, newline).trim();
          buffered = buffered.slice(newline + 1);
          if (line === '') continue;
          const event = parseWatchLine(line);
          if (event === null) continue;
          if (event.type === 'expired') {
            response.body.destroy();
            return { kind: 'expired' };
          }
          if (event.type === 'error') throw new Error(`watch error: ${event.message}`);
          if (event.type === 'BOOKMARK') {
            current = event.resourceVersion;
            continue;
          }
          if (event.resourceVersion !== null) current = event.resourceVersion;
          if (event.type === 'DELETED') this.slices.delete(event.slice.name);
          else if (this.slices.has(event.slice.name) || this.slices.size < MAX_SLICES)
            this.slices.set(event.slice.name, event.slice);
          else if (!this.loggedFull) {
            this.loggedFull = true;
            this.options.logger?.warn(
              { slices: this.slices.size },
              'kubernetes discovery: too many EndpointSlices, new ones ignored',
            );
          }
          await this.answer();
        }
        if (buffered.length > MAX_EVENT_BYTES) throw new Error(`a watch event longer than ${MAX_EVENT_BYTES} bytes`);
      }
      return { kind: 'ended', resourceVersion: current };
    } catch (error) {
      return { kind: 'failed', resourceVersion: current, error };
    }
  }

  private async answer(): Promise<void> {
    const { target, scheme, maxBackends } = this.options;
    await this.onAnswer({
      kind: 'backends',
      ...backendsFromSlices(this.slices.values(), {
        sourceName: target.name,
        scheme,
        portName: target.portName,
        maxBackends,
      }),
    });
  }

  private async report(error: unknown): Promise<void> {
    await this.onAnswer({ kind: 'failed', error });
  }

  /** Waits, unless stopped meanwhile: false then. */
  private async sleep(ms: number): Promise<boolean> {
    try {
      await delay(ms, undefined, { signal: this.abort.signal });
      return true;
    } catch {
      return false;
    }
  }

  private urlOf(query: Record<string, string>): string {
    const { namespace, target, api } = this.options;
    const params = new URLSearchParams({ labelSelector: sliceSelectorOf(target.services), ...query });
    return `${api.url}/apis/discovery.k8s.io/v1/namespaces/${encodeURIComponent(namespace)}/endpointslices?${params.toString()}`;
  }

  private async requestOptions(): Promise<{
    dispatcher: Dispatcher;
    signal: AbortSignal;
    headersTimeout: number;
    bodyTimeout: number;
    headers: Record<string, string>;
  }> {
    const token = await this.options.api.token();
    return {
      dispatcher: this.options.api.dispatcher,
      signal: this.abort.signal,
      headersTimeout: this.options.requestTimeoutMs,
      bodyTimeout: this.options.requestTimeoutMs,
      headers:
        token === null
          ? { accept: 'application/json' }
          : { accept: 'application/json', authorization: `Bearer ${token}` },
    };
  }
}

/** A response body as text, failing (and dropping the connection) once it exceeds `maxBytes`: a list is read whole into memory. */
async function readCapped(body: Dispatcher.ResponseData['body'], maxBytes: number): Promise<string> {
  const chunks: Buffer[] = [];
  let bytes = 0;
  for await (const chunk of body) {
    bytes += (chunk as Buffer).length;
    if (bytes > maxBytes) {
      body.destroy();
      throw new Error(`listing EndpointSlices: a body larger than ${maxBytes} bytes`);
    }
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** The label selector of the EndpointSlices of `services`: an equality for one, a set for several. */
export function sliceSelectorOf(services: readonly string[]): string {
  return services.length === 1
    ? `kubernetes.io/service-name=${services[0]}`
    : `kubernetes.io/service-name in (${services.join(',')})`;
}
