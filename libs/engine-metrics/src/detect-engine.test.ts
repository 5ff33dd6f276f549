import { describe, expect, it } from 'vitest';
import { detectEngineKind } from './detect-engine';
import { parsePrometheusText } from './prometheus-text';

const detect = (...lines: string[]) => detectEngineKind(parsePrometheusText(lines.join('\n')));

describe('detectEngineKind', () => {
  it('tells the engine by its namespace', () => {
    expect(detect('sglang:num_running_reqs{model_name="m"} 1.0')).toBe('sglang');
    expect(detect('llamacpp:requests_processing 1')).toBe('llamacpp');
    expect(detect('vllm:num_requests_running{engine="0",model_name="m"} 1.0')).toBe('vllm');
  });

  it('tells vLLM V0 by a V0-only name without any V1 sign', () => {
    expect(
      detect('vllm:num_requests_running{model_name="m"} 1.0', 'vllm:gpu_prefix_cache_hit_rate{model_name="m"} 0.5'),
    ).toBe('vllm-v0');
    expect(
      detect('vllm:gpu_cache_usage_perc{model_name="m"} 0.5', 'vllm:num_requests_swapped{model_name="m"} 0.0'),
    ).toBe('vllm-v0');
    // V1 ≤ 0.10 also printed gpu_cache_usage_perc, with an engine label.
    expect(
      detect(
        'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.5',
        'vllm:cpu_cache_usage_perc{engine="0",model_name="m"} 0.0',
      ),
    ).toBe('vllm');
    expect(
      detect('vllm:gpu_prefix_cache_hit_rate{model_name="m"} 0.5', 'vllm:kv_cache_usage_perc{model_name="m"} 0.5'),
    ).toBe('vllm');
    // Nothing era-specific: the current engine.
    expect(detect('vllm:num_requests_running{model_name="m"} 1.0')).toBe('vllm');
  });

  it('picks the namespace with the most samples and ignores others', () => {
    expect(
      detect(
        'process_cpu_seconds_total 1',
        'sglang:num_running_reqs 1',
        'sglang:num_queue_reqs 0',
        'vllm:num_requests_running 1',
      ),
    ).toBe('sglang');
  });

  it('returns null without any engine namespace', () => {
    expect(detect('')).toBeNull();
    expect(
      detect('# TYPE vllm:num_requests_running gauge', 'python_gc_objects_collected_total{generation="0"} 12.0'),
    ).toBeNull();
  });
});
