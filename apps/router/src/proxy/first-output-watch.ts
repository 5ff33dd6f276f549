import { StringDecoder } from 'node:string_decoder';
import { eventCarriesOutput } from '@kvroute/protocols';
import { createParser, type EventSourceParser } from 'eventsource-parser';

/**
 * Most characters of one unfinished SSE line or event held while looking for the first output. A
 * first event is a few hundred bytes (a tool call's id and name, a text delta); one larger than this
 * is no stream kvroute can read, and the watch gives up on it rather than buffer without bound.
 */
const MAX_BUFFERED_CHARS = 1024 * 1024;

/**
 * Finds the first event of an SSE response that carries generated output (`eventCarriesOutput`: text,
 * reasoning, a tool call…, in every stream format the router relays), fed the response body chunk by
 * chunk as it is relayed. Events are framed by eventsource-parser (the WHATWG rules: any line ending,
 * events spanning any number of chunks, several events in one chunk, multi-line `data:`), after a
 * streaming UTF-8 decode (a character may be split between chunks too: node's StringDecoder, which
 * holds a split character back as TextDecoder's `stream` mode does, at a seventh of its cost per chunk).
 *
 * Cost: only the chunks up to the first output are decoded and parsed, usually the first one or two of
 * a stream (the role chunk, then the first delta); after that `feed` returns at once.
 */
export class FirstOutputWatch {
  private readonly decoder = new StringDecoder('utf8');
  private readonly parser: EventSourceParser;
  private found = false;
  private done = false;

  constructor() {
    this.parser = createParser({
      onEvent: (event) => {
        if (!this.found && eventCarriesOutput(event)) this.found = true;
      },
      onError: (error) => {
        // Only an oversized buffer ends the watch; unknown fields and bad retry values are ignored.
        if (error.type === 'max-buffer-size-exceeded') this.done = true;
      },
      maxBufferSize: MAX_BUFFERED_CHARS,
    });
  }

  /** Feeds one body chunk; true exactly once: for the chunk that completed the first output event. */
  feed(chunk: Buffer): boolean {
    if (this.done) return false;
    this.parser.feed(this.decoder.write(chunk));
    if (!this.found) return false;
    this.done = true;
    return true;
  }
}
