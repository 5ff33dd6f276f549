/**
 * The one error type configuration loading throws. Its message is written for the person starting the process: every
 * problem on its own line, naming the flag, env var or file key the bad value came from, so main.ts can print it and
 * exit (exitOnStartFailure: code 2, a usage error).
 */

/** Where a value was read from. `default` means nothing set it and the schema's default (or absence) applied. */
export type ConfigSource =
  | { kind: 'default' }
  | { kind: 'file'; path: string }
  | { kind: 'env'; name: string; raw: string }
  | { kind: 'flag'; name: string; raw: string };

export interface ConfigProblem {
  /** Dotted path of the field (`redis.url`), or the flag / file the problem is about when no field applies. */
  path: string;
  message: string;
  source?: ConfigSource;
  /** What to do about it, e.g. which flag or env var sets a missing field. */
  hint?: string;
}

export class ConfigError extends Error {
  override readonly name = 'ConfigError';
  readonly problems: readonly ConfigProblem[];

  constructor(problems: readonly ConfigProblem[], options?: { cause?: unknown }) {
    super(formatProblems(problems), options);
    this.problems = problems;
  }
}

/**
 * One line per problem, each starting with what the user typed: the flag (`--backends: "127.0.0.1:8001" is not a URL;
 * expected http://host:port`), the env var, or the key and its file. A user who gave one bad value reads one line.
 */
function formatProblems(problems: readonly ConfigProblem[]): string {
  return problems.map(formatProblem).join('\n');
}

export function formatProblem(problem: ConfigProblem): string {
  const hint = problem.hint === undefined ? '' : ` → ${problem.hint}`;
  return `${placeOf(problem)}: ${problem.message}${hint}`;
}

function placeOf(problem: ConfigProblem): string {
  switch (problem.source?.kind) {
    case 'flag':
      return `--${problem.source.name}`;
    case 'env':
      return problem.source.name;
    case 'file':
      return problem.path === problem.source.path ? problem.path : `${problem.path} in ${problem.source.path}`;
    default:
      return problem.path;
  }
}

/** Human wording for a source, e.g. `from env KVROUTE_POLICY="fastest"`; credentials in a value are masked. */
export function describeSource(source: ConfigSource): string {
  switch (source.kind) {
    case 'default':
      return 'not set';
    case 'file':
      return `from config file ${source.path}`;
    case 'env':
      return `from env ${source.name}=${JSON.stringify(withoutCredentials(source.raw))}`;
    case 'flag':
      return `from flag --${source.name}=${JSON.stringify(withoutCredentials(source.raw))}`;
  }
}

/**
 * A value with the userinfo of any URL in it masked (`redis://:hunter2@host` → `redis://***@host`):
 * a mistyped Redis or backend URL is echoed in the error, which lands in logs, but its password must not.
 */
export function withoutCredentials(raw: string): string {
  // One URL at a time (a list such as `--backends` holds several): each one's userinfo runs from `://` to
  // the last `@` of that URL, so a password holding `@`, `/` or `,` is masked whole.
  return raw
    .split(/(?=\b[a-z][a-z0-9+.-]*:\/\/)/i)
    .map((part) => part.replace(/^([a-z][a-z0-9+.-]*:\/\/)[^\s"]*@/i, '$1***@'))
    .join('');
}
