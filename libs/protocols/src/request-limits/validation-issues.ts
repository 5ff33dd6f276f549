/**
 * Validation failures that cost little and say little: the first issue(s) of an invalid request, in a
 * message capped in bytes, instead of every issue joined (200,000 invalid messages made a 24.9 MB
 * error response).
 *
 * Two parts:
 * - `safeParseFirstIssue`: zod's `safeParse`, stopping at the first issue. zod 4 collects every issue
 *   and finalises each (its message included), which is most of the cost of a failing parse: 4096
 *   messages with five invalid fields each took 60–170 ms and ~18 MB of heap (20,481 issues); stopped
 *   at the first issue, 0.1 ms. Valid input parses as before, and unions get cheaper (a 128k token-id
 *   `prompt` fails the string-list branch on its first element instead of on all 131,072: ~90 → ~12 ms).
 * - `formatValidationIssues` / `formatIssuePath`: the client-facing message and OpenAI-style `param`.
 *
 * What clients see: paths and zod's messages, never input values (zod puts none in its messages
 * unless a schema's own message does, and `reportInput` stays off). A path can hold a client's object
 * key, so each key is cut to 64 characters and each path to 256 bytes.
 */
import type { z } from 'zod';

/** What formatting needs of an issue; zod's issues have this shape. */
export interface ValidationIssue {
  readonly path: readonly PropertyKey[];
  readonly message: string;
}

export interface FormatValidationIssuesOptions {
  /** Issues spelled out; the rest are counted. Default 5. */
  readonly maxIssues?: number;
  /** Cap on the message's UTF-8 length, bytes. Default 1024. */
  readonly maxBytes?: number;
}

/**
 * zod 4.6's `ParseContextInternal.abortEarly`, the flag its public `schema.validate()` parses with:
 * objects stop at their first failing property, arrays at their first failing element. It is internal
 * to zod, so a test pins it (200,000 invalid messages give one issue): if an upgrade drops it, that
 * test fails while parsing stays correct (every issue again, and their cost).
 */
const STOP_AT_FIRST_ISSUE: z.core.ParseContextInternal<z.core.$ZodIssue> = Object.freeze({ abortEarly: true });

/**
 * `schema.safeParse(input)`, except that a failure holds the first issue found (one per container on
 * the path to it: an invalid union lists its branches' first issues) rather than all of them. The
 * result of a successful parse is the same.
 */
export function safeParseFirstIssue<Schema extends z.ZodType>(
  schema: Schema,
  input: unknown,
): z.ZodSafeParseResult<z.output<Schema>> {
  return schema.safeParse(input, STOP_AT_FIRST_ISSUE);
}

const PREFIX = 'Invalid request: ';
const SEPARATOR = '; ';
const ELLIPSIS = '…';
const MAX_KEY_CHARS = 64;
const MAX_PATH_BYTES = 256;
const MAX_ISSUE_MESSAGE_BYTES = 256;
const IDENTIFIER = /^[A-Za-z_$][\w$]*$/;
const counts = new Intl.NumberFormat('en-US');

/**
 * `Invalid request: messages[0].role: Invalid option: …; model: Invalid input: … (and 199,995 more
 * issues)`: the first `maxIssues` issues, then a count of the others, at most `maxBytes` UTF-8 bytes
 * (issues that do not fit join the count; a single one that does not fit is cut, never inside a
 * surrogate pair). Reads only the issues it shows, so a long list costs nothing more.
 */
export function formatValidationIssues(
  issues: readonly ValidationIssue[],
  options: FormatValidationIssuesOptions = {},
): string {
  const maxIssues = options.maxIssues ?? 5;
  const maxBytes = options.maxBytes ?? 1024;
  if (issues.length === 0) return truncateUtf8('Invalid request.', maxBytes);
  const described = issues.slice(0, Math.max(0, maxIssues)).map(describeIssue);
  if (described.length === 0) return truncateUtf8(`Invalid request (${countOf(issues.length)}).`, maxBytes);
  for (let shown = described.length; shown > 1; shown--) {
    const text = PREFIX + described.slice(0, shown).join(SEPARATOR) + moreSuffix(issues.length - shown);
    if (utf8Length(text) <= maxBytes) return text;
  }
  const suffix = moreSuffix(issues.length - 1);
  const budget = maxBytes - utf8Length(PREFIX) - utf8Length(suffix);
  if (budget < utf8Length(ELLIPSIS) + 1) return truncateUtf8(PREFIX + (described[0] as string) + suffix, maxBytes);
  return PREFIX + truncateUtf8(described[0] as string, budget) + suffix;
}

/**
 * An issue path as OpenAI's `param` spells it: `messages[3].content`, `tools[0].function.name`; a key
 * that is not an identifier in brackets as JSON (`metadata["a.b"]`); the root as `body`. At most 256
 * bytes, each key at most 64 characters.
 */
export function formatIssuePath(path: readonly PropertyKey[]): string {
  if (path.length === 0) return 'body';
  let out = '';
  for (const key of path) {
    if (typeof key === 'number') out += `[${key}]`;
    else if (typeof key === 'symbol') out += `[${truncateChars(String(key), MAX_KEY_CHARS)}]`;
    else if (IDENTIFIER.test(key) && key.length <= MAX_KEY_CHARS) out += out === '' ? key : `.${key}`;
    else out += `[${JSON.stringify(truncateChars(key, MAX_KEY_CHARS))}]`;
    // A path deeper than the byte cap stops being read here.
    if (out.length > MAX_PATH_BYTES) break;
  }
  return truncateUtf8(out, MAX_PATH_BYTES);
}

function describeIssue(issue: ValidationIssue): string {
  return `${formatIssuePath(issue.path)}: ${truncateUtf8(issue.message, MAX_ISSUE_MESSAGE_BYTES)}`;
}

function moreSuffix(more: number): string {
  return more === 0 ? '' : ` (and ${counts.format(more)} more ${more === 1 ? 'issue' : 'issues'})`;
}

function countOf(total: number): string {
  return `${counts.format(total)} ${total === 1 ? 'issue' : 'issues'}`;
}

function utf8Length(text: string): number {
  return Buffer.byteLength(text, 'utf8');
}

function truncateChars(text: string, maxChars: number): string {
  if (text.length <= maxChars) return text;
  let end = maxChars - 1;
  if (isHighSurrogate(text.charCodeAt(end - 1))) end--;
  return text.slice(0, end) + ELLIPSIS;
}

/**
 * The longest start of `text` that, with `…` appended when cut, is at most `maxBytes` UTF-8 bytes. Cuts
 * between code points, so a surrogate pair stays whole (a lone surrogate counts as the 3 bytes of the
 * U+FFFD it encodes to).
 */
export function truncateUtf8(text: string, maxBytes: number): string {
  // Every UTF-16 code unit encodes to at most 3 bytes.
  if (text.length * 3 <= maxBytes || utf8Length(text) <= maxBytes) return text;
  const budget = maxBytes - utf8Length(ELLIPSIS);
  if (budget < 0) return '';
  let bytes = 0;
  let end = 0;
  while (end < text.length) {
    const unit = text.charCodeAt(end);
    const pair = isHighSurrogate(unit) && end + 1 < text.length && isLowSurrogate(text.charCodeAt(end + 1));
    const size = pair ? 4 : unit < 0x80 ? 1 : unit < 0x800 ? 2 : 3;
    if (bytes + size > budget) break;
    bytes += size;
    end += pair ? 2 : 1;
  }
  return text.slice(0, end) + ELLIPSIS;
}

function isHighSurrogate(unit: number): boolean {
  return unit >= 0xd800 && unit <= 0xdbff;
}

function isLowSurrogate(unit: number): boolean {
  return unit >= 0xdc00 && unit <= 0xdfff;
}
