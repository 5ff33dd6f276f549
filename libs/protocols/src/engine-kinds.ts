/**
 * The inference engines kvroute knows, one list for every project: the dialects whose `/metrics` the
 * health poller reads (`@kvroute/engine-metrics`), the engines a published backend state names
 * (`backend-state.ts`, plus `unknown`), and the dialects vllm-sim imitates (`--metrics-dialect`).
 * - `vllm`: vLLM V1 engine (≥ 0.8); `vllm-v0`: vLLM 0.6.x/0.7.x V0 engine;
 * - `sglang`: SGLang `--enable-metrics`; `llamacpp`: llama.cpp `llama-server --metrics`.
 */
export const ENGINE_KINDS = ['vllm', 'vllm-v0', 'sglang', 'llamacpp'] as const;
export type EngineKind = (typeof ENGINE_KINDS)[number];
