export * from './prometheus-text';
export * from './engine-metrics';
export * from './detect-engine';
export * from './normalise-engine-metrics';
export * from './hit-rate-over-interval';
export { VLLM_METRIC_NAMES } from './dialects/vllm';
export { SGLANG_METRIC_NAMES, SGLANG_REPLICA_LABELS } from './dialects/sglang';
export { LLAMACPP_METRIC_NAMES, readLlamaCppSlots, type LlamaCppSlotView } from './dialects/llamacpp';
