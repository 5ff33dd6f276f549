import type { ChatCompletionRequest, ChatMessage } from '@kvroute/protocols';
import { describe, expect, it } from 'vitest';
import { buildRoutingRequest, DEFAULT_MAX_ROUTED_BLOCKS } from './routing-request';

const SYSTEM_PROMPT = 'You are a meticulous assistant. '.repeat(20);

function conversation(turns: number): ChatCompletionRequest {
  const messages: ChatMessage[] = [{ role: 'system', content: SYSTEM_PROMPT }];
  for (let turn = 0; turn < turns; turn++) {
    if (turn > 0)
      messages.push({ role: 'assistant', content: `Here is answer number ${turn}, with some detail. `.repeat(3) });
    messages.push({ role: 'user', content: `Follow-up question ${turn}: what about the next step? ` });
  }
  return { model: 'llama-3-8b', messages, user: 'user-7' };
}

describe('buildRoutingRequest', () => {
  it("makes turn k's block hashes a prefix of turn k+1's", () => {
    let previous = buildRoutingRequest(conversation(1), { blockSizeBytes: 64 });
    for (let turns = 2; turns <= 6; turns++) {
      const next = buildRoutingRequest(conversation(turns), { blockSizeBytes: 64 });
      expect(next.blockHashes.slice(0, previous.blockHashes.length)).toEqual(previous.blockHashes);
      expect(next.blockHashes.length).toBeGreaterThan(previous.blockHashes.length);
      expect(next.headHash).toBe(previous.headHash);
      previous = next;
    }
  });

  it('counts as context the blocks a previous turn already sent', () => {
    const previousTurn = buildRoutingRequest(conversation(3), { blockSizeBytes: 64 });
    const asked = conversation(3);
    const next = buildRoutingRequest(
      {
        ...asked,
        messages: [...asked.messages, { role: 'assistant', content: 'ok' }, { role: 'user', content: 'and then?' }],
      },
      { blockSizeBytes: 64 },
    );
    // The context ends where the new user message starts, after the previous turn's text and the reply.
    expect(next.contextBlocks).toBeGreaterThanOrEqual(previousTurn.blockHashes.length);
    expect(next.contextBlocks).toBeLessThanOrEqual(next.blockHashes.length);
    const single: ChatCompletionRequest = { model: 'llama-3-8b', messages: [{ role: 'user', content: SYSTEM_PROMPT }] };
    expect(buildRoutingRequest(single, { blockSizeBytes: 64 }).contextBlocks).toBe(0);
  });

  it("names as boundary blocks where the previous turn's blocks and the system prompt's end, on both sides", () => {
    const system = buildRoutingRequest(
      { ...conversation(1), messages: conversation(1).messages.slice(0, 1) },
      {
        blockSizeBytes: 64,
      },
    );
    for (let turns = 2; turns <= 8; turns++) {
      const previous = buildRoutingRequest(conversation(turns - 1), { blockSizeBytes: 64 });
      const next = buildRoutingRequest(conversation(turns), { blockSizeBytes: 64 });
      const blocks = next.boundaryBlocks ?? [];
      // A backend that served the previous turn holds its blocks: its match stops after the last of them.
      expect(blocks).toContain(previous.blockHashes.length);
      expect(blocks).toContain(previous.blockHashes.length + 1);
      // Every conversation with this system prompt shares its blocks.
      expect(blocks).toContain(system.blockHashes.length);
      expect(blocks).toEqual([...new Set(blocks)].sort((a, b) => a - b));
      expect(blocks.every((block) => block >= 1 && block <= next.blockHashes.length)).toBe(true);
      // The first message's end and the last four messages', two blocks each at most.
      expect(blocks.length).toBeLessThanOrEqual(10);
    }
    const completion = buildRoutingRequest({ model: 'm', prompt: SYSTEM_PROMPT }, { blockSizeBytes: 64 });
    expect(completion.boundaryBlocks).toEqual([]);
  });

  it.each<[string, string | null | undefined, string | undefined, string | null]>([
    ['the header over the body user', 'sess-1', 'user-7', 'sess-1'],
    ['the body user without a header', undefined, 'user-7', 'user-7'],
    ['the body user when the header is empty', '', 'user-7', 'user-7'],
    ['no key when neither is given', null, undefined, null],
  ])('takes as session key %s', (_label, header, user, expected) => {
    const body = { ...conversation(1), user };
    expect(buildRoutingRequest(body, { blockSizeBytes: 64, sessionKey: header }).sessionKey).toBe(expected);
  });

  it.each<[string, string | null, unknown, string | undefined, string | null]>([
    ['the header over prompt_cache_key', 'sess-1', 'cache-key', 'user-7', 'sess-1'],
    ['prompt_cache_key over the body user', null, 'cache-key', 'user-7', 'cache-key'],
    ['prompt_cache_key alone', null, 'cache-key', undefined, 'cache-key'],
    ['the body user when prompt_cache_key is empty', '', '', 'user-7', 'user-7'],
    ['the body user when prompt_cache_key is not a string', null, 42, 'user-7', 'user-7'],
  ])('takes as session key %s', (_label, header, cacheKey, user, expected) => {
    const body = { ...conversation(1), user, prompt_cache_key: cacheKey };
    expect(buildRoutingRequest(body, { blockSizeBytes: 64, sessionKey: header }).sessionKey).toBe(expected);
  });

  it('fills every field from the body', () => {
    const request = buildRoutingRequest({ model: 'm', prompt: 'x'.repeat(130) }, { blockSizeBytes: 64 });
    expect(request).toMatchObject({ model: 'm', blockSizeBytes: 64, contextBlocks: 0, sessionKey: null });
    expect(request.textBytes).toBeGreaterThan(130);
    expect(request.blockHashes).toHaveLength(Math.floor(request.textBytes / 64));
    expect(request.headHash).toBe(request.blockHashes[0]);
  });

  it.each<[string, Record<string, number>, number | null]>([
    ['max_completion_tokens over max_tokens', { max_completion_tokens: 50, max_tokens: 80 }, 50],
    ['max_tokens times n', { max_tokens: 80, n: 3 }, 240],
    ['null when the body sets no bound', {}, null],
  ])('takes as generation budget %s', (_label, fields, expected) => {
    expect(buildRoutingRequest({ ...conversation(1), ...fields }, { blockSizeBytes: 64 }).maxTokens).toBe(expected);
  });
});

describe('buildRoutingRequest: the routed prefix is capped', () => {
  it('keeps DEFAULT_MAX_ROUTED_BLOCKS blocks by default, or maxBlocks, with the whole text length', () => {
    const body: ChatCompletionRequest = { model: 'm', messages: [{ role: 'user', content: 'w'.repeat(16 * 3000) }] };
    const capped = buildRoutingRequest(body, { blockSizeBytes: 16 });
    expect(capped.blockHashes).toHaveLength(DEFAULT_MAX_ROUTED_BLOCKS);
    expect(capped.textBytes).toBeGreaterThan(16 * 3000);
    const fewer = buildRoutingRequest(body, { blockSizeBytes: 16, maxBlocks: 10 });
    expect(fewer.blockHashes).toEqual(capped.blockHashes.slice(0, 10));
    expect(fewer.textBytes).toBe(capped.textBytes);
  });

  it('renders only the head a capped request routes on, with the same hashes and the whole length', () => {
    // Multi-byte text (2- and 4-byte UTF-8, surrogate pairs) in several messages, long past the cap.
    const long = 'Grüße aus Köln 🚀 — ok. '.repeat(5_000);
    const body: ChatCompletionRequest = {
      model: 'm',
      tools: [{ type: 'function', function: { name: 'lookup' } }],
      messages: [
        { role: 'system', content: long },
        { role: 'user', content: [{ type: 'text', text: long }] },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'c1', type: 'function', function: { name: 'lookup', arguments: long } }],
        },
        { role: 'user', content: 'and now?' },
      ],
    };
    const uncapped = buildRoutingRequest(body, { blockSizeBytes: 64, maxBlocks: Number.MAX_SAFE_INTEGER });
    for (const maxBlocks of [1, 7, 100, 2_000]) {
      const capped = buildRoutingRequest(body, { blockSizeBytes: 64, maxBlocks });
      expect(capped.blockHashes).toEqual(uncapped.blockHashes.slice(0, maxBlocks));
      expect(capped.textBytes).toBe(uncapped.textBytes);
      expect(capped.headHash).toBe(uncapped.headHash);
      expect(capped.contextBlocks).toBe(Math.min(uncapped.contextBlocks, maxBlocks));
    }
  });
});

describe('the first turn (what keys a pool cell)', () => {
  const system = { role: 'system' as const, content: 'You are a helpful assistant. '.repeat(40) };
  const first = { role: 'user' as const, content: 'Plan a trip to Lisbon for four days, with a budget. '.repeat(10) };
  const options = { blockSizeBytes: 64 };
  it('is the first message after the instructions, at the same bytes in every later turn of the conversation', () => {
    const turn1 = buildRoutingRequest({ model: 'm', messages: [system, first] }, options);
    const turn3 = buildRoutingRequest(
      {
        model: 'm',
        messages: [
          system,
          first,
          { role: 'assistant', content: 'Day 1: …' },
          { role: 'user', content: 'Cheaper, please.' },
          { role: 'assistant', content: 'Sure.' },
          { role: 'user', content: 'And day 2?' },
        ],
      },
      options,
    );
    expect(turn1.firstTurnBytes).toBeDefined();
    expect(turn3.firstTurnBytes).toEqual(turn1.firstTurnBytes);
    const { start, end } = turn1.firstTurnBytes as { start: number; end: number };
    expect(start).toBeGreaterThan(Buffer.byteLength(system.content));
    expect(end - start).toBeGreaterThan(Buffer.byteLength(first.content));
    expect(end).toBeLessThanOrEqual(turn1.textBytes);
  });

  it('is absent for a completion and for a chat of instructions only', () => {
    expect(buildRoutingRequest({ model: 'm', prompt: 'Once upon a time' }, options).firstTurnBytes).toBeUndefined();
    expect(buildRoutingRequest({ model: 'm', messages: [system] }, options).firstTurnBytes).toBeUndefined();
  });
});
