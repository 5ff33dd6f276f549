/**
 * A minimal writer for the Prometheus text exposition format 0.0.4, plus the two number formats the
 * imitated engines print: Python `prometheus_client` (vLLM, SGLang) and a C++ `std::ostream` with its
 * default precision (llama.cpp). The writer knows nothing about any engine: callers choose names,
 * label order and formatter, so each dialect can reproduce its engine byte for byte.
 */

export type MetricType = 'counter' | 'gauge' | 'histogram';

/** Label pairs in the order they are printed (the format does not sort; each client library decides). */
export type LabelPairs = ReadonlyArray<readonly [name: string, value: string]>;

export type NumberFormatter = (value: number) => string;

export class ExpositionWriter {
  private readonly lines: string[] = [];

  constructor(private readonly formatValue: NumberFormatter) {}

  /** `# HELP` and `# TYPE` lines that open a metric family. */
  family(name: string, type: MetricType, help: string): void {
    this.lines.push(`# HELP ${name} ${escapeHelp(help)}`, `# TYPE ${name} ${type}`);
  }

  /** One sample line; labels are printed in the given order, `{}` omitted when there are none. */
  sample(name: string, labels: LabelPairs, value: number): void {
    const labelText =
      labels.length === 0 ? '' : `{${labels.map(([label, text]) => `${label}="${escapeLabelValue(text)}"`).join(',')}}`;
    this.lines.push(`${name}${labelText} ${this.formatValue(value)}`);
  }

  /** The exposition; every line, the last included, ends with a newline (as both client libraries do). */
  text(): string {
    return this.lines.length === 0 ? '' : `${this.lines.join('\n')}\n`;
  }
}

/** HELP text escaping: backslash and newline (quotes stay as they are). */
export function escapeHelp(help: string): string {
  return help.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
}

/** Label value escaping: backslash, newline and double quote. */
export function escapeLabelValue(value: string): string {
  return value.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');
}

/** Labels sorted by name, as `prometheus_client` prints them whatever order they were declared in. */
export function sortedLabels(labels: Readonly<Record<string, string>>): LabelPairs {
  return Object.entries(labels).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

/**
 * Python's `repr(float)`: the shortest digits that round-trip (the same digits as JavaScript's), always
 * with a `.0` when integral, in exponent form below 1e-4 or from 1e16 (`1e-05`, `1e+16`, two-digit
 * minimum exponent).
 */
export function pythonFloatRepr(value: number): string {
  if (Number.isNaN(value)) return 'nan';
  if (value === Infinity) return 'inf';
  if (value === -Infinity) return '-inf';
  if (value === 0) return Object.is(value, -0) ? '-0.0' : '0.0';
  const sign = value < 0 ? '-' : '';
  // toExponential() without an argument gives the shortest round-trip digits.
  const [mantissa = '', exponentText = '0'] = Math.abs(value).toExponential().split('e');
  const digits = mantissa.replace('.', '');
  const exponent = Number(exponentText);
  if (exponent < -4 || exponent >= 16) {
    const head = digits.length === 1 ? digits : `${digits.slice(0, 1)}.${digits.slice(1)}`;
    return `${sign}${head}e${exponent < 0 ? '-' : '+'}${String(Math.abs(exponent)).padStart(2, '0')}`;
  }
  if (exponent < 0) return `${sign}0.${'0'.repeat(-exponent - 1)}${digits}`;
  if (digits.length <= exponent + 1) return `${sign}${digits}${'0'.repeat(exponent + 1 - digits.length)}.0`;
  return `${sign}${digits.slice(0, exponent + 1)}.${digits.slice(exponent + 1)}`;
}

/**
 * `prometheus_client`'s `floatToGoString`: `+Inf`/`-Inf`/`NaN`, else Python's repr, except that a
 * positive value with more than 6 digits before the point switches to Go's exponent form
 * (`2417733.0` → `2.417733e+06`). The quirks are kept: trailing zeros and dots are stripped from the
 * mantissa, and the exponent is written as `e+0` followed by the digit count (`e+010` from 1e10 up).
 */
export function formatPythonClientValue(value: number): string {
  if (value === Infinity) return '+Inf';
  if (value === -Infinity) return '-Inf';
  if (Number.isNaN(value)) return 'NaN';
  const repr = pythonFloatRepr(value);
  const dot = repr.indexOf('.');
  if (value > 0 && dot > 6) {
    const mantissa = `${repr.slice(0, 1)}.${repr.slice(1, dot)}${repr.slice(dot + 1)}`.replace(/[0.]+$/, '');
    return `${mantissa}e+0${dot - 1}`;
  }
  return repr;
}

/** Significant digits of `std::ostream << double` with the default precision. */
const CPP_DEFAULT_PRECISION = 6;

/**
 * `std::ostream << double` with default flags: printf `%g` at precision 6 (llama.cpp's `/metrics`).
 * Rounds half-to-even on the exact binary value, as glibc does (`1234565` → `1.23456e+06`), picks
 * fixed notation for decimal exponents −4…5 and strips trailing zeros (`100`, `0.5`, `1e-05`).
 */
export function formatCppStreamValue(value: number): string {
  if (Number.isNaN(value)) return 'nan';
  if (value === Infinity) return 'inf';
  if (value === -Infinity) return '-inf';
  if (value === 0) return Object.is(value, -0) ? '-0' : '0';
  const sign = value < 0 ? '-' : '';
  const { digits, exponent } = roundHalfEvenToSignificant(Math.abs(value), CPP_DEFAULT_PRECISION);
  if (exponent < -4 || exponent >= CPP_DEFAULT_PRECISION) {
    const fraction = digits.slice(1).replace(/0+$/, '');
    const head = fraction === '' ? digits.slice(0, 1) : `${digits.slice(0, 1)}.${fraction}`;
    return `${sign}${head}e${exponent < 0 ? '-' : '+'}${String(Math.abs(exponent)).padStart(2, '0')}`;
  }
  if (exponent < 0) return `${sign}0.${`${'0'.repeat(-exponent - 1)}${digits}`.replace(/0+$/, '')}`;
  const integerPart = digits.slice(0, exponent + 1);
  const fraction = digits.slice(exponent + 1).replace(/0+$/, '');
  return fraction === '' ? `${sign}${integerPart}` : `${sign}${integerPart}.${fraction}`;
}

/**
 * Rounds a positive finite value to `precision` significant decimal digits, half to even on its exact
 * binary value. Returns exactly `precision` digits and the decimal exponent of the first one.
 */
function roundHalfEvenToSignificant(value: number, precision: number): { digits: string; exponent: number } {
  // toFixed(100) is the exact decimal expansion for every double in [2^-48, 1e21): enough for metrics.
  if (value >= 1e21 || value < 2 ** -48) {
    const [mantissa = '', exponentText = '0'] = value.toExponential(precision - 1).split('e');
    return { digits: mantissa.replace('.', ''), exponent: Number(exponentText) };
  }
  const [integerText = '', fractionText = ''] = value.toFixed(100).split('.');
  const all = `${integerText}${fractionText}`;
  const first = all.search(/[1-9]/);
  let exponent = integerText.length - 1 - first;
  const significant = all.slice(first).replace(/0+$/, '');
  let kept = significant.slice(0, precision).padEnd(precision, '0');
  const rest = significant.slice(precision);
  const roundUp =
    rest !== '' && (rest[0] as string) >= '5' && (rest !== '5' || Number(kept[kept.length - 1]) % 2 === 1);
  if (roundUp) {
    const incremented = (BigInt(kept) + 1n).toString();
    if (incremented.length > precision) {
      kept = incremented.slice(0, precision);
      exponent++;
    } else {
      kept = incremented;
    }
  }
  return { digits: kept, exponent };
}
