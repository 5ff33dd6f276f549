import { endOfCompleteEvents } from './usage-strip';

/**
 * Puts a disaggregated request's true prefix-cache hit into the decode leg's usage (issue 32): every
 * `"cached_tokens": <n>` of a successful answer gets `cachedTokens`, the prefill engine's own count.
 *
 * Why: the decode engine counts the blocks it pulled from the prefill engine as cached (vLLM's scheduler sets
 * `num_cached_tokens` from local and external hits alike), so its `cached_tokens` is nearly the whole prompt whatever
 * the prefill engine found. What the fleet did not compute is what the prefill engine found in its cache; llm-d's
 * sidecar rewrites the decode usage the same way. A usage without `cached_tokens` (the engine's
 * `--enable-prompt-tokens-details` off) is left as it is: there is nothing to correct.
 *
 * In chat and text-completion answers `cached_tokens` is a key of `usage.prompt_tokens_details` only (a quote in a
 * JSON string is escaped, so the quoted key never matches text). The rewrite is applied before the usage strip and the
 * tail the learn stage reads: both see the merged usage.
 *
 * - Event stream: complete events go on at once, rewritten where they hold the key; only an incomplete event at a
 *   chunk's end waits for its end (vLLM writes whole events: in practice nothing waits).
 * - JSON body: all but its last `CARRY_BYTES` go on at once; those wait for the next chunk, so a key or number cut by
 *   a chunk boundary is rewritten whole. A client of a non-streaming answer reads it whole anyway.
 */
export class CachedTokensRewrite {
  /** Bytes not yet passed on: an incomplete event, or a JSON body's last bytes. */
  private held: Buffer | null = null;
  private readonly replacement: string;

  constructor(
    cachedTokens: number,
    private readonly isSse: boolean,
  ) {
    this.replacement = `"cached_tokens":${cachedTokens}`;
  }

  /** One upstream chunk in; what goes on now (null: nothing yet). */
  feed(chunk: Buffer): Buffer | null {
    const data = this.held === null ? chunk : Buffer.concat([this.held, chunk]);
    const end = this.isSse ? endOfCompleteEvents(data) : jsonPassableEnd(data);
    this.held = end < data.length ? data.subarray(end) : null;
    const passed = end === 0 ? null : this.rewritten(end === data.length ? data : data.subarray(0, end));
    if (this.held === null || this.held.length <= MAX_HELD_BYTES) return passed;
    // An event still arriving past any usage event's size: it goes on as it is.
    const rest = this.held;
    this.held = null;
    return passed === null ? rest : Buffer.concat([passed, rest]);
  }

  /** The body ended: whatever is held, rewritten. */
  end(): Buffer | null {
    const rest = this.held;
    this.held = null;
    return rest === null ? null : this.rewritten(rest);
  }

  private rewritten(bytes: Buffer): Buffer {
    const text = bytes.toString('latin1');
    if (!CACHED_TOKENS.test(text)) return bytes;
    CACHED_TOKENS_ALL.lastIndex = 0;
    return Buffer.from(text.replace(CACHED_TOKENS_ALL, this.replacement), 'latin1');
  }
}

const KEY = '"cached_tokens"';
/** A member `cached_tokens` with a number value (JSON whitespace around the colon). */
const CACHED_TOKENS = /"cached_tokens"[ \t\n\r]*:[ \t\n\r]*\d+/;
const CACHED_TOKENS_ALL = new RegExp(CACHED_TOKENS.source, 'g');
/** A JSON body's bytes held back: more than a key, its colon, spacing and any number (~40 B). */
const CARRY_BYTES = 64;
/** Longest member matched: key, spacing, colon and a number's digits. */
const LONGEST_MATCH_BYTES = 48;
/** An event still arriving past this is no usage event (~300 B): it is passed on as it is. */
const MAX_HELD_BYTES = 1024 * 1024;

/**
 * Where a JSON body's passable bytes end: `CARRY_BYTES` before its end, moved back to the start of a key that begins
 * before that point but may end after it (its number may go on in the next chunk).
 */
function jsonPassableEnd(data: Buffer): number {
  const end = data.length - CARRY_BYTES;
  if (end <= 0) return 0;
  const from = Math.max(0, end - LONGEST_MATCH_BYTES);
  const key = data.toString('latin1', from, end + KEY.length).lastIndexOf(KEY);
  return key !== -1 && from + key < end ? from + key : end;
}
