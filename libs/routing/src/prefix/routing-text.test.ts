import type { ChatCompletionRequest, ChatMessage, CompletionRequest, ContentPart } from '@kvroute/protocols';
import { describe, expect, it } from 'vitest';
import { seededRandom } from '@kvroute/workloads';
import { renderRoutingText } from './routing-text';

const SYSTEM: ChatMessage = { role: 'system', content: 'You are a helpful assistant.' };
const chat = (messages: ChatMessage[], extra: Partial<ChatCompletionRequest> = {}): ChatCompletionRequest => ({
  model: 'llama-3-8b',
  messages,
  ...extra,
});
const part = (value: Record<string, unknown>) => value as unknown as ContentPart;
const tool = (parameters: unknown): NonNullable<ChatCompletionRequest['tools']>[number] => ({
  type: 'function',
  function: { name: 'f', parameters },
});
/** `depth` nested arrays around nothing, built without recursion. */
function nestedArrays(depth: number): unknown[] {
  let value: unknown[] = [];
  for (let level = 1; level < depth; level++) value = [value];
  return value;
}
/** Deterministic pseudo-random JSON values (mulberry32): unicode, escapes, odd numbers, integer-like keys. */
function randomJsonValue(seed: number): unknown {
  const random = seededRandom(seed);
  const strings = [
    '',
    'a',
    '"quoted"',
    'back\\slash',
    'line\nbreak',
    '\u001e\u001f',
    'é✨😀',
    '\ud800',
    '10',
    '2',
    '__proto__',
  ];
  const scalars = [0, -0, 1.5, 1e21, 5e-324, -42, true, false, null, 'text', '\u2028'];
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;
  const value = (depth: number): unknown => {
    const roll = random();
    if (depth > 5 || roll < 0.35) return roll < 0.15 ? pick(strings) : pick(scalars);
    const size = Math.floor(random() * 5);
    if (roll < 0.65) return Array.from({ length: size }, () => value(depth + 1));
    const record: Record<string, unknown> = {};
    for (let index = 0; index < size; index++) record[pick(strings)] = value(depth + 1);
    return record;
  };
  return value(0);
}
const completion = (
  prompt: CompletionRequest['prompt'],
  extra: Partial<CompletionRequest> = {},
): CompletionRequest => ({ model: 'llama-3-8b', prompt, ...extra });

describe('renderRoutingText', () => {
  it('only appends text when a conversation grows by a turn', () => {
    const messages: ChatMessage[] = [SYSTEM, { role: 'user', content: 'Hi' }];
    let previous = renderRoutingText(chat(messages)).text;
    for (let turn = 0; turn < 5; turn++) {
      messages.push({
        role: 'assistant',
        content: `Answer ${turn}`,
        tool_calls: [{ function: { name: 'lookup', arguments: `{"q":${turn}}` } }],
      });
      messages.push({ role: 'tool', content: 'result', tool_call_id: `call-${turn}` });
      messages.push({
        role: 'user',
        content: [
          { type: 'text', text: `Question ${turn}` },
          { type: 'image_url', image_url: { url: `https://x/${turn}.png` } },
        ],
      });
      const next = renderRoutingText(chat(messages)).text;
      expect(next.startsWith(previous)).toBe(true);
      expect(next.length).toBeGreaterThan(previous.length);
      previous = next;
    }
  });

  it.each<[string, ChatCompletionRequest]>([
    ['model', chat([SYSTEM], { model: 'llama-3-70b' })],
    ['cache_salt', chat([SYSTEM], { cache_salt: 'tenant-a' })],
    ['tools', chat([SYSTEM], { tools: [{ type: 'function', function: { name: 'search' } }] })],
    ['role', chat([{ ...SYSTEM, role: 'developer' }])],
    ['name', chat([{ ...SYSTEM, name: 'alice' }])],
    ['content', chat([{ ...SYSTEM, content: 'You are a terse assistant.' }])],
    [
      'tool call arguments',
      chat([{ role: 'assistant', content: null, tool_calls: [{ function: { name: 'f', arguments: '{"a":2}' } }] }]),
    ],
    ['tool_call_id', chat([{ role: 'tool', content: 'r', tool_call_id: 'c2' }])],
  ])('changes with %s', (_field, variant) => {
    const bases: Record<string, ChatCompletionRequest> = {
      'tool call arguments': chat([
        { role: 'assistant', content: null, tool_calls: [{ function: { name: 'f', arguments: '{"a":1}' } }] },
      ]),
      tool_call_id: chat([{ role: 'tool', content: 'r', tool_call_id: 'c1' }]),
    };
    const base = bases[_field] ?? chat([SYSTEM]);
    expect(renderRoutingText(variant).text).not.toBe(renderRoutingText(base).text);
  });

  it('changes with an image URL and keeps the text around it', () => {
    const withImage = (url: string) =>
      chat([
        {
          role: 'user',
          content: [
            { type: 'text', text: 'What is this?' },
            { type: 'image_url', image_url: { url } },
          ],
        },
      ]);
    const a = renderRoutingText(withImage('https://img/a.png')).text;
    expect(a).not.toBe(renderRoutingText(withImage('https://img/b.png')).text);
    expect(a).toContain('What is this?');
    expect(a).toContain('https://img/a.png');
  });

  it('renders string content and a single text part alike (engines flatten both the same way)', () => {
    const asString = renderRoutingText(chat([{ role: 'user', content: 'hello' }])).text;
    const asParts = renderRoutingText(chat([{ role: 'user', content: [{ type: 'text', text: 'hello' }] }])).text;
    expect(asParts).toBe(asString);
  });

  it('keeps other content parts (audio, files) as JSON so they change the text too', () => {
    const audio = (data: string) => chat([{ role: 'user', content: [{ type: 'input_audio', input_audio: { data } }] }]);
    expect(renderRoutingText(audio('AAAA')).text).not.toBe(renderRoutingText(audio('BBBB')).text);
  });

  it('escapes separator characters so content cannot imitate a field or message boundary', () => {
    // Without escaping, one message whose content embeds "end of field, start of message, role user"
    // would render exactly like two messages.
    const forged = chat([{ role: 'user', content: 'a\u001e\u001dr\u001fuser\u001e' }]);
    const real = chat([
      { role: 'user', content: 'a' },
      { role: 'user', content: '' },
    ]);
    expect(renderRoutingText(forged).text).not.toBe(renderRoutingText(real).text);
    expect(renderRoutingText(chat([{ role: 'user', content: '\u001b\u001e' }])).text).not.toBe(
      renderRoutingText(chat([{ role: 'user', content: '\u001b^' }])).text,
    );
  });

  it('marks where the last message starts', () => {
    const first: ChatMessage = { role: 'user', content: 'Hi' };
    const reply: ChatMessage = { role: 'assistant', content: 'Hello! ✨' };
    const last: ChatMessage = { role: 'user', content: 'Tell me more' };
    const rendered = renderRoutingText(chat([SYSTEM, first, reply, last]));
    expect(rendered.text.slice(0, rendered.contextEndOffset)).toBe(
      renderRoutingText(chat([SYSTEM, first, reply])).text,
    );
    expect(renderRoutingText(chat([first])).contextEndOffset).toBe(0);
    expect(renderRoutingText(completion('Once upon a time')).contextEndOffset).toBe(0);
  });

  it.each<[string, CompletionRequest['prompt'], string]>([
    ['text', 'Once upon a time', 'Once upon a time'],
    ['a batch of texts', ['first', 'second'], 'second'],
    ['token ids as decimal text', [101, 7592, 2088], '101,7592,2088'],
    [
      'a batch of token-id lists',
      [
        [1, 2],
        [30, 40],
      ],
      '30,40',
    ],
  ])('renders a completion prompt given as %s', (_label, prompt, expected) => {
    const rendered = renderRoutingText(completion(prompt, { cache_salt: 's' }));
    expect(rendered.text).toContain(expected);
    expect(rendered.text).toContain('llama-3-8b');
  });

  it('renders a null cache_salt as no salt, as vLLM treats it', () => {
    expect(renderRoutingText(chat([SYSTEM], { cache_salt: null })).text).toBe(renderRoutingText(chat([SYSTEM])).text);
    expect(renderRoutingText(chat([SYSTEM], { cache_salt: 'a' })).text).not.toBe(
      renderRoutingText(chat([SYSTEM])).text,
    );
  });

  it('tells token ids from the same digits sent as text', () => {
    expect(renderRoutingText(completion([1, 2])).text).not.toBe(renderRoutingText(completion('1,2')).text);
  });

  it('renders a request byte for byte as it always has (cache keys must not move)', () => {
    const body = chat(
      [
        { role: 'system', content: 'Be brief.' },
        {
          role: 'user',
          name: 'ann',
          content: [
            { type: 'text', text: 'Hi' },
            part({ type: 'input_audio', input_audio: { data: 'AA==', format: 'wav' } }),
          ],
        },
        { role: 'assistant', content: null, tool_calls: [{ function: { name: 'get', arguments: '{"q":1}' } }] },
        { role: 'tool', content: 'ok', tool_call_id: 'c1' },
      ],
      {
        cache_salt: 's',
        tools: [tool({ type: 'object', properties: { q: { type: 'integer', enum: [1, 2] } }, required: ['q'] })],
      },
    );
    expect(renderRoutingText(body).text).toBe(
      'M\u001fllama-3-8b\u001eS\u001fs\u001e' +
        'T\u001f[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"q":{"type":"integer",' +
        '"enum":[1,2]}},"required":["q"]}}}]\u001e' +
        '\u001dr\u001fsystem\u001ec\u001fBe brief.\u001e' +
        '\u001dr\u001fuser\u001en\u001fann\u001ec\u001fHi\u001ex\u001f{"type":"input_audio","input_audio":{"data":"AA==","format":"wav"}}\u001e' +
        '\u001dr\u001fassistant\u001ef\u001fget\u001ea\u001f{"q":1}\u001e' +
        '\u001dr\u001ftool\u001ec\u001fok\u001ed\u001fc1\u001e',
    );
  });

  it('writes a value too deep for JSON.stringify exactly as JSON.stringify would, random values included', () => {
    // 300 random values at the bottom of 100,000 nested arrays: JSON.stringify runs out of stack, so the
    // iterative writer renders all of it, and must write what JSON.stringify writes for each value.
    const values = Array.from({ length: 300 }, (_, index) => randomJsonValue(index + 1));
    let wrapped: unknown[] = values;
    for (let level = 1; level < 100_000; level++) wrapped = [wrapped];
    expect(() => JSON.stringify(wrapped)).toThrow(RangeError);
    const json = `${'['.repeat(100_000)}${values.map((value) => JSON.stringify(value) ?? 'null').join(',')}${']'.repeat(100_000)}`;
    const rendered = renderRoutingText(
      chat([{ role: 'user', content: [part({ type: 'custom', wrapped })] }], { tools: [tool(wrapped)] }),
    ).text;
    expect(rendered).toBe(
      `M\u001fllama-3-8b\u001eT\u001f[{"type":"function","function":{"name":"f","parameters":${json}}}]\u001e\u001dr\u001fuser\u001ex\u001f{"type":"custom",` +
        `"wrapped":${json}}\u001e`,
    );
  });

  it('follows JSON.stringify on undefined, functions, symbols, holes and toJSON, at any depth', () => {
    const odd = {
      a: undefined,
      b: () => 1,
      c: Symbol('s'),
      d: [undefined, () => 1, Symbol('t'), , 1],
      e: new Date(0),
      f: { toJSON: (key: string) => `key ${key}` },
    };
    const deep = nestedArrays(100_000);
    const rendered = renderRoutingText(chat([{ role: 'user', content: [part({ type: 'custom', odd, deep })] }])).text;
    expect(rendered).toContain(
      `x\u001f${JSON.stringify({ type: 'custom', odd }).slice(0, -1)},"deep":${'['.repeat(100_000)}`,
    );
  });

  it('renders tools and content parts 20,000 levels deep (the hostile body of issue 12)', () => {
    const deep = nestedArrays(20_000);
    const rendered = renderRoutingText(
      chat([{ role: 'user', content: [part({ type: 'custom', deep })] }], { tools: [tool(deep)] }),
    ).text;
    const json = '['.repeat(20_000) + ']'.repeat(20_000);
    expect(rendered).toBe(
      `M\u001fllama-3-8b\u001eT\u001f[{"type":"function","function":{"name":"f","parameters":${json}}}]\u001e` +
        `\u001dr\u001fuser\u001ex\u001f{"type":"custom","deep":${json}}\u001e`,
    );
  });

  it('writes a reference back to an enclosing value as null instead of looping or throwing', () => {
    const cyclic: Record<string, unknown> = { type: 'custom', shared: { n: 1 } };
    cyclic['self'] = cyclic;
    cyclic['again'] = cyclic['shared'];
    const rendered = renderRoutingText(chat([{ role: 'user', content: [part(cyclic)] }])).text;
    expect(rendered).toContain('x\u001f{"type":"custom","shared":{"n":1},"self":null,"again":{"n":1}}\u001e');
  });
});
