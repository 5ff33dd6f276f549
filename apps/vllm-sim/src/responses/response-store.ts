import type { ChatMessage } from '@kvroute/protocols';

/** One stored response: what `GET` answers, and the conversation a follow-up continues. */
export interface StoredResponse {
  /** The response object as it was answered (status `completed`). */
  readonly response: Readonly<Record<string, unknown>>;
  /**
   * The conversation up to and including this response's answer, without `instructions` (a
   * follow-up's own `instructions` replace them, as in OpenAI's API): earlier turns' input messages,
   * this turn's input messages, then the assistant's output.
   */
  readonly history: readonly ChatMessage[];
}

/**
 * The sim's store of Responses API responses (`store: true`), in memory like vLLM's
 * (`response_store`, a dict, with `VLLM_ENABLE_RESPONSES_API_STORE=1`), but bounded: past
 * `maxEntries` the oldest response is dropped (vLLM's grows without bound; a sim run for hours must
 * not). `maxEntries` 0: nothing is stored, as vLLM without that variable (`store` silently ignored).
 * Only this sim's own responses are here: another backend's id is unknown (404), which is why the
 * router must send a follow-up back to the backend that stored its previous response.
 */
export class ResponseStore {
  private readonly entries = new Map<string, StoredResponse>();

  constructor(private readonly maxEntries: number) {}

  get enabled(): boolean {
    return this.maxEntries > 0;
  }

  get size(): number {
    return this.entries.size;
  }

  put(id: string, entry: StoredResponse): void {
    if (!this.enabled) return;
    this.entries.delete(id);
    this.entries.set(id, entry);
    while (this.entries.size > this.maxEntries) this.entries.delete(this.entries.keys().next().value as string);
  }

  get(id: string): StoredResponse | undefined {
    return this.entries.get(id);
  }

  delete(id: string): boolean {
    return this.entries.delete(id);
  }
}
