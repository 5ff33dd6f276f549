/**
 * LoRA adapters on one engine, as vLLM V1 runs them (README "LoRA adapters" names the source files):
 * - Batch limit (`Scheduler.schedule`): at most `maxLoras` distinct adapters among the sequences scheduled in
 *   one step. A waiting request whose adapter would be one too many is skipped for this step, keeping its place
 *   in the queue, and the requests behind it are still considered (no head-of-line blocking).
 * - CPU cache (`LRUCacheWorkerLoRAManager.add_adapter`): up to `maxCpuLoras` adapters stay loaded, least
 *   recently used evicted first, before the new one is read. A step whose batch holds an adapter that is not
 *   loaded reads it from disk first: `loadMs` more for that step, which every sequence in it waits for.
 * - GPU slots (`LRUCacheLoRAModelManager.activate_adapter`): `maxLoras` slots, least recently used replaced. A
 *   loaded adapter that holds no slot is copied into one: `swapMs` more for the step.
 * - Request states (`LoRARequestStates`): per adapter, the ids of its waiting and running requests; an adapter
 *   is listed from its first request until it has none, in the order it was first listed; every step sets the
 *   `vllm:lora_requests_info` series of the current lists to the wall clock, and every series stays.
 * Pure bookkeeping: the engine calls it; the wall clock is passed in.
 */

export interface LoraSlotsOptions {
  /** Distinct adapters in one batch, and GPU slots (`--max-loras`). */
  readonly maxLoras: number;
  /** Adapters kept loaded in CPU memory (`--max-cpu-loras`, ≥ maxLoras). */
  readonly maxCpuLoras: number;
  /** Reading an adapter from disk into CPU memory, simulated ms. */
  readonly loadMs: number;
  /** Copying a loaded adapter into a GPU slot, simulated ms. */
  readonly swapMs: number;
  /** Wall clock, unix seconds: the value `set_to_current_time` gives the info gauge. */
  readonly nowUnixSeconds: () => number;
}

/** One `vllm:lora_requests_info` series: its two adapter lists and the last time it was set. */
export interface LoraInfoSeries {
  readonly running: string;
  readonly waiting: string;
  value: number;
}

interface AdapterRequests {
  readonly waiting: Set<string>;
  readonly running: Set<string>;
}

export class LoraSlots {
  /** Loaded adapters, least recently used first (a Map keeps insertion order; a touch re-inserts). */
  private readonly cpu = new Map<string, true>();
  /** Adapters holding a GPU slot, least recently used first. */
  private readonly gpu = new Map<string, true>();
  /** Loads from disk per adapter since start (sim-only: `kvroute_sim_lora_loads_total`). */
  readonly loads = new Map<string, number>();
  private readonly requests = new Map<string, AdapterRequests>();
  /** Every label set the info gauge was set with, in first-set order (prometheus_client keeps them all). */
  readonly infoSeries = new Map<string, LoraInfoSeries>();

  constructor(readonly options: LoraSlotsOptions) {
    if (options.maxCpuLoras < options.maxLoras)
      throw new Error(`max_cpu_loras (${options.maxCpuLoras}) must be >= max_loras (${options.maxLoras})`);
  }

  get maxLoras(): number {
    return this.options.maxLoras;
  }

  /** Loaded adapters, least recently used first. */
  get loaded(): readonly string[] {
    return [...this.cpu.keys()];
  }

  /** Adapters holding a GPU slot, least recently used first. */
  get active(): readonly string[] {
    return [...this.gpu.keys()];
  }

  /** Whether a sequence under `adapter` (none: the base model) may join a step that already holds `scheduled`. */
  fits(scheduled: ReadonlySet<string>, adapter: string | undefined): boolean {
    return adapter === undefined || scheduled.has(adapter) || scheduled.size < this.options.maxLoras;
  }

  /**
   * Makes every adapter of a step's batch loaded and active, in batch order. Returns the time that adds to the
   * step: a load per adapter read from disk, a swap per adapter copied into a GPU slot.
   */
  prepareStep(adapters: Iterable<string>): number {
    let extraMs = 0;
    for (const adapter of adapters) {
      if (this.load(adapter)) extraMs += this.options.loadMs;
      if (this.gpu.has(adapter)) {
        this.gpu.delete(adapter);
      } else {
        extraMs += this.options.swapMs;
        if (this.gpu.size >= this.options.maxLoras) this.gpu.delete(this.gpu.keys().next().value as string);
      }
      this.gpu.set(adapter, true);
    }
    return extraMs;
  }

  /**
   * Reads `adapter` into the CPU cache unless it is there (then only marks it used). Returns whether it was read.
   * At capacity the least recently used one is evicted first, as vLLM frees its memory before loading.
   */
  load(adapter: string): boolean {
    if (this.cpu.has(adapter)) {
      this.cpu.delete(adapter);
      this.cpu.set(adapter, true);
      return false;
    }
    if (this.cpu.size >= this.options.maxCpuLoras) {
      const oldest = this.cpu.keys().next().value as string;
      this.cpu.delete(oldest);
      this.gpu.delete(oldest);
    }
    this.cpu.set(adapter, true);
    this.loads.set(adapter, (this.loads.get(adapter) ?? 0) + 1);
    return true;
  }

  /** `load_inplace`: the adapter's weights changed on disk; it is read again (and leaves its GPU slot). */
  reload(adapter: string): void {
    this.remove(adapter);
    this.load(adapter);
  }

  /** Drops `adapter` from memory and its GPU slot (unloaded through the API). */
  remove(adapter: string): void {
    this.cpu.delete(adapter);
    this.gpu.delete(adapter);
  }

  requestWaiting(requestId: string, adapter: string | undefined): void {
    this.update(requestId, adapter, 'waiting');
  }

  requestRunning(requestId: string, adapter: string | undefined): void {
    this.update(requestId, adapter, 'running');
  }

  requestFinished(requestId: string, adapter: string | undefined): void {
    this.update(requestId, adapter, 'none');
  }

  /** End of a step: sets the series of the current adapter lists to now (`set_to_current_time`). */
  recordStep(): void {
    const names = [...this.requests.keys()].join(',');
    // vLLM fills both lists from every listed adapter, with its count (0 included); the labels carry names only.
    const key = `${names}\u0000${names}`;
    const now = this.options.nowUnixSeconds();
    const series = this.infoSeries.get(key);
    if (series) series.value = now;
    else this.infoSeries.set(key, { running: names, waiting: names, value: now });
  }

  private update(requestId: string, adapter: string | undefined, state: 'waiting' | 'running' | 'none'): void {
    if (adapter === undefined) return;
    let entry = this.requests.get(adapter);
    if (!entry) {
      entry = { waiting: new Set(), running: new Set() };
      this.requests.set(adapter, entry);
    }
    if (state === 'waiting') entry.waiting.add(requestId);
    else entry.waiting.delete(requestId);
    if (state === 'running') entry.running.add(requestId);
    else entry.running.delete(requestId);
    if (entry.waiting.size === 0 && entry.running.size === 0) this.requests.delete(adapter);
  }
}
