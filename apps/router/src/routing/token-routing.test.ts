import type { ChatCompletionRequest } from '@kvroute/protocols';
import { buildTokenRoutingRequest } from '@kvroute/routing';
import { describe, expect, it } from 'vitest';
import { type ByteModeFallback, type PromptTokenizer, tokenRoutingRequest } from './token-routing';

/** A whitespace tokenizer: one id per word (its code-unit sum), enough to tell prompts apart. */
const words = (text: string): number[] =>
  text
    .split(/\s+/)
    .filter((word) => word !== '')
    .map((word) => [...word].reduce((sum, char) => sum + char.charCodeAt(0), 0));

const tokenizer: PromptTokenizer = {
  chatPromptTokens: async (body: ChatCompletionRequest) => {
    if (body.messages.some((message) => message.role === 'bogus')) throw new Error('template: unknown role');
    return words(body.messages.map((message) => `<${message.role}> ${String(message.content)}`).join(' '));
  },
  completionPromptTokens: async (prompt) => [1, ...words(prompt)],
};

function depsWith(models: Record<string, PromptTokenizer>) {
  const fallbacks: ByteModeFallback[] = [];
  return {
    fallbacks,
    deps: {
      tokenizerOf: (model: string) => models[model] ?? null,
      blockSizeTokens: 4,
      maxBlocks: 100,
      onFallback: (reason: ByteModeFallback) => fallbacks.push(reason),
    },
  };
}

const longText = Array.from({ length: 40 }, (_, i) => `w${i}`).join(' ');

describe('tokenRoutingRequest', () => {
  it("routes a chat on its template's token blocks, and a completion on its prompt's with special tokens", async () => {
    const { deps } = depsWith({ m: tokenizer });
    const chat = { model: 'm', messages: [{ role: 'user', content: longText }] };
    const request = await tokenRoutingRequest(deps, chat, null);
    const expected = buildTokenRoutingRequest(chat, words(`<user> ${longText}`), { blockSizeTokens: 4 });
    expect(request?.blockHashes).toEqual(expected.blockHashes);
    expect(request?.unit).toBe('tokens');
    const completion = await tokenRoutingRequest(deps, { model: 'm', prompt: longText }, 'session-1');
    expect(completion?.textBytes).toBe(41); // BOS + 40 words
    expect(completion?.sessionKey).toBe('session-1');
    // A one-prompt list is that prompt; token ids are routed as given.
    expect((await tokenRoutingRequest(deps, { model: 'm', prompt: [longText] }, null))?.blockHashes).toEqual(
      completion?.blockHashes,
    );
    expect((await tokenRoutingRequest(deps, { model: 'm', prompt: [1, 2, 3, 4, 5] }, null))?.textBytes).toBe(5);
  });

  it('leaves to byte mode, counted, what it cannot tokenize: a template error, a batch of prompts; and a model without a tokenizer', async () => {
    const { deps, fallbacks } = depsWith({ m: tokenizer });
    expect(await tokenRoutingRequest(deps, { model: 'm', messages: [{ role: 'bogus', content: 'x' }] }, null)).toBe(
      null,
    );
    expect(await tokenRoutingRequest(deps, { model: 'm', prompt: ['a', 'b'] }, null)).toBe(null);
    expect(await tokenRoutingRequest(deps, { model: 'm', prompt: [[1], [2]] }, null)).toBe(null);
    expect(fallbacks).toEqual(['template-failed', 'prompt-batch', 'prompt-batch']);
    expect(await tokenRoutingRequest(deps, { model: 'other', prompt: longText }, null)).toBe(null);
    expect(fallbacks).toHaveLength(3);
  });

  it("falls back, counted as tokenizer-failed, when the tokenizer's threads cannot take a chat or a completion", async () => {
    const unavailable = Object.assign(new Error('queue full'), { name: 'TokenizerUnavailableError' });
    const busy: PromptTokenizer = {
      chatPromptTokens: async () => Promise.reject(unavailable),
      completionPromptTokens: async () => Promise.reject(unavailable),
    };
    const { deps, fallbacks } = depsWith({ m: busy });
    expect(await tokenRoutingRequest(deps, { model: 'm', messages: [{ role: 'user', content: 'x' }] }, null)).toBe(
      null,
    );
    expect(await tokenRoutingRequest(deps, { model: 'm', prompt: longText }, null)).toBe(null);
    expect(fallbacks).toEqual(['tokenizer-failed', 'tokenizer-failed']);
  });
});
