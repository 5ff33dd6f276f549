/**
 * Public trace formats → request events (pure: the text comes from `read.ts`).
 *
 * - Mooncake JSONL (`timestamp` ms, `input_length`, `output_length`, `hash_ids` of 512-token blocks):
 *   each hash id becomes one deterministic 512-token block of word text (2,048 bytes), so equal ids give
 *   byte-identical blocks and the trace's shared prefixes are real; the last block is cut to
 *   `input_length − 512·(n − 1)` tokens.
 * - Azure LLM inference CSV (`TIMESTAMP,ContextTokens,GeneratedTokens`): arrivals and lengths only;
 *   every prompt is fresh text of its own (the trace has no prefix information).
 *
 * Offsets are relative to the first record, divided by `timeScale` (the sims' time-scale: simulated
 * time runs that many times faster than wall time) and by `rateMultiplier` (2 = twice the arrival rate).
 */
import type { CompletionEvent } from './events';
import { mixSeed, wordText } from './text';

export const MOONCAKE_BLOCK_TOKENS = 512;

export interface TraceOptions {
  readonly timeScale?: number;
  readonly rateMultiplier?: number;
  /** Only the first `limit` records. */
  readonly limit?: number;
  /** Varies the texts (Mooncake blocks, Azure prompts); equal seeds give equal texts. Default 0. */
  readonly seed?: number;
}

function divisor(options: TraceOptions): number {
  const timeScale = options.timeScale ?? 1;
  const rateMultiplier = options.rateMultiplier ?? 1;
  if (!(timeScale > 0) || !(rateMultiplier > 0)) throw new RangeError('timeScale and rateMultiplier must be > 0');
  return timeScale * rateMultiplier;
}

const round3 = (ms: number): number => Math.round(ms * 1000) / 1000;

/** The text of Mooncake block `hashId` (512 word tokens, 2,048 bytes). */
export function mooncakeBlockText(hashId: number, seed = 0): string {
  return wordText(MOONCAKE_BLOCK_TOKENS, mixSeed(seed, 20, hashId));
}

export interface MooncakeRecord {
  readonly timestamp: number;
  readonly input_length: number;
  readonly output_length: number;
  readonly hash_ids: readonly number[];
}

export function parseMooncakeRecord(line: string, lineNumber: number): MooncakeRecord {
  const raw = JSON.parse(line) as Partial<MooncakeRecord>;
  const ok =
    typeof raw.timestamp === 'number' &&
    typeof raw.input_length === 'number' &&
    raw.input_length >= 1 &&
    typeof raw.output_length === 'number' &&
    Array.isArray(raw.hash_ids) &&
    raw.hash_ids.length >= 1 &&
    raw.hash_ids.every((id) => Number.isInteger(id));
  if (!ok)
    throw new Error(
      `mooncake line ${lineNumber}: expected {timestamp, input_length ≥ 1, output_length, hash_ids: [int, …]}`,
    );
  const record = raw as MooncakeRecord;
  if (record.hash_ids.length !== Math.ceil(record.input_length / MOONCAKE_BLOCK_TOKENS)) {
    throw new Error(
      `mooncake line ${lineNumber}: ${record.hash_ids.length} hash ids for ${record.input_length} tokens (expected ceil(input_length / 512))`,
    );
  }
  return record;
}

export function parseMooncake(text: string, options: TraceOptions = {}): CompletionEvent[] {
  const scale = divisor(options);
  const seed = options.seed ?? 0;
  const blocks = new Map<number, string>();
  const block = (id: number): string => {
    let value = blocks.get(id);
    if (value === undefined) blocks.set(id, (value = mooncakeBlockText(id, seed)));
    return value;
  };
  const events: CompletionEvent[] = [];
  let first: number | undefined;
  const lines = text.split('\n');
  for (let index = 0; index < lines.length && events.length < (options.limit ?? Infinity); index++) {
    const line = lines[index] as string;
    if (line.trim() === '') continue;
    const record = parseMooncakeRecord(line, index + 1);
    first ??= record.timestamp;
    const ids = record.hash_ids;
    const lastTokens = record.input_length - MOONCAKE_BLOCK_TOKENS * (ids.length - 1);
    let prompt = '';
    ids.forEach((id, position) => {
      prompt += position === ids.length - 1 ? block(id).slice(0, lastTokens * 4) : block(id);
    });
    events.push({
      id: `m${index + 1}`,
      atMs: round3((record.timestamp - first) / scale),
      kind: 'completion',
      maxTokens: Math.max(1, record.output_length),
      prompt,
    });
  }
  return events;
}

/** `2023-11-16 18:15:46.6805900` (UTC, 7 fractional digits) → epoch ms with fraction. */
export function parseAzureTimestamp(value: string): number {
  const match = /^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?$/.exec(value.trim());
  if (match === null) throw new Error(`bad Azure timestamp ${JSON.stringify(value)}`);
  const [, y, mo, d, h, mi, s, fraction = '0'] = match.map((part) => part ?? '0') as [
    string,
    string,
    string,
    string,
    string,
    string,
    string,
    string?,
  ];
  return (
    Date.UTC(Number(y), Number(mo) - 1, Number(d), Number(h), Number(mi), Number(s)) + Number(`0.${fraction}`) * 1000
  );
}

export function parseAzure(text: string, options: TraceOptions = {}): CompletionEvent[] {
  const scale = divisor(options);
  const seed = options.seed ?? 0;
  const lines = text.split('\n');
  if (lines[0]?.trim() !== 'TIMESTAMP,ContextTokens,GeneratedTokens')
    throw new Error('azure trace: expected header TIMESTAMP,ContextTokens,GeneratedTokens');
  const events: CompletionEvent[] = [];
  let first: number | undefined;
  for (let index = 1; index < lines.length && events.length < (options.limit ?? Infinity); index++) {
    const line = (lines[index] as string).trim();
    if (line === '') continue;
    const [stamp = '', context = '', generated = ''] = line.split(',');
    const contextTokens = Number(context);
    const generatedTokens = Number(generated);
    if (!Number.isInteger(contextTokens) || contextTokens < 1 || !Number.isInteger(generatedTokens))
      throw new Error(`azure line ${index + 1}: bad token counts`);
    const at = parseAzureTimestamp(stamp);
    first ??= at;
    events.push({
      id: `a${index + 1}`,
      atMs: round3((at - first) / scale),
      kind: 'completion',
      maxTokens: Math.max(1, generatedTokens),
      prompt: wordText(contextTokens, mixSeed(seed, 30, index)),
    });
  }
  return events;
}
