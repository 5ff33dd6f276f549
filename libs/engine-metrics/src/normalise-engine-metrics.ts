import { detectEngineKind } from './detect-engine';
import { normaliseLlamaCpp } from './dialects/llamacpp';
import { normaliseSglang, SGLANG_REPLICA_LABELS } from './dialects/sglang';
import { normaliseVllm } from './dialects/vllm';
import { EngineMetricsError, type EngineKind, type EngineMetrics } from './engine-metrics';
import { parsePrometheusText, type PrometheusExposition } from './prometheus-text';
import { SeriesReader } from './series-reader';

export interface EngineMetricsOptions {
  /** Skip detection and read the exposition as this engine's (names of other engines are then ignored). */
  readonly engine?: EngineKind;
  /** llama.cpp only: the parsed JSON body of `GET /slots`, for the KV capacity (and busy slots). */
  readonly llamaCppSlots?: unknown;
}

/**
 * One engine's `/metrics` exposition → `EngineMetrics`. The engine is `options.engine`, else detected
 * from the metric names (`detectEngineKind`); a body with no engine's names but `llamaCppSlots` given
 * is read as llama.cpp. Throws `EngineMetricsError` (`ENGINE_METRICS_ERR_UNKNOWN_ENGINE`) when no
 * engine can be told.
 */
export function normaliseEngineMetrics(
  exposition: PrometheusExposition,
  options: EngineMetricsOptions = {},
): EngineMetrics {
  const engine =
    options.engine ?? detectEngineKind(exposition) ?? (options.llamaCppSlots !== undefined ? 'llamacpp' : null);
  switch (engine) {
    case 'vllm':
    case 'vllm-v0':
      return normaliseVllm(new SeriesReader(exposition), engine);
    case 'sglang':
      return normaliseSglang(new SeriesReader(exposition, SGLANG_REPLICA_LABELS));
    case 'llamacpp':
      return normaliseLlamaCpp(new SeriesReader(exposition), options.llamaCppSlots);
    case null:
      throw new EngineMetricsError(
        'ENGINE_METRICS_ERR_UNKNOWN_ENGINE',
        'no vllm:, sglang: or llamacpp: metric in the exposition',
      );
  }
}

/** `parsePrometheusText` then `normaliseEngineMetrics`; lines the parser skipped are not reported (parse first to see them). */
export function parseEngineMetrics(text: string, options: EngineMetricsOptions = {}): EngineMetrics {
  return normaliseEngineMetrics(parsePrometheusText(text), options);
}
