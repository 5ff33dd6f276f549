import type { ChatCompletionRequest, ChatMessage, CompletionRequest } from '@kvroute/protocols';
import { describe, expect, it } from 'vitest';
import { renderRoutingText } from './routing-text';

const SYSTEM: ChatMessage = { role: 'system', content: 'You are a helpful assistant.' };
const chat = (messages: ChatMessage[], extra: Partial<ChatCompletionRequest> = {}): ChatCompletionRequest => ({ model: 'llama-3-8b', messages, ...extra });
const completion = (prompt: CompletionRequest['prompt'], extra: Partial<CompletionRequest> = {}): CompletionRequest => ({ model: 'llama-3-8b', prompt, ...extra });

describe('renderRoutingText', () => {
  it('only appends text when a conversation grows by a turn', () => {
    const messages: ChatMessage[] = [SYSTEM, { role: 'user', content: 'Hi' }];
    let previous = renderRoutingText(chat(messages)).text;
    for (let turn = 0; turn < 5; turn++) {
      messages.push({ role: 'assistant', content: `Answer ${turn}`, tool_calls: [{ function: { name: 'lookup', arguments: `{"q":${turn}}` } }] });
      messages.push({ role: 'tool', content: 'result', tool_call_id: `call-${turn}` });
      messages.push({ role: 'user', content: [{ type: 'text', text: `Question ${turn}` }, { type: 'image_url', image_url: { url: `https://x/${turn}.png` } }] });
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
    ['tool call arguments', chat([{ role: 'assistant', content: null, tool_calls: [{ function: { name: 'f', arguments: '{"a":2}' } }] }])],
    ['tool_call_id', chat([{ role: 'tool', content: 'r', tool_call_id: 'c2' }])],
  ])('changes with %s', (_field, variant) => {
    const bases: Record<string, ChatCompletionRequest> = {
      'tool call arguments': chat([{ role: 'assistant', content: null, tool_calls: [{ function: { name: 'f', arguments: '{"a":1}' } }] }]),
      tool_call_id: chat([{ role: 'tool', content: 'r', tool_call_id: 'c1' }]),
    };
    const base = bases[_field] ?? chat([SYSTEM]);
    expect(renderRoutingText(variant).text).not.toBe(renderRoutingText(base).text);
  });

  it('changes with an image URL and keeps the text around it', () => {
    const withImage = (url: string) => chat([{ role: 'user', content: [{ type: 'text', text: 'What is this?' }, { type: 'image_url', image_url: { url } }] }]);
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
    const real = chat([{ role: 'user', content: 'a' }, { role: 'user', content: '' }]);
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
    expect(rendered.text.slice(0, rendered.contextEndOffset)).toBe(renderRoutingText(chat([SYSTEM, first, reply])).text);
    expect(renderRoutingText(chat([first])).contextEndOffset).toBe(0);
    expect(renderRoutingText(completion('Once upon a time')).contextEndOffset).toBe(0);
  });

  it.each<[string, CompletionRequest['prompt'], string]>([
    ['text', 'Once upon a time', 'Once upon a time'],
    ['a batch of texts', ['first', 'second'], 'second'],
    ['token ids as decimal text', [101, 7592, 2088], '101,7592,2088'],
    ['a batch of token-id lists', [[1, 2], [30, 40]], '30,40'],
  ])('renders a completion prompt given as %s', (_label, prompt, expected) => {
    const rendered = renderRoutingText(completion(prompt, { cache_salt: 's' }));
    expect(rendered.text).toContain(expected);
    expect(rendered.text).toContain('llama-3-8b');
  });

  it('tells token ids from the same digits sent as text', () => {
    expect(renderRoutingText(completion([1, 2])).text).not.toBe(renderRoutingText(completion('1,2')).text);
  });
});
