/** A backend's KV-event source as configured (the `kvEvents` field of a backend entry). */
export interface KvEventsSource {
  /** PUB endpoint of rank 0, `tcp://host:port` (default: the backend's host at `kvEventsPort`). */
  readonly endpoint?: string | undefined;
  /** Replay ROUTER endpoint of rank 0; null = none (default: the host at `kvEventsReplayPort`, or the PUB port + 1). */
  readonly replayEndpoint?: string | null | undefined;
  /** Data-parallel ranks publishing, each on its own port (default: the backend's dataParallel, else `kvEventsDataParallelSize`). */
  readonly dataParallelSize?: number | undefined;
  /** Global rank of the first (vLLM --data-parallel-start-rank under hybrid LB; default the backend's, else 0). */
  readonly dataParallelStartRank?: number | undefined;
  /** The model pool its blocks go in (default: the backend's only model, else `kvEventsModel`). */
  readonly model?: string | undefined;
}

/** What the poller knows of a backend for its event streams. */
export interface EventedBackend {
  readonly id: string;
  readonly url: string;
  readonly models?: readonly string[] | undefined;
  readonly kvEvents?: KvEventsSource | undefined;
  /** Its data-parallel ranks as the fleet's shared set carries them (the routers' `dataParallel`). */
  readonly dataParallel?: { readonly size: number; readonly startRank: number } | undefined;
}

/** The poller-wide defaults (config flags). */
export interface KvEventsDefaults {
  /** `--kv-events-port`: every backend publishes on its own host at this port (null = only backends with an endpoint). */
  readonly port: number | null;
  /** `--kv-events-replay-port` (null = the PUB port + 1); `replay: false` = no replay socket anywhere. */
  readonly replayPort: number | null;
  readonly replay: boolean;
  readonly dataParallelSize: number;
  readonly model: string | null;
}

/** One rank's stream: what a subscription connects to and where its blocks go. */
export interface RankStream {
  /** The id its ownership is recorded under: the backend id, or `<backend id>@<rank>` with data parallelism. */
  readonly rankId: string;
  readonly backendId: string;
  /** Its global data-parallel rank (0 without data parallelism). */
  readonly rank: number;
  readonly endpoint: string;
  readonly replayEndpoint: string | null;
  readonly pool: string;
}

/**
 * vLLM's `ZmqEventPublisher.offset_endpoint_port` (vllm/distributed/kv_events.py, v@0181ea31): rank r
 * of a data-parallel engine binds its PUB and its replay ROUTER at the configured ports + r (rank 0
 * unchanged; the last `:<port>` of a tcp endpoint). Note vLLM's own consequence: with a replay port
 * of PUB + 1, rank 1's PUB and rank 0's replay collide, so a DP deployment configures the replay
 * port apart (e.g. PUB + 100): `kvEventsReplayPort` or a backend's `replayEndpoint`.
 */
export function offsetEndpointPort(endpoint: string, rank: number): string {
  if (rank === 0) return endpoint;
  const colon = endpoint.lastIndexOf(':');
  const port = Number(endpoint.slice(colon + 1));
  if (!endpoint.startsWith('tcp://') || colon < 6 || !Number.isInteger(port))
    throw new RangeError(`cannot offset the port of ${endpoint} (a tcp://host:port endpoint is needed)`);
  return `${endpoint.slice(0, colon)}:${port + rank}`;
}

/** Hosts a publisher binds to but nobody can connect to (vLLM's default `tcp://*:5557` among them). */
const WILDCARD_HOSTS = new Set(['*', '0.0.0.0', '[::]', '::']);

/**
 * An endpoint as configured, its wildcard host (`*`, `0.0.0.0`, `::`: vLLM's bind syntax, easy to copy
 * from its --kv-events-config) replaced by the backend's own host: zeromq refuses to connect to `*`.
 */
export function connectableEndpoint(endpoint: string, backendHost: string): string {
  const colon = endpoint.lastIndexOf(':');
  if (!endpoint.startsWith('tcp://') || colon < 6) return endpoint;
  const host = endpoint.slice('tcp://'.length, colon);
  return WILDCARD_HOSTS.has(host) ? `tcp://${backendHost}${endpoint.slice(colon)}` : endpoint;
}

/**
 * The rank streams of a backend: none when it has no endpoint (no `kvEvents.endpoint` and no
 * `--kv-events-port`) or no pool (no `kvEvents.model`, not exactly one model, no `kvEventsModel`).
 * A backend of one rank is indexed under its own id; each rank of a data-parallel one under
 * `<id>@<global rank>`, as the routers name its rank candidates (apps/router backends/data-parallel.ts),
 * its ports offset by that global rank as vLLM offsets them. A wildcard host is the backend's host.
 */
export function rankStreams(backend: EventedBackend, defaults: KvEventsDefaults): RankStream[] {
  const source = backend.kvEvents ?? {};
  const host = new URL(backend.url).hostname;
  const configured = source.endpoint ?? (defaults.port === null ? null : `tcp://${host}:${defaults.port}`);
  if (configured === null) return [];
  const endpoint = connectableEndpoint(configured, host);
  const models = backend.models ?? [];
  const pool = source.model ?? (models.length === 1 ? (models[0] as string) : defaults.model);
  if (pool === null) return [];
  let replay: string | null = null;
  if (source.replayEndpoint !== undefined)
    replay = source.replayEndpoint === null ? null : connectableEndpoint(source.replayEndpoint, host);
  else if (defaults.replay) {
    const pubPort = Number(endpoint.slice(endpoint.lastIndexOf(':') + 1));
    const replayHost = endpoint.slice(0, endpoint.lastIndexOf(':'));
    replay = `${replayHost}:${defaults.replayPort ?? pubPort + 1}`;
  }
  const size = source.dataParallelSize ?? backend.dataParallel?.size ?? defaults.dataParallelSize;
  const start = size > 1 ? (source.dataParallelStartRank ?? backend.dataParallel?.startRank ?? 0) : 0;
  return Array.from({ length: size }, (_, local) => {
    const rank = start + local;
    return {
      rankId: size > 1 ? `${backend.id}@${rank}` : backend.id,
      backendId: backend.id,
      rank,
      endpoint: offsetEndpointPort(endpoint, rank),
      replayEndpoint: replay === null ? null : offsetEndpointPort(replay, rank),
      pool,
    };
  });
}
