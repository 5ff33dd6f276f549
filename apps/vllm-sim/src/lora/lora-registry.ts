import type { LoraSlots } from '../engine/lora-slots';
import { EngineError } from '../engine-errors';
import type { LoraModule } from './lora-modules';

/** A served adapter: vLLM's `LoRARequest` as `OpenAIServingModels` keeps it. */
export interface LoraAdapter {
  readonly name: string;
  /** `lora_int_id`: 1, 2, … in load order; kept when loaded again in place. */
  readonly id: number;
  readonly path: string;
  /** The served model it adapts (`parent` of its /v1/models card). */
  readonly parent: string;
}

/** What an OpenAI `model` names: the base model (no adapter) or an adapter. */
export type ModelTarget = { readonly lora?: { readonly name: string; readonly id: number } };

/** A runtime load or unload refused, with vLLM's status, error type and message. */
export class LoraRequestError extends EngineError {
  constructor(status: 400 | 404, vllmType: string, message: string) {
    super(status === 404 ? 'not-found' : 'bad-request', message, status, vllmType);
  }
}

/**
 * The adapters a sim serves, as vLLM's `OpenAIServingModels` (`vllm/entrypoints/openai/models/serving.py`):
 * static `--lora-modules` loaded at start, runtime loads and unloads, the model check of every request.
 * Loading an adapter also reads it into every engine's CPU cache (vLLM `add_lora` preloads it); unloading drops it.
 */
export class LoraRegistry {
  private readonly adapters = new Map<string, LoraAdapter>();
  private nextId = 1;

  constructor(
    readonly servedModel: string,
    private readonly engines: readonly LoraSlots[],
  ) {}

  /** Whether LoRA is on (`--lora-modules` given or runtime loading allowed: vLLM's `--enable-lora`). */
  get enabled(): boolean {
    return this.engines.length > 0;
  }

  get list(): readonly LoraAdapter[] {
    return [...this.adapters.values()];
  }

  /** `init_static_loras`: every `--lora-modules` entry, loaded at once. */
  loadStatic(modules: readonly LoraModule[]): void {
    for (const module of modules) this.add(module.name, module.path, module.baseModelName);
  }

  /**
   * The target of a request's `model`: the served model, or a loaded adapter.
   * @throws EngineError 404 "The model `x` does not exist." (vLLM's check_model) for anything else.
   */
  resolve(model: string): ModelTarget {
    if (model === this.servedModel) return {};
    const adapter = this.adapters.get(model);
    if (adapter) return { lora: { name: adapter.name, id: adapter.id } };
    throw new EngineError('not-found', `The model \`${model}\` does not exist.`);
  }

  /** Checks a runtime load before its load time is spent (`_check_load_lora_adapter_request`). */
  checkLoad(name: string, path: string, inplace: boolean): void {
    if (name === '' || path === '')
      throw new LoraRequestError(400, 'InvalidUserInput', "Both 'lora_name' and 'lora_path' must be provided.");
    if (!inplace && this.adapters.has(name))
      throw new LoraRequestError(
        400,
        'InvalidUserInput',
        `The lora adapter '${name}' has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True.`,
      );
  }

  /** Registers (or, in place, replaces) an adapter and reads it into every engine's CPU cache. */
  add(name: string, path: string, baseModelName?: string): LoraAdapter {
    const existing = this.adapters.get(name);
    const parent = baseModelName === this.servedModel ? baseModelName : this.servedModel;
    const adapter: LoraAdapter = { name, id: existing?.id ?? this.nextId++, path, parent };
    this.adapters.set(name, adapter);
    for (const slots of this.engines) {
      if (existing) slots.reload(name);
      else slots.load(name);
    }
    return adapter;
  }

  /** `unload_lora_adapter`: forgets the adapter and drops it from every engine. */
  remove(name: string): void {
    if (name === '')
      throw new LoraRequestError(400, 'InvalidUserInput', "'lora_name' needs to be provided to unload a LoRA adapter.");
    if (!this.adapters.has(name))
      throw new LoraRequestError(404, 'NotFoundError', `The lora adapter '${name}' cannot be found.`);
    this.adapters.delete(name);
    for (const slots of this.engines) slots.remove(name);
  }
}
