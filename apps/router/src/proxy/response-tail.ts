import { STREAM_START_BYTES, usageFromStreamStart, usageFromTail, type ResponseUsage } from '@kvroute/protocols';

/**
 * The last `maxBytes` (or a little more) of a response body, kept as the relay passes the chunks on:
 * where an engine puts its usage (the end of a JSON body; a stream's usage chunk before `[DONE]`). The
 * chunks are only referenced, never copied, until `text()` joins what is kept: O(1) per chunk.
 */
export class ResponseTail {
  private readonly chunks: Buffer[] = [];
  private bytes = 0;
  /**
   * The body's first bytes, up to STREAM_START_BYTES (small chunks referenced, a large one's start copied): where an Anthropic stream's
   * `message_start` has the prompt's usage when its last usage (`message_delta`) has only `output_tokens`.
   */
  private readonly head: Buffer[] = [];
  private headBytes = 0;
  /** The usage already read (the usage strip's usage event, or a first `usage()`); undefined: not read. */
  private known: ResponseUsage | null | undefined;

  /** `keepsHead`: keep the first STREAM_START_BYTES too (only an Anthropic Messages stream needs them). */
  constructor(
    private readonly maxBytes: number,
    private readonly keepsHead = false,
  ) {}

  add(chunk: Buffer): void {
    if (this.keepsHead && this.headBytes < STREAM_START_BYTES) {
      // Only what the head needs is kept: a whole first chunk of a large answer would live as long as the response.
      const wanted = STREAM_START_BYTES - this.headBytes;
      const part = chunk.length <= wanted ? chunk : Buffer.from(chunk.subarray(0, wanted));
      this.head.push(part);
      this.headBytes += part.length;
    }
    this.chunks.push(chunk);
    this.bytes += chunk.length;
    // Drop whole chunks from the front while what is left still holds maxBytes.
    while (this.chunks.length > 1 && this.bytes - (this.chunks[0] as Buffer).length >= this.maxBytes) {
      this.bytes -= (this.chunks.shift() as Buffer).length;
    }
  }

  /** Records the usage already read from the body as it passed, so `usage()` need not read the kept bytes again. */
  knowUsage(usage: ResponseUsage): void {
    this.known = usage;
  }

  /** The response's usage: what `knowUsage` was told, else read once from the kept bytes (null: none there). */
  usage(): ResponseUsage | null {
    if (this.known === undefined) {
      const tail = this.text();
      this.known =
        usageFromTail(tail) ??
        (this.headBytes === 0 ? null : usageFromStreamStart(Buffer.concat(this.head).toString('utf8'), tail));
    }
    return this.known;
  }

  /** The kept bytes as text (their first character may be cut: the tail is read from its end). */
  text(): string {
    const joined = this.chunks.length === 1 ? (this.chunks[0] as Buffer) : Buffer.concat(this.chunks, this.bytes);
    return joined.subarray(Math.max(0, joined.length - this.maxBytes)).toString('utf8');
  }
}
