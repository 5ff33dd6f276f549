import { hashBlock, hashFullBlocks, rootHash } from './block-hash';
import { BlockPool, blocksFor, type KvBlock, type PoolEventSink } from './block-pool';
import { EngineStats, type FinishReason } from './engine-stats';
import { KvHolds, KvTransferLink, type KvTransferLinkOptions } from './kv-transfer';
import type { LoraSlots } from './lora-slots';
import { BLOCK_SIZE_TOKENS, type EngineProfile } from './profiles';
import { computeStepMs, type PrefillChunk } from './step-time';

/**
 * The simulated engine core: continuous batching over a KV block pool with prefix caching.
 * Pure and synchronous: time is passed in (simulated milliseconds), nothing sleeps. `EngineLoop`
 * drives it in (scaled) real time; tests drive it directly.
 *
 * One step = plan (choose what runs, allocate KV, compute duration) then complete (advance the
 * sequences, emit tokens). Scheduling follows vLLM (shared/reference/simulator-model.md §1):
 * - V1 (default): running sequences first (one decode token, or the next chunk of an unfinished
 *   prefill), then waiting ones FCFS with the remaining token budget; prefill and decode share a step.
 *   A waiting request is admitted only if the blocks for its new tokens can be allocated (head-of-line
 *   blocking otherwise). A running sequence that needs a block when none is free preempts the most
 *   recently admitted one (freed, back to the front of the queue, recomputed later); no new
 *   requests are admitted in a step that preempted.
 * - V0 (vLLM 0.6.x): a step is either prefills (every admissible waiting prompt, whole) or decodes;
 *   prefills win, so running streams stall while new prompts prefill. 1 % of blocks are kept free.
 *
 * When a computed block becomes hittable (`cacheAt`, README "Cache timing"):
 * - `schedule` (default, as vLLM): the full blocks a request will compute in a step are registered
 *   as it is scheduled, before the step runs (V1: `KVCacheManager.allocate_slots` → `cache_blocks`,
 *   up to min(computed + scheduled, tokens so far)), so a request scheduled later in the same pass or
 *   in a later step hits them; a long prompt under chunked prefill becomes hittable chunk by chunk.
 *   V0 registers them at the end of the scheduling pass (`mark_blocks_as_computed`): no hits within
 *   the pass, all of them from the next step on.
 * - `step-end` (the sim's earlier behaviour, for comparison): registered when the step that computes
 *   them ends, so a request admitted in the same step as the chunk that computes its prefix misses it.
 */

export type EngineVersion = 'v1' | 'v0';

/** When a computed block's hash enters the prefix cache; see the header. */
export type CacheAt = 'schedule' | 'step-end';

export interface SequenceListener {
  /** A new output token (index from 0). `nowMs` is simulated time. */
  onToken(sequence: Sequence, outputIndex: number, nowMs: number): void;
  onFinish(sequence: Sequence, reason: FinishReason, nowMs: number): void;
}

/**
 * Receives the prefix-cache changes vLLM reports as KV events (kv-events/kv-event-recorder.ts): stores as the
 * engine registers blocks (`cache_full_blocks`), evictions and resets from the pool, and the end of each
 * step, when vLLM publishes the step's events as one batch.
 */
export interface KvCacheEventSink extends PoolEventSink {
  /** Blocks `[first, end)` of `sequence` were just registered in the prefix cache, in one call. */
  blocksStored(sequence: Sequence, first: number, end: number): void;
  /** Publishes what was recorded since the last flush (end of a step, or a cache reset). */
  flush(): void;
}

export interface SequenceSpec {
  readonly id: string;
  readonly promptTokens: readonly number[];
  /** Output tokens to generate before finishing. */
  readonly outputTokens: number;
  /** Why the sequence ends when `outputTokens` are out: `length` (hit max_tokens) or `stop` (EOS). */
  readonly finishReason: 'stop' | 'length';
  /** Token id of output token `index` (deterministic pseudo-text, hashed into cached blocks). */
  readonly outputTokenAt: (index: number) => number;
  readonly cacheSalt?: string;
  /** The LoRA adapter it runs under (`model` named one); absent: the base model. */
  readonly lora?: { readonly name: string; readonly id: number };
  /** Request-level parameters, for the `request_params_*` histograms. */
  readonly maxTokensParam: number;
  readonly listener: SequenceListener;
  /**
   * Prefill/decode, decode side (`kv_transfer_params.do_remote_prefill`): a prefill instance computed this many
   * prompt tokens; the ones this engine does not hold are pulled over the link instead of computed.
   */
  readonly remotePrefillTokens?: number;
  /** Prefill/decode, prefill side (`do_remote_decode`): its blocks are held for the decode side when it finishes. */
  readonly holdForRemoteDecode?: boolean;
}

export type SequenceStatus = 'waiting' | 'running' | 'finished';

export class Sequence {
  status: SequenceStatus = 'waiting';
  /** Prompt followed by the output tokens generated so far. */
  readonly tokens: number[];
  readonly promptLength: number;
  /** Chained hashes of the full blocks of `tokens` computed so far. */
  readonly blockHashes: number[] = [];
  /** vLLM's block hashes (sha256_cbor digests) of leading blocks, filled only while KV events are on. */
  readonly eventDigests: Uint8Array[] = [];
  blocks: KvBlock[] = [];
  /** Tokens whose KV is computed (cache hits included). */
  numComputed = 0;
  /** Leading blocks registered in the prefix cache (hits included); vLLM's `num_cached_block`. */
  registeredBlocks = 0;
  outputCount = 0;
  /** Prompt tokens served from the prefix cache at first admission (`cached_tokens`). */
  cachedTokens: number | null = null;
  admittedAtMs: number | null = null;
  /** A pull of remote KV in progress: when it completes (simulated ms); null when none is. */
  transferDoneAtMs: number | null = null;
  /** Prompt tokens pulled from a prefill instance (`external_kv_transfer`). */
  externalTokens = 0;
  /** Prefill side: when the blocks held for the decode instance are freed unless it read them first. */
  holdExpiresAtMs: number | null = null;
  firstTokenAtMs: number | null = null;
  lastTokenAtMs: number | null = null;
  admissionOrder = 0;

  constructor(
    readonly spec: SequenceSpec,
    readonly arrivalMs: number,
    /** When the request reaches the scheduler (arrival + HTTP/tokenisation overhead). */
    readonly readyAtMs: number,
  ) {
    this.tokens = spec.promptTokens.slice();
    this.promptLength = spec.promptTokens.length;
  }

  get id(): string {
    return this.spec.id;
  }

  /** Extends `blockHashes` to cover every full block of `tokens` up to `tokenCount`. */
  hashBlocksUpTo(tokenCount: number): void {
    const fullBlocks = Math.floor(tokenCount / BLOCK_SIZE_TOKENS);
    let parent =
      this.blockHashes.length === 0
        ? rootHash(this.spec.cacheSalt, this.spec.lora?.name)
        : (this.blockHashes[this.blockHashes.length - 1] as number);
    for (let block = this.blockHashes.length; block < fullBlocks; block++) {
      parent = hashBlock(parent, this.tokens, block * BLOCK_SIZE_TOKENS);
      this.blockHashes.push(parent);
    }
  }
}

interface ScheduledWork {
  readonly sequence: Sequence;
  readonly tokens: number;
}

export interface StepPlan {
  readonly startMs: number;
  readonly durationMs: number;
  readonly work: readonly ScheduledWork[];
}

export interface EngineOptions {
  readonly profile: EngineProfile;
  readonly version: EngineVersion;
  /** Overrides the profile's max model length (`--max-model-len`). */
  readonly maxModelLen?: number;
  /** Overrides the profile's KV capacity. */
  readonly numGpuBlocks?: number;
  /** When computed blocks become hittable (default `schedule`, as vLLM). */
  readonly cacheAt?: CacheAt;
  /** KV events (`--kv-events-port`); none when off. */
  readonly kvEvents?: KvCacheEventSink;
  /** Prefill/decode KV transfer (`--pd-role`): the pull link and the prefill side's lease; none when off. */
  readonly kvTransfer?: { readonly link: Omit<KvTransferLinkOptions, 'bytesPerToken'>; readonly leaseMs: number };
  /** LoRA adapters (`--lora-modules` or runtime loading): batch limit, load and swap costs; none when off. */
  readonly lora?: LoraSlots;
}

export class Engine {
  readonly pool: BlockPool;
  readonly stats: EngineStats;
  readonly maxModelLen: number;
  readonly cacheAt: CacheAt;
  private readonly waiting: Sequence[] = [];
  private readonly running: Sequence[] = [];
  private admissions = 0;
  private readonly events: KvCacheEventSink | null;
  /** The decode side's pull link; null without `kvTransfer`. */
  readonly link: KvTransferLink | null;
  /** The prefill side's blocks held for decode instances. */
  readonly holds: KvHolds;
  /**
   * The last plan left the head of the queue waiting for free blocks. With nothing running, only a pull completing,
   * held blocks freed (a decode side's notice, a lease running out) can change that: the loop waits for those.
   */
  private blockedOnKv = false;
  /** Start of the step being planned: the admission time of requests admitted in it. */
  private currentPlanStartMs = 0;
  /** LoRA adapters; null when off. */
  readonly lora: LoraSlots | null;
  /** Adapters among the sequences of the step being planned (vLLM's `scheduled_loras`). */
  private readonly stepAdapters = new Set<string>();

  constructor(private readonly options: EngineOptions) {
    this.maxModelLen = options.maxModelLen ?? options.profile.maxModelLen;
    this.cacheAt = options.cacheAt ?? 'schedule';
    this.events = options.kvEvents ?? null;
    this.lora = options.lora ?? null;
    this.pool = new BlockPool(options.numGpuBlocks ?? options.profile.numGpuBlocks, this.events);
    this.stats = new EngineStats(this.maxModelLen);
    const transfer = options.kvTransfer;
    this.link =
      transfer === undefined
        ? null
        : new KvTransferLink({ ...transfer.link, bytesPerToken: options.profile.kvBytesPerToken });
    this.holds = new KvHolds(transfer?.leaseMs ?? 30_000, (blocks) => this.pool.release(blocks));
  }

  get profile(): EngineProfile {
    return this.options.profile;
  }

  get version(): EngineVersion {
    return this.options.version;
  }

  get runningCount(): number {
    return this.running.length;
  }

  get waitingCount(): number {
    return this.waiting.length;
  }

  get runningSequences(): readonly Sequence[] {
    return this.running;
  }

  get hasWork(): boolean {
    return this.running.length > 0 || this.waiting.length > 0;
  }

  /** Earliest time a waiting request becomes schedulable or a pull completes, or null if none will. */
  nextReadyAtMs(): number | null {
    let earliest: number | null = this.blockedOnKv ? this.holds.nextExpiryMs() : null;
    if (!this.blockedOnKv)
      for (const sequence of this.waiting)
        if (earliest === null || sequence.readyAtMs < earliest) earliest = sequence.readyAtMs;
    for (const sequence of this.running) {
      const doneAt = sequence.transferDoneAtMs;
      if (doneAt !== null && (earliest === null || doneAt < earliest)) earliest = doneAt;
    }
    return earliest;
  }

  add(spec: SequenceSpec, arrivalMs: number): Sequence {
    const sequence = new Sequence(spec, arrivalMs, arrivalMs + this.profile.apiOverheadMs);
    this.waiting.push(sequence);
    this.lora?.requestWaiting(sequence.id, spec.lora?.name);
    this.stats.requestParamsMaxTokens.observe(spec.maxTokensParam);
    return sequence;
  }

  /** Prompt tokens this engine would serve from its cache for `promptTokens` right now (the oracle). */
  matchPrefixTokens(promptTokens: readonly number[], cacheSalt?: string, loraName?: string): number {
    const hitLimit = maxHitBlocks(promptTokens.length);
    const hashes = hashFullBlocks(promptTokens, cacheSalt, hitLimit, loraName);
    return this.pool.countCachedPrefix(hashes, hitLimit) * BLOCK_SIZE_TOKENS;
  }

  /** Ends a sequence early (client went away). Its blocks are freed at once; an in-flight step skips it. */
  abort(sequence: Sequence, nowMs: number): void {
    if (sequence.status === 'finished') return;
    if (sequence.status === 'waiting') removeFrom(this.waiting, sequence);
    else removeFrom(this.running, sequence);
    this.finish(sequence, 'abort', nowMs);
  }

  /** Chooses the next step's work starting at `startMs`; null when nothing can run. */
  planStep(startMs: number): StepPlan | null {
    this.currentPlanStartMs = startMs;
    this.holds.expire(startMs);
    this.blockedOnKv = false;
    this.stepAdapters.clear();
    const work = this.version === 'v0' ? this.planV0(startMs) : this.planV1(startMs);
    if (work.length === 0) return null;
    // vLLM's worker loads and activates the batch's adapters before the forward pass: the whole step waits.
    const loraMs = this.lora === null ? 0 : this.lora.prepareStep(this.stepAdapters);
    let decodeSequences = 0;
    let decodeContextTokens = 0;
    const prefillChunks: PrefillChunk[] = [];
    for (const item of work) {
      if (isDecode(item.sequence, item.tokens)) {
        decodeSequences++;
        decodeContextTokens += item.sequence.numComputed + 1;
      } else {
        prefillChunks.push({ queryTokens: item.tokens, keysBefore: item.sequence.numComputed });
      }
    }
    const durationMs = computeStepMs(this.profile, { decodeSequences, decodeContextTokens, prefillChunks }) + loraMs;
    return { startMs, durationMs, work };
  }

  /** Applies a planned step at its end time: computes KV, caches full blocks (`step-end`), emits tokens, finishes sequences. */
  completeStep(plan: StepPlan): void {
    const endMs = plan.startMs + plan.durationMs;
    const stepSeconds = plan.durationMs / 1000;
    let iterationTokens = 0;
    let prefilled = false;
    // All of a step's tokens exist at the same simulated instant; first tokens are handed out before
    // decode tokens so that the cost of writing a large batch of stream events lands on inter-token
    // latency rather than on TTFT.
    const decodeTokens: Sequence[] = [];
    for (const { sequence, tokens } of plan.work) {
      iterationTokens += tokens;
      if (sequence.status !== 'running') continue;
      if (!isDecode(sequence, tokens)) prefilled = true;
      sequence.numComputed += tokens;
      if (this.cacheAt === 'step-end') this.registerFullBlocks(sequence, sequence.numComputed);
      if (sequence.numComputed !== sequence.tokens.length) continue;
      if (sequence.outputCount === 0) this.emitToken(sequence, endMs);
      else decodeTokens.push(sequence);
    }
    for (const sequence of decodeTokens) this.emitToken(sequence, endMs);
    this.stats.steps++;
    this.stats.iterationTokens.observe(iterationTokens);
    if (prefilled) this.stats.prefillBusySeconds += stepSeconds;
    else this.stats.decodeBusySeconds += stepSeconds;
    // vLLM publishes a step's KV events once its output is processed (Scheduler.update_from_output).
    this.events?.flush();
    this.lora?.recordStep();
  }

  /** Forgets every cached prefix (blocks in use stay allocated). */
  resetPrefixCache(): void {
    this.pool.resetCache();
    // Published at once, even when idle (vLLM would send it with its next step's batch).
    this.events?.flush();
  }

  private planV1(startMs: number): ScheduledWork[] {
    const work: ScheduledWork[] = [];
    let budget = this.profile.maxNumBatchedTokens;
    const preemptionsBefore = this.stats.preemptions;
    // Running sequences, oldest admission first. Victims of preemption come from the end of the list,
    // so a sequence is only preempted itself when it is the last one: the loop then ends.
    let index = 0;
    while (index < this.running.length && budget > 0) {
      const sequence = this.running[index] as Sequence;
      if (!this.transferComplete(sequence, startMs)) {
        index++;
        continue;
      }
      if (!this.adapterFits(sequence)) {
        index++;
        continue;
      }
      const tokens = Math.min(sequence.tokens.length - sequence.numComputed, budget);
      if (tokens > 0 && this.growOrPreempt(sequence, tokens)) {
        work.push({ sequence, tokens });
        budget -= tokens;
        this.registerScheduled(sequence, tokens);
        this.addStepAdapter(sequence);
      }
      index++;
    }
    if (this.stats.preemptions !== preemptionsBefore) return work;
    // Waiting requests FCFS; one whose adapter would exceed max_loras is skipped and keeps its place.
    let next = 0;
    while (budget > 0 && this.running.length < this.profile.maxNumSeqs) {
      const sequence = this.waiting[next];
      if (!sequence || sequence.readyAtMs > startMs) break;
      if (!this.adapterFits(sequence)) {
        next++;
        continue;
      }
      const tokens = this.admit(sequence, budget, 0);
      if (tokens === null) {
        this.blockedOnKv = true;
        break;
      }
      this.addStepAdapter(sequence);
      // Admitted with a pull of remote KV in flight: it runs once the pull completes.
      if (tokens === 0) continue;
      work.push({ sequence, tokens });
      budget -= tokens;
      this.registerScheduled(sequence, tokens);
    }
    return work;
  }

  private planV0(startMs: number): ScheduledWork[] {
    const work: ScheduledWork[] = [];
    let budget = Math.max(this.maxModelLen, 2048);
    const watermarkBlocks = Math.ceil(0.01 * this.pool.usableBlocks);
    let next = 0;
    while (this.running.length < this.profile.maxNumSeqs) {
      const sequence = this.waiting[next];
      if (!sequence || sequence.readyAtMs > startMs) break;
      if (!this.adapterFits(sequence)) {
        next++;
        continue;
      }
      const tokens = this.admit(sequence, budget, watermarkBlocks, true);
      if (tokens === null) break;
      this.addStepAdapter(sequence);
      work.push({ sequence, tokens });
      budget -= tokens;
    }
    if (work.length === 0) {
      for (let index = 0; index < this.running.length; index++) {
        const sequence = this.running[index] as Sequence;
        if (!this.adapterFits(sequence)) continue;
        if (this.growOrPreempt(sequence, 1)) {
          work.push({ sequence, tokens: 1 });
          this.addStepAdapter(sequence);
        }
      }
    }
    // V0 marks the scheduled blocks computed once the whole batch is built (no hits within the pass).
    for (const { sequence, tokens } of work) this.registerScheduled(sequence, tokens);
    return work;
  }

  /**
   * Admits the head of the waiting queue if its blocks fit: takes its cached prefix, allocates blocks
   * for the tokens scheduled now. Returns the tokens scheduled, or null if it must keep waiting.
   * `wholePrompt` (V0) schedules all new tokens or nothing.
   */
  private admit(sequence: Sequence, budget: number, reserveBlocks: number, wholePrompt = false): number | null {
    const total = sequence.tokens.length;
    sequence.hashBlocksUpTo(total);
    const hitBlocks = this.pool.countCachedPrefix(sequence.blockHashes, maxHitBlocks(total));
    const hitTokens = hitBlocks * BLOCK_SIZE_TOKENS;
    const newTokens = total - hitTokens;
    if (wholePrompt && newTokens > budget) return null;
    // Decode side of prefill/decode: what the prefill instance computed and this engine lacks is pulled, all
    // but the last prompt token, which is computed here (vLLM's NIXL connector: prompt − 1 − local hits).
    const pulled = this.pulledTokens(sequence, hitTokens);
    const tokens = pulled > 0 ? 0 : Math.min(newTokens, budget);
    const neededBlocks = blocksFor(pulled > 0 ? total : hitTokens + tokens) - hitBlocks;
    const freeTakenByHits = this.pool.countFreeAmongCached(sequence.blockHashes, hitBlocks);
    if (this.pool.freeCount - freeTakenByHits - reserveBlocks < neededBlocks) return null;
    const cached = this.pool.touchCached(sequence.blockHashes, hitBlocks);
    const fresh = this.pool.allocate(neededBlocks) as KvBlock[];
    sequence.blocks = cached.concat(fresh);
    sequence.numComputed = hitTokens;
    sequence.registeredBlocks = hitBlocks;
    sequence.status = 'running';
    sequence.admissionOrder = ++this.admissions;
    if (pulled > 0) {
      sequence.externalTokens = pulled;
      sequence.transferDoneAtMs = (this.link as KvTransferLink).pull(pulled, this.currentPlanStartMs);
    } else if (sequence.cachedTokens === null) {
      sequence.cachedTokens = hitTokens;
      this.stats.countPromptSources(total, hitTokens, 0);
    }
    if (sequence.admittedAtMs === null) {
      sequence.admittedAtMs = Math.max(sequence.readyAtMs, this.currentPlanStartMs);
      this.stats.queueSeconds.observe((sequence.admittedAtMs - sequence.arrivalMs) / 1000);
    }
    this.stats.prefixQueryTokens += total;
    this.stats.prefixHitTokens += hitTokens;
    this.stats.prefixQueryBlocks += Math.floor(total / BLOCK_SIZE_TOKENS);
    this.stats.prefixHitBlocks += hitBlocks;
    this.stats.lastPrefillBatchHitRate = total > 0 ? hitTokens / total : 0;
    removeFrom(this.waiting, sequence);
    this.running.push(sequence);
    this.lora?.requestRunning(sequence.id, sequence.spec.lora?.name);
    return tokens;
  }

  /**
   * Makes room for `tokens` more tokens of a running sequence, preempting the most recently admitted
   * sequences while blocks are short. Returns false if `sequence` itself had to be preempted.
   */
  private growOrPreempt(sequence: Sequence, tokens: number): boolean {
    const needed = blocksFor(sequence.numComputed + tokens) - sequence.blocks.length;
    if (needed <= 0) return true;
    while (this.pool.freeCount < needed) {
      const victim = this.running[this.running.length - 1] as Sequence;
      this.preempt(victim);
      if (victim === sequence) return false;
    }
    sequence.blocks.push(...(this.pool.allocate(needed) as KvBlock[]));
    return true;
  }

  private preempt(sequence: Sequence): void {
    removeFrom(this.running, sequence);
    // A pull in flight is abandoned with the blocks it was filling; readmission pulls again.
    sequence.transferDoneAtMs = null;
    this.pool.release(sequence.blocks);
    sequence.blocks = [];
    sequence.numComputed = 0;
    sequence.registeredBlocks = 0;
    sequence.status = 'waiting';
    this.stats.preemptions++;
    this.waiting.unshift(sequence);
    this.lora?.requestWaiting(sequence.id, sequence.spec.lora?.name);
  }

  /**
   * Prompt tokens `sequence` pulls from a prefill instance instead of computing, given `hitTokens` held here:
   * 0 unless it carries remote prefill params, this engine has a link and the V1 scheduler (NIXL is V1-only).
   */
  private pulledTokens(sequence: Sequence, hitTokens: number): number {
    const remote = sequence.spec.remotePrefillTokens;
    if (remote === undefined || this.link === null || this.version !== 'v1' || sequence.outputCount > 0) return 0;
    return Math.max(0, Math.min(remote, sequence.promptLength - 1) - hitTokens);
  }

  /**
   * Whether `sequence` may be scheduled at `startMs`: no pull in flight, or one that completed by then. A completed
   * pull makes the pulled tokens computed and their full blocks hittable (vLLM caches them once received), and
   * counts them as cached for `cached_tokens`, as vLLM's scheduler does at the request's first schedule.
   */
  private transferComplete(sequence: Sequence, startMs: number): boolean {
    const doneAt = sequence.transferDoneAtMs;
    if (doneAt === null) return true;
    if (doneAt > startMs) return false;
    sequence.transferDoneAtMs = null;
    const localTokens = sequence.numComputed;
    sequence.numComputed += sequence.externalTokens;
    this.registerFullBlocks(sequence, sequence.numComputed);
    if (sequence.cachedTokens === null) {
      sequence.cachedTokens = sequence.numComputed;
      this.stats.countPromptSources(sequence.promptLength, localTokens, sequence.externalTokens);
    }
    return true;
  }

  /** Whether `sequence`'s adapter may join the step being planned (always, without LoRA or for the base model). */
  private adapterFits(sequence: Sequence): boolean {
    return this.lora === null || this.lora.fits(this.stepAdapters, sequence.spec.lora?.name);
  }

  private addStepAdapter(sequence: Sequence): void {
    const adapter = sequence.spec.lora?.name;
    if (adapter !== undefined && this.lora !== null) this.stepAdapters.add(adapter);
  }

  /** `schedule` mode: registers the full blocks that `tokens` more scheduled tokens will complete. */
  private registerScheduled(sequence: Sequence, tokens: number): void {
    if (this.cacheAt !== 'schedule') return;
    // vLLM caps at the tokens that exist (num_tokens, no draft tokens); here that cap never binds.
    this.registerFullBlocks(sequence, Math.min(sequence.numComputed + tokens, sequence.tokens.length));
  }

  /** Registers every full block of the first `tokenCount` tokens not yet registered. */
  private registerFullBlocks(sequence: Sequence, tokenCount: number): void {
    const fullBlocks = Math.floor(tokenCount / BLOCK_SIZE_TOKENS);
    if (fullBlocks <= sequence.registeredBlocks) return;
    sequence.hashBlocksUpTo(tokenCount);
    for (let block = sequence.registeredBlocks; block < fullBlocks; block++) {
      const kvBlock = sequence.blocks[block];
      if (kvBlock) this.pool.cacheFullBlock(kvBlock, sequence.blockHashes[block] as number);
    }
    this.events?.blocksStored(sequence, sequence.registeredBlocks, fullBlocks);
    sequence.registeredBlocks = fullBlocks;
  }

  private emitToken(sequence: Sequence, nowMs: number): void {
    const outputIndex = sequence.outputCount;
    sequence.tokens.push(sequence.spec.outputTokenAt(outputIndex));
    sequence.outputCount++;
    this.stats.generationTokens++;
    if (outputIndex === 0) {
      sequence.firstTokenAtMs = nowMs;
      this.stats.ttftSeconds.observe((nowMs - sequence.arrivalMs) / 1000);
    } else {
      this.stats.interTokenSeconds.observe((nowMs - (sequence.lastTokenAtMs as number)) / 1000);
    }
    sequence.lastTokenAtMs = nowMs;
    sequence.spec.listener.onToken(sequence, outputIndex, nowMs);
    if (sequence.outputCount >= sequence.spec.outputTokens) {
      removeFrom(this.running, sequence);
      this.finish(sequence, sequence.spec.finishReason, nowMs);
    }
  }

  private finish(sequence: Sequence, reason: FinishReason, nowMs: number): void {
    if (sequence.spec.holdForRemoteDecode === true && reason !== 'abort') {
      sequence.holdExpiresAtMs = this.holds.hold(sequence.id, sequence.blocks, nowMs);
    } else {
      this.pool.release(sequence.blocks);
    }
    sequence.blocks = [];
    sequence.status = 'finished';
    this.lora?.requestFinished(sequence.id, sequence.spec.lora?.name);
    const stats = this.stats;
    stats.requestSuccess[reason]++;
    if (reason !== 'abort') {
      stats.promptTokens += sequence.promptLength;
      stats.requestPromptTokens.observe(sequence.promptLength);
      stats.requestGenerationTokens.observe(sequence.outputCount);
      stats.requestParamsN.observe(1);
      stats.e2eSeconds.observe((nowMs - sequence.arrivalMs) / 1000);
      const admittedAt = sequence.admittedAtMs ?? nowMs;
      const firstTokenAt = sequence.firstTokenAtMs ?? nowMs;
      stats.inferenceSeconds.observe((nowMs - admittedAt) / 1000);
      stats.prefillSeconds.observe((firstTokenAt - admittedAt) / 1000);
      stats.decodeSeconds.observe((nowMs - firstTokenAt) / 1000);
      if (sequence.outputCount > 1) {
        stats.requestTimePerOutputTokenSeconds.observe((nowMs - firstTokenAt) / 1000 / (sequence.outputCount - 1));
      }
    }
    sequence.spec.listener.onFinish(sequence, reason, nowMs);
  }
}

/** A step item that computes exactly the last sampled token of a sequence (decode); anything else prefills (or recomputes). Judged before the step runs. */
function isDecode(sequence: Sequence, tokens: number): boolean {
  return sequence.outputCount > 0 && tokens === 1 && sequence.numComputed === sequence.tokens.length - 1;
}

/** vLLM always recomputes the last prompt token: a hit covers at most floor((n − 1) / 16) blocks. */
export function maxHitBlocks(promptTokens: number): number {
  return Math.max(0, Math.floor((promptTokens - 1) / BLOCK_SIZE_TOKENS));
}

function removeFrom(list: Sequence[], sequence: Sequence): void {
  const index = list.indexOf(sequence);
  if (index !== -1) list.splice(index, 1);
}
