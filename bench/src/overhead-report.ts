import type { WrkResult } from './wrk';

/**
 * Pure part of the proxy-overhead benchmark (overhead.ts): the figures derived from the raw wrk
 * runs (added latency against the direct path, ratios to the bare proxy, target checks) and their
 * markdown rendering.
 */

/**
 * In the order every round visits them: a baseline path (`--baseline`: the router of another
 * checkout, e.g. the commit before a change) runs right after the path it is compared with, so the
 * pair sees the same state of a drifting machine.
 */
export const PATH_IDS = [
  'direct',
  'bare',
  'kvroute',
  'kvroute-baseline',
  'kvroute-redis',
  'kvroute-redis-baseline',
  'kvroute-redis-keys',
  'kvroute-pd',
  'haproxy',
] as const;
export type PathId = (typeof PATH_IDS)[number];
/** The paths measured only with `--baseline`, and the path each is compared with. */
export const BASELINE_OF = {
  'kvroute-baseline': 'kvroute',
  'kvroute-redis-baseline': 'kvroute-redis',
} as const satisfies Partial<Record<PathId, PathId>>;
export type BaselinePathId = keyof typeof BASELINE_OF;

export function isBaselinePath(path: PathId): path is BaselinePathId {
  return Object.hasOwn(BASELINE_OF, path);
}

/** Paths whose router keeps its routing state in the private Redis. */
export function usesRedis(path: PathId): boolean {
  return path === 'kvroute-redis' || path === 'kvroute-redis-baseline' || path === 'kvroute-redis-keys';
}

export const PATH_LABELS: Record<PathId, string> = {
  direct: 'direct to sim',
  bare: 'bare Node proxy',
  kvroute: 'kvroute',
  'kvroute-baseline': 'kvroute, baseline',
  'kvroute-redis': 'kvroute + Redis',
  'kvroute-redis-baseline': 'kvroute + Redis, baseline',
  'kvroute-redis-keys': 'kvroute + Redis + keys and limits',
  'kvroute-pd': 'kvroute, prefill/decode (every request split)',
  haproxy: 'HAProxy (TCP)',
};

export interface Workload {
  readonly id: string;
  readonly promptBytes: number;
  readonly stream: boolean;
}

export const WORKLOADS: readonly Workload[] = [
  { id: 'small-json', promptBytes: 100, stream: false },
  { id: 'small-sse', promptBytes: 100, stream: true },
  { id: '32k-json', promptBytes: 32 * 1024, stream: false },
  { id: '32k-sse', promptBytes: 32 * 1024, stream: true },
  // An agent's long history (issue 15: what a 128 KB prompt costs end to end); not in the default set.
  { id: '128k-json', promptBytes: 128 * 1024, stream: false },
];
/** The workloads run when `--workloads` is not given. */
export const DEFAULT_WORKLOAD_IDS: readonly string[] = ['small-json', 'small-sse', '32k-json', '32k-sse'];

/**
 * The paced (target-rate) runs of one path, combined over rounds: percentiles are the median of the
 * rounds' percentiles, counts and CPU are summed. Latencies in ms.
 */
export interface PacedMeasurement {
  readonly rounds: number;
  readonly requests: number;
  readonly achievedRate: number;
  readonly p50Ms: number;
  readonly p90Ms: number;
  readonly p99Ms: number;
  readonly p999Ms: number;
  readonly meanMs: number;
  readonly maxMs: number;
  readonly errors: number;
  /** CPU time of the proxy process per request, µs (absent for the direct path). */
  readonly proxyCpuUsPerRequest?: number;
  readonly simCpuUsPerRequest: number;
  /** CPU time of the router's private redis-server per request, µs (kvroute + Redis only). */
  readonly redisCpuUsPerRequest?: number;
  /** kvroute + Redis only: rounds during which the router routed (partly) on its local state. */
  readonly roundsOnLocalState?: number;
  /** (proxy + sim CPU) / wall time: how busy the shared core was (Redis runs on the client core, not in it). */
  readonly sharedCoreBusy: number;
  /** Most CPU other processes took during one round, in cores (undefined where /proc/stat is missing). */
  readonly foreignCpuCoresMax?: number;
  /** Each round's p50 and p99, ms, in the order they ran. */
  readonly roundP50sMs: readonly number[];
  readonly roundP99sMs: readonly number[];
  /** Each round's proxy CPU per request, µs, in the order they ran (empty for the direct path). */
  readonly roundProxyCpuUsPerRequest: readonly number[];
}

/** One paced wrk run and the CPU the sim and the proxy used meanwhile. */
export interface PacedRound {
  readonly wrk: WrkResult;
  readonly simCpuSeconds: number;
  /** Absent for the direct path. */
  readonly proxyCpuSeconds?: number;
  /** CPU of the router's redis-server meanwhile (kvroute + Redis only). */
  readonly redisCpuSeconds?: number;
  /** kvroute + Redis only: the router routed on its local state (Redis degraded) during part of the round. */
  readonly onLocalState?: boolean;
  readonly wallSeconds: number;
  /** CPU used meanwhile by processes other than the sim, the proxy, wrk and this script, in cores. */
  readonly foreignCpuCores?: number;
}

export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1
    ? (sorted[middle] as number)
    : ((sorted[middle - 1] as number) + (sorted[middle] as number)) / 2;
}

/** Combines the paced rounds of one path: median of each percentile, sums of counts, CPU and time. */
export function combinePacedRounds(rounds: readonly PacedRound[]): PacedMeasurement {
  const requests = rounds.reduce((sum, round) => sum + round.wrk.requests, 0);
  if (requests === 0) throw new Error('no request completed in the paced runs');
  const sum = (pick: (round: PacedRound) => number): number => rounds.reduce((total, round) => total + pick(round), 0);
  const ms = (pick: (latency: WrkResult['latencyUs']) => number): number[] =>
    rounds.map((round) => pick(round.wrk.latencyUs) / 1000);
  const hasProxy = rounds.every((round) => round.proxyCpuSeconds !== undefined);
  const simCpu = sum((round) => round.simCpuSeconds);
  const proxyCpu = sum((round) => round.proxyCpuSeconds ?? 0);
  const hasRedis = rounds.every((round) => round.redisCpuSeconds !== undefined);
  const errors = sum(
    (round) =>
      round.wrk.errors.connect +
      round.wrk.errors.read +
      round.wrk.errors.write +
      round.wrk.errors.status +
      round.wrk.errors.timeout,
  );
  return {
    rounds: rounds.length,
    requests,
    achievedRate: requests / (sum((round) => round.wrk.durationUs) / 1e6),
    p50Ms: median(ms((latency) => latency.p50)),
    p90Ms: median(ms((latency) => latency.p90)),
    p99Ms: median(ms((latency) => latency.p99)),
    p999Ms: median(ms((latency) => latency.p999)),
    meanMs: sum((round) => round.wrk.latencyUs.mean * round.wrk.requests) / requests / 1000,
    maxMs: Math.max(...ms((latency) => latency.max)),
    errors,
    ...(hasProxy ? { proxyCpuUsPerRequest: (proxyCpu * 1e6) / requests } : {}),
    simCpuUsPerRequest: (simCpu * 1e6) / requests,
    ...(hasRedis ? { redisCpuUsPerRequest: (sum((round) => round.redisCpuSeconds ?? 0) * 1e6) / requests } : {}),
    ...(rounds.some((round) => round.onLocalState !== undefined)
      ? { roundsOnLocalState: rounds.filter((round) => round.onLocalState === true).length }
      : {}),
    sharedCoreBusy: (simCpu + (hasProxy ? proxyCpu : 0)) / sum((round) => round.wallSeconds),
    ...(rounds.every((round) => round.foreignCpuCores !== undefined)
      ? { foreignCpuCoresMax: Math.max(...rounds.map((round) => round.foreignCpuCores ?? 0)) }
      : {}),
    roundP50sMs: ms((latency) => latency.p50),
    roundP99sMs: ms((latency) => latency.p99),
    roundProxyCpuUsPerRequest: hasProxy
      ? rounds.map((round) => ((round.proxyCpuSeconds ?? 0) * 1e6) / Math.max(1, round.wrk.requests))
      : [],
  };
}

/** The closed-loop (unpaced) run of one path. */
export interface MaxMeasurement {
  readonly rate: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly errors: number;
}

export interface PathResult {
  readonly path: PathId;
  readonly paced?: PacedMeasurement;
  readonly max?: MaxMeasurement;
  /** Why this path has no (or partial) figures. */
  readonly skipped?: string;
  /** wrk's own figures, for the JSON file. */
  readonly wrk?: { readonly paced: readonly WrkResult[]; readonly max?: WrkResult };
}

export interface WorkloadResult {
  readonly workload: Workload;
  readonly paths: readonly PathResult[];
}

export interface Targets {
  /** kvroute added p50 ≤ this × the bare proxy's. */
  readonly addedP50VsBare: number;
  /** kvroute added p99 ≤ this, ms. */
  readonly addedP99Ms: number;
  /** kvroute max rate ≥ this × the bare proxy's. */
  readonly maxRateVsBare: number;
  /** kvroute with Redis state added p50 (over direct) ≤ this, ms. */
  readonly redisAddedP50Ms: number;
}

export const TARGETS: Targets = { addedP50VsBare: 1.3, addedP99Ms: 1.5, maxRateVsBare: 0.75, redisAddedP50Ms: 0.5 };

/** Below this, an added p50 is within wrk's and the scheduler's noise: a ratio to it means nothing. */
export const MIN_MEANINGFUL_ADDED_MS = 0.01;

export interface Added {
  readonly p50Ms: number;
  readonly p99Ms: number;
}

/** What a path adds over the direct path, percentile by percentile (p99 of path − p99 of direct). */
export function addedLatency(
  path: PacedMeasurement | undefined,
  direct: PacedMeasurement | undefined,
): Added | undefined {
  if (!path || !direct) return undefined;
  return { p50Ms: path.p50Ms - direct.p50Ms, p99Ms: path.p99Ms - direct.p99Ms };
}

/** a / b, undefined when either is missing or b is too small to divide by meaningfully. */
export function ratio(
  a: number | undefined,
  b: number | undefined,
  minDenominator = Number.EPSILON,
): number | undefined {
  if (a === undefined || b === undefined || !Number.isFinite(a) || !Number.isFinite(b) || b < minDenominator)
    return undefined;
  return a / b;
}

export interface WorkloadSummary {
  readonly workload: string;
  readonly added: Partial<Record<PathId, Added>>;
  readonly kvrouteAddedP50VsBare?: number;
  readonly kvrouteAddedP99Ms?: number;
  readonly kvrouteMaxRateVsBare?: number;
  readonly haproxyAddedP50VsBare?: number;
  readonly haproxyMaxRateVsBare?: number;
  /** kvroute + Redis over direct (its `added`), p50 and p99. */
  readonly kvrouteRedisAddedP50Ms?: number;
  readonly kvrouteRedisAddedP99Ms?: number;
  /** What Redis state costs over kvroute's local state: kvroute + Redis's percentiles − kvroute's. */
  readonly kvrouteRedisVsKvroute?: Added;
  readonly redisCpuUsPerRequest?: number;
  /** true / false against TARGETS; undefined when a figure is missing. */
  readonly meets: {
    readonly addedP50?: boolean;
    readonly addedP99?: boolean;
    readonly maxRate?: boolean;
    readonly redisAddedP50?: boolean;
  };
}

export function summarize(result: WorkloadResult, targets: Targets = TARGETS): WorkloadSummary {
  const byPath = new Map(result.paths.map((path) => [path.path, path]));
  const direct = byPath.get('direct')?.paced;
  const added: Partial<Record<PathId, Added>> = {};
  for (const path of result.paths) {
    if (path.path === 'direct') continue;
    const value = addedLatency(path.paced, direct);
    if (value) added[path.path] = value;
  }
  const bareMax = byPath.get('bare')?.max?.rate;
  const kvrouteAddedP50VsBare = ratio(added.kvroute?.p50Ms, added.bare?.p50Ms, MIN_MEANINGFUL_ADDED_MS);
  const kvrouteAddedP99Ms = added.kvroute?.p99Ms;
  const kvrouteMaxRateVsBare = ratio(byPath.get('kvroute')?.max?.rate, bareMax);
  const withRedis = byPath.get('kvroute-redis')?.paced;
  const kvrouteRedisAddedP50Ms = added['kvroute-redis']?.p50Ms;
  const kvrouteRedisVsKvroute = addedLatency(withRedis, byPath.get('kvroute')?.paced);
  return {
    workload: result.workload.id,
    added,
    kvrouteAddedP50VsBare,
    kvrouteAddedP99Ms,
    kvrouteMaxRateVsBare,
    haproxyAddedP50VsBare: ratio(added.haproxy?.p50Ms, added.bare?.p50Ms, MIN_MEANINGFUL_ADDED_MS),
    haproxyMaxRateVsBare: ratio(byPath.get('haproxy')?.max?.rate, bareMax),
    kvrouteRedisAddedP50Ms,
    kvrouteRedisAddedP99Ms: added['kvroute-redis']?.p99Ms,
    kvrouteRedisVsKvroute,
    redisCpuUsPerRequest: withRedis?.redisCpuUsPerRequest,
    meets: {
      addedP50: kvrouteAddedP50VsBare === undefined ? undefined : kvrouteAddedP50VsBare <= targets.addedP50VsBare,
      addedP99: kvrouteAddedP99Ms === undefined ? undefined : kvrouteAddedP99Ms <= targets.addedP99Ms,
      maxRate: kvrouteMaxRateVsBare === undefined ? undefined : kvrouteMaxRateVsBare >= targets.maxRateVsBare,
      redisAddedP50:
        kvrouteRedisAddedP50Ms === undefined ? undefined : kvrouteRedisAddedP50Ms <= targets.redisAddedP50Ms,
    },
  };
}

const DASH = '–';

function ms(value: number | undefined): string {
  return value === undefined ? DASH : `${value.toFixed(3)}`;
}

function signedMs(value: number | undefined): string {
  if (value === undefined) return DASH;
  return `${value >= 0 ? '+' : '−'}${Math.abs(value).toFixed(3)}`;
}

function times(value: number | undefined): string {
  return value === undefined ? DASH : `${value.toFixed(2)}×`;
}

function mark(ok: boolean | undefined): string {
  return ok === undefined ? '' : ok ? ' ✓' : ' ✗';
}

/** One row per workload × path: the raw figures and what each path adds over direct. */
export function resultsTable(results: readonly WorkloadResult[], rate: number): string {
  const lines = [
    `| workload | path | achieved req/s (target ${rate}) | p50 ms | p99 ms | added p50 ms | added ` +
      `p99 ms | max req/s | max vs bare | proxy CPU µs/req | sim CPU µs/req | Redis CPU µs/req | ` +
      `proxy + sim CPU (of one core) | errors |`,
    '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const result of results) {
    const summary = summarize(result);
    const bareMax = result.paths.find((path) => path.path === 'bare')?.max?.rate;
    for (const path of result.paths) {
      const label = PATH_LABELS[path.path];
      if (!path.paced && !path.max) {
        lines.push(
          `| ${result.workload.id} | ${label} | skipped: ${escapeCell(path.skipped ?? 'no data')} ||||||||||||`,
        );
        continue;
      }
      const paced = path.paced;
      const added = summary.added[path.path];
      const errors = (paced?.errors ?? 0) + (path.max?.errors ?? 0);
      const cells = [
        result.workload.id,
        label + (path.skipped ? ` (${escapeCell(path.skipped)})` : ''),
        paced ? paced.achievedRate.toFixed(0) : DASH,
        ms(paced?.p50Ms),
        ms(paced?.p99Ms),
        path.path === 'direct' ? '0' : signedMs(added?.p50Ms),
        path.path === 'direct' ? '0' : signedMs(added?.p99Ms),
        path.max ? path.max.rate.toFixed(0) : DASH,
        path.path === 'bare' ? '1.00×' : times(ratio(path.max?.rate, bareMax)),
        paced?.proxyCpuUsPerRequest === undefined ? DASH : paced.proxyCpuUsPerRequest.toFixed(0),
        paced ? paced.simCpuUsPerRequest.toFixed(0) : DASH,
        paced?.redisCpuUsPerRequest === undefined ? DASH : paced.redisCpuUsPerRequest.toFixed(0),
        paced ? `${(100 * paced.sharedCoreBusy).toFixed(0)} %` : DASH,
        String(errors),
      ];
      lines.push(`| ${cells.join(' | ')} |`);
    }
  }
  return lines.join('\n');
}

/**
 * One row per workload: kvroute against the targets (local state, then with Redis state, whose added
 * p99, cost over local state and Redis CPU stand beside its target), and the bare proxy and HAProxy
 * beside them for scale.
 */
export function targetsTable(results: readonly WorkloadResult[], targets: Targets = TARGETS): string {
  const lines = [
    `| workload | kvroute added p50 ÷ bare's (≤ ${targets.addedP50VsBare}) | kvroute added p99 ` +
      `ms (≤ ${targets.addedP99Ms}) | kvroute max ÷ bare's (≥ ${targets.maxRateVsBare}) | kvroute ` +
      `+ Redis added p50 ms (≤ ${targets.redisAddedP50Ms}) | kvroute + Redis added p99 ms | kvroute ` +
      `+ Redis − kvroute p50 / p99 ms | Redis CPU µs/req | bare added p50 / p99 ms | HAProxy added ` +
      `p50 / p99 ms | HAProxy added p50 ÷ bare's | HAProxy max ÷ bare's |`,
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  const pair = (value: Added | undefined): string =>
    value ? `${signedMs(value.p50Ms)} / ${signedMs(value.p99Ms)}` : DASH;
  for (const result of results) {
    const summary = summarize(result, targets);
    const cells = [
      result.workload.id,
      `${times(summary.kvrouteAddedP50VsBare)}${mark(summary.meets.addedP50)}`,
      `${signedMs(summary.kvrouteAddedP99Ms)}${mark(summary.meets.addedP99)}`,
      `${times(summary.kvrouteMaxRateVsBare)}${mark(summary.meets.maxRate)}`,
      `${signedMs(summary.kvrouteRedisAddedP50Ms)}${mark(summary.meets.redisAddedP50)}${onLocalState(result)}`,
      signedMs(summary.kvrouteRedisAddedP99Ms),
      pair(summary.kvrouteRedisVsKvroute),
      summary.redisCpuUsPerRequest === undefined ? DASH : summary.redisCpuUsPerRequest.toFixed(0),
      pair(summary.added.bare),
      pair(summary.added.haproxy),
      times(summary.haproxyAddedP50VsBare),
      times(summary.haproxyMaxRateVsBare),
    ];
    lines.push(`| ${cells.join(' | ')} |`);
  }
  return lines.join('\n');
}

/**
 * One row per workload × compared path (`--baseline`): the router's CPU per request against the
 * baseline router's, as a ratio of the totals and as the median of the per-round ratios (round r of
 * a path and of its baseline ran back to back, so each round's ratio is the one least moved by the
 * machine's drift), with the extreme rounds beside it; and the added p50 of both.
 */
export function baselineTable(results: readonly WorkloadResult[]): string {
  const lines = [
    '| workload | path | proxy CPU µs/req: baseline → this | change (totals) | change, median of rounds [min, max] | added p50 ms: baseline → this |',
    '|---|---|---:|---:|---:|---:|',
  ];
  const percent = (value: number | undefined): string =>
    value === undefined ? DASH : `${value >= 1 ? '+' : '−'}${Math.abs(100 * (value - 1)).toFixed(1)} %`;
  for (const result of results) {
    const summary = summarize(result);
    const byPath = new Map(result.paths.map((path) => [path.path, path]));
    for (const [baselinePath, comparedPath] of Object.entries(BASELINE_OF) as [BaselinePathId, PathId][]) {
      const baseline = byPath.get(baselinePath)?.paced;
      const compared = byPath.get(comparedPath)?.paced;
      if (!byPath.has(baselinePath) || !byPath.has(comparedPath)) continue;
      const roundRatios = (compared?.roundProxyCpuUsPerRequest ?? [])
        .map((value, round) => ratio(value, baseline?.roundProxyCpuUsPerRequest[round]))
        .filter((value): value is number => value !== undefined);
      const cells = [
        result.workload.id,
        PATH_LABELS[comparedPath],
        `${baseline?.proxyCpuUsPerRequest?.toFixed(0) ?? DASH} → ${compared?.proxyCpuUsPerRequest?.toFixed(0) ?? DASH}`,
        percent(ratio(compared?.proxyCpuUsPerRequest, baseline?.proxyCpuUsPerRequest)),
        roundRatios.length === 0
          ? DASH
          : `${percent(median(roundRatios))} [${percent(Math.min(...roundRatios))}, ${percent(Math.max(...roundRatios))}]`,
        `${signedMs(summary.added[baselinePath]?.p50Ms)} → ${signedMs(summary.added[comparedPath]?.p50Ms)}`,
      ];
      lines.push(`| ${cells.join(' | ')} |`);
    }
  }
  return lines.join('\n');
}

/** Flags kvroute + Redis figures measured (partly) while the router routed on its local state. */
function onLocalState(result: WorkloadResult): string {
  const paced = result.paths.find((path) => path.path === 'kvroute-redis')?.paced;
  return paced?.roundsOnLocalState ? ` (${paced.roundsOnLocalState}/${paced.rounds} rounds partly on local state)` : '';
}

function escapeCell(text: string): string {
  return text.replaceAll('|', '\\|').replaceAll('\n', ' ');
}
