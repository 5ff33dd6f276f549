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
 * three `Buffer.indexOf` for the keys `"usage"` and `"finish_reason"`; an event is split out and looked at
 * only in a chunk that holds one of them, and only a usage-event candidate is JSON-parsed (once per
 * stream). After the usage event every chunk goes through untouched.
 */
/** What the relays remember of one backend between its streams. */
export interface FingerprintMemory {
  /** The `system_fingerprint` of its last usage event, as raw JSON (quotes included); null: none. */
  last: Buffer | null;
}

export class StreamUsageStrip {
  /** Bytes after the last complete event seen (an event still arriving). */
  private pending: Buffer | null = null;
  /** Complete terminal events waiting for the event after them. */
  private held: Buffer[] | null = null;
  /** The usage event is gone (or the engine reports usage anyway): everything else passes untouched. */
  private done = false;
  /** The removed usage event ended with a CR at the end of what had arrived: a LF right after it is its own. */
  private dropLeadingLf = false;
  /** The last byte of the complete events already looked at (0: none): a LF opening the next event belongs to a CR before it. */
  private lastByte = 0;

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
    if (this.held === null && !hasUsageObject(complete) && !hasStringValue(complete, FINISH_REASON_KEY)) {
      this.lastByte = complete[complete.length - 1] as number;
      return complete;
    }
    return this.sift(complete);
  }

  /** The upstream body ended (or failed): whatever is still here, unchanged. */
  end(): Buffer | null {
    const rest = [...(this.held ?? []), ...(this.pending === null ? [] : [this.pending])];
    this.held = null;
    this.pending = null;
    this.done = true;
    return rest.length === 0 ? null : rest.length === 1 ? (rest[0] as Buffer) : Buffer.concat(rest);
  }

  /** Complete events, one by one: the slow path, for a chunk holding a candidate. */
  private sift(complete: Buffer): Buffer | null {
    const out: Buffer[] = [];
    const boundaries = new EventBoundaries(complete);
    let at = 0;
    while (at < complete.length && !this.done) {
      const end = boundaries.endOfEventAt(at);
      const event = complete.subarray(at, end);
      const byteBefore = at === 0 ? this.lastByte : (complete[at - 1] as number);
      at = end;
      if (hasUsageObject(event)) {
        const usageEvent = usageEventOf(event);
        if (usageEvent !== null) {
          this.releaseHeld(out, usageEvent.fingerprint);
          if (this.memory !== null) this.memory.last = usageEvent.fingerprint === null ? null : Buffer.from(usageEvent.fingerprint);
        } else {
          // Usage on an event with choices: the engine reports usage by itself; nothing here is ours to take.
          this.releaseHeld(out, null);
          out.push(event);
        }
        if (usageEvent !== null && event[0] === LF && byteBefore === CR) out.push(event.subarray(0, 1));
        if (usageEvent !== null && event[event.length - 1] === CR && at === complete.length) this.dropLeadingLf = true;
        this.done = true;
      } else if (hasStringValue(event, FINISH_REASON_KEY)) {
        (this.held ??= []).push(event);
      } else {
        this.releaseHeld(out, this.memory?.last ?? null);
        out.push(event);
      }
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

  /** The held terminal events, given `fingerprint` (the raw JSON string of the usage event's) when there is one. */
  private releaseHeld(out: Buffer[], fingerprint: Buffer | null): void {
    if (this.held === null) return;
    for (const event of this.held) out.push(fingerprint === null ? event : withFingerprint(event, fingerprint));
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
const USAGE_KEY = Buffer.from('"usage"');
const CHOICES_KEY = Buffer.from('"choices"');
const FINISH_REASON_KEY = Buffer.from('"finish_reason"');
const FINGERPRINT_KEY = Buffer.from('"system_fingerprint"');
const FINGERPRINT_MEMBER = Buffer.from(',"system_fingerprint":');
const LF_LF = Buffer.from('\n\n');
const LF_CR = Buffer.from('\n\r');
const CR_CR = Buffer.from('\r\r');

/**
 * Where the complete events of `data` end (0: none is complete). Two line endings in a row end an event;
 * CRLF is one line ending, so every event end contains `\n\n`, `\n\r` or `\r\r` (a CR may be followed by
 * the LF of its CRLF: counted in when it has arrived).
 */
function endOfCompleteEvents(data: Buffer): number {
  const length = data.length;
  // vLLM writes one whole event per write: a chunk nearly always ends at a boundary.
  if (length >= 2 && data[length - 1] === LF && (data[length - 2] === LF || (length >= 4 && data[length - 2] === CR && data[length - 3] === LF && data[length - 4] === CR))) {
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

/** The event ends in a run of complete events, found with one forward search per pattern (each reused until passed). */
class EventBoundaries {
  private readonly next = [-1, -1, -1];
  private readonly patterns = [LF_LF, LF_CR, CR_CR];

  constructor(private readonly events: Buffer) {
    for (let i = 0; i < 3; i++) this.next[i] = events.indexOf(this.patterns[i] as Buffer);
  }

  /** The end (exclusive, blank line included) of the event starting at `at`; the buffer's end if none is found. */
  endOfEventAt(at: number): number {
    let first = -1;
    for (let i = 0; i < 3; i++) {
      let position = this.next[i] as number;
      if (position !== -1 && position < at) position = this.next[i] = this.events.indexOf(this.patterns[i] as Buffer, at);
      if (position !== -1 && (first === -1 || position < first)) first = position;
    }
    if (first === -1) return this.events.length;
    let end = first + 2;
    if (this.events[end - 1] === CR && this.events[end] === LF) end++;
    return end;
  }
}

/** Skips JSON whitespace from `at`. */
function skipSpace(buffer: Buffer, at: number): number {
  let position = at;
  while (position < buffer.length) {
    const byte = buffer[position];
    if (byte !== 0x20 && byte !== 0x09 && byte !== LF && byte !== CR) break;
    position++;
  }
  return position;
}

/**
 * Where the value of the first member named by `key` (quoted, e.g. `"usage"`) whose value starts with
 * `opening` begins, or -1. A quote inside a JSON string is escaped, so `key` matches a member name only.
 */
function findValue(buffer: Buffer, key: Buffer, opening: number): number {
  let from = 0;
  for (;;) {
    const at = buffer.indexOf(key, from);
    if (at === -1) return -1;
    from = at + key.length;
    const colon = skipSpace(buffer, from);
    if (buffer[colon] !== 0x3a) continue;
    const value = skipSpace(buffer, colon + 1);
    if (buffer[value] === opening) return value;
  }
}

function hasUsageObject(buffer: Buffer): boolean {
  return findValue(buffer, USAGE_KEY, 0x7b) !== -1;
}

function hasStringValue(buffer: Buffer, key: Buffer): boolean {
  return findValue(buffer, key, 0x22) !== -1;
}

/** A usage event: its data is a JSON object with `choices: []` and a `usage` object. Its fingerprint: the raw JSON string, if any. */
function usageEventOf(event: Buffer): { fingerprint: Buffer | null } | null {
  const choices = findValue(event, CHOICES_KEY, 0x5b);
  if (choices === -1 || event[skipSpace(event, choices + 1)] !== 0x5d) return null;
  let payload: unknown;
  try {
    payload = JSON.parse(dataOf(event));
  } catch {
    return null;
  }
  if (payload === null || typeof payload !== 'object') return null;
  const { choices: parsedChoices, usage, system_fingerprint: fingerprint } = payload as { choices?: unknown; usage?: unknown; system_fingerprint?: unknown };
  if (!Array.isArray(parsedChoices) || parsedChoices.length !== 0 || usage === null || typeof usage !== 'object') return null;
  return { fingerprint: typeof fingerprint === 'string' ? rawStringValue(event, FINGERPRINT_KEY) : null };
}

/** The `data:` lines of one event, joined with LF (WHATWG: one leading space of each value dropped). */
function dataOf(event: Buffer): string {
  const lines = event.toString('utf8').split(/\r\n|\r|\n/);
  const data: string[] = [];
  for (const line of lines) {
    if (line === 'data' || line.startsWith('data:')) data.push(line.slice(line.startsWith('data: ') ? 6 : 5));
  }
  return data.join('\n');
}

/** The bytes of the JSON string value of member `key`, quotes included, exactly as the engine wrote them. */
function rawStringValue(event: Buffer, key: Buffer): Buffer | null {
  const start = findValue(event, key, 0x22);
  if (start === -1) return null;
  let at = start + 1;
  for (;;) {
    at = event.indexOf(0x22, at);
    if (at === -1) return null;
    let backslashes = 0;
    while (event[at - 1 - backslashes] === 0x5c) backslashes++;
    if (backslashes % 2 === 0) return event.subarray(start, at + 1);
    at++;
  }
}

/**
 * A terminal event with `,"system_fingerprint":<fingerprint>` as its data's last member (before the
 * object's closing brace), unless it has one already or its data does not end with an object.
 */
function withFingerprint(event: Buffer, fingerprint: Buffer): Buffer {
  let close = event.length - 1;
  while (close >= 0 && (event[close] === LF || event[close] === CR)) close--;
  if (close < 0 || event[close] !== 0x7d || event.indexOf(FINGERPRINT_KEY) !== -1) return event;
  return Buffer.concat([event.subarray(0, close), FINGERPRINT_MEMBER, fingerprint, event.subarray(close)]);
}
