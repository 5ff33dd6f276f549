import { describe, expect, it } from 'vitest';
import { FirstOutputWatch } from './first-output-watch';

const role = JSON.stringify({
  object: 'chat.completion.chunk',
  choices: [{ index: 0, delta: { role: 'assistant', content: '' } }],
});
const toolCall = JSON.stringify({
  object: 'chat.completion.chunk',
  choices: [
    {
      index: 0,
      delta: {
        tool_calls: [
          { index: 0, id: 'chatcmpl-tool-1', type: 'function', function: { name: 'look_up_café', arguments: '' } },
        ],
      },
    },
  ],
});
const text = JSON.stringify({ object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: 'é' } }] });

/** Feeds `body` cut at `cuts` (byte offsets); the index of the piece for which feed said true, or -1 (and how often it did). */
function feedInPieces(body: Buffer, cuts: readonly number[]): { at: number; times: number } {
  const watch = new FirstOutputWatch();
  let at = -1;
  let times = 0;
  const bounds = [0, ...cuts, body.length];
  for (let piece = 0; piece + 1 < bounds.length; piece++) {
    if (watch.feed(body.subarray(bounds[piece], bounds[piece + 1]))) {
      times++;
      if (at === -1) at = piece;
    }
  }
  return { at, times };
}

describe('FirstOutputWatch', () => {
  it.each([
    ['\n', '\n\n'],
    ['\r\n', '\r\n\r\n'],
    ['\r', '\r\r'],
  ])('finds a tool-call-first stream wherever its bytes are cut (line ending %j)', (newline, end) => {
    const body = Buffer.from(
      `data: ${role}${end}: keep-alive${newline}${newline}data: ${toolCall}${end}data: [DONE]${end}`,
    );
    const firstOutputEnds = body.indexOf(Buffer.from(`data: [DONE]`));
    for (let cut = 1; cut < body.length; cut++) {
      const { at, times } = feedInPieces(body, [cut]);
      expect(times, `cut at ${cut}`).toBe(1);
      // Found in the piece that completes the tool-call event (its blank line), never before. With bare CR
      // line endings a CR that ends a piece may be half of a CRLF: the event is dispatched one byte later.
      const completesAt = firstOutputEnds + (newline === '\r' ? 1 : 0);
      expect(at, `cut at ${cut}`).toBe(cut < completesAt ? 1 : 0);
    }
  });

  it('reads a multi-line data field and a character split between chunks', () => {
    // One event whose JSON spans two data: lines (joined with \n, still valid JSON), cut inside the 2-byte é.
    const split = text.indexOf(',') + 1; // between two JSON members: a newline there is whitespace
    const [head, tail] = [text.slice(0, split), text.slice(split)];
    const body = Buffer.from(`data: ${role}\n\ndata: ${head}\ndata: ${tail}\n\n`);
    const inside = body.indexOf(Buffer.from('é')) + 1;
    expect(feedInPieces(body, [inside]).times).toBe(1);
  });

  it('does not count a stream without output, and gives up on an event larger than it buffers', () => {
    expect(feedInPieces(Buffer.from(`data: ${role}\n\ndata: [DONE]\n\n`), []).times).toBe(0);
    const huge = Buffer.from(`data: ${'x'.repeat(2 * 1024 * 1024)}`);
    const watch = new FirstOutputWatch();
    expect(watch.feed(huge)).toBe(false);
    expect(watch.feed(Buffer.from(`\n\ndata: ${text}\n\n`))).toBe(false);
  });
});
