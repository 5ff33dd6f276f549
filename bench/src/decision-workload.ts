/**
 * What the Redis decision benchmarks share (`bench:redis-decision`, `bench:cells`): the prompts (a shared
 * system prompt, conversations of TURN_TOKENS turns, unique prompts), synthetic backends, the router's
 * state defaults, and Redis INFO parsing.
 */
import type { ChatCompletionRequest, ChatMessage } from '@kvroute/protocols';
import { buildRoutingRequest, type BackendInfo, type RoutingRequest } from '@kvroute/routing';
import { mean, syntheticTokenPrompt } from '@kvroute/workloads';

export const BLOCK_SIZE_BYTES = 256;

export const SYSTEM_TOKENS = 256;

export const TURN_TOKENS = 200;

export const POOL = 'bench-model';

/** The router's defaults (apps/router/src/config.ts). */
export const STATE_DEFAULTS = { maxBlocksPerPool: 1_000_000, blockIdleTtlMs: 1_800_000, leaseTtlMs: 15_000 } as const;

export interface Workload {
  /** Previous turn of each conversation (pre-filled), its next turn (measured), a new prompt (measured). */
  previous: RoutingRequest[];
  next: RoutingRequest[];
  unique: RoutingRequest[];
  hashMsMean: number;
}

/** `tokens` ≈ 4-byte words (3 base-36 characters and a space), deterministic per seed. */
export function words(tokens: number, seed: number): string {
  return syntheticTokenPrompt(Math.max(1, tokens), seed)
    .map((id) => (id % 46_656).toString(36).padStart(3, '0'))
    .join(' ');
}

export const SYSTEM_PROMPT: ChatMessage = {
  role: 'system',
  content: `You are the assistant of a benchmark. ${words(SYSTEM_TOKENS - 8, 999)}`,
};

export function body(messages: ChatMessage[]): ChatCompletionRequest {
  return { model: POOL, messages };
}

export function routingRequest(messages: ChatMessage[]): RoutingRequest {
  return buildRoutingRequest(body(messages), { blockSizeBytes: BLOCK_SIZE_BYTES, sessionKey: null });
}

/** Conversation `c` up to `tokens` tokens: the system prompt, then turns of TURN_TOKENS. */
export function conversation(c: number, tokens: number): ChatMessage[] {
  const messages: ChatMessage[] = [SYSTEM_PROMPT];
  for (let used = SYSTEM_TOKENS, m = 0; used < tokens; m++) {
    const size = Math.min(TURN_TOKENS, tokens - used);
    messages.push({
      role: m % 2 === 0 ? 'user' : 'assistant',
      content: `conversation ${c} message ${m}: ${words(size - 4, c * 1000 + m + 1)}`,
    });
    used += size;
  }
  return messages;
}

export function buildWorkload(promptTokens: number, count: number): Workload {
  const previous: RoutingRequest[] = [];
  const next: RoutingRequest[] = [];
  const unique: RoutingRequest[] = [];
  const hashMs: number[] = [];
  for (let c = 0; c < count; c++) {
    const before = conversation(c, Math.max(SYSTEM_TOKENS + 1, promptTokens - TURN_TOKENS));
    previous.push(routingRequest(before));
    const reply: ChatMessage = {
      role: 'assistant',
      content: `conversation ${c} reply: ${words((3 * TURN_TOKENS) / 4 - 4, c * 1000 + 998)}`,
    };
    const question: ChatMessage = {
      role: 'user',
      content: `conversation ${c} follow-up: ${words(TURN_TOKENS / 4 - 4, c * 1000 + 999)}`,
    };
    const nextMessages = [...before, reply, question];
    const started = performance.now();
    next.push(routingRequest(nextMessages));
    hashMs.push(performance.now() - started);
    unique.push(
      routingRequest([
        SYSTEM_PROMPT,
        { role: 'user', content: `new prompt ${c}: ${words(promptTokens - SYSTEM_TOKENS - 4, 2_000_000 + c)}` },
      ]),
    );
  }
  return { previous, next, unique, hashMsMean: mean(hashMs) };
}

export function infoNumber(info: string, field: string): number {
  const match = new RegExp(`^${field}:([\\d.]+)`, 'm').exec(info);
  if (!match) throw new Error(`INFO has no ${field}`);
  return Number(match[1]);
}

/** Script calls (FCALL, EVALSHA, EVAL) and their usec from INFO commandstats. */
export function scriptStats(info: string): { calls: number; usec: number } {
  let calls = 0;
  let usec = 0;
  for (const match of info.matchAll(/^cmdstat_(?:fcall|evalsha|eval):calls=(\d+),usec=(\d+)/gm)) {
    calls += Number(match[1]);
    usec += Number(match[2]);
  }
  return { calls, usec };
}

export function serverCpuSeconds(info: string): number {
  return infoNumber(info, 'used_cpu_user') + infoNumber(info, 'used_cpu_sys');
}

export function backendInfos(count: number): BackendInfo[] {
  return Array.from({ length: count }, (_, i) => ({ id: `10.0.${i >> 8}.${i & 255}:8000`, weight: 1 }));
}

/** Runs `tasks` with at most `concurrency` in flight (pipelined on one connection). */
export async function inBatches<T>(
  items: readonly T[],
  concurrency: number,
  task: (item: T, index: number) => Promise<void>,
): Promise<void> {
  for (let from = 0; from < items.length; from += concurrency) {
    await Promise.all(items.slice(from, from + concurrency).map((item, k) => task(item, from + k)));
  }
}

/**
 * Raises a redis-server's scheduling priority (renice -20; root only, else nothing changes) so that on a
 * shared machine other processes seldom preempt it mid-script: Redis's own µs per call (commandstats)
 * count wall time inside the command, descheduled time included. Returns whether it was raised.
 */
export async function raiseRedisPriority(info: string): Promise<boolean> {
  const pid = infoNumber(info, 'process_id');
  if (!Number.isInteger(pid) || pid <= 0) return false;
  const { spawnSync } = await import('node:child_process');
  return spawnSync('renice', ['-n', '-20', '-p', String(pid)], { stdio: 'ignore' }).status === 0;
}
