import { describe, expect, it } from 'vitest';
import { encodeSseData, SseParser, SSE_DONE } from './sse';

describe('SseParser', () => {
  it('splits on blank lines, not on reads', () => {
    const parser = new SseParser();
    const wire = encodeSseData('{"a":1}') + encodeSseData('{"b":2}') + encodeSseData(SSE_DONE);
    const events: string[] = [];
    for (let i = 0; i < wire.length; i += 5) events.push(...parser.push(wire.slice(i, i + 5)));
    expect(events).toEqual(['{"a":1}', '{"b":2}', '[DONE]']);
    expect(parser.pending).toBe('');
  });

  it('handles CRLF framing, multi-line data and comments', () => {
    const parser = new SseParser();
    expect(parser.push(': keep-alive\r\n\r\ndata: line1\r\ndata: line2\r\n\r\ndata: x')).toEqual(['line1\nline2']);
    expect(parser.pending).toBe('data: x');
  });
});
