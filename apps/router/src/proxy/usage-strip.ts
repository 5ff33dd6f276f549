import { usageFromTail, type ResponseUsage } from '@kvroute/protocols';

/** What the relays remember of one backend between its streams. */
export interface FingerprintMemory {
  /** The `system_fingerprint` of its last usage event, as raw JSON (quotes included); null: none. */
  last: Buffer | null;
}

/**
 * Takes out of an SSE stream what `stream_options.include_usage` put into it, for a stream whose client
 * did not ask for usage but the router did on its behalf (pipeline/parse.ts: the learn stage needs the
 * engine's `cached_tokens`). The client gets the bytes the engine would have sent it without the option.
 *
 * What the option changes, as vLLM does it (chat_completion/serving.py `chat_completion_stream_generator`,
 * completion/serving.py `completion_stream_generator`; chunks are serialised with `exclude_unset`, so no
 * other chunk gains a key):
 * 1. one more event right before `data: [DONE]`: `choices: []` and `usage` (the **usage event**). It is
 *    removed, whole, blank line included.
 * 2. the `system_fingerprint` that each terminal chunk (one whose `finish_reason` is a string) carries
 *    without the option moves to the usage event (vLLM ≥ #40537, `--fingerprint-mode` other than `none`).
 *    A run of terminal events is therefore held until the event after it: the usage event (vLLM sends it
 *    in the same generator step) gives the fingerprint back to them, inserted as their last key (its
 *    place in vLLM's field order on a terminal chunk). Another event after them (with `n` > 1, a choice
 *    that finished before the others) releases them at once, stamped with the fingerprint this backend's
 *    last usage event carried (`FingerprintMemory`: a vLLM server's is fixed for its lifetime), or
 *    unchanged when none was seen yet: the one case where the client's bytes can differ.
 * An engine that reports usage on its own (an earlier event carries a `usage` object: vLLM's
 * `--enable-force-include-usage` or `continuous_usage_stats`) would send the usage event without the
 * option too: the stream is then passed on untouched from there.
 *
 * Framing follows the WHATWG rules: an event ends with a blank line (`\n\n`, `\r\n\r\n`, `\r\r`, or a
 * mix), may span any number of chunks, and a chunk may hold many events. Only the incomplete event at
 * the end of a chunk is held back (a client cannot dispatch it before its blank line anyway); the
 * complete ones go on at once, as they came.
 *
 * Cost per chunk on a stream of plain events: a look at its last bytes (is it at an event boundary?) and
 * one regular-expression test for a `usage` object or a string `finish_reason` over its bytes read as
 * latin1 (one byte, one character: offsets are byte offsets; a binding call such as `Buffer.indexOf`
 * costs more than that scan on a chunk this size). Only a chunk that has a match is split into events,
 * around the matches; only a usage-event candidate is JSON-parsed (once per stream). After the usage
 * event every chunk goes through untouched.
 */
export class StreamUsageStrip {
  /** Bytes after the last complete event seen (an event still arriving). */
  private pending: Buffer | null = null;
  /** Complete terminal events waiting for the event after them. */
  private held: Buffer[] | null = null;
  /** Per held event: it carries a `system_fingerprint` of its own (never given another). */
  private heldStamped: boolean[] = [];
  /** The usage event is gone (or the engine reports usage anyway): everything else passes untouched. */
  private done = false;
  /** The removed usage event ended with a CR at the end of what had arrived: a LF right after it is its own. */
  private dropLeadingLf = false;
  /** The last byte of the complete events already looked at (0: none): a LF opening the next event belongs to a CR before it. */
  private lastByte = 0;
  /**
   * The usage event's usage, once it was taken out (null: not seen, or not a usable one): the learn stage reads it
   * from here instead of parsing the response's tail again.
   */
  usage: ResponseUsage | null = null;

  constructor(private readonly memory: FingerprintMemory | null = null) {}

  /** One upstream chunk in; what the client gets now (null: nothing yet). */
  feed(chunk: Buffer): Buffer | null {
    if (this.dropLeadingLf) {
      this.dropLeadingLf = false;
      if (chunk[0] === LF) chunk = chunk.subarray(1);
      if (chunk.length === 0) return null;
    }
    if (this.done) return chunk;
    const data = this.pending === null ? chunk : Buffer.concat([this.pending, chunk]);
    const completeEnd = endOfCompleteEvents(data);
    if (completeEnd < data.length) {
      this.pending = data.subarray(completeEnd);
      if (this.pending.length > MAX_PENDING_BYTES) return this.giveUp(data);
    } else {
      this.pending = null;
    }
    if (completeEnd === 0) return null;
    const complete = completeEnd === data.length ? data : data.subarray(0, completeEnd);
    const text = complete.toString('latin1');
    if (this.held === null && !CANDIDATE.test(text)) {
      this.lastByte = complete[complete.length - 1] as number;
      return complete;
    }
    return this.sift(complete, text);
  }

  /** The upstream body ended (or failed): whatever is still here, unchanged. */
  end(): Buffer | null {
    const rest = [...(this.held ?? []), ...(this.pending === null ? [] : [this.pending])];
    this.held = null;
    this.pending = null;
    this.done = true;
    return rest.length === 0 ? null : rest.length === 1 ? (rest[0] as Buffer) : Buffer.concat(rest);
  }

  /**
   * The slow path, for complete events holding a candidate (`text`: their bytes as latin1): runs of
   * events without one are passed on whole; an event with one, or the event after held ones, is cut out
   * and looked at.
   */
  private sift(complete: Buffer, text: string): Buffer | null {
    const out: Buffer[] = [];
    // Without a CR (vLLM's framing) an event can only end with LF LF: one search instead of three.
    const patterns = text.includes('\r') ? ANY_BLANK_LINE : LF_BLANK_LINE;
    let at = 0;
    while (at < complete.length && !this.done) {
      let start = at;
      if (this.held === null) {
        CANDIDATE_FROM.lastIndex = at;
        const match = CANDIDATE_FROM.exec(text);
        if (match === null) {
          out.push(complete.subarray(at));
          at = complete.length;
          break;
        }
        start = startOfEventAt(text, match.index, at, patterns);
        if (start > at) out.push(complete.subarray(at, start));
      }
      const end = endOfEventAt(text, start, patterns);
      this.look(
        complete.subarray(start, end),
        text.slice(start, end),
        start === 0 ? this.lastByte : (complete[start - 1] as number),
        end === complete.length,
        out,
      );
      at = end;
    }
    if (this.done) {
      if (at < complete.length) out.push(this.dropLeadingLfOf(complete.subarray(at)));
      if (this.pending !== null) out.push(this.dropLeadingLfOf(this.pending));
      this.pending = null;
    }
    this.lastByte = complete[complete.length - 1] as number;
    const written = out.filter((part) => part.length > 0);
    return written.length === 0 ? null : written.length === 1 ? (written[0] as Buffer) : Buffer.concat(written);
  }

  /** One complete event (`text`: as latin1) that holds a candidate or follows held ones. */
  private look(event: Buffer, text: string, byteBefore: number, isLast: boolean, out: Buffer[]): void {
    if (USAGE_OBJECT.test(text)) {
      const usageEvent = usageEventOf(event, text);
      if (usageEvent === null) {
        // Usage on an event with choices: the engine reports usage by itself; nothing here is ours to take.
        this.releaseHeld(out, null);
        out.push(event);
      } else {
        // The event is the usage object and little else: the tail reader's two regexes read it.
        this.usage = usageFromTail(text);
        this.releaseHeld(out, usageEvent.fingerprint);
        if (this.memory !== null) this.remember(this.memory, usageEvent.fingerprint);
        // A LF opening the event ends the CR before it (the previous event's); a CR closing it may be followed by its LF.
        if (event[0] === LF && byteBefore === CR) out.push(event.subarray(0, 1));
        if (event[event.length - 1] === CR && isLast) this.dropLeadingLf = true;
      }
      this.done = true;
    } else if (TERMINAL.test(text)) {
      if (this.held === null) {
        this.held = [];
        this.heldStamped = [];
      }
      this.held.push(event);
      this.heldStamped.push(text.includes(FINGERPRINT_KEY));
    } else {
      this.releaseHeld(out, this.memory?.last ?? null);
      out.push(event);
    }
  }

  /** Keeps the fingerprint for the backend's next streams (a copy: not the chunk it came in). */
  private remember(memory: FingerprintMemory, fingerprint: Buffer | null): void {
    if (fingerprint === null) memory.last = null;
    else if (memory.last === null || !memory.last.equals(fingerprint)) memory.last = Buffer.from(fingerprint);
  }

  /** The held terminal events, given `fingerprint` (the raw JSON string of the usage event's) when there is one. */
  private releaseHeld(out: Buffer[], fingerprint: Buffer | null): void {
    if (this.held === null) return;
    this.held.forEach((event, index) =>
      out.push(fingerprint === null || this.heldStamped[index] ? event : withFingerprint(event, fingerprint)),
    );
    this.held = null;
  }

  private dropLeadingLfOf(rest: Buffer): Buffer {
    if (!this.dropLeadingLf || rest.length === 0) return rest;
    this.dropLeadingLf = false;
    return rest[0] === LF ? rest.subarray(1) : rest;
  }

  /** An event larger than any usage event could be: stop looking, pass everything on. */
  private giveUp(data: Buffer): Buffer {
    const held = this.held ?? [];
    this.held = null;
    this.pending = null;
    this.done = true;
    return held.length === 0 ? data : Buffer.concat([...held, data]);
  }
}

const LF = 0x0a;
const CR = 0x0d;
/** An incomplete event larger than this is not a usage event (~300 B): the strip gives up rather than buffer it. */
const MAX_PENDING_BYTES = 1024 * 1024;
/**
 * A member `usage` whose value is an object, or `finish_reason` whose value is a string. A quote inside
 * a JSON string is escaped, so a quoted key matches a member name, never text. (Whitespace as JSON's.)
 */
const USAGE_OBJECT = /"usage"[ \t\n\r]*:[ \t\n\r]*\{/;
const TERMINAL = /"finish_reason"[ \t\n\r]*:[ \t\n\r]*"/;
const CANDIDATE = /"usage"[ \t\n\r]*:[ \t\n\r]*\{|"finish_reason"[ \t\n\r]*:[ \t\n\r]*"/;
const CANDIDATE_FROM = new RegExp(CANDIDATE.source, 'g');
const EMPTY_CHOICES = /"choices"[ \t\n\r]*:[ \t\n\r]*\[[ \t\n\r]*\]/;
const FINGERPRINT_VALUE = /"system_fingerprint"[ \t\n\r]*:[ \t\n\r]*"/;
const FINGERPRINT_KEY = '"system_fingerprint"';
const FINGERPRINT_MEMBER = Buffer.from(`,${FINGERPRINT_KEY}:`);
const LF_LF = Buffer.from('\n\n');
const LF_CR = Buffer.from('\n\r');
const CR_CR = Buffer.from('\r\r');

/**
 * Where the complete events of `data` end (0: none is complete). Two line endings in a row end an event;
 * CRLF is one line ending, so every event end contains `\n\n`, `\n\r` or `\r\r` (a CR may be followed by
 * the LF of its CRLF: counted in when it has arrived).
 */
export function endOfCompleteEvents(data: Buffer): number {
  const length = data.length;
  // vLLM writes one whole event per write: a chunk nearly always ends at a boundary.
  if (
    length >= 2 &&
    data[length - 1] === LF &&
    (data[length - 2] === LF ||
      (length >= 4 && data[length - 2] === CR && data[length - 3] === LF && data[length - 4] === CR))
  ) {
    return length;
  }
  let end = 0;
  for (const pattern of [LF_LF, LF_CR, CR_CR]) {
    const at = data.lastIndexOf(pattern);
    if (at !== -1 && at + 2 > end) end = at + 2;
  }
  if (end > 0 && data[end - 1] === CR && data[end] === LF) end++;
  return end;
}

/** The two-character sequences that end an event (every blank line contains one of them). */
const ANY_BLANK_LINE = ['\n\n', '\n\r', '\r\r'] as const;
const LF_BLANK_LINE = ['\n\n'] as const;

/** The end (exclusive, blank line included) of the event starting at `at` in complete events `text`. */
function endOfEventAt(text: string, at: number, patterns: readonly string[]): number {
  let first = -1;
  for (const pattern of patterns) {
    const position = text.indexOf(pattern, at);
    if (position !== -1 && (first === -1 || position < first)) first = position;
  }
  if (first === -1) return text.length;
  let end = first + 2;
  if (text.charCodeAt(end - 1) === CR && text.charCodeAt(end) === LF) end++;
  return end;
}

/** The start of the event that holds offset `position` (not before `floor`, an event start). */
function startOfEventAt(text: string, position: number, floor: number, patterns: readonly string[]): number {
  let start = floor;
  for (const pattern of patterns) {
    const found = text.lastIndexOf(pattern, position - 2);
    if (found === -1 || found + 2 <= start) continue;
    let end = found + 2;
    if (text.charCodeAt(end - 1) === CR && text.charCodeAt(end) === LF) end++;
    if (end <= position && end > start) start = end;
  }
  return start;
}

/**
 * A usage event: its data is one JSON object with `choices: []` and a `usage` object (the caller matched
 * USAGE_OBJECT). Its fingerprint: the raw JSON string, if any. Read without `JSON.parse` (it cost more
 * than the rest of the strip): a quote inside a JSON string is escaped, so the quoted-key patterns match
 * member names only, and an event whose data is not one object (`{` first, `}` last) is not taken.
 */
function usageEventOf(event: Buffer, text: string): { fingerprint: Buffer | null } | null {
  if (!EMPTY_CHOICES.test(text) || !ONE_OBJECT_DATA.test(text)) return null;
  return { fingerprint: rawFingerprint(event, text) };
}

/** One event whose `data:` lines hold one object: `{` opens the first value, `}` closes the last (line ends around: a CRLF split by the cut). */
const ONE_OBJECT_DATA = /^[\r\n]*data:[ \t]*\{[^]*\}[ \t]*[\r\n]*$/;

/** The bytes of the event's `system_fingerprint` string, quotes included, exactly as the engine wrote them. */
function rawFingerprint(event: Buffer, text: string): Buffer | null {
  const match = FINGERPRINT_VALUE.exec(text);
  if (match === null) return null;
  const start = match.index + match[0].length - 1;
  let at = start + 1;
  for (;;) {
    at = text.indexOf('"', at);
    if (at === -1) return null;
    let backslashes = 0;
    while (text.charCodeAt(at - 1 - backslashes) === 0x5c) backslashes++;
    if (backslashes % 2 === 0) return event.subarray(start, at + 1);
    at++;
  }
}

/**
 * A terminal event (without a fingerprint) with `,"system_fingerprint":<fingerprint>` as its data's last
 * member (before the object's closing brace), unless its data does not end with an object.
 */
function withFingerprint(event: Buffer, fingerprint: Buffer): Buffer {
  let close = event.length - 1;
  while (close >= 0 && (event[close] === LF || event[close] === CR)) close--;
  if (close < 0 || event[close] !== 0x7d) return event;
  return Buffer.concat([event.subarray(0, close), FINGERPRINT_MEMBER, fingerprint, event.subarray(close)]);
}
