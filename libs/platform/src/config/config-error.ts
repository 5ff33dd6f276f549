/**
 * The one error type configuration loading throws. Its message is written for the person starting the process: every
 * problem on its own line, naming the field and where the bad value came from, so main.ts can print it and exit.
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

function formatProblems(problems: readonly ConfigProblem[]): string {
  const heading =
    problems.length === 1 ? 'Invalid configuration:' : `Invalid configuration (${problems.length} problems):`;
  const lines = problems.map((problem) => {
    const origin = problem.source === undefined ? '' : ` (${describeSource(problem.source)})`;
    const hint = problem.hint === undefined ? '' : ` → ${problem.hint}`;
    return `  ✖ ${problem.path}: ${problem.message}${origin}${hint}`;
  });
  return [heading, ...lines].join('\n');
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
