import { describe, expect, it } from 'vitest';
import { LORA_MAX_NAME_CHARS, LORA_MAX_NAMES } from './lora-adapters';
import { parseEngineMetrics } from './normalise-engine-metrics';

const LOAD = [
  'vllm:num_requests_running{engine="0",model_name="base"} 3.0',
  'vllm:num_requests_waiting{engine="0",model_name="base"} 1.0',
  'vllm:kv_cache_usage_perc{engine="0",model_name="base"} 0.25',
];

/** A vLLM V1 body with these `lora_requests_info` lines (each one full sample line). */
function body(...loraLines: string[]): string {
  return [
    ...LOAD,
    '# HELP vllm:lora_requests_info Running stats on lora requests.',
    '# TYPE vllm:lora_requests_info gauge',
    ...loraLines,
  ].join('\n');
}

function info(maxLora: string, running: string, waiting: string, value: string): string {
  return `vllm:lora_requests_info{max_lora="${maxLora}",running_lora_adapters="${running}",waiting_lora_adapters="${waiting}"} ${value}`;
}

const lora = (text: string) => {
  const { loraAdapters, loraAdaptersMalformed } = parseEngineMetrics(text);
  return { loraAdapters, loraAdaptersMalformed };
};

describe('LoRA adapters from vllm:lora_requests_info', () => {
  it('reads the running and waiting names and max_lora of the one series', () => {
    expect(lora(body(info('2', 'sql-lora,alpaca', 'chat', '1.789828498802105e+09')))).toEqual({
      loraAdapters: { running: ['alpaca', 'sql-lora'], waiting: ['chat'], maxLoras: 2 },
      loraAdaptersMalformed: false,
    });
  });

  it('takes the series with the largest value: older label sets that linger are ignored', () => {
    const text = body(
      info('4', 'old-a,old-b', 'old-c', '1.789828400e+09'),
      info('4', 'now', '', '1.789828498802105e+09'),
      info('4', '', 'older', '1.789828300e+09'),
    );
    expect(lora(text).loraAdapters).toEqual({ running: ['now'], waiting: [], maxLoras: 4 });
  });

  it('reads empty labels as no adapters (the engine served LoRA before, none now)', () => {
    expect(lora(body(info('1', '', '', '1.7898e+09'))).loraAdapters).toEqual({
      running: [],
      waiting: [],
      maxLoras: 1,
    });
  });

  it('drops empty names, removes duplicates and sorts by code unit, whatever the label order', () => {
    const text = body(
      'vllm:lora_requests_info{waiting_lora_adapters="b,,b",running_lora_adapters="z,A,a,z,",max_lora="3"} 1.7898e+09',
    );
    expect(lora(text).loraAdapters).toEqual({ running: ['A', 'a', 'z'], waiting: ['b'], maxLoras: 3 });
  });

  it('is null and not malformed when the engine shows no such metric (no LoRA request yet, or another engine)', () => {
    expect(lora(LOAD.join('\n'))).toEqual({ loraAdapters: null, loraAdaptersMalformed: false });
    expect(lora('sglang:num_running_reqs{model_name="m"} 1.0')).toEqual({
      loraAdapters: null,
      loraAdaptersMalformed: false,
    });
  });

  it('reads vLLM V0, which prints the same gauge', () => {
    const text = [
      'vllm:num_requests_running{model_name="m"} 1.0',
      'vllm:num_requests_waiting{model_name="m"} 0.0',
      'vllm:num_requests_swapped{model_name="m"} 0.0',
      'vllm:gpu_cache_usage_perc{model_name="m"} 0.1',
      info('2', 'a', '', '1.7e+09'),
    ].join('\n');
    expect(parseEngineMetrics(text)).toMatchObject({
      engine: 'vllm-v0',
      loraAdapters: { running: ['a'], waiting: [], maxLoras: 2 },
    });
  });

  it.each([
    ['a NaN value (which series is latest cannot be told)', [info('2', 'a', '', 'NaN'), info('2', 'b', '', '1.7e+09')]],
    ['an +Inf value', [info('2', 'a', '', '+Inf')]],
    ['a -Inf value beside a good series', [info('2', 'b', '', '1.7e+09'), info('2', 'a', '', '-Inf')]],
    ['max_lora that is not a number', [info('None', 'a', '', '1.7e+09')]],
    ['a negative max_lora', [info('-1', 'a', '', '1.7e+09')]],
    ['a fractional max_lora', [info('1.5', 'a', '', '1.7e+09')]],
    ['an empty max_lora', [info('', 'a', '', '1.7e+09')]],
    ['no max_lora label', ['vllm:lora_requests_info{running_lora_adapters="a",waiting_lora_adapters=""} 1.7e+09']],
    ['no running label', ['vllm:lora_requests_info{max_lora="2",waiting_lora_adapters=""} 1.7e+09']],
    ['no waiting label', ['vllm:lora_requests_info{max_lora="2",running_lora_adapters="a"} 1.7e+09']],
    ['no labels at all', ['vllm:lora_requests_info 1.7e+09']],
    ['a name over the length bound', [info('2', 'x'.repeat(LORA_MAX_NAME_CHARS + 1), '', '1.7e+09')]],
    [
      'more distinct names than the bound',
      [info('2', Array.from({ length: LORA_MAX_NAMES + 1 }, (_, i) => `a${i}`).join(','), '', '1.7e+09')],
    ],
  ])('is null and malformed with %s', (_, lines) => {
    const metrics = parseEngineMetrics(body(...lines));
    expect(metrics.loraAdapters).toBeNull();
    expect(metrics.loraAdaptersMalformed).toBe(true);
    // The rest of the scrape is still read.
    expect(metrics).toMatchObject({ running: 3, waiting: 1, kvUsage: 0.25 });
  });

  it('accepts names and lists exactly at the bounds, and a max_lora of 0', () => {
    const longest = 'y'.repeat(LORA_MAX_NAME_CHARS);
    const many = Array.from({ length: LORA_MAX_NAMES }, (_, i) => `n${String(i).padStart(3, '0')}`);
    // Repeats do not count against the bound.
    const text = body(info('0', [...many, ...many].join(','), longest, '1.7e+09'));
    expect(lora(text)).toEqual({
      loraAdapters: { running: many, waiting: [longest], maxLoras: 0 },
      loraAdaptersMalformed: false,
    });
  });

  it('ignores a malformed older series when the latest one is fine', () => {
    const text = body(info('x', 'old', '', '1.6e+09'), info('2', 'new', '', '1.7e+09'));
    expect(lora(text)).toEqual({
      loraAdapters: { running: ['new'], waiting: [], maxLoras: 2 },
      loraAdaptersMalformed: false,
    });
  });

  it('keeps unescaped label values: a name with a quote or a backslash is a name like any other', () => {
    const text = body(
      'vllm:lora_requests_info{max_lora="1",running_lora_adapters="we\\"ird\\\\x",waiting_lora_adapters=""} 1.7e+09',
    );
    expect(lora(text).loraAdapters?.running).toEqual(['we"ird\\x']);
  });
});
