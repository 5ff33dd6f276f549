import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { MOONCAKE_BLOCK_TOKENS, mooncakeBlockText, parseAzure, parseAzureTimestamp, parseMooncake } from './traces';

/** The heads of the real traces, vendored in the checkout (test-data/README.md: sources, licenses). */
const DATA = fileURLToPath(new URL('../../../test-data', import.meta.url));
/** The first `n` lines of a vendored trace head (`path`: the trace's own name; the file is `….head.<ext>`). */
function head(path: string, n: number): string {
  const file = path.replace(/\.(jsonl|csv)$/, '.head.$1');
  const lines = readFileSync(`${DATA}/${file}`, 'utf8').split('\n');
  if (lines.filter((line) => line !== '').length < n) throw new Error(`${file} has fewer than ${n} lines`);
  return lines.slice(0, n).join('\n');
}

describe('mooncake trace', () => {
  const text = head('mooncake/synthetic_trace.jsonl', 50);
  const records = text
    .split('\n')
    .map(
      (line) =>
        JSON.parse(line) as { timestamp: number; input_length: number; output_length: number; hash_ids: number[] },
    );

  it('turns each record into a completion at its timestamp with input_length tokens and output_length max_tokens', () => {
    const events = parseMooncake(text);
    expect(events).toHaveLength(50);
    events.forEach((event, i) => {
      const record = records[i];
      expect(event.atMs).toBe(record?.timestamp);
      expect(event.prompt.length).toBe((record?.input_length ?? 0) * 4);
      expect(event.maxTokens).toBe(Math.max(1, record?.output_length ?? 0));
    });
    expect(events.at(-1)?.atMs).toBe(14514);
  });

  it('makes equal hash ids identical 2 KB blocks: lines 43 and 50 share exactly their 57 common blocks', () => {
    const events = parseMooncake(text);
    const a = events[42]?.prompt ?? '';
    const b = events[49]?.prompt ?? '';
    const shared = 57 * MOONCAKE_BLOCK_TOKENS * 4;
    expect(a.slice(0, shared)).toBe(b.slice(0, shared));
    expect(a.slice(shared, shared + 64)).not.toBe(b.slice(shared, shared + 64));
    expect(a.slice(0, 2048)).toBe(mooncakeBlockText(records[42]?.hash_ids[0] ?? -1));
    // Lines without common ids share nothing.
    expect(events[0]?.prompt.slice(0, 64)).not.toBe(events[1]?.prompt.slice(0, 64));
    expect(mooncakeBlockText(5)).toHaveLength(2048);
    expect(mooncakeBlockText(5, 1)).not.toBe(mooncakeBlockText(5));
  });

  it('scales time by the time-scale and the rate multiplier, and stops at the limit', () => {
    const events = parseMooncake(text, { timeScale: 2, rateMultiplier: 5, limit: 10 });
    expect(events).toHaveLength(10);
    events.forEach((event, i) => expect(event.atMs).toBeCloseTo((records[i]?.timestamp ?? 0) / 10, 6));
    expect(() => parseMooncake(text, { rateMultiplier: 0 })).toThrow(RangeError);
  });

  it('rejects malformed records with their line number', () => {
    expect(() => parseMooncake('{"timestamp": 0, "input_length": 1000, "output_length": 1, "hash_ids": [1]}')).toThrow(
      /line 1: 1 hash ids for 1000 tokens/,
    );
    expect(() => parseMooncake('\n{"timestamp": 0}')).toThrow(/line 2/);
  });
});

describe('azure trace', () => {
  const text = head('azure-llm-2023/AzureLLMInferenceTrace_conv.csv', 51);

  it('parses the 7-digit fractional timestamps', () => {
    expect(
      parseAzureTimestamp('2023-11-16 18:15:50.9951690') - parseAzureTimestamp('2023-11-16 18:15:46.6805900'),
    ).toBeCloseTo(4314.579, 3);
    expect(() => parseAzureTimestamp('yesterday')).toThrow(/bad Azure timestamp/);
  });

  it('turns each row into a fresh completion at its offset from the first row, with its lengths', () => {
    const rows = text
      .split('\n')
      .slice(1)
      .map((line) => line.split(','));
    const events = parseAzure(text);
    expect(events).toHaveLength(50);
    expect(events[0]?.atMs).toBe(0);
    expect(events[1]?.atMs).toBeCloseTo(4314.579, 3);
    events.forEach((event, i) => {
      expect(event.prompt.length).toBe(Number(rows[i]?.[1]) * 4);
      expect(event.maxTokens).toBe(Math.max(1, Number(rows[i]?.[2])));
      if (i > 0) expect(event.atMs).toBeGreaterThanOrEqual(events[i - 1]?.atMs ?? 0);
    });
    // No prefix information: no two prompts share even their first words.
    expect(new Set(events.map((event) => event.prompt.slice(0, 32))).size).toBe(50);
    const faster = parseAzure(text, { rateMultiplier: 2, limit: 5 });
    expect(faster).toHaveLength(5);
    expect(faster[1]?.atMs).toBeCloseTo(4314.579 / 2, 3);
    expect(faster[1]?.prompt).toBe(events[1]?.prompt);
  });

  it('reads the code trace too and rejects a wrong header', () => {
    const code = parseAzure(head('azure-llm-2023/AzureLLMInferenceTrace_code.csv', 51));
    expect(code).toHaveLength(50);
    expect(code[0]?.prompt.length).toBe(4808 * 4);
    expect(() => parseAzure('a,b,c\n1,2,3')).toThrow(/header/);
  });
});
