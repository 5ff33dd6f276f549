/**
 * Reads PromQL with Prometheus' own grammar (@prometheus-io/lezer-promql, the parser of the Prometheus
 * UI): which metric names an expression selects and which label matchers it uses. Grafana's interval
 * variables are replaced by a duration first, so dashboard queries parse as Prometheus would see them.
 */
import { parser } from '@prometheus-io/lezer-promql';

export interface LabelMatcher {
  readonly metric: string | null;
  readonly label: string;
  readonly op: string;
  readonly value: string;
}

export interface ParsedExpression {
  /** Metric names selected, in order of appearance, without repeats. */
  readonly metricNames: readonly string[];
  readonly matchers: readonly LabelMatcher[];
  /** Syntax errors (position and the text there); empty when the expression parses. */
  readonly errors: readonly string[];
}

/** Grafana's built-in interval variables, as a duration Prometheus accepts. */
const GRAFANA_INTERVALS = /\$(?:__rate_interval|__interval|__range)\b|\$\{(?:__rate_interval|__interval|__range)\}/g;

type Node = NonNullable<ReturnType<ReturnType<typeof parser.parse>['topNode']['getChild']>>;

export function parsePromql(expression: string): ParsedExpression {
  const text = expression.replace(GRAFANA_INTERVALS, '5m');
  const errors: string[] = [];
  if (/\$/.test(text.replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '')))
    errors.push('a template variable other than $__rate_interval, $__interval, $__range');
  const tree = parser.parse(text);
  const names: string[] = [];
  const matchers: LabelMatcher[] = [];
  tree.iterate({
    enter: (ref) => {
      if (ref.type.isError) {
        errors.push(`syntax error at ${ref.from}: ${JSON.stringify(text.slice(ref.from, ref.from + 20))}`);
        return;
      }
      if (ref.name !== 'VectorSelector') return;
      const selector = ref.node;
      const slice = (node: Node): string => text.slice(node.from, node.to);
      const identifier = selector.getChild('Identifier');
      let metric: string | null = identifier ? slice(identifier) : null;
      const labelMatchers = selector.getChild('LabelMatchers');
      const quotedName = labelMatchers?.getChild('QuotedLabelName');
      if (metric === null && quotedName) metric = stringValue(slice(quotedName));
      for (const matcher of labelMatchers?.getChildren('UnquotedLabelMatcher') ?? []) {
        const label = matcher.getChild('LabelName');
        const op = matcher.getChild('MatchOp');
        const value = matcher.getChild('StringLiteral');
        if (!label || !op || !value) continue;
        const entry = { label: slice(label), op: slice(op), value: stringValue(slice(value)) };
        if (entry.label === '__name__' && entry.op === '=' && metric === null) metric = entry.value;
        else matchers.push({ metric, ...entry });
      }
      if (metric === null) errors.push(`selector without a metric name: ${slice(selector)}`);
      else if (!names.includes(metric)) names.push(metric);
    },
  });
  return { metricNames: names, matchers, errors };
}

/** The value of a PromQL string literal ("…", '…' or `…`). */
function stringValue(literal: string): string {
  if (literal.startsWith('`')) return literal.slice(1, -1);
  if (literal.startsWith("'"))
    return JSON.parse(`"${literal.slice(1, -1).replace(/\\'/g, "'").replace(/"/g, '\\"')}"`) as string;
  return JSON.parse(literal) as string;
}
