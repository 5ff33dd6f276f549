/**
 * A small human-readable formatter for local development, so `pretty: true` works without installing pino-pretty.
 * Each JSON line pino writes becomes
 *
 *   12:04:05.123 INFO  router/proxy: upstream connected  backend="b1" durationMs=12
 *
 * It formats lines pino has already redacted, so redaction holds in pretty mode too. Not for production: it parses
 * every line again, which is the cost pino's JSON output exists to avoid.
 *
 * Apps select it with `--log-format pretty`. It is plain code in the same module graph, so `npm run build` bundles it
 * into every app and an installed `kvroute` needs nothing more. pino-pretty as a transport (its documented use) runs
 * in a worker thread that loads the module from node_modules at run time, which an esbuild bundle does not carry;
 * as a stream it would bundle, but it brings a dependency tree for what this file does for these lines.
 */
import type { DestinationStream } from 'pino';

/** Anything with a string `write`, e.g. `process.stdout`. */
export interface TextSink {
  write(text: string): unknown;
}

/** Fields shown in the line prefix rather than repeated as key=value pairs. */
const PREFIX_KEYS = new Set(['level', 'time', 'service', 'component', 'msg']);

export function createPrettyLogStream(sink: TextSink): DestinationStream {
  return {
    write(line: string): void {
      sink.write(formatLine(line));
    },
  };
}

function formatLine(line: string): string {
  let record: Record<string, unknown>;
  try {
    record = JSON.parse(line) as Record<string, unknown>;
  } catch {
    return line.endsWith('\n') ? line : `${line}\n`;
  }
  const time = typeof record['time'] === 'string' ? record['time'].slice(11, 23) : '';
  const level = String(record['level'] ?? '')
    .toUpperCase()
    .padEnd(5);
  const origin = [record['service'], record['component']].filter((part) => part !== undefined).join('/');
  const rest = Object.entries(record)
    .filter(([key]) => !PREFIX_KEYS.has(key))
    .map(([key, value]) => `${key}=${JSON.stringify(value)}`)
    .join(' ');
  return `${time} ${level} ${origin}: ${String(record['msg'] ?? '')}${rest === '' ? '' : `  ${rest}`}\n`;
}
