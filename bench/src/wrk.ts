import { spawn } from 'node:child_process';
import { join } from 'node:path';

/** Runs Debian's `wrk` with bench/wrk/chat-completions.lua and parses what its done() hook prints. */

export const WRK_CHAT_SCRIPT = join(import.meta.dirname, '..', 'wrk', 'chat-completions.lua');

export interface WrkErrors {
  readonly connect: number;
  readonly read: number;
  readonly write: number;
  /** Responses with a status > 399. */
  readonly status: number;
  readonly timeout: number;
}

export interface WrkResult {
  readonly durationUs: number;
  readonly requests: number;
  readonly bytes: number;
  readonly errors: WrkErrors;
  /** Request written → response complete (the whole SSE stream for streaming requests), µs. */
  readonly latencyUs: {
    readonly min: number;
    readonly mean: number;
    readonly stdev: number;
    readonly max: number;
    readonly p50: number;
    readonly p90: number;
    readonly p99: number;
    readonly p999: number;
  };
}

export interface WrkWorkload {
  readonly model: string;
  readonly promptBytes: number;
  readonly maxTokens: number;
  readonly stream: boolean;
}

export interface WrkRun {
  readonly url: string;
  readonly workload: WrkWorkload;
  readonly connections: number;
  readonly seconds: number;
  /** Target aggregate rate in req/s; undefined = closed loop (unpaced). */
  readonly rate?: number;
  /** Distinguishes prompts of different runs. */
  readonly runId: number;
  /** Pin wrk to this core with taskset. */
  readonly core?: number;
  readonly timeoutSeconds?: number;
  /** Sent as `Authorization: Bearer` (a router with `auth: api-keys`). */
  readonly apiKey?: string;
}

/**
 * Pause of one connection between a response and its next request, in ms, so that `connections`
 * connections together offer `rate` req/s: each one sends every connections/rate seconds. (The
 * response time comes on top, so the achieved rate is slightly below the target; it is reported.)
 */
export function pacingDelayMs(rate: number, connections: number): number {
  if (!(rate > 0) || !Number.isFinite(rate)) throw new Error(`rate must be a positive number, got ${rate}`);
  if (!Number.isInteger(connections) || connections < 1)
    throw new Error(`connections must be a positive integer, got ${connections}`);
  return (1000 * connections) / rate;
}

/** Requests per second over the run. */
export function requestRate(result: WrkResult): number {
  return result.durationUs > 0 ? result.requests / (result.durationUs / 1e6) : 0;
}

export function errorCount(errors: WrkErrors): number {
  return errors.connect + errors.read + errors.write + errors.status + errors.timeout;
}

const MARKER = 'WRK_JSON ';

/** Finds the `WRK_JSON {...}` line of the Lua done() hook in wrk's stdout and checks its shape. */
export function parseWrkOutput(stdout: string): WrkResult {
  const line = stdout.split('\n').find((candidate) => candidate.startsWith(MARKER));
  if (!line) throw new Error(`wrk printed no ${MARKER.trim()} line:\n${stdout.slice(-2000)}`);
  const raw: unknown = JSON.parse(line.slice(MARKER.length));
  const record = asRecord(raw, 'result');
  const errors = asRecord(record.errors, 'errors');
  const latency = asRecord(record.latencyUs, 'latencyUs');
  return {
    durationUs: asNumber(record.durationUs, 'durationUs'),
    requests: asNumber(record.requests, 'requests'),
    bytes: asNumber(record.bytes, 'bytes'),
    errors: {
      connect: asNumber(errors.connect, 'errors.connect'),
      read: asNumber(errors.read, 'errors.read'),
      write: asNumber(errors.write, 'errors.write'),
      status: asNumber(errors.status, 'errors.status'),
      timeout: asNumber(errors.timeout, 'errors.timeout'),
    },
    latencyUs: {
      min: asNumber(latency.min, 'latencyUs.min'),
      mean: asNumber(latency.mean, 'latencyUs.mean'),
      stdev: asNumber(latency.stdev, 'latencyUs.stdev'),
      max: asNumber(latency.max, 'latencyUs.max'),
      p50: asNumber(latency.p50, 'latencyUs.p50'),
      p90: asNumber(latency.p90, 'latencyUs.p90'),
      p99: asNumber(latency.p99, 'latencyUs.p99'),
      p999: asNumber(latency.p999, 'latencyUs.p999'),
    },
  };
}

function asRecord(value: unknown, name: string): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw new Error(`wrk result: ${name} is not an object`);
  return value as Record<string, unknown>;
}

function asNumber(value: unknown, name: string): number {
  if (typeof value !== 'number' || !Number.isFinite(value)) throw new Error(`wrk result: ${name} is not a number`);
  return value;
}

/** Command line (program + args) and environment of one wrk run. */
export function wrkCommand(
  run: WrkRun,
  wrkPath = 'wrk',
): { command: string; args: string[]; env: Record<string, string> } {
  const wrkArgs = [
    '-t1',
    `-c${run.connections}`,
    `-d${run.seconds}s`,
    `--timeout`,
    `${run.timeoutSeconds ?? 5}s`,
    '-s',
    WRK_CHAT_SCRIPT,
    run.url,
  ];
  const env = {
    BENCH_MODEL: run.workload.model,
    BENCH_PROMPT_BYTES: String(run.workload.promptBytes),
    BENCH_MAX_TOKENS: String(run.workload.maxTokens),
    BENCH_STREAM: run.workload.stream ? '1' : '0',
    BENCH_DELAY_MS: run.rate === undefined ? '0' : pacingDelayMs(run.rate, run.connections).toFixed(3),
    BENCH_RUN_ID: String(run.runId),
    ...(run.apiKey === undefined ? {} : { BENCH_API_KEY: run.apiKey }),
  };
  return run.core === undefined
    ? { command: wrkPath, args: wrkArgs, env }
    : { command: 'taskset', args: ['-c', String(run.core), wrkPath, ...wrkArgs], env };
}

export function runWrk(run: WrkRun, wrkPath = 'wrk'): Promise<WrkResult> {
  const { command, args, env } = wrkCommand(run, wrkPath);
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    const killer = setTimeout(() => child.kill('SIGKILL'), (run.seconds + 30) * 1000);
    child.on('error', (error) => {
      clearTimeout(killer);
      reject(error);
    });
    child.on('close', (code, signal) => {
      clearTimeout(killer);
      if (code !== 0)
        return reject(new Error(`wrk exited with ${signal ?? code}: ${(stderr || stdout).trim().slice(-1000)}`));
      try {
        resolve(parseWrkOutput(stdout));
      } catch (error) {
        reject(error instanceof Error ? error : new Error(String(error)));
      }
    });
  });
}
