/**
 * zod's own messages are written for developers (`backends.0: Invalid input`, `expected number, received NaN`); an
 * operator starting a process needs the value they gave, what is wrong with it and what would be right:
 * `"127.0.0.1:8001" is not a URL; expected http://host:port`. This is a zod error map giving such messages. A schema's
 * own message (`.min(16, 'must be at least 16 characters')`) still wins: zod asks an error map only for issues
 * without one.
 *
 * The loader puts the flag, env var or file position in front (load-config.ts); this says nothing about where the
 * value came from.
 */
import { z } from 'zod';
import { closestName } from '../command-line/parse-command-line';
import { withoutCredentials } from './config-error';

export interface ReadableIssueOptions {
  /**
   * The value at an issue's path before coercion, when the caller has it: a flag's `80x` rather than the NaN that
   * `z.coerce.number()` made of it. Undefined when unknown.
   */
  readonly rawValueAt?: (path: readonly PropertyKey[]) => unknown;
  /** Top-level keys whose values are secrets: their values are never quoted. */
  readonly secretKeys?: ReadonlySet<string>;
}

/** An error map for `schema.safeParse(value, { error })`. */
export function readableIssueMap(options: ReadableIssueOptions = {}): z.core.$ZodErrorMap {
  return (issue) => readableMessage(issue, options);
}

function readableMessage(issue: z.core.$ZodRawIssue, options: ReadableIssueOptions): string | undefined {
  const path = issue.path ?? [];
  const secret = path.length > 0 && options.secretKeys?.has(String(path[0])) === true;
  const raw = options.rawValueAt?.(path);
  const input = Number.isNaN(issue.input) && raw !== undefined ? raw : issue.input;
  const value = secret ? 'the value (a secret, not shown)' : quote(input);

  switch (issue.code) {
    case 'invalid_type': {
      if (input === undefined) return 'is required';
      return `${value} is not ${typeName(issue.expected)}${unitHint(path, issue.expected)}`;
    }
    case 'invalid_format':
      return `${value} ${formatProblem(issue as z.core.$ZodRawIssue<z.core.$ZodIssueInvalidStringFormat>)}`;
    case 'too_small':
      return `${value} is ${rangeProblem(issue as z.core.$ZodRawIssue<z.core.$ZodIssueTooSmall>)}`;
    case 'too_big':
      return `${value} is ${rangeProblem(issue as z.core.$ZodRawIssue<z.core.$ZodIssueTooBig>)}`;
    case 'not_multiple_of':
      return `${value} is not a multiple of ${String(issue.divisor)}`;
    case 'invalid_value': {
      const allowed = issue.values.map((allowedValue) => String(allowedValue));
      const suggestion = typeof input === 'string' ? closestName(input, allowed) : undefined;
      const hint = suggestion === undefined ? '' : ` (did you mean "${suggestion}"?)`;
      return `${value} is not one of ${allowed.join(', ')}${hint}`;
    }
    case 'unrecognized_keys':
      return unknownKeysMessage(issue.keys, knownKeysOf(issue.inst));
    case 'invalid_union':
      return unionMessage(issue as z.core.$ZodRawIssue<z.core.$ZodIssueInvalidUnion>, value);
    default:
      return undefined;
  }
}

/** `unknown key "polcy" (did you mean "policy"?)`; several keys in one line. */
export function unknownKeysMessage(keys: readonly string[], known: readonly string[]): string {
  const described = keys.map((key) => {
    const suggestion = closestName(key, known);
    return suggestion === undefined ? `"${key}"` : `"${key}" (did you mean "${suggestion}"?)`;
  });
  return `unknown key${keys.length === 1 ? '' : 's'} ${described.join(', ')}`;
}

function knownKeysOf(inst: unknown): string[] {
  return inst instanceof z.core.$ZodObject ? Object.keys(inst._zod.def.shape) : [];
}

/**
 * A union fails as a whole ("Invalid input"); the useful message is that of the one member whose type the value had
 * (a URL string for `backends: [http://…]`, a mapping for `backends: [{url: …}]`).
 */
function unionMessage(issue: z.core.$ZodRawIssue<z.core.$ZodIssueInvalidUnion>, value: string): string | undefined {
  const errors = 'errors' in issue && Array.isArray(issue.errors) ? issue.errors : [];
  const wrongType = (member: z.core.$ZodIssue) => member.code === 'invalid_type' && member.path.length === 0;
  const typeMatched = errors.filter((memberIssues) => !memberIssues.some(wrongType));
  if (typeMatched.length === 0) {
    // No member took a value of this type at all (a number where a URL or a mapping goes): name the types.
    const expected = errors.flatMap((memberIssues) =>
      memberIssues.filter(wrongType).map((member) => typeName((member as z.core.$ZodIssueInvalidType).expected)),
    );
    return expected.length === 0 ? undefined : `${value} is not ${[...new Set(expected)].join(' or ')}`;
  }
  const chosen = typeMatched.length === 1 ? typeMatched[0] : undefined;
  if (chosen === undefined || chosen.length === 0) return undefined;
  // Every problem of that member, in one line: a misspelt key usually comes with the required key it misses.
  return chosen.map(memberMessage).join('; ');
}

function memberMessage(member: z.core.$ZodIssue): string {
  if (member.path.length === 0) return member.message;
  const path = member.path.map(String).join('.');
  return member.message === 'is required' ? `${path} is required` : `${path}: ${member.message}`;
}

function formatProblem(issue: z.core.$ZodRawIssue<z.core.$ZodIssueInvalidStringFormat>): string {
  switch (issue.format) {
    case 'url':
      return 'is not a URL; expected http://host:port';
    case 'regex':
      return `does not match ${String(issue.pattern)}`;
    default:
      return `is not a valid ${issue.format}`;
  }
}

function rangeProblem(
  issue: z.core.$ZodRawIssue<z.core.$ZodIssueTooSmall> | z.core.$ZodRawIssue<z.core.$ZodIssueTooBig>,
): string {
  const small = issue.code === 'too_small';
  const bound = String(small ? issue.minimum : issue.maximum);
  const inclusive = issue.inclusive !== false;
  const relation = small ? (inclusive ? 'at least' : 'more than') : inclusive ? 'at most' : 'less than';
  switch (issue.origin) {
    case 'string':
      return `too ${small ? 'short' : 'long'}; expected ${relation} ${bound} characters`;
    case 'array':
    case 'set':
      return `too ${small ? 'short' : 'long'} a list; expected ${relation} ${bound} items`;
    default:
      return `too ${small ? 'small' : 'large'}; expected ${relation} ${bound}`;
  }
}

/**
 * What a number field counts, from the house naming of keys (`leaseTtlMs`, `port`, `adminPort`): `5s` for a
 * duration is the mistake this answers.
 */
function unitHint(path: readonly PropertyKey[], expected: string): string {
  if (expected !== 'number' && expected !== 'int') return '';
  const key = String(path.at(-1) ?? '');
  if (/Ms$/.test(key)) return '; expected a number of milliseconds, e.g. 5000';
  if (/Seconds$|Secs$/.test(key)) return '; expected a number of seconds';
  if (/^port$|Port$/.test(key)) return '; expected a port number, 0 to 65535';
  return '';
}

function typeName(expected: string): string {
  switch (expected) {
    case 'number':
    case 'int':
      return expected === 'int' ? 'an integer' : 'a number';
    case 'boolean':
      return 'true or false';
    case 'string':
      return 'a string';
    case 'array':
      return 'a list';
    case 'object':
    case 'record':
      return 'a mapping';
    default:
      return `a ${expected}`;
  }
}

/** How a value is shown: strings quoted (any URL's password masked), lists and mappings by their kind. */
function quote(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(withoutCredentials(value));
  if (Array.isArray(value)) return 'a list';
  if (value !== null && typeof value === 'object') return 'a mapping';
  return String(value);
}
