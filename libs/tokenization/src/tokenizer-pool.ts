/**
 * Tokenization off the event loop. A large prompt costs tens of milliseconds of CPU to encode the first time
 * (README.md has the measurements), and a 15 MB body about a second: the pool runs those in worker threads
 * (Piscina), so the router keeps serving other requests meanwhile. Small prompts are encoded inline, where a
 * round trip to a thread would cost more than the work.
 *
 * Each thread loads the model's tokenizer once (~0.5 s and ~100 MB per thread for a 150k-token vocabulary)
 * and keeps its own segment cache. Results are Uint32Array (moved from the thread, not copied).
 */

import { fileURLToPath } from 'node:url';
import type { Piscina } from 'piscina';
import type { ChatMessageInput } from './chat-messages';
import { ChatTemplateError, TokenizerUnavailableError } from './errors';
import {
  type LoadModelTokenizerOptions,
  loadModelTokenizer,
  type ModelTokenizer,
  type RenderChatOptions,
} from './model-tokenizer';
import type { TokenizerTask, TokenizerTaskResult, TokenizerWorkerData } from './tokenizer-worker';

export interface TokenizerPoolOptions extends LoadModelTokenizerOptions {
  /** Worker threads (default 1: the machine's other core serves requests). */
  readonly threads?: number;
  /** Texts (or a chat's message and tool text) shorter than this many UTF-16 units are encoded inline (default 16 Ki). */
  readonly inlineBelowBytes?: number;
  /**
   * Prompts waiting for a thread at most (default 4 per thread): past it a prompt is refused at once
   * (TokenizerUnavailableError), so a client sending many large prompts cannot queue everyone's behind them.
   */
  readonly maxQueued?: number;
  /** The worker module (a bundled build passes its compiled tokenizer-worker); default: the TypeScript worker through tsx. */
  readonly workerFile?: string | URL;
}

export interface TokenizerPool {
  /** The tokenizer the inline path uses (loaded in this thread too). */
  readonly tokenizer: ModelTokenizer;
  encode(text: string, options: { addSpecialTokens: boolean }): Promise<Uint32Array>;
  /** Rejects with ChatTemplateError when the template cannot render the request. */
  encodeChat(messages: readonly ChatMessageInput[], options?: RenderChatOptions): Promise<Uint32Array>;
  /** Stops the threads; pending tasks reject. */
  close(): Promise<void>;
}

const DEFAULT_INLINE_BELOW = 16 * 1024;

/** Loads the tokenizer in this thread (failing fast with TokenizerLoadError); the threads start with the first large prompt. */
export function createTokenizerPool(source: string, options: TokenizerPoolOptions = {}): TokenizerPool {
  const { threads = 1, inlineBelowBytes = DEFAULT_INLINE_BELOW, workerFile, maxQueued, ...loadOptions } = options;
  const tokenizer = loadModelTokenizer(source, loadOptions);
  const workerData: TokenizerWorkerData = {
    source,
    options: { ...loadOptions, cwd: loadOptions.cwd ?? process.cwd() },
  };
  const file = workerFile ?? new URL('./tokenizer-worker-entry.mjs', import.meta.url);
  // The threads start with the first large prompt: piscina (outside the app bundles, tools/build.ts) is
  // loaded then, so a router whose prompts all stay inline never loads it.
  let piscina: Promise<Piscina> | null = null;
  const startThreads = async (): Promise<Piscina> => {
    const { Piscina: Pool } = await import('piscina');
    return new Pool({
      filename: typeof file === 'string' ? file : fileURLToPath(file),
      minThreads: threads,
      maxThreads: threads,
      // A thread's tokenizer holds ~100 MB: keep the threads rather than reload it.
      idleTimeout: Number.POSITIVE_INFINITY,
      maxQueue: maxQueued ?? 4 * threads,
      workerData,
    });
  };

  async function run(task: TokenizerTask): Promise<Uint32Array> {
    piscina ??= startThreads();
    let result: TokenizerTaskResult;
    try {
      result = (await (await piscina).run(task)) as TokenizerTaskResult;
    } catch (error) {
      // A pool that failed to start is tried again by the next prompt, not remembered as failed.
      if (!(await piscina.then(() => true).catch(() => false))) piscina = null;
      throw new TokenizerUnavailableError(
        `the tokenizer's threads could not take the prompt: ${(error as Error).message}`,
        {
          cause: error,
        },
      );
    }
    if (result instanceof Uint32Array) return result;
    throw new ChatTemplateError(result.reason, result.message);
  }

  return {
    tokenizer,
    async encode(text, { addSpecialTokens }) {
      if (text.length < inlineBelowBytes) return Uint32Array.from(tokenizer.encode(text, { addSpecialTokens }));
      return run({ kind: 'encode', text, addSpecialTokens });
    },
    async encodeChat(messages, chatOptions = {}) {
      if (textUnitsUpTo([messages, chatOptions.tools, chatOptions.templateKwargs], inlineBelowBytes) < inlineBelowBytes)
        return Uint32Array.from(tokenizer.encodeChat(messages, chatOptions));
      return run({ kind: 'chat', messages, options: chatOptions });
    },
    async close() {
      if (piscina !== null) await (await piscina).destroy();
    },
  };
}

/**
 * The text a chat carries, counted up to `limit`: every string anywhere in its messages, tools and
 * template arguments (any of them may be rendered: a refusal part, an assistant's reasoning, a document
 * in the kwargs), keys included, and each value at least one unit, so the walk itself is bounded by
 * `limit` whatever the body's shape. A chat at the limit is tokenized on a worker thread.
 */
function textUnitsUpTo(value: unknown, limit: number): number {
  let units = 0;
  const pending: unknown[] = [value];
  while (pending.length > 0 && units < limit) {
    const next = pending.pop();
    units += 1;
    if (typeof next === 'string') units += next.length;
    else if (Array.isArray(next)) {
      for (const item of next) {
        if (pending.length >= limit) break;
        pending.push(item);
      }
    } else if (next !== null && typeof next === 'object') {
      for (const key in next) {
        if (pending.length >= limit) break;
        units += key.length;
        pending.push((next as Record<string, unknown>)[key]);
      }
    }
  }
  return units;
}
