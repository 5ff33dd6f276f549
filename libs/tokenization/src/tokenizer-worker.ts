/**
 * The pool's worker (tokenizer-pool.ts): loads the model's tokenizer once per thread and answers tasks.
 * Results cross as a Uint32Array moved (not copied) to the caller; a ChatTemplateError comes back as a plain
 * value, since a thrown custom error loses its name and fields when it is cloned across threads.
 */

import { workerData } from 'node:worker_threads';
import { Piscina } from 'piscina';
import type { ChatMessageInput } from './chat-messages';
import { ChatTemplateError, type ChatTemplateErrorReason } from './errors';
import {
  type LoadModelTokenizerOptions,
  loadModelTokenizer,
  type ModelTokenizer,
  type RenderChatOptions,
} from './model-tokenizer';

export interface TokenizerWorkerData {
  readonly source: string;
  readonly options: LoadModelTokenizerOptions;
}

export type TokenizerTask =
  | { readonly kind: 'encode'; readonly text: string; readonly addSpecialTokens: boolean }
  | { readonly kind: 'chat'; readonly messages: readonly ChatMessageInput[]; readonly options: RenderChatOptions };

/** The ids (moved as the whole return value: Piscina transfers only a top-level movable), or the template's refusal. */
export type TokenizerTaskResult = Uint32Array | { readonly reason: ChatTemplateErrorReason; readonly message: string };

let tokenizer: ModelTokenizer | undefined;

export default function runTokenizerTask(task: TokenizerTask): TokenizerTaskResult {
  const data = workerData as TokenizerWorkerData;
  tokenizer ??= loadModelTokenizer(data.source, data.options);
  try {
    const ids =
      task.kind === 'encode'
        ? tokenizer.encode(task.text, { addSpecialTokens: task.addSpecialTokens })
        : tokenizer.encodeChat(task.messages, task.options);
    return Piscina.move(Uint32Array.from(ids)) as Uint32Array;
  } catch (error) {
    if (error instanceof ChatTemplateError) return { reason: error.reason, message: error.message };
    throw error;
  }
}
