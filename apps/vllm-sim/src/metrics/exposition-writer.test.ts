import { describe, expect, it } from 'vitest';
import {
  ExpositionWriter,
  escapeHelp,
  escapeLabelValue,
  formatCppStreamValue,
  formatPythonClientValue,
  pythonFloatRepr,
  sortedLabels,
} from './exposition-writer';

describe('pythonFloatRepr (Python repr of a float)', () => {
  it.each([
    [7, '7.0'],
    [0, '0.0'],
    [-0, '-0.0'],
    [0.0731, '0.0731'],
    [0.1 + 0.2, '0.30000000000000004'],
    [0.0001, '0.0001'],
    [0.00001, '1e-05'],
    [0.000012345, '1.2345e-05'],
    [123456789, '123456789.0'],
    [1234567890123456, '1234567890123456.0'],
    [1e16, '1e+16'],
    [1.5e16, '1.5e+16'],
    [1e100, '1e+100'],
    [-2.5, '-2.5'],
  ])('%s → %s', (value, expected) => {
    expect(pythonFloatRepr(value)).toBe(expected);
  });
});

describe('formatPythonClientValue (prometheus_client floatToGoString)', () => {
  it.each([
    [7, '7.0'],
    [0.0731, '0.0731'],
    [123456, '123456.0'],
    [1018864, '1.018864e+06'],
    [2417733, '2.417733e+06'],
    [1000000, '1e+06'],
    [2000000, '2e+06'],
    [1234567.5, '1.2345675e+06'],
    [1761204418.3526373, '1.7612044183526373e+09'],
    // Go-style exponent quirk kept: "e+0" then the digit count.
    [12345678901, '1.2345678901e+010'],
    [-2417733, '-2417733.0'],
    [Infinity, '+Inf'],
    [-Infinity, '-Inf'],
    [NaN, 'NaN'],
  ])('%s → %s', (value, expected) => {
    expect(formatPythonClientValue(value)).toBe(expected);
  });
});

describe('formatCppStreamValue (std::ostream default, 6 significant digits)', () => {
  it.each([
    [0, '0'],
    [3, '3'],
    [100, '100'],
    [0.5, '0.5'],
    [0.1, '0.1'],
    [3.14159265, '3.14159'],
    [123456, '123456'],
    [1234567, '1.23457e+06'],
    [2417733, '2.41773e+06'],
    // Exact ties round half to even, as glibc does.
    [1234565, '1.23456e+06'],
    [1234575, '1.23458e+06'],
    [123456.5, '123456'],
    [12345.25, '12345.2'],
    [999999.5, '1e+06'],
    [0.0001, '0.0001'],
    [0.00001, '1e-05'],
    [0.000123456789, '0.000123457'],
    [5.025125628140704, '5.02513'],
    [1e21, '1e+21'],
    [-2.5, '-2.5'],
  ])('%s → %s', (value, expected) => {
    expect(formatCppStreamValue(value)).toBe(expected);
  });
});

describe('escaping and label order', () => {
  it('escapes HELP backslashes and newlines, and label values also with quotes', () => {
    expect(escapeHelp('a\\b\nc "q"')).toBe('a\\\\b\\nc "q"');
    expect(escapeLabelValue('a\\b\nc "q"')).toBe('a\\\\b\\nc \\"q\\"');
  });

  it('sorts labels by name like prometheus_client', () => {
    expect(sortedLabels({ model_name: 'm', le: '0.1', engine: '0' })).toEqual([
      ['engine', '0'],
      ['le', '0.1'],
      ['model_name', 'm'],
    ]);
  });
});

describe('ExpositionWriter', () => {
  it('writes family headers and samples with labels in the given order, newline-terminated', () => {
    const writer = new ExpositionWriter(formatPythonClientValue);
    writer.family('x:requests_total', 'counter', 'Requests.\nSecond line');
    writer.sample(
      'x:requests_total',
      [
        ['zone', 'b"1'],
        ['app', 'a'],
      ],
      3,
    );
    writer.sample('x:requests_total', [], 2417733);
    expect(writer.text()).toBe(
      [
        '# HELP x:requests_total Requests.\\nSecond line',
        '# TYPE x:requests_total counter',
        'x:requests_total{zone="b\\"1",app="a"} 3.0',
        'x:requests_total 2.417733e+06',
        '',
      ].join('\n'),
    );
  });

  it('writes nothing when empty', () => {
    expect(new ExpositionWriter(formatCppStreamValue).text()).toBe('');
  });
});
