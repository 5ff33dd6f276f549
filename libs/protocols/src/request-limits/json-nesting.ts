/**
 * JSON nesting depth measured on the raw body, before `JSON.parse` and before anything that recurses
 * over the parsed value (`JSON.stringify`, schema validation, rendering), so a 20,000-deep body is
 * refused for the cost of reading its first `maxDepth + 1` brackets.
 *
 * Depth: the number of objects and arrays open at a point. `1` and `"a"` have depth 0, `{}` and `[]`
 * depth 1, `{"a":[1]}` depth 2.
 *
 * Algorithm: one left-to-right pass over the UTF-8 bytes with one bit of state (inside a string or
 * not). Outside strings, `{`/`[` open a level and `}`/`]` close one. At a `"` the scan reads up to 16
 * bytes itself (keys and roles end there), then jumps to the next `"` with `indexOf` (memchr: a 16 MB
 * prompt string costs well under a millisecond) and treats that quote as escaped when an odd run of
 * backslashes precedes it; each backslash run precedes exactly one quote, so the look-back keeps the
 * pass O(n). Bytes of multi-byte UTF-8 sequences are ≥ 0x80 and never equal an ASCII structural
 * character.
 *
 * Measured (16 MB bodies, a loaded 2-core machine): a chat body with one 16 MB prompt 0.4–0.6 ms;
 * bodies that are all structure (`[1,1,…]`, `["ab",…]`, small nested objects) 25–50 ms, against
 * 150–900 ms for `JSON.parse` of the same bodies.
 *
 * The scan does not validate. For valid JSON the depth is exact; for malformed input it is some
 * number, and `JSON.parse` rejects that input afterwards anyway (V8's JSON parser is iterative, so
 * input it rejects cannot exhaust the stack either).
 */

export type JsonNesting =
  | {
      readonly tooDeep: false;
      /** The deepest nesting in the body. */
      readonly depth: number;
    }
  | {
      readonly tooDeep: true;
      /** `maxDepth + 1`: the scan stops at the first bracket past the limit. */
      readonly depth: number;
      /** Byte offset of that bracket in the body (for a string argument: in its UTF-8 encoding). */
      readonly offset: number;
    };

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
/** `[` (0x5b) and `{` (0x7b) differ only in bit 0x20, as do `]` (0x5d) and `}` (0x7d): OR-ing it in folds each pair. */
const CASE_BIT = 0x20;
const FOLDED_OPEN = 0x7b;
const FOLDED_CLOSE = 0x7d;
/** Strings up to this long are scanned byte by byte before `indexOf` takes over. */
const SHORT_STRING_BYTES = 16;

/**
 * Whether `body` nests objects and arrays deeper than `maxDepth`. O(n), no recursion, no allocation
 * for a Buffer (a string is encoded to UTF-8 first; the router holds the body as a Buffer).
 */
export function measureJsonNesting(body: Buffer | string, maxDepth: number): JsonNesting {
  if (!Number.isInteger(maxDepth) || maxDepth < 0)
    throw new RangeError(`maxDepth must be a non-negative integer, got ${maxDepth}`);
  const bytes = typeof body === 'string' ? Buffer.from(body, 'utf8') : body;
  const length = bytes.length;
  let depth = 0;
  let deepest = 0;
  for (let index = 0; index < length; index++) {
    const byte = bytes[index] as number;
    const folded = byte | CASE_BIT;
    if (folded === FOLDED_OPEN) {
      depth++;
      if (depth > maxDepth) return { tooDeep: true, depth, offset: index };
      if (depth > deepest) deepest = depth;
    } else if (folded === FOLDED_CLOSE) {
      depth--;
    } else if (byte === QUOTE) {
      index = closingQuote(bytes, index + 1);
    }
  }
  return { tooDeep: false, depth: deepest };
}

/** Index of the quote that ends the string whose content starts at `from`; the last index if the string never ends. */
function closingQuote(bytes: Buffer, from: number): number {
  // Short strings (keys, roles) end within a few bytes: a plain loop beats the cost of an indexOf call.
  const shortEnd = Math.min(from + SHORT_STRING_BYTES, bytes.length);
  let index = from;
  for (; index < shortEnd; index++) {
    const byte = bytes[index] as number;
    if (byte === QUOTE) return index;
    if (byte === BACKSLASH) index++;
  }
  if (index >= bytes.length) return bytes.length - 1;
  let quote = bytes.indexOf(QUOTE, index);
  while (quote !== -1) {
    let backslashes = 0;
    while (quote - backslashes > from && bytes[quote - backslashes - 1] === BACKSLASH) backslashes++;
    if (backslashes % 2 === 0) return quote;
    quote = bytes.indexOf(QUOTE, quote + 1);
  }
  return bytes.length - 1;
}
