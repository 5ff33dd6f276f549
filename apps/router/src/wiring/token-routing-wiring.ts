import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { ShutdownStack } from '@kvroute/platform';
import type { ChatCompletionRequest } from '@kvroute/protocols';
import { createTokenizerPool, type ChatToolInput, type TokenizerPool } from '@kvroute/tokenization';
import type { RouterConfig } from '../config';
import type { RouterMetrics } from '../router-metrics';
import type { PromptTokenizer, TokenRoutingDeps } from '../routing/token-routing';

/**
 * The tokenizer pool's worker when this module runs bundled (`npm run build` writes tokenizer-worker.mjs
 * beside router.mjs, tools/build.ts); null from sources, where the pool's own TypeScript worker serves.
 */
const BUNDLED_WORKER = ((): URL | null => {
  const beside = new URL('./tokenizer-worker.mjs', import.meta.url);
  return beside.protocol === 'file:' && existsSync(fileURLToPath(beside)) ? beside : null;
})();

/**
 * Token mode's tokenizers (routing/token-routing.ts): one pool per distinct tokenizer source, loaded at
 * start so a missing or unreadable path fails the start with its error (TokenizerLoadError names the
 * file), closed at shutdown. Undefined when no model has a tokenizer: byte mode for all.
 */
export function wireTokenRouting(
  config: RouterConfig,
  deps: { readonly metrics: RouterMetrics; readonly baseModelOf: (model: string) => string | null },
  closers: ShutdownStack,
): TokenRoutingDeps | undefined {
  const perModel = config.tokenizers;
  if (config.tokenizer === undefined && Object.keys(perModel).length === 0) return undefined;
  const pools = new Map<string, PromptTokenizer>();
  const tokenizerFor = (source: string): PromptTokenizer => {
    let tokenizer = pools.get(source);
    if (tokenizer === undefined) {
      const pool = createTokenizerPool(source, {
        threads: config.tokenizerThreads,
        ...(BUNDLED_WORKER === null ? {} : { workerFile: BUNDLED_WORKER }),
      });
      closers.push(`tokenizer ${source}`, () => pool.close());
      tokenizer = promptTokenizerOf(pool);
      pools.set(source, tokenizer);
    }
    return tokenizer;
  };
  const byModel = new Map(Object.entries(perModel).map(([model, source]) => [model, tokenizerFor(source)]));
  const everyModel = config.tokenizer === undefined ? null : tokenizerFor(config.tokenizer);
  return {
    tokenizerOf: (model) => byModel.get(model) ?? everyModel,
    baseModelOf: deps.baseModelOf,
    blockSizeTokens: config.kvBlockSizeTokens,
    maxBlocks: config.maxRoutedTokenBlocks,
    onFallback: (reason) => deps.metrics.recordByteModeFallback(reason),
  };
}

/** A chat body's prompt as vLLM renders it (its defaults: add_generation_prompt true, continue_final_message false). */
function promptTokenizerOf(pool: TokenizerPool): PromptTokenizer {
  return {
    chatPromptTokens: (body: ChatCompletionRequest) => {
      const fields = body as ChatCompletionRequest & {
        readonly add_generation_prompt?: unknown;
        readonly continue_final_message?: unknown;
        readonly chat_template_kwargs?: unknown;
      };
      return pool.encodeChat(body.messages, {
        tools: (body.tools as readonly ChatToolInput[] | undefined) ?? null,
        addGenerationPrompt: fields.add_generation_prompt !== false,
        continueFinalMessage: fields.continue_final_message === true,
        templateKwargs: isRecord(fields.chat_template_kwargs) ? fields.chat_template_kwargs : undefined,
      });
    },
    completionPromptTokens: (prompt) => pool.encode(prompt, { addSpecialTokens: true }),
  };
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}
