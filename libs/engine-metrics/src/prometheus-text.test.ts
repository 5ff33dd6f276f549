import { describe, expect, it } from 'vitest';
import { parsePrometheusText, parsePrometheusValue } from './prometheus-text';

describe('parsePrometheusText', () => {
  it('reads HELP and TYPE metadata and a labelled sample', () => {
    const { samples, metadata, issues } = parsePrometheusText(
      [
        '# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.',
        '# TYPE vllm:kv_cache_usage_perc gauge',
        'vllm:kv_cache_usage_perc{engine="0",model_name="qwen2.5-7b"} 0.0731',
        '',
      ].join('\n'),
    );
    expect(issues).toEqual([]);
    expect(metadata.get('vllm:kv_cache_usage_perc')).toEqual({
      type: 'gauge',
      help: 'KV-cache usage. 1 means 100 percent usage.',
    });
    expect(samples).toEqual([
      {
        name: 'vllm:kv_cache_usage_perc',
        labels: { engine: '0', model_name: 'qwen2.5-7b' },
        value: 0.0731,
        timestampMs: null,
      },
    ]);
  });

  it('unescapes backslash, double quote and newline in label values and keeps unknown escapes as written', () => {
    const { samples, issues } = parsePrometheusText(
      String.raw`m{path="C:\\dir\\",quote="say \"hi\"",nl="a\nb",other="tab\there"} 1` + '\n',
    );
    expect(issues).toEqual([]);
    expect(samples[0]?.labels).toEqual({ path: 'C:\\dir\\', quote: 'say "hi"', nl: 'a\nb', other: 'tab\\there' });
  });

  it('keeps braces, commas, equals signs and # inside quoted label values', () => {
    const { samples, issues } = parsePrometheusText('m{a="x}y,z=w # {q}"} 2\n');
    expect(issues).toEqual([]);
    expect(samples[0]?.labels).toEqual({ a: 'x}y,z=w # {q}' });
  });

  it('parses NaN, +Inf, -Inf and the lower-case forms llama.cpp prints', () => {
    const { samples, issues } = parsePrometheusText(
      ['a NaN', 'b +Inf', 'c -Inf', 'd nan', 'e inf', 'f -inf', 'g Inf'].join('\n'),
    );
    expect(issues).toEqual([]);
    expect(samples.map((sample) => String(sample.value))).toEqual([
      'NaN',
      'Infinity',
      '-Infinity',
      'NaN',
      'Infinity',
      '-Infinity',
      'Infinity',
    ]);
  });

  it('parses the number forms of prometheus_client and C++ streams', () => {
    const { samples } = parsePrometheusText(
      ['a 7.0', 'b 2.417733e+06', 'c 1e-05', 'd -0.0', 'e .5', 'f 1.7612044183526373e+09', 'g 13959.6', 'h 1E3'].join(
        '\n',
      ),
    );
    expect(samples.map((sample) => sample.value)).toEqual([
      7, 2_417_733, 0.00001, -0, 0.5, 1_761_204_418.3526373, 13959.6, 1000,
    ]);
  });

  it('reads a millisecond timestamp after the value, negative ones included', () => {
    const { samples, issues } = parsePrometheusText('a{x="1"} 3 1700000000000\nb 4 -15\n');
    expect(issues).toEqual([]);
    expect(samples.map((sample) => sample.timestampMs)).toEqual([1_700_000_000_000, -15]);
  });

  it('skips an OpenMetrics exemplar after the value or the timestamp', () => {
    const { samples, issues } = parsePrometheusText(
      [
        'h_bucket{le="0.5"} 4 # {trace_id="abc def"} 0.43 1700000000.1',
        'h_bucket{le="1"} 5 1700000000000 # {trace_id="x"} 0.9',
        '# EOF',
      ].join('\n'),
    );
    expect(issues).toEqual([]);
    expect(samples).toEqual([
      { name: 'h_bucket', labels: { le: '0.5' }, value: 4, timestampMs: null },
      { name: 'h_bucket', labels: { le: '1' }, value: 5, timestampMs: 1_700_000_000_000 },
    ]);
  });

  it('keeps every label set of a histogram as separate bucket, count and sum samples', () => {
    const text = [
      '# TYPE ttft histogram',
      'ttft_bucket{engine="0",le="0.1"} 1.0',
      'ttft_bucket{engine="0",le="+Inf"} 2.0',
      'ttft_count{engine="0"} 2.0',
      'ttft_sum{engine="0"} 0.3',
      'ttft_sum{engine="1"} 1.5',
      'ttft_bucket{engine="1",le="0.1"} 5.0',
      'ttft_bucket{engine="1",le="+Inf"} 7.0',
      'ttft_count{engine="1"} 7.0',
    ].join('\n');
    const { samples, metadata } = parsePrometheusText(text);
    expect(metadata.get('ttft')?.type).toBe('histogram');
    expect(samples).toHaveLength(8);
    const infBuckets = samples.filter((sample) => sample.name === 'ttft_bucket' && sample.labels['le'] === '+Inf');
    expect(infBuckets.map((sample) => [sample.labels['engine'], sample.value])).toEqual([
      ['0', 2],
      ['1', 7],
    ]);
    expect(samples.filter((sample) => sample.name === 'ttft_sum').map((sample) => sample.value)).toEqual([0.3, 1.5]);
  });

  it('keeps summary quantiles as samples with a quantile label', () => {
    const { samples, metadata } = parsePrometheusText(
      [
        '# TYPE rpc summary',
        'rpc{quantile="0.5"} 0.05',
        'rpc{quantile="0.99"} NaN',
        'rpc_sum 12.0',
        'rpc_count 300',
      ].join('\n'),
    );
    expect(metadata.get('rpc')?.type).toBe('summary');
    expect(samples.map((sample) => [sample.name, sample.labels['quantile'] ?? null])).toEqual([
      ['rpc', '0.5'],
      ['rpc', '0.99'],
      ['rpc_sum', null],
      ['rpc_count', null],
    ]);
  });

  it('reads _created lines as ordinary samples of their own family', () => {
    const { samples, metadata } = parsePrometheusText(
      [
        '# TYPE c_total counter',
        'c_total{a="1"} 3.0',
        '# TYPE c_created gauge',
        'c_created{a="1"} 1.7612044183526373e+09',
      ].join('\n'),
    );
    expect(metadata.get('c_created')?.type).toBe('gauge');
    expect(samples.map((sample) => sample.name)).toEqual(['c_total', 'c_created']);
  });

  it('tolerates CRLF, blank lines, indentation, tabs, blanks around labels, a trailing comma and empty braces', () => {
    const text = ['', '  a 1\r', '\tb{} 2', 'c {x = "1" , y="2",} 3', 'd{x="1"}\t4\t\t', '   ', 'e\t5'].join('\r\n');
    const { samples, issues } = parsePrometheusText(text);
    expect(issues).toEqual([]);
    expect(samples.map((sample) => [sample.name, sample.labels, sample.value])).toEqual([
      ['a', {}, 1],
      ['b', {}, 2],
      ['c', { x: '1', y: '2' }, 3],
      ['d', { x: '1' }, 4],
      ['e', {}, 5],
    ]);
  });

  it('ignores plain comments and # EOF, unescapes HELP text and allows an empty HELP', () => {
    const { samples, metadata, issues } = parsePrometheusText(
      [
        '# just a comment',
        '#no space comment',
        String.raw`# HELP a Line one\nline two with a \\ backslash and "quotes"`,
        '# HELP b',
        'a 1',
        '# EOF',
      ].join('\n'),
    );
    expect(issues).toEqual([]);
    expect(samples).toHaveLength(1);
    expect(metadata.get('a')?.help).toBe('Line one\nline two with a \\ backslash and "quotes"');
    expect(metadata.get('b')).toEqual({ type: null, help: '' });
  });

  it('stores a label named __proto__ as an ordinary own property', () => {
    const { samples } = parsePrometheusText('m{__proto__="x",a="y"} 1');
    const labels = samples[0]?.labels ?? {};
    expect(Object.keys(labels)).toEqual(['__proto__', 'a']);
    expect(Object.getPrototypeOf(labels)).toBe(Object.prototype);
    expect(labels['__proto__']).toBe('x');
  });

  it('reports each malformed line with its number and reason, and keeps parsing the rest', () => {
    const lines = [
      'good 1',
      'bad_value{a="1"} abc',
      'unterminated{a="1} 2',
      'unclosed{a="1" 2',
      'dup{a="1",a="2"} 3',
      'no_value{a="1"}',
      'bad_ts 1 12.5',
      'extra 1 2 3',
      'noblank{a="1"}2',
      '9starts_with_digit 1',
      'no_eq{a "1"} 1',
      'unquoted{a=1} 1',
      '# TYPE x bogus',
      '# TYPE good gauge',
      '# TYPE good counter',
      '# HELP good once',
      '# HELP good twice',
      'also_good{b="2"} 2',
    ];
    const { samples, issues } = parsePrometheusText(lines.join('\n'));
    expect(samples.map((sample) => sample.name)).toEqual(['good', 'also_good']);
    expect(issues.map((issue) => [issue.line, issue.reason])).toEqual([
      [2, 'invalid value "abc"'],
      [3, 'unterminated value for label "a"'],
      [4, 'expected , or } after a label'],
      [5, 'duplicate label "a"'],
      [6, 'missing value'],
      [7, 'invalid timestamp "12.5"'],
      [8, 'unexpected text after the value'],
      [9, 'expected a blank before the value'],
      [10, 'invalid metric name'],
      [11, 'expected = after label "a"'],
      [12, 'expected a quoted value for label "a"'],
      [13, 'unknown metric type "bogus"'],
      [15, 'second TYPE line for good'],
      [17, 'second HELP line for good'],
    ]);
    expect(issues[0]?.text).toBe('bad_value{a="1"} abc');
  });

  it('returns nothing for an empty body', () => {
    expect(parsePrometheusText('')).toEqual({ samples: [], metadata: new Map(), issues: [] });
  });
});

describe('parsePrometheusValue', () => {
  it('accepts what Go ParseFloat accepts in this format and rejects the rest', () => {
    expect(parsePrometheusValue('+Inf')).toBe(Infinity);
    expect(parsePrometheusValue('-Infinity')).toBe(-Infinity);
    expect(parsePrometheusValue('NAN')).toBeNaN();
    expect(parsePrometheusValue('+3.5e-2')).toBe(0.035);
    expect(parsePrometheusValue('1.')).toBe(1);
    for (const text of ['', 'abc', '1,5', '0x10', '1e', '--1', 'Infinite', '1_000'])
      expect(parsePrometheusValue(text)).toBeNull();
  });
});
