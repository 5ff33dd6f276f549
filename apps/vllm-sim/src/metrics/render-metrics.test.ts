import { describe, expect, it } from 'vitest';
import { MODEL_NAME, newEngine, STARTED_AT_UNIX_SECONDS } from './metrics-test-support';
import { metricsContentType, renderMetrics, type MetricsDialect } from './render-metrics';

describe('renderMetrics', () => {
  const source = { engine: newEngine('v1'), modelName: MODEL_NAME, startedAtUnixSeconds: STARTED_AT_UNIX_SECONDS };

  it.each<[MetricsDialect, string, string]>([
    [
      'vllm',
      '# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n',
      'vllm:kv_cache_usage_perc{engine="0",',
    ],
    [
      'vllm-v0',
      '# HELP vllm:num_requests_running Number of requests currently running on GPU.\n',
      'vllm:gpu_cache_usage_perc{model_name=',
    ],
    [
      'sglang',
      '# HELP sglang:num_running_reqs The number of running requests.\n',
      'sglang:token_usage{engine_type="unified",',
    ],
    [
      'llamacpp',
      '# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.\n',
      '\nllamacpp:requests_processing 0\n',
    ],
  ])(
    'renders the %s dialect, every family under its prefix (vLLM V1: and its process start time), on an idle engine',
    (dialect, first, contains) => {
      const text = renderMetrics(dialect, source);
      expect(text.startsWith(first)).toBe(true);
      expect(text).toContain(contains);
      expect(text.endsWith('\n')).toBe(true);
      const prefix = dialect === 'sglang' ? 'sglang:' : dialect === 'llamacpp' ? 'llamacpp:' : 'vllm:';
      for (const line of text.split('\n')) {
        const name = line.replace(/^# (HELP|TYPE) /, '');
        if (line !== '')
          expect(
            name.startsWith(prefix) || (dialect === 'vllm' && name.startsWith('process_start_time_seconds')),
            line,
          ).toBe(true);
      }
    },
  );

  it('names the content type each engine sends', () => {
    expect(metricsContentType('vllm')).toBe('text/plain; version=0.0.4; charset=utf-8');
    expect(metricsContentType('sglang')).toBe('text/plain; version=0.0.4; charset=utf-8');
    expect(metricsContentType('llamacpp')).toBe('text/plain; version=0.0.4');
  });
});
