import { describe, expect, it } from 'vitest';
import { FirstOutputWatch } from './first-output-watch';

/** The first output of an Anthropic Messages stream, as vLLM and vllm-sim frame it (`event:` + `data:` with `type`), fed in awkward chunks. */
const start =
  'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":"message",' +
  '"role":"assistant","content":[],"model":"m","usage":{"input_tokens":40,"output_tokens":0}}}\n\n' +
  'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n' +
  'event: ping\ndata: {"type":"ping"}\n\n';

function firstOutputChunk(stream: string, chunkBytes: number): number {
  const watch = new FirstOutputWatch();
  const bytes = Buffer.from(stream);
  for (let at = 0; at < bytes.length; at += chunkBytes) {
    if (watch.feed(bytes.subarray(at, at + chunkBytes))) return at + chunkBytes;
  }
  return -1;
}

describe('FirstOutputWatch on Anthropic Messages streams', () => {
  it.each([
    ['text_delta', '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" the"}}'],
    [
      'thinking_delta',
      '{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me"}}',
    ],
    [
      'input_json_delta',
      '{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\\"q\\":"}}',
    ],
  ])(
    'finds the first %s, not message_start, an empty text block start or a ping, whatever the chunking',
    (_kind, delta) => {
      const stream = `${start}event: content_block_delta\ndata: ${delta}\n\nevent: message_stop\ndata: {"type":"message_stop"}\n\n`;
      const deltaEnd = Buffer.byteLength(`${start}event: content_block_delta\ndata: ${delta}\n\n`);
      for (const chunkBytes of [1, 7, 64, stream.length]) {
        const found = firstOutputChunk(stream, chunkBytes);
        // Found in the chunk that completed the delta event (its blank line), not before.
        expect(found).toBeGreaterThanOrEqual(deltaEnd);
        expect(found - chunkBytes).toBeLessThan(deltaEnd);
      }
    },
  );

  it('finds nothing in a stream without output (an empty answer)', () => {
    expect(
      firstOutputChunk(
        `${start}event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\nevent: message_stop\ndata: {"type":"message_stop"}\n\n`,
        9,
      ),
    ).toBe(-1);
  });
});
