/**
 * A parser for the Prometheus text exposition format 0.0.4, the body every engine's `/metrics` sends
 * to a plain `Accept: text/plain` scrape. Written here because no npm package parses it correctly
 * (see this library's README: histograms with labels, `+Inf`/`-Inf`, names with `:`).
 *
 * Output is flat: one `PrometheusSample` per sample line, in input order, plus the HELP/TYPE metadata
 * by family name. Histogram and summary series stay as their `_bucket`/`_count`/`_sum` (or quantile)
 * sample lines with their `le`/`quantile` label, so any number of label sets survives intact.
 *
 * Grammar accepted (the Prometheus text format spec, as `expfmt`'s parser reads it):
 * - lines end in `\n`; a trailing `\r` is dropped; empty lines are ignored;
 * - `# HELP <name> <text>` (text escapes `\\`, `\n`), `# TYPE <name> <type>`; any other `#` line is a
 *   comment (`# EOF` included);
 * - `<name>[{<label>="<value>",…}] <value> [<timestamp ms>]`: name `[a-zA-Z_:][a-zA-Z0-9_:]*`, label
 *   name `[a-zA-Z_][a-zA-Z0-9_]*`, label value escapes `\\`, `\"`, `\n` (any other `\x` is kept as the
 *   two characters, as Prometheus does); blanks are allowed around every token and a trailing comma
 *   inside the braces;
 * - values: decimal floats (`7.0`, `2.417733e+06`, `.5`), `NaN`, `+Inf`, `-Inf`, `Inf` (any case, as
 *   Go's ParseFloat, so llama.cpp's `nan`/`inf` parse too); timestamps: integer milliseconds;
 * - an OpenMetrics exemplar after the value (` # {trace_id="…"} 1.0`) is skipped, so an OpenMetrics body
 *   still yields its samples.
 * Not accepted: Prometheus 3's quoted UTF-8 metric names (`{"my.metric"}`), hex floats.
 *
 * A line that does not fit is skipped and reported in `issues` (1-based line number and reason); it
 * never throws, so one odd line does not cost the whole scrape.
 */

export type PrometheusMetricType = 'counter' | 'gauge' | 'histogram' | 'summary' | 'untyped';

export type PrometheusLabels = Readonly<Record<string, string>>;

export interface PrometheusSample {
  /** Sample name as printed (`vllm:prefix_cache_queries_total`, `vllm:e2e_request_latency_seconds_bucket`). */
  readonly name: string;
  /** Unescaped label values; an own-property object (a label named `__proto__` is an ordinary key). */
  readonly labels: PrometheusLabels;
  /** May be NaN or ±Infinity: the format allows them; consumers decide what they mean. */
  readonly value: number;
  readonly timestampMs: number | null;
}

export interface PrometheusFamilyMetadata {
  readonly type: PrometheusMetricType | null;
  readonly help: string | null;
}

export interface PrometheusParseIssue {
  /** 1-based line number. */
  readonly line: number;
  readonly reason: string;
  readonly text: string;
}

export interface PrometheusExposition {
  readonly samples: readonly PrometheusSample[];
  /** HELP/TYPE by the name written on those lines (a family name, not each sample name). */
  readonly metadata: ReadonlyMap<string, PrometheusFamilyMetadata>;
  readonly issues: readonly PrometheusParseIssue[];
}

const METRIC_TYPES: ReadonlySet<string> = new Set<PrometheusMetricType>([
  'counter',
  'gauge',
  'histogram',
  'summary',
  'untyped',
]);
const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*/;
const DECIMAL_FLOAT = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;
const INFINITY = /^([+-]?)inf(?:inity)?$/i;
const NOT_A_NUMBER = /^nan$/i;
const INTEGER = /^[+-]?\d+$/;

/** Parses one exposition body; never throws (unparseable lines land in `issues`). */
export function parsePrometheusText(text: string): PrometheusExposition {
  const samples: PrometheusSample[] = [];
  const metadata = new Map<string, { type: PrometheusMetricType | null; help: string | null }>();
  const issues: PrometheusParseIssue[] = [];
  const lines = text.split('\n');
  for (let index = 0; index < lines.length; index++) {
    const raw = lines[index] as string;
    const line = raw.endsWith('\r') ? raw.slice(0, -1) : raw;
    const trimmed = line.trim();
    if (trimmed === '') continue;
    const result = trimmed.startsWith('#') ? readCommentLine(trimmed, metadata) : readSampleLine(trimmed);
    if (typeof result === 'string') issues.push({ line: index + 1, reason: result, text: line });
    else if (result !== null) samples.push(result);
  }
  return { samples, metadata, issues };
}

/**
 * Parses one sample value as Go's ParseFloat would for this format: decimal, `NaN`, `±Inf`
 * (case-insensitive). Returns null for anything else (JavaScript's `Number()` rejects `+Inf`).
 */
export function parsePrometheusValue(text: string): number | null {
  if (DECIMAL_FLOAT.test(text)) return Number(text);
  const infinity = INFINITY.exec(text);
  if (infinity) return infinity[1] === '-' ? -Infinity : Infinity;
  if (NOT_A_NUMBER.test(text)) return NaN;
  return null;
}

/** HELP/TYPE lines update `metadata` and return null; other comments return null; errors return a reason. */
function readCommentLine(
  line: string,
  metadata: Map<string, { type: PrometheusMetricType | null; help: string | null }>,
): string | null {
  const match = /^#[ \t]+(HELP|TYPE)[ \t]+(\S+)(?:[ \t]+(.*))?$/.exec(line);
  if (!match) return null; // a plain comment
  const [, keyword, name = '', rest = ''] = match;
  if (METRIC_NAME.exec(name)?.[0] !== name) return `invalid metric name in ${keyword} line`;
  const entry = metadata.get(name) ?? { type: null, help: null };
  if (keyword === 'HELP') {
    if (entry.help !== null) return `second HELP line for ${name}`;
    entry.help = unescapeHelp(rest);
  } else {
    const type = rest.trim();
    if (!METRIC_TYPES.has(type)) return `unknown metric type "${type}"`;
    if (entry.type !== null) return `second TYPE line for ${name}`;
    entry.type = type as PrometheusMetricType;
  }
  metadata.set(name, entry);
  return null;
}

function unescapeHelp(text: string): string {
  return text.replace(/\\(\\|n)/g, (_, escaped: string) => (escaped === 'n' ? '\n' : '\\'));
}

/** A cursor over one line; every reader advances `position`. */
class LineCursor {
  position = 0;
  constructor(readonly line: string) {}

  get done(): boolean {
    return this.position >= this.line.length;
  }

  peek(): string {
    return this.line[this.position] ?? '';
  }

  skipBlanks(): number {
    const start = this.position;
    while (this.peek() === ' ' || this.peek() === '\t') this.position++;
    return this.position - start;
  }

  take(pattern: RegExp): string | null {
    const match = pattern.exec(this.line.slice(this.position));
    if (!match) return null;
    this.position += match[0].length;
    return match[0];
  }

  /** The run of characters up to the next blank or the end of the line. */
  token(): string {
    const start = this.position;
    while (!this.done && this.peek() !== ' ' && this.peek() !== '\t') this.position++;
    return this.line.slice(start, this.position);
  }
}

function readSampleLine(line: string): PrometheusSample | string {
  const cursor = new LineCursor(line);
  const name = cursor.take(METRIC_NAME);
  if (name === null) return 'invalid metric name';
  let blanks = cursor.skipBlanks();
  let labels: PrometheusLabels = {};
  if (cursor.peek() === '{') {
    const read = readLabels(cursor);
    if (typeof read === 'string') return read;
    labels = read;
    blanks = cursor.skipBlanks();
  }
  if (blanks === 0 && !cursor.done) return 'expected a blank before the value';
  const valueText = cursor.token();
  if (valueText === '') return 'missing value';
  const value = parsePrometheusValue(valueText);
  if (value === null) return `invalid value "${valueText}"`;
  cursor.skipBlanks();
  let timestampMs: number | null = null;
  if (!cursor.done && cursor.peek() !== '#') {
    const timestampText = cursor.token();
    if (!INTEGER.test(timestampText)) return `invalid timestamp "${timestampText}"`;
    timestampMs = Number(timestampText);
    cursor.skipBlanks();
  }
  // Whatever follows a `#` here is an OpenMetrics exemplar: skipped.
  if (!cursor.done && cursor.peek() !== '#') return 'unexpected text after the value';
  return { name, labels, value, timestampMs };
}

function readLabels(cursor: LineCursor): PrometheusLabels | string {
  cursor.position++; // '{'
  const pairs: Array<[string, string]> = [];
  const seen = new Set<string>();
  for (;;) {
    cursor.skipBlanks();
    if (cursor.peek() === '}') break;
    const labelName = cursor.take(LABEL_NAME);
    if (labelName === null) return cursor.done ? 'unterminated label set' : 'invalid label name';
    if (seen.has(labelName)) return `duplicate label "${labelName}"`;
    seen.add(labelName);
    cursor.skipBlanks();
    if (cursor.peek() !== '=') return `expected = after label "${labelName}"`;
    cursor.position++;
    cursor.skipBlanks();
    if (cursor.peek() !== '"') return `expected a quoted value for label "${labelName}"`;
    cursor.position++;
    const value = readQuotedLabelValue(cursor);
    if (value === null) return `unterminated value for label "${labelName}"`;
    pairs.push([labelName, value]);
    cursor.skipBlanks();
    if (cursor.peek() === ',') {
      cursor.position++;
      continue;
    }
    if (cursor.peek() !== '}') return cursor.done ? 'unterminated label set' : 'expected , or } after a label';
  }
  cursor.position++; // '}'
  // fromEntries defines own properties, so no label name can reach Object.prototype.
  return Object.fromEntries(pairs);
}

/** Reads up to the closing quote (consumed); null when the line ends first. */
function readQuotedLabelValue(cursor: LineCursor): string | null {
  let value = '';
  while (!cursor.done) {
    const char = cursor.peek();
    cursor.position++;
    if (char === '"') return value;
    if (char !== '\\') {
      value += char;
      continue;
    }
    const escaped = cursor.peek();
    if (escaped === '') return null;
    cursor.position++;
    value += escaped === 'n' ? '\n' : escaped === '\\' || escaped === '"' ? escaped : `\\${escaped}`;
  }
  return null;
}
