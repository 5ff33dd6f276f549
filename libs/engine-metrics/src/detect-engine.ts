import type { EngineKind } from './engine-metrics';
import type { PrometheusExposition } from './prometheus-text';

/** Names only the V1 engine prints (any `engine` label also means V1: V0 has `model_name` only). */
const VLLM_V1_MARKERS: ReadonlySet<string> = new Set([
  'vllm:kv_cache_usage_perc',
  'vllm:prefix_cache_queries_total',
  'vllm:gpu_prefix_cache_queries_total',
  'vllm:inter_token_latency_seconds_count',
]);

/** Names only the V0 engine prints. */
const VLLM_V0_MARKERS: ReadonlySet<string> = new Set([
  'vllm:gpu_prefix_cache_hit_rate',
  'vllm:num_requests_swapped',
  'vllm:cpu_cache_usage_perc',
]);

const PREFIXES = [
  ['vllm:', 'vllm'],
  ['sglang:', 'sglang'],
  ['llamacpp:', 'llamacpp'],
] as const;

/**
 * Which engine printed this exposition, from its sample names: the namespace with the most samples
 * (`vllm:`, `sglang:`, `llamacpp:`; ties go in that order). A vLLM exposition is `vllm-v0` when it has
 * a V0-only name and no V1 sign (a V1-only name or an `engine` label), else `vllm`.
 * null when no sample has any of these namespaces.
 */
export function detectEngineKind(exposition: PrometheusExposition): EngineKind | null {
  const counts = PREFIXES.map(
    ([prefix]) => exposition.samples.filter((sample) => sample.name.startsWith(prefix)).length,
  );
  const best = Math.max(...counts);
  if (best === 0) return null;
  const kind = PREFIXES[counts.indexOf(best)]?.[1] ?? null;
  if (kind !== 'vllm') return kind;
  let v0 = false;
  for (const { name, labels } of exposition.samples) {
    if (!name.startsWith('vllm:')) continue;
    if (VLLM_V1_MARKERS.has(name) || labels['engine'] !== undefined) return 'vllm';
    if (VLLM_V0_MARKERS.has(name)) v0 = true;
  }
  return v0 ? 'vllm-v0' : 'vllm';
}
