import { RESPONSE_ID_PATTERN } from '@kvroute/protocols';

/**
 * Most bytes of a response's head read for its id. A Responses body starts with its id (vLLM's and
 * OpenAI's `{"id":"resp_…","object":"response",…`), and a stream's first event is `response.created`,
 * whose `response` starts with it (`{"type":"response.created",…,"response":{"id":"resp_…"`). What
 * comes before the id is a few fixed fields; 8 KiB leaves room for an engine that orders them otherwise.
 */
const MAX_HEAD_BYTES = 8 * 1024;

/** The first `"id"` member with a string value; the value is checked against RESPONSE_ID_PATTERN after. */
const ID_MEMBER = /"id"\s*:\s*"([^"\\]{1,200})"/;

/**
 * Finds the id of a Responses API response in its first bytes, fed the body chunk by chunk as the relay
 * passes it on (before each chunk is written to the client, so the id is known before the client can
 * read it). The first `"id"` member is the response's: it precedes every field a client controls
 * (`instructions`, `input`, `metadata`) in both the body and the `response.created` event. Only the
 * head is kept (at most MAX_HEAD_BYTES); after the id, or past the head, `feed` costs nothing.
 */
export class ResponseIdWatch {
  private head = '';
  private bytes = 0;
  private done = false;

  constructor(private readonly onId: (responseId: string) => void) {}

  /** Feeds one body chunk; true once the watch needs no more (found, or gave up). */
  feed(chunk: Buffer): boolean {
    if (this.done) return true;
    const room = MAX_HEAD_BYTES - this.bytes;
    const piece = chunk.length > room ? chunk.subarray(0, room) : chunk;
    this.bytes += piece.length;
    // A character split at a chunk's end shows as U+FFFD and cannot be part of a valid id: harmless.
    this.head += piece.toString('utf8');
    const match = ID_MEMBER.exec(this.head);
    if (match !== null) {
      this.done = true;
      const id = match[1] as string;
      if (RESPONSE_ID_PATTERN.test(id)) this.onId(id);
    } else if (this.bytes >= MAX_HEAD_BYTES) {
      this.done = true;
    }
    if (this.done) this.head = '';
    return this.done;
  }
}
