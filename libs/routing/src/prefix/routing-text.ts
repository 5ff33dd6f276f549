/**
 * The routing text: a deterministic rendering of everything in a request body that shapes the
 * engine's KV prefix, so equal rendered prefixes ⇔ (approximately) equal engine prefixes. We do not
 * apply the model's chat template or tokenizer (the router does not know them); instead we keep
 * every input the template reads, in the order it reads them:
 *
 *   model, cache_salt, tools (JSON), then per message: role, name, content (text parts' text,
 *   image_url parts' url, other parts as JSON), tool_calls (name, arguments), tool_call_id.
 *   Completions: model, cache_salt, then each prompt (text, or token ids as decimal text).
 *
 * Invariant (prefix stability): appending messages only appends text. Turn k's rendering is a
 * byte prefix of turn k+1's, so turn k's block hashes are a prefix of turn k+1's. Hence nothing
 * is ever written after the last message (no trailer, no message count).
 *
 * Layout: every field is `<tag> US <value> RS`; every message starts with GS. Tags are single
 * ASCII letters. Values never contain the separators: the five control characters ESC, FS, GS,
 * RS, US (U+001B–U+001F) are escaped as ESC + (char + 0x40), which is injective, so no content can
 * imitate a field or message boundary.
 *
 * JSON values (tools, other parts) are `JSON.stringify`'s text (`renderJson`). It throws on a value
 * nested deeper than the call stack allows (a RangeError at 20,000 levels), and rendering must not fail
 * on any body, however deep: such a value is written again without recursion, to the same text. The
 * router refuses deep bodies before parsing; this keeps rendering safe for every caller all the same.
 */

import { Buffer } from 'node:buffer';
import type { ChatCompletionRequest, ChatMessage, CompletionRequest, ContentPart } from '@kvroute/protocols';

/** Starts every message. */
const MESSAGE_START = '\u001d';
/** Ends every field. */
const FIELD_END = '\u001e';
/** Separates a field's tag from its value. */
const TAG_END = '\u001f';
const SEPARATOR_CHARS = /[\u001b-\u001f]/;
const SEPARATOR_CHARS_GLOBAL = /[\u001b-\u001f]/g;

/** Field tags: one letter each, never reused with another meaning (renaming one re-keys every cache). */
const Tag = {
  model: 'M',
  cacheSalt: 'S',
  tools: 'T',
  role: 'r',
  name: 'n',
  text: 'c',
  imageUrl: 'i',
  otherPart: 'x',
  toolCallName: 'f',
  toolCallArguments: 'a',
  toolCallId: 'd',
  promptText: 'p',
  promptTokens: 'k',
} as const;

export interface RenderedRoutingText {
  /**
   * The rendering, or its first `maxUnits` UTF-16 units or a little more (`RenderOptions`). One string:
   * for tests and tools. The request path renders into a byte encoder instead (`renderRoutingTextInto`),
   * since V8 allocates a string of 128 KB or more in its large-object space (~0.5 ms to build one here).
   */
  readonly text: string;
  /**
   * UTF-8 bytes of the rendering left out of `text` past `maxUnits` (0 when nothing was), so that
   * the whole text's length is known without writing it: bytes of `text` + omittedBytes. Escapes in the
   * omitted part count one byte each (they are two).
   */
  readonly omittedBytes?: number;
  /**
   * UTF-16 index in `text` where the last message starts: everything before it is what a previous
   * turn of the same conversation already sent. 0 for completions and single-message chats.
   */
  readonly contextEndOffset: number;
  /**
   * UTF-16 indices in `text` where the first turn (the first message that is not `system` or
   * `developer`: what opens a conversation after its instructions) starts and ends; absent for
   * completions and chats without one. Every later turn of the conversation renders the same text
   * up to the end, so a key taken there (a pool's cell: libs/redis-store pool-cells.ts) is one per
   * conversation.
   */
  readonly firstTurnStartOffset?: number;
  readonly firstTurnEndOffset?: number;
  /** UTF-16 indices in `text` where each message of a chat ends, ascending; absent or empty for completions. */
  readonly messageEndOffsets?: readonly number[];
}

function escapeValue(value: string): string {
  // Fast path: real content almost never holds these control characters.
  if (!SEPARATOR_CHARS.test(value)) return value;
  return value.replace(SEPARATOR_CHARS_GLOBAL, (char) => `\u001b${String.fromCharCode(char.charCodeAt(0) + 0x40)}`);
}

/** Bytes a field adds besides its value: tag, TAG_END, FIELD_END (one byte each). */
const FIELD_OVERHEAD_BYTES = 3;

/**
 * Where a rendering goes, piece by piece, in order: their concatenation is the rendering. A piece never
 * ends inside a character (a value is one piece, cut only between characters), so each can be encoded
 * on its own. `ascii` pieces are the format's own tags and separators.
 */
export interface RoutingTextSink {
  piece(text: string, ascii: boolean): void;
  /** The last message starts here (once, for a chat of two or more messages; before its first piece). */
  contextEnds(): void;
  /** The first turn (`RenderedRoutingText.firstTurnStartOffset`) starts or ends here (once each, for a chat that has one). */
  firstTurnEdge(edge: 'start' | 'end'): void;
  /** A chat's message ends here (after each message's last piece). */
  messageEnds(): void;
}

/** `${tag}${TAG_END}` per tag, made once: a field's opening costs no string building. */
const FIELD_OPENING: Readonly<Record<string, string>> = Object.fromEntries(
  Object.values(Tag).map((tag) => [tag, `${tag}${TAG_END}`]),
);

/**
 * Sends fields to a sink until the rendering holds `maxUnits` UTF-16 units; past that it only counts
 * the UTF-8 bytes it leaves out. What it writes is always a prefix of the whole rendering (escaping
 * works character by character, so the escape of a value's head is the head of its escape).
 */
class TextWriter {
  units = 0;
  omittedBytes = 0;

  constructor(
    private readonly sink: RoutingTextSink,
    private readonly maxUnits: number,
  ) {}

  /** A separator or other ASCII the format adds itself. */
  mark(ascii: string): void {
    if (this.units < this.maxUnits) this.append(ascii, true);
    else this.omittedBytes += ascii.length;
  }

  field(tag: string, value: string): void {
    const room = this.maxUnits - this.units;
    if (room <= 0) {
      this.omittedBytes += FIELD_OVERHEAD_BYTES + Buffer.byteLength(value, 'utf8');
      return;
    }
    this.append(FIELD_OPENING[tag] as string, true);
    if (value.length <= room) {
      this.append(escapeValue(value), false);
      this.append(FIELD_END, true);
      return;
    }
    // Cut the value (never between the two halves of a surrogate pair); the text is now full.
    const cut = isHighSurrogate(value.charCodeAt(room - 1)) ? room - 1 : room;
    const kept = value.slice(0, cut);
    this.append(escapeValue(kept), false);
    this.omittedBytes += Buffer.byteLength(value, 'utf8') - Buffer.byteLength(kept, 'utf8') + 1;
  }

  contextEnds(): void {
    this.sink.contextEnds();
  }

  firstTurnEdge(edge: 'start' | 'end'): void {
    this.sink.firstTurnEdge(edge);
  }

  messageEnds(): void {
    this.sink.messageEnds();
  }

  private append(piece: string, ascii: boolean): void {
    if (piece.length === 0) return;
    this.units += piece.length;
    this.sink.piece(piece, ascii);
  }
}

/** Collects a rendering as one string (`renderRoutingText`). */
class TextCollector implements RoutingTextSink {
  private readonly pieces: string[] = [];
  private units = 0;
  contextEndOffset = 0;
  firstTurnStartOffset: number | undefined;
  firstTurnEndOffset: number | undefined;
  readonly messageEndOffsets: number[] = [];

  piece(text: string): void {
    this.pieces.push(text);
    this.units += text.length;
  }

  contextEnds(): void {
    this.contextEndOffset = this.units;
  }

  firstTurnEdge(edge: 'start' | 'end'): void {
    if (edge === 'start') this.firstTurnStartOffset = this.units;
    else this.firstTurnEndOffset = this.units;
  }

  messageEnds(): void {
    this.messageEndOffsets.push(this.units);
  }

  text(): string {
    return this.pieces.join('');
  }
}

function isHighSurrogate(code: number): boolean {
  return code >= 0xd800 && code <= 0xdbff;
}

/** An object or array being written by renderJson: its entries, and how many were written. */
interface OpenJson {
  readonly value: object;
  /** Own enumerable keys for an object; null for an array. */
  readonly keys: readonly string[] | null;
  /** Next entry to write. */
  next: number;
  /** Whether an entry was written yet (an object skips undefined, function and symbol values). */
  wroteEntry: boolean;
}

/**
 * `JSON.stringify(value)`, which never throws. Native first: it is 4–10× faster than the iterative
 * writer (a 256 KB `tools` array: ~1 ms against 3–10 ms); only a value it cannot write (too deep, a
 * cycle) is written again by `renderJsonIteratively`.
 */
function renderJson(value: object): string {
  try {
    return JSON.stringify(value);
  } catch {
    return renderJsonIteratively(value);
  }
}

/**
 * `JSON.stringify(value)` without recursion: the same text for every value `JSON.parse` can produce
 * (and for `toJSON`, `undefined`, functions and symbols, which it follows), with an explicit stack
 * instead of the call stack, so any depth renders. Where `JSON.stringify` throws, it writes instead:
 * a reference back to an enclosing value (a cycle) as `null`, a BigInt as its digits.
 */
function renderJsonIteratively(root: object): string {
  const stack: OpenJson[] = [];
  const open = new Set<object>();
  let text = '';
  /** Writes a value (already through jsonValueOf), or opens it (returns true) if it is an object or array. */
  const write = (value: unknown): boolean => {
    if (typeof value !== 'object' || value === null) {
      text += jsonScalar(value) ?? 'null';
      return false;
    }
    if (open.has(value)) {
      text += 'null';
      return false;
    }
    const isArray = Array.isArray(value);
    text += isArray ? '[' : '{';
    open.add(value);
    stack.push({ value, keys: isArray ? null : Object.keys(value), next: 0, wroteEntry: false });
    return true;
  };
  write(jsonValueOf(root, ''));
  while (stack.length > 0) {
    const frame = stack[stack.length - 1] as OpenJson;
    if (frame.keys === null) {
      const array = frame.value as readonly unknown[];
      if (frame.next < array.length) {
        const index = frame.next++;
        if (index > 0) text += ',';
        write(jsonValueOf(array[index], String(index)));
        continue;
      }
    } else {
      const record = frame.value as Record<string, unknown>;
      let opened = false;
      while (frame.next < frame.keys.length && !opened) {
        const key = frame.keys[frame.next++] as string;
        const value = jsonValueOf(record[key], key);
        if (value === undefined || typeof value === 'function' || typeof value === 'symbol') continue;
        text += `${frame.wroteEntry ? ',' : ''}${JSON.stringify(key)}:`;
        frame.wroteEntry = true;
        opened = write(value);
      }
      if (opened) continue;
    }
    text += frame.keys === null ? ']' : '}';
    open.delete(frame.value);
    stack.pop();
  }
  return text;
}

/** What JSON.stringify serialises in place of `value`: the result of its `toJSON(key)`, if it has one. */
function jsonValueOf(value: unknown, key: string): unknown {
  if (typeof value === 'object' && value !== null && typeof (value as { toJSON?: unknown }).toJSON === 'function') {
    return (value as { toJSON: (key: string) => unknown }).toJSON(key);
  }
  return value;
}

/** A non-object value's JSON text; undefined for what JSON omits (undefined, functions, symbols). */
function jsonScalar(value: unknown): string | undefined {
  if (typeof value === 'bigint') return value.toString();
  return JSON.stringify(value) as string | undefined;
}

function isChatRequest(body: ChatCompletionRequest | CompletionRequest): body is ChatCompletionRequest {
  return Array.isArray((body as Partial<ChatCompletionRequest>).messages);
}

function renderContentPart(out: TextWriter, part: ContentPart): void {
  if (part.type === 'text') out.field(Tag.text, part.text ?? '');
  else if (part.type === 'image_url') out.field(Tag.imageUrl, part.image_url?.url ?? '');
  // Audio, files, …: whatever the part holds shapes the prefix; JSON keeps all of it.
  else out.field(Tag.otherPart, renderJson(part));
}

function renderMessage(out: TextWriter, message: ChatMessage): void {
  out.mark(MESSAGE_START);
  out.field(Tag.role, message.role);
  if (message.name !== undefined) out.field(Tag.name, message.name);
  const content = message.content;
  if (typeof content === 'string') {
    out.field(Tag.text, content);
  } else if (Array.isArray(content)) {
    for (const part of content) renderContentPart(out, part);
  }
  if (message.tool_calls !== undefined) {
    for (const call of message.tool_calls) {
      out.field(Tag.toolCallName, call.function.name);
      out.field(Tag.toolCallArguments, call.function.arguments ?? '');
    }
  }
  if (message.tool_call_id !== undefined) out.field(Tag.toolCallId, message.tool_call_id);
}

function renderHeader(out: TextWriter, body: ChatCompletionRequest | CompletionRequest): void {
  out.field(Tag.model, body.model);
  // A null salt is no salt to vLLM: such a request shares blocks with unsalted ones, so it renders as one.
  if (typeof body.cache_salt === 'string') out.field(Tag.cacheSalt, body.cache_salt);
}

function renderPrompt(out: TextWriter, prompt: CompletionRequest['prompt']): void {
  if (typeof prompt === 'string') return out.field(Tag.promptText, prompt);
  for (const item of prompt) {
    if (typeof item === 'string') out.field(Tag.promptText, item);
    else if (typeof item === 'number') return out.field(Tag.promptTokens, prompt.join(','));
    else out.field(Tag.promptTokens, item.join(','));
  }
}

export interface RenderOptions {
  /**
   * Write at most about this many UTF-16 units (default: all): the routed part of a huge prompt is
   * its head, so the rest is measured, not written. Every unit is at least one UTF-8 byte, so a text
   * cut here still holds at least `maxUnits` bytes.
   */
  readonly maxUnits?: number;
}

/** What a rendering into a sink measured: UTF-16 units written, UTF-8 bytes left out past `maxUnits`. */
export interface RenderedSize {
  readonly units: number;
  readonly omittedBytes: number;
}

/**
 * Renders a validated chat or completion request body into `sink`, piece by piece (see the module
 * comment for the format): the request path encodes the pieces as they come (block-hasher.ts), so no
 * string of the whole rendering is ever built.
 */
export function renderRoutingTextInto(
  body: ChatCompletionRequest | CompletionRequest,
  sink: RoutingTextSink,
  options: RenderOptions = {},
): RenderedSize {
  const out = new TextWriter(sink, options.maxUnits ?? Number.POSITIVE_INFINITY);
  renderHeader(out, body);
  if (!isChatRequest(body)) {
    renderPrompt(out, body.prompt);
  } else {
    if (body.tools !== undefined) out.field(Tag.tools, renderJson(body.tools));
    const lastIndex = body.messages.length - 1;
    let firstTurnSeen = false;
    for (const [index, message] of body.messages.entries()) {
      if (index === lastIndex && index > 0) out.contextEnds();
      const opensTurn = !firstTurnSeen && message.role !== 'system' && message.role !== 'developer';
      if (opensTurn) {
        firstTurnSeen = true;
        out.firstTurnEdge('start');
      }
      renderMessage(out, message);
      if (opensTurn) out.firstTurnEdge('end');
      out.messageEnds();
    }
  }
  return { units: out.units, omittedBytes: out.omittedBytes };
}

/** Renders a validated chat or completion request body as one string; see the module comment for the format. */
export function renderRoutingText(
  body: ChatCompletionRequest | CompletionRequest,
  options: RenderOptions = {},
): RenderedRoutingText {
  const collector = new TextCollector();
  const { omittedBytes } = renderRoutingTextInto(body, collector, options);
  const { contextEndOffset, firstTurnStartOffset, firstTurnEndOffset, messageEndOffsets } = collector;
  return {
    text: collector.text(),
    contextEndOffset,
    messageEndOffsets,
    omittedBytes,
    ...(firstTurnStartOffset === undefined || firstTurnEndOffset === undefined
      ? {}
      : { firstTurnStartOffset, firstTurnEndOffset }),
  };
}
