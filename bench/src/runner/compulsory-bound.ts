/**
 * The compulsory-miss bound: the most prefix reuse any placement of a run's requests can get.
 *
 * Definition. Over the run's request sequence, with an infinite KV cache pooled over the whole fleet,
 * a request's prompt tokens in full blocks that some earlier request already had (its prompt or the
 * tokens it generated) are hits; only blocks nobody had before miss (compulsory misses). Token-weighted
 * over the run: Σ hit tokens ÷ Σ prompt tokens. No router can beat it: a real fleet only loses to it
 * (a prefix on another backend, an eviction, a sibling sent before its prefix was computed).
 *
 * How it is computed: from the sims' own view, not bench-side. The bench has no tokenizer or chat
 * template of the sims (both live in apps/vllm-sim), and the block hashes, the 16-token blocks, the
 * last-token rule (a fully cached prompt still computes its last token) and the generated tokens that
 * later turns carry back are the sim's. So the run's requests are replayed, exactly as the driver sends
 * them (driveWorkload in serial mode: sessions one after another with the replies this sim gives, events
 * in arrival order, one request at a time, no pauses), through one extra vllm-sim with the cluster's
 * profile and sim keys but a KV cache large enough never to evict and a time scale that makes its
 * engine time negligible. Its `usage.prompt_tokens_details.cached_tokens` over `prompt_tokens`, summed
 * the way the report sums KV hit % (successful responses), is the bound: the sims' own hit counting on
 * a cache that is pooled (one cache) and infinite (no eviction), each request seeing every earlier one.
 * The sims' replies are a pure function of the prompt (and the sim seed, the same on every sim of a
 * cluster), so the replayed sequence is the one every policy's run sends, byte for byte; only its
 * interleaving differs, which moves the sum only through the last-token rule (a prompt whose full
 * blocks are all cached). Once per workload and seed: it does not depend on the policy.
 *
 * Infinite is checked, not assumed: the replay sim's KV blocks are sized from the workload's text
 * (distinct 256-byte chunk chains at ≥ 2.5 bytes per token, plus generation and slack per request),
 * and its `/sim/state` `evicted_blocks` is read before and after; if it evicted anything, the replay
 * runs again with 4× the blocks (once, up to MAX_BOUND_BLOCKS), and a bound that still evicted is
 * reported with its evictions (the report then shows none for that seed: it would bound nothing).
 */
import type { Agent } from 'undici';
import type { SeedBound } from '../report';
import { sessionEvents, type RequestEvent } from '../workloads';
import { driveWorkload, type DriveClock } from './drive-workload';
import { servedModel, type RunRequestRecord } from './request-client';
import type { Workload } from './scenario';

/** Simulated ms per wall ms in the replay sim: steps run back to back as fast as its loop turns. */
export const BOUND_SIM_TIME_SCALE = 100_000;
/** KV blocks the replay sim may get at most (~100 bytes each in the sim: 400 MB). */
export const MAX_BOUND_BLOCKS = 4_000_000;
/** The fewest KV blocks the replay sim gets. */
export const MIN_BOUND_BLOCKS = 16_384;

const ENGINE_BLOCK_TOKENS = 16;
const CHUNK_BYTES = 256;
/** Fewer bytes per token than any workload text here has (one-token words: 4–5; the seed's filler runs: more). */
const MIN_BYTES_PER_TOKEN = 2.5;
/** Blocks per request beyond its text: generated tokens (reasoning included) and partial and template blocks. */
const SLACK_BLOCKS_PER_REQUEST = 72;

/** Sleeps are skipped: the replay sends each request as soon as the previous one ended. */
export const NO_WAIT_CLOCK: DriveClock = { now: () => performance.now(), sleep: () => Promise.resolve() };

/** A running replay sim. */
export interface BoundSimHandle {
  readonly url: string;
  readonly numGpuBlocks: number;
  stop(): Promise<void>;
}

export interface CompulsoryBoundOptions {
  /** Starts a vllm-sim with the cluster's profile and sim keys, this many KV blocks and BOUND_SIM_TIME_SCALE. */
  readonly startSim: (numGpuBlocks: number) => Promise<BoundSimHandle>;
  readonly agent: Agent;
  readonly log: (line: string) => void;
  readonly maxBlocks?: number;
  /** The replay sim's first size for a workload (default estimateBoundBlocks). */
  readonly sizeBlocks?: (workload: Workload) => number;
}

export interface BoundReplayHooks {
  readonly extraBody?: Readonly<Record<string, unknown>>;
  /** After every replayed request (progress). */
  readonly onDone?: (record: RunRequestRecord) => void;
}

/** Σ over the replay's records: requests, failures (non-2xx), and prompt and cached tokens of the successful ones. */
export function boundTotals(
  records: readonly RunRequestRecord[],
): Pick<SeedBound, 'requests' | 'failed' | 'promptTokens' | 'cachedTokens'> {
  let failed = 0;
  let promptTokens = 0;
  let cachedTokens = 0;
  for (const record of records) {
    if (record.status < 200 || record.status >= 300) {
      failed++;
      continue;
    }
    promptTokens += record.promptTokens;
    cachedTokens += record.cachedTokens ?? 0;
  }
  return { requests: records.length, failed, promptTokens, cachedTokens };
}

/** The requests of a workload as events (sessions with placeholder replies): what the size estimate reads. */
function eventsOf(workload: Workload): readonly RequestEvent[] {
  return workload.kind === 'sessions' ? sessionEvents(workload.sessions) : workload.events;
}

function eventText(event: RequestEvent): string {
  if (event.kind === 'completion') return event.prompt;
  return event.messages
    .map(
      (message) =>
        `${message.role}\n${message.content ?? ''}${message.tool_calls ? JSON.stringify(message.tool_calls) : ''}`,
    )
    .join('\n');
}

/** 53-bit string hash (cyrb53), seeded: chains chunk hashes so equal hash ⇒ equal text up to that chunk. */
function hash53(text: string, seed: number): number {
  let h1 = 0xdeadbeef ^ seed;
  let h2 = 0x41c6ce57 ^ seed;
  for (let index = 0; index < text.length; index++) {
    const code = text.charCodeAt(index);
    h1 = Math.imul(h1 ^ code, 2654435761);
    h2 = Math.imul(h2 ^ code, 1597334677);
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);
  return 4294967296 * (2097151 & h2) + (h1 >>> 0);
}

/**
 * KV blocks an infinite cache needs for the workload, over-estimated from its text: shared prefixes
 * (same text chunk chain) count once, every request's generation and partial blocks count apart.
 * Not clamped; `estimateBoundBlocks` is.
 */
export function textBoundBlocks(workload: Workload): number {
  const seen = new Set<number>();
  let distinctChars = 0;
  let slackBlocks = 0;
  for (const event of eventsOf(workload)) {
    const text = eventText(event);
    let parent = 0;
    for (let start = 0; start < text.length; start += CHUNK_BYTES) {
      const chunk = text.slice(start, start + CHUNK_BYTES);
      parent = hash53(chunk, parent % 0x7fffffff);
      if (seen.has(parent)) continue;
      seen.add(parent);
      distinctChars += chunk.length;
    }
    slackBlocks += Math.ceil(event.maxTokens / ENGINE_BLOCK_TOKENS) + SLACK_BLOCKS_PER_REQUEST;
  }
  // UTF-16 units ≤ UTF-8 bytes for the ASCII text of these workloads; tokens ≤ bytes ÷ MIN_BYTES_PER_TOKEN.
  return Math.ceil(distinctChars / MIN_BYTES_PER_TOKEN / ENGINE_BLOCK_TOKENS) + slackBlocks;
}

/** The replay sim's first size for the workload: textBoundBlocks, at least MIN_BOUND_BLOCKS. */
export function estimateBoundBlocks(workload: Workload): number {
  return Math.max(MIN_BOUND_BLOCKS, textBoundBlocks(workload));
}

/** The sim's cached blocks evicted since it started (its /sim/state). */
async function evictedBlocks(simUrl: string): Promise<number> {
  const response = await fetch(new URL('/sim/state', simUrl));
  if (!response.ok) throw new Error(`${simUrl}/sim/state answered ${response.status}`);
  const state = (await response.json()) as { evicted_blocks?: unknown };
  if (typeof state.evicted_blocks !== 'number') throw new Error(`${simUrl}/sim/state has no evicted_blocks`);
  return state.evicted_blocks;
}

async function resetCache(simUrl: string): Promise<void> {
  const response = await fetch(new URL('/sim/reset-cache', simUrl), { method: 'POST' });
  if (!response.ok) throw new Error(`${simUrl}/sim/reset-cache answered ${response.status}`);
  await response.text();
}

/** The replay sim and the bound computation; one per local cluster, the sim kept between workloads that fit it. */
export class CompulsoryBound {
  private sim: BoundSimHandle | undefined;

  constructor(private readonly options: CompulsoryBoundOptions) {}

  /** The bound of one workload and seed (see the header). */
  async compute(workload: Workload, seed: number, hooks: BoundReplayHooks = {}): Promise<SeedBound> {
    const cap = this.options.maxBlocks ?? MAX_BOUND_BLOCKS;
    let blocks = Math.min(cap, (this.options.sizeBlocks ?? estimateBoundBlocks)(workload));
    for (let attempt = 0; ; attempt++) {
      const sim = await this.simWith(blocks);
      await resetCache(sim.url);
      const evictedBefore = await evictedBlocks(sim.url);
      const driven = await driveWorkload(workload, {
        routers: [sim.url],
        model: await servedModel(sim.url),
        agent: this.options.agent,
        maxRunMs: Number.POSITIVE_INFINITY,
        maxInflight: 1,
        clock: NO_WAIT_CLOCK,
        serial: true,
        extraBody: hooks.extraBody,
        onDone: hooks.onDone,
      });
      const evicted = (await evictedBlocks(sim.url)) - evictedBefore;
      const bound: SeedBound = {
        seed,
        ...boundTotals(driven.requests),
        evictedBlocks: evicted,
        numGpuBlocks: sim.numGpuBlocks,
      };
      if (evicted === 0 || attempt >= 1 || sim.numGpuBlocks >= cap) {
        if (evicted > 0)
          this.options.log(
            `  bound, seed ${seed}: the replay sim evicted ${evicted} blocks with ${sim.numGpuBlocks}: no bound for this seed`,
          );
        return bound;
      }
      blocks = Math.min(cap, 4 * sim.numGpuBlocks);
      this.options.log(
        `  bound, seed ${seed}: the replay sim evicted ${evicted} blocks with ${sim.numGpuBlocks}: again with ${blocks}`,
      );
    }
  }

  /** A replay sim with at least `blocks` KV blocks: the current one, or a new one (the old one stopped). */
  private async simWith(blocks: number): Promise<BoundSimHandle> {
    if (this.sim && this.sim.numGpuBlocks >= blocks) return this.sim;
    await this.close();
    this.sim = await this.options.startSim(blocks);
    return this.sim;
  }

  async close(): Promise<void> {
    const sim = this.sim;
    this.sim = undefined;
    await sim?.stop();
  }
}
