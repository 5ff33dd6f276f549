import { ENGINE_KINDS } from '@kvroute/engine-metrics';
import {
  LOG_FORMATS,
  KVROUTE_FILE_KEYS,
  portOption,
  type SharedConfigFile,
  urlWithSecretOffFlags,
  UPSTREAM_KEY_SOURCE_FIELDS,
  upstreamKeyConfigFields,
} from '@kvroute/platform/config';
import { z } from 'zod';

/**
 * Health-poller configuration: one schema, parsed once at start by main.ts.
 * Precedence: defaults < `--config FILE` (YAML or JSON) < env `KVROUTE_POLLER_*` < flags.
 */
const TCP_ENDPOINT = /^tcp:\/\/[^\s/]+:\d+$/;

/** A backend's KV-event source (kv-events/endpoints.ts KvEventsSource). */
const KvEventsSourceConfig = z.strictObject({
  endpoint: z
    .string()
    .regex(TCP_ENDPOINT, 'must be tcp://host:port')
    .optional()
    .describe(
      "rank 0's PUB endpoint (default: the backend's host at kvEventsPort; a * / 0.0.0.0 / :: host, vLLM's bind syntax, is the backend's host)",
    ),
  replayEndpoint: z
    .string()
    .regex(TCP_ENDPOINT, 'must be tcp://host:port')
    .nullable()
    .optional()
    .describe("rank 0's replay ROUTER endpoint; null = none (gaps then resynchronise)"),
  dataParallelSize: z
    .number()
    .int()
    .min(1)
    .max(1024)
    .optional()
    .describe('data-parallel ranks, each publishing at port + rank'),
  model: z.string().min(1).optional().describe('the model pool its blocks go in'),
});

export const PollerBackendConfig = z.strictObject({
  url: z.url({ protocol: /^https?$/ }).describe('base URL of the engine'),
  id: z.string().min(1).optional().describe("stable id (default: the URL's host:port), the same the routers use"),
  engine: z.enum(ENGINE_KINDS).optional().describe('engine kind (default: told from its /metrics)'),
  // Accepted so that a router's backend list can be reused as is; models also name the pool of its KV events.
  models: z
    .array(z.string().min(1))
    .optional()
    .describe("the router's option; for KV events, the pool of a backend with exactly one model"),
  weight: z.number().positive().optional().describe('ignored (router option)'),
  // The same key sources as the router's backends (libs/platform upstream-keys.ts): the scrapes carry the key too.
  ...UPSTREAM_KEY_SOURCE_FIELDS,
  kvEvents: KvEventsSourceConfig.optional().describe(
    "the backend's KV-event streams (vLLM --kv-events-config), over the kvEvents* defaults",
  ),
});
export type PollerBackendConfig = z.infer<typeof PollerBackendConfig>;

const BackendEntry = z.union([z.url({ protocol: /^https?$/ }).transform((url) => ({ url })), PollerBackendConfig]);

export const PollerConfig = z
  .object({
    host: z.string().default('0.0.0.0').describe('address of the /healthz and /metrics server'),
    port: z.coerce.number().int().min(0).max(65_535).default(9464).describe('port of the /healthz and /metrics server'),
    redisUrl: urlWithSecretOffFlags(
      z
        .string()
        .regex(/^rediss?(\+cluster)?:\/\//, 'must be a redis://, rediss://, redis+cluster:// or rediss+cluster:// URL')
        .describe(
          'Redis shared with the routers (scrape jobs, backend states, the backend set): redis[s]://[user:password@]host:port, ' +
            'or a Redis Cluster as redis[s]+cluster://[user:password@]host:port,host:port,… (seed nodes); a URL ' +
            'with a password from the environment or the config file only (the flag refuses it)',
        ),
    ),
    backends: z
      .array(BackendEntry)
      .default([])
      .describe(
        'backends to scrape: URLs (comma-separated on the command line) or {url,id,engine} objects ' +
          "in a file; the fleet's shared backend set in Redis is scraped too",
      ),
    ...upstreamKeyConfigFields(
      "the shared set's backends that are not configured here (added through a router's admin API)",
    ),
    followSharedSet: z
      .boolean()
      .default(true)
      .describe("also scrape the fleet's shared backend set in Redis (the routers' admin API), following its changes"),
    backendSetPollMs: z.coerce
      .number()
      .int()
      .min(50)
      .default(500)
      .describe('how often the shared backend set is re-read, in case a change notice (pub/sub) was lost'),
    intervalMs: z.coerce
      .number()
      .int()
      .min(100)
      .default(1000)
      .describe('scrape every backend once per this interval (one BullMQ job scheduler per backend)'),
    scrapeTimeoutMs: z.coerce
      .number()
      .int()
      .positive()
      .default(500)
      .describe('timeout of each request of a scrape (/health, /metrics, /slots): connect to last byte'),
    failuresToUnhealthy: z.coerce
      .number()
      .int()
      .min(1)
      .default(2)
      .describe('consecutive failed health probes that mark a backend unhealthy'),
    successesToHealthy: z.coerce
      .number()
      .int()
      .min(1)
      .default(2)
      .describe('consecutive passed health probes that mark an unhealthy backend healthy again'),
    stateTtlIntervals: z.coerce
      .number()
      .int()
      .min(2)
      .default(3)
      .describe('a published state expires this many intervals after its scrape unless a newer one replaces it'),
    concurrency: z.coerce.number().int().min(1).default(16).describe('scrapes one poller runs at once'),
    jobLockMs: z.coerce
      .number()
      .int()
      .positive()
      .default(5000)
      .describe(
        'BullMQ lock of a running scrape job (renewed at half); a job whose poller died is taken back after this plus stalledCheckMs',
      ),
    stalledCheckMs: z.coerce
      .number()
      .int()
      .positive()
      .default(5000)
      .describe('how often each poller looks for jobs of dead pollers (BullMQ stalledInterval)'),
    reconcileMs: z.coerce
      .number()
      .int()
      .min(100)
      .default(5000)
      .describe(
        'how often the job schedulers are checked against the backend list (a missing or changed one ' +
          'is (re)created, a departed one removed; stuck ones are looked for every quarter interval)',
      ),
    shutdownGraceMs: z.coerce
      .number()
      .int()
      .positive()
      .default(10_000)
      .describe('how long the running scrapes may take to finish on SIGTERM'),
    kvEventsPort: portOption()
      .default(0)
      .describe(
        "KV-event indexer: every backend publishes vLLM's KV events on its own host at this port (vLLM's " +
          'default 5557; rank r at port + r); 0 = only backends with a kvEvents endpoint',
      ),
    kvEventsReplayPort: portOption()
      .default(0)
      .describe(
        "the replay ROUTER's port (rank r at port + r); 0 = kvEventsPort + 1 (with data parallelism set it " +
          "apart: vLLM's rank 1 PUB is at kvEventsPort + 1)",
      ),
    kvEventsReplay: z
      .boolean()
      .default(true)
      .describe('ask the replay socket for lost batches (false: a gap forgets the rank and goes on)'),
    kvEventsDataParallelSize: z.coerce
      .number()
      .int()
      .min(1)
      .max(1024)
      .default(1)
      .describe(
        'data-parallel ranks of a backend without its own kvEvents.dataParallelSize; ranks > 1 are indexed as <id>@<rank>',
      ),
    kvEventsModel: z
      .string()
      .min(1)
      .optional()
      .describe('the model pool of the events of a backend without kvEvents.model or exactly one model'),
    kvEventsTopic: z.string().default('').describe('topic prefix subscribed to (vLLM default "")'),
    kvEventsLeaseMs: z.coerce
      .number()
      .int()
      .min(300)
      .default(5000)
      .describe(
        "a replica's lease on a rank's stream, renewed every third; a dead replica's streams move within about two of them",
      ),
    kvEventsReplayTimeoutMs: z.coerce
      .number()
      .int()
      .min(50)
      .default(2000)
      .describe('a replay not ended after this long is given up and the rank resynchronised (forgotten)'),
    kvEventsMaxBatchEvents: z.coerce
      .number()
      .int()
      .min(1)
      .default(4096)
      .describe('events per batch at most; a bigger batch is dropped whole (counted, found as a gap)'),
    kvEventsMaxBatchBlocks: z.coerce
      .number()
      .int()
      .min(1)
      .default(65_536)
      .describe('blocks per batch at most (stored and removed); a bigger batch is dropped whole'),
    kvEventsMaxMessageBytes: z.coerce
      .number()
      .int()
      .min(1024)
      .default(16 * 1024 * 1024)
      .describe(
        "a KV-event batch's bytes at most (the sockets' maxMessageSize): a bigger frame cuts the publisher off " +
          '(it reconnects; the batch is found as a gap) and a bigger payload is dropped unread',
      ),
    kvEventsMaxQueuedBatches: z.coerce
      .number()
      .int()
      .min(1)
      .default(1000)
      .describe(
        "batches waiting per rank at most (and the SUB socket's high-water mark); beyond, dropped and replayed",
      ),
    kvEventsNamesPerRank: z.coerce
      .number()
      .int()
      .min(16)
      .default(65_536)
      .describe(
        "engine block hash → router name entries kept per rank (LRU; ~150 B each): at least the engine's " +
          'KV-cache blocks, so every BlockRemoved finds its block',
      ),
    blockIdleTtlMs: z.coerce
      .number()
      .int()
      .min(0)
      .default(1_800_000)
      .describe("the routers' blockIdleTtlMs: owner generations turn by the same rule whoever records"),
    maxBlocksPerPool: z.coerce.number().int().positive().default(1_000_000).describe("the routers' maxBlocksPerPool"),
    poolCells: z.coerce
      .number()
      .int()
      .min(1)
      .max(64)
      .default(1)
      .describe("the routers' poolCells: a rank's ownership is written in its cell"),
    logLevel: z
      .enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'])
      .default('info')
      .describe('log level'),
    logFormat: z
      .enum(LOG_FORMATS)
      .default('json')
      .describe('log lines as JSON (one object per line, for a log store) or pretty (for a person at a terminal)'),
  })
  .superRefine((config, context) => {
    if (config.scrapeTimeoutMs >= config.intervalMs) {
      context.addIssue({
        code: 'custom',
        path: ['scrapeTimeoutMs'],
        message: `must be below intervalMs (${config.intervalMs}): a scrape has to end before the next one starts`,
      });
    }
    // A job makes at most two requests one after the other (llama.cpp's /slots once its engine is known)
    // plus two Redis calls: its lock must outlast that, with room for a slow event loop.
    if (config.jobLockMs < 2 * config.scrapeTimeoutMs + 1000) {
      context.addIssue({
        code: 'custom',
        path: ['jobLockMs'],
        message: `must be at least 2 × scrapeTimeoutMs + 1000 (${2 * config.scrapeTimeoutMs + 1000})`,
      });
    }
  });
export type PollerConfig = z.infer<typeof PollerConfig>;

export const POLLER_ENV_PREFIX = 'KVROUTE_POLLER_';

/** This app's section of docs/configuration.md (generated by `npm run docs:config`, checked by a test). */
export function renderPollerConfigDoc(
  render: (schema: typeof PollerConfig, options: { title: string; envPrefix: string; intro: string }) => string,
): string {
  return render(PollerConfig, {
    title: 'Health poller (`npm run poller`)',
    envPrefix: POLLER_ENV_PREFIX,
    intro:
      'Precedence: defaults < `--config FILE` (YAML or JSON) < env < flags. Lists (`backends`) are ' +
      'comma-separated in env and flags. Every poller replica of a fleet should have the same config.',
  });
}

/** One kvroute.yaml serves routers and pollers: common keys at the top, this app's own under `poller:`. */
export const POLLER_CONFIG_FILE = {
  section: 'poller',
  otherSections: ['router'],
  otherAppKeys: KVROUTE_FILE_KEYS.router,
} as const satisfies SharedConfigFile;
