import { describe, expect, it } from 'vitest';
import { CachedTokensRewrite } from './cached-tokens-rewrite';

const usage = (cached: number) => ({
  prompt_tokens: 1200,
  completion_tokens: 3,
  total_tokens: 1203,
  prompt_tokens_details: { cached_tokens: cached },
});

const event = (data: unknown) => `data: ${JSON.stringify(data)}\n\n`;
const STREAM = [
  event({ id: 'c', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: 'cached_tokens: 7' } }] }),
  event({ id: 'c', object: 'chat.completion.chunk', choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] }),
  event({ id: 'c', object: 'chat.completion.chunk', choices: [], usage: usage(1199) }),
  'data: [DONE]\n\n',
].join('');
const BODY = JSON.stringify({
  id: 'c',
  object: 'chat.completion',
  choices: [{ index: 0, message: { role: 'assistant', content: '"cached_tokens":5' }, finish_reason: 'stop' }],
  usage: usage(1199),
  kv_transfer_params: null,
});

/** Feeds `text` cut at `cuts` and returns what went on, in order, and whether anything went on before the end. */
function run(text: string, cuts: readonly number[], isSse: boolean): { out: string; early: string } {
  const rewrite = new CachedTokensRewrite(480, isSse);
  const bytes = Buffer.from(text);
  const parts: Buffer[] = [];
  let from = 0;
  for (const cut of [...cuts, bytes.length]) {
    const out = rewrite.feed(bytes.subarray(from, cut));
    if (out !== null) parts.push(out);
    from = cut;
  }
  const early = Buffer.concat(parts).toString();
  const rest = rewrite.end();
  if (rest !== null) parts.push(rest);
  return { out: Buffer.concat(parts).toString(), early };
}

describe('CachedTokensRewrite', () => {
  it("puts the prefill engine's cached tokens in a stream's usage event wherever the chunks are cut; text is untouched", () => {
    const expected = STREAM.replace('"cached_tokens":1199', '"cached_tokens":480');
    expect(expected).not.toBe(STREAM);
    for (let cut = 1; cut < STREAM.length; cut++) expect(run(STREAM, [cut], true).out).toBe(expected);
    for (let cut = 1; cut + 7 < STREAM.length; cut += 3) expect(run(STREAM, [cut, cut + 7], true).out).toBe(expected);
  });

  it('passes complete events on at once: only an incomplete one waits for its end', () => {
    const firstEnd = STREAM.indexOf('\n\n') + 2;
    expect(run(STREAM, [firstEnd + 5], true).early.startsWith(STREAM.slice(0, firstEnd))).toBe(true);
    const rewrite = new CachedTokensRewrite(480, true);
    expect(rewrite.feed(Buffer.from(STREAM.slice(0, firstEnd)))?.toString()).toBe(STREAM.slice(0, firstEnd));
  });

  it('rewrites a JSON body wherever it is cut, the number included, and holds back no more than its last bytes', () => {
    const expected = BODY.replace('"cached_tokens":1199', '"cached_tokens":480');
    for (let cut = 1; cut < BODY.length; cut++) expect(run(BODY, [cut], false).out).toBe(expected);
    const key = BODY.indexOf('"cached_tokens":1199');
    // Cut inside the number: "…:11" then "99…" must become 480, not 48099.
    expect(run(BODY, [key + 18], false).out).toBe(expected);
    expect(run(BODY, [BODY.length - 1], false).early.length).toBeGreaterThanOrEqual(BODY.length - 64);
  });

  it('JSON whitespace around the colon, and a usage without cached_tokens, as they come', () => {
    const spaced = BODY.replace('"cached_tokens":1199', '"cached_tokens" :\n 1199');
    expect(run(spaced, [], false).out).toBe(BODY.replace('"cached_tokens":1199', '"cached_tokens":480'));
    const plain = BODY.replace(',"prompt_tokens_details":{"cached_tokens":1199}', '');
    expect(run(plain, [40], false).out).toBe(plain);
  });
});
