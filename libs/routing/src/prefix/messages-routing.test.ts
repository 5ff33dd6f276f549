import type { MessagesRequest } from '@kvroute/protocols';
import { describe, expect, it } from 'vitest';
import { buildMessagesRoutingRequest, messagesAsChat } from './messages-routing';
import { buildRoutingRequest } from './routing-request';
import { renderRoutingText } from './routing-text';

const options = { blockSizeBytes: 16 };

function conversation(turns: number): MessagesRequest {
  const messages: MessagesRequest['messages'] = [];
  for (let turn = 0; turn < turns; turn++) {
    messages.push({ role: 'user', content: [{ type: 'text', text: `question ${turn} `.repeat(8) }] });
    messages.push({
      role: 'assistant',
      content: [
        { type: 'thinking', thinking: `thought ${turn}`, signature: 'sig' },
        { type: 'tool_use', id: `toolu_${turn}`, name: 'lookup', input: { q: turn } },
      ],
    });
    messages.push({
      role: 'user',
      content: [{ type: 'tool_result', tool_use_id: `toolu_${turn}`, content: `result ${turn}` }],
    });
  }
  return {
    model: 'm',
    max_tokens: 16,
    system: [{ type: 'text', text: 'You are terse. '.repeat(10) }],
    tools: [{ name: 'lookup', input_schema: { type: 'object' } }],
    messages,
  };
}

describe('buildMessagesRoutingRequest', () => {
  it("keeps a conversation's earlier turn's blocks as a prefix of the next turn's (prefix stability)", () => {
    const one = buildMessagesRoutingRequest(conversation(1), options);
    const three = buildMessagesRoutingRequest(conversation(3), options);
    expect(one.blockHashes.length).toBeGreaterThan(4);
    expect(three.blockHashes.slice(0, one.blockHashes.length - 1)).toEqual(one.blockHashes.slice(0, -1));
    expect(three.textBytes).toBeGreaterThan(one.textBytes);
  });

  it('renders system, tools and every kind of block into the text, so a change in any one changes the hashes', () => {
    const text = renderRoutingText(messagesAsChat(conversation(1))).text;
    for (const piece of ['You are terse.', '"input_schema"', 'question 0', 'thought 0', 'toolu_0', 'result 0'])
      expect(text).toContain(piece);
    const base = buildMessagesRoutingRequest(conversation(1), options).blockHashes;
    const otherSystem = buildMessagesRoutingRequest(
      { ...conversation(1), system: 'Something else entirely.' },
      options,
    ).blockHashes;
    const otherTools = buildMessagesRoutingRequest(
      { ...conversation(1), tools: [{ name: 'other' }] },
      options,
    ).blockHashes;
    expect(otherSystem.at(-1)).not.toBe(base.at(-1));
    expect(otherTools.slice(0, 2)).not.toEqual(base.slice(0, 2));
  });

  it('routes a string system and string contents like the same chat, takes metadata.user_id as the session key after the header', () => {
    const body: MessagesRequest = {
      model: 'm',
      max_tokens: 8,
      system: 'Be brief.',
      messages: [{ role: 'user', content: 'Hello there, how are you?' }],
      metadata: { user_id: 'u-1' },
    };
    const chat = buildRoutingRequest(
      {
        model: 'm',
        max_tokens: 8,
        messages: [
          { role: 'system', content: 'Be brief.' },
          { role: 'user', content: 'Hello there, how are you?' },
        ],
      },
      options,
    );
    const routed = buildMessagesRoutingRequest(body, options);
    expect(routed.blockHashes).toEqual(chat.blockHashes);
    expect(routed.sessionKey).toBe('u-1');
    expect(routed.maxTokens).toBe(8);
    expect(buildMessagesRoutingRequest(body, { ...options, sessionKey: 'header' }).sessionKey).toBe('header');
    expect(routed.firstTurnBytes?.end).toBeGreaterThan(routed.firstTurnBytes?.start ?? Infinity);
  });
});
