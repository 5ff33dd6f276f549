/** One `--lora-modules` entry, as vLLM's `LoRAModulePath`. */
export interface LoraModule {
  readonly name: string;
  readonly path: string;
  /** The served model it adapts; ignored unless it is one (vLLM: `is_base_model`). */
  readonly baseModelName?: string;
}

/**
 * Parses `--lora-modules` as vLLM's `LoRAParserAction` reads its items: `name=path`, or a JSON object with
 * `name`, `path` and optionally `base_model_name`. vLLM takes several shell words; the sim's one string joins
 * them with commas (`a=/p/a,b=/p/b`), or holds JSON objects (`{..},{..}`) or a JSON array of them.
 * @throws Error naming the item it cannot read.
 */
export function parseLoraModules(text: string | undefined): LoraModule[] {
  if (text === undefined || text.trim() === '') return [];
  const trimmed = text.trim();
  const modules = trimmed.startsWith('{') || trimmed.startsWith('[') ? fromJson(trimmed) : fromPairs(trimmed);
  const seen = new Set<string>();
  for (const module of modules) {
    if (seen.has(module.name)) throw new Error(`--lora-modules names the adapter '${module.name}' twice`);
    seen.add(module.name);
  }
  return modules;
}

function fromPairs(text: string): LoraModule[] {
  return text.split(',').map((item) => {
    const at = item.indexOf('=');
    const name = item.slice(0, at).trim();
    const path = item.slice(at + 1).trim();
    if (at <= 0 || name === '' || path === '')
      throw new Error(`--lora-modules: '${item}' is neither name=path nor a JSON object`);
    return { name, path };
  });
}

function fromJson(text: string): LoraModule[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text.startsWith('[') ? text : `[${text}]`);
  } catch (error) {
    throw new Error(`--lora-modules: invalid JSON (${(error as Error).message})`);
  }
  return (parsed as unknown[]).map((item) => {
    const entry = item as { name?: unknown; path?: unknown; base_model_name?: unknown };
    if (typeof entry?.name !== 'string' || entry.name === '' || typeof entry.path !== 'string' || entry.path === '')
      throw new Error(`--lora-modules: ${JSON.stringify(item)} needs "name" and "path" strings`);
    const base = entry.base_model_name;
    if (base !== undefined && base !== null && typeof base !== 'string')
      throw new Error(`--lora-modules: "base_model_name" of '${entry.name}' must be a string`);
    return { name: entry.name, path: entry.path, ...(typeof base === 'string' ? { baseModelName: base } : {}) };
  });
}
