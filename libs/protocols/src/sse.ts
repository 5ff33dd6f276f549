/**
 * Server-sent events as OpenAI-compatible engines frame them: `data: <json>\n\n` per event, ending with
 * `data: [DONE]\n\n`; no `event:` or `id:` fields. Parsing splits on blank lines, never on reads,
 * because one network read may carry half an event or several.
 */

export const SSE_DONE = '[DONE]';

export function encodeSseData(payload: string): string {
  return `data: ${payload}\n\n`;
}

/** Incremental SSE parser: feed text as it arrives, get back the `data` payloads of complete events. */
export class SseParser {
  private buffer = '';

  push(text: string): string[] {
    this.buffer += text;
    const events: string[] = [];
    let boundary = this.findBoundary();
    while (boundary !== null) {
      const rawEvent = this.buffer.slice(0, boundary.index);
      this.buffer = this.buffer.slice(boundary.index + boundary.length);
      const data = extractData(rawEvent);
      if (data !== null) events.push(data);
      boundary = this.findBoundary();
    }
    return events;
  }

  /** Text received after the last complete event (a stream that ends here was cut short). */
  get pending(): string {
    return this.buffer;
  }

  private findBoundary(): { index: number; length: number } | null {
    const match = /\r\n\r\n|\n\n|\r\r/.exec(this.buffer);
    return match ? { index: match.index, length: match[0].length } : null;
  }
}

function extractData(rawEvent: string): string | null {
  const dataLines: string[] = [];
  for (const line of rawEvent.split(/\r\n|\n|\r/)) {
    if (line.startsWith('data:')) dataLines.push(line.slice(line.startsWith('data: ') ? 6 : 5));
  }
  return dataLines.length > 0 ? dataLines.join('\n') : null;
}
