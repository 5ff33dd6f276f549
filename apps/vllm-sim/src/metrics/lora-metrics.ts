import type { Engine } from '../engine/engine';
import type { PythonClientExposition } from './python-client-exposition';

/**
 * `vllm:lora_requests_info` as vLLM V1's PrometheusStatLogger keeps it (`vllm/v1/metrics/loggers.py`): a gauge
 * created only with LoRA enabled, labels `max_lora`, `running_lora_adapters`, `waiting_lora_adapters` (comma-joined
 * adapter names) and no `engine`/`model_name`; every step sets the series of its label set to the current time
 * (`set_to_current_time`), and prometheus_client keeps every label set ever used, so old series linger and the
 * newest is the one with the largest value. Absent until the first step ran (the family has no sample before).
 * LoRA with data parallelism is refused at start, as vLLM refuses it, so there is one engine here.
 */
export function renderLoraInfo(out: PythonClientExposition, engine: Engine): void {
  const lora = engine.lora;
  if (lora === null || lora.infoSeries.size === 0) return;
  out.gauge(
    'vllm:lora_requests_info',
    'Running stats on lora requests.',
    [...lora.infoSeries.values()].map((series) => ({
      labels: {
        max_lora: String(lora.maxLoras),
        running_lora_adapters: series.running,
        waiting_lora_adapters: series.waiting,
      },
      value: series.value,
    })),
  );
}

/**
 * Sim-only, after every vLLM family: adapter reads from disk into CPU memory per adapter since start (static
 * `--lora-modules` at start included), so a bench can count adapter loads per request. No real engine has it.
 */
export function renderSimLoraLoads(out: PythonClientExposition, engine: Engine): void {
  const lora = engine.lora;
  if (lora === null || lora.loads.size === 0) return;
  out.counter(
    'kvroute_sim_lora_loads_total',
    'Simulator only: LoRA adapter loads from disk into CPU memory.',
    [...lora.loads].map(([adapter, value]) => ({ labels: { adapter }, value })),
  );
}
