import type { EngineKind } from '@kvroute/protocols';
import { renderLlamaCppMetrics } from './llamacpp-metrics';
import type { MetricsSource } from './metrics-source';
import { renderSglangMetrics } from './sglang-metrics';
import { renderVllmV0Metrics } from './vllm-v0-metrics';
import { renderVllmV1Metrics } from './vllm-v1-metrics';

export type { MetricsSource } from './metrics-source';

/** Which engine's `/metrics` the simulator imitates (one of the known kinds): vLLM V1 (0.11), vLLM V0 (0.6.4), SGLang, llama.cpp. */
export type MetricsDialect = EngineKind;

const RENDERERS: Record<MetricsDialect, (source: MetricsSource) => string> = {
  vllm: renderVllmV1Metrics,
  'vllm-v0': renderVllmV0Metrics,
  sglang: renderSglangMetrics,
  llamacpp: renderLlamaCppMetrics,
};

/** The `/metrics` body (Prometheus text format 0.0.4) in the given dialect. */
export function renderMetrics(dialect: MetricsDialect, source: MetricsSource): string {
  return RENDERERS[dialect](source);
}

/**
 * Content-Type each engine sends with it: prometheus_client's `CONTENT_TYPE_LATEST` for the Python
 * engines, llama.cpp's literal without charset.
 */
export function metricsContentType(dialect: MetricsDialect): string {
  return dialect === 'llamacpp' ? 'text/plain; version=0.0.4' : 'text/plain; version=0.0.4; charset=utf-8';
}
