import { describe, expect, it } from 'vitest';
import { eventCarriesOutput } from './stream-output';

const chunk = (delta: object, extra: object = {}) =>
  JSON.stringify({
    id: 'c',
    object: 'chat.completion.chunk',
    choices: [{ index: 0, delta, finish_reason: null }],
    ...extra,
  });

describe('eventCarriesOutput', () => {
  it.each([
    ['chat text', { data: chunk({ content: 'Hi' }) }],
    ['chat reasoning_content (vLLM reasoning parsers)', { data: chunk({ reasoning_content: 'Let me think' }) }],
    ['chat reasoning (newer vLLM)', { data: chunk({ reasoning: 'Let me think' }) }],
    ['chat refusal', { data: chunk({ refusal: 'No.' }) }],
    [
      'the first tool-call delta (id, name, empty arguments)',
      {
        data: chunk({
          tool_calls: [
            { index: 0, id: 'chatcmpl-tool-1', type: 'function', function: { name: 'lookup', arguments: '' } },
          ],
        }),
      },
    ],
    ['a tool-call arguments piece', { data: chunk({ tool_calls: [{ index: 0, function: { arguments: '{"q":' } }] }) }],
    ['a legacy function_call', { data: chunk({ function_call: { name: 'lookup' } }) }],
    [
      'completions text',
      { data: JSON.stringify({ object: 'text_completion', choices: [{ index: 0, text: 'Once' }] }) },
    ],
    [
      'Responses output text',
      {
        event: 'response.output_text.delta',
        data: JSON.stringify({ type: 'response.output_text.delta', delta: 'Hi' }),
      },
    ],
    [
      'Responses function-call arguments',
      {
        event: 'response.function_call_arguments.delta',
        data: '{"type":"response.function_call_arguments.delta","delta":"{"}',
      },
    ],
    ['Responses reasoning summary', { event: 'response.reasoning_summary_text.delta', data: '{}' }],
    ['Responses reasoning text', { event: 'response.reasoning_text.delta', data: '{}' }],
    [
      'Responses event without an event: line',
      { data: JSON.stringify({ type: 'response.output_text.delta', delta: 'Hi' }) },
    ],
    [
      'Responses MCP call arguments',
      { event: 'response.mcp_call_arguments.delta', data: '{"type":"response.mcp_call_arguments.delta","delta":"{"}' },
    ],
    [
      'Responses custom tool input',
      {
        event: 'response.custom_tool_call_input.delta',
        data: '{"type":"response.custom_tool_call_input.delta","delta":"x"}',
      },
    ],
    [
      'a Responses function call item added (it names the tool)',
      {
        event: 'response.output_item.added',
        data: JSON.stringify({
          type: 'response.output_item.added',
          output_index: 0,
          item: {
            type: 'function_call',
            id: 'fc_1',
            call_id: 'call_1',
            name: 'lookup',
            arguments: '',
            status: 'in_progress',
          },
        }),
      },
    ],
    [
      'a Responses item done (a server sending whole items)',
      {
        data: JSON.stringify({
          type: 'response.output_item.done',
          output_index: 0,
          item: { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Hi' }] },
        }),
      },
    ],
    [
      'Anthropic text',
      {
        event: 'content_block_delta',
        data: JSON.stringify({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hi' } }),
      },
    ],
    [
      'Anthropic tool input',
      {
        event: 'content_block_delta',
        data: JSON.stringify({
          type: 'content_block_delta',
          index: 1,
          delta: { type: 'input_json_delta', partial_json: '{"q"' },
        }),
      },
    ],
    [
      'Anthropic thinking',
      {
        event: 'content_block_delta',
        data: JSON.stringify({
          type: 'content_block_delta',
          index: 0,
          delta: { type: 'thinking_delta', thinking: 'Hmm' },
        }),
      },
    ],
    [
      'Anthropic tool_use block start',
      {
        event: 'content_block_start',
        data: JSON.stringify({
          type: 'content_block_start',
          index: 1,
          content_block: { type: 'tool_use', id: 'toolu_1', name: 'lookup', input: {} },
        }),
      },
    ],
  ])('counts %s as output', (_what, event) => {
    expect(eventCarriesOutput(event)).toBe(true);
  });

  it.each([
    ['the opening role chunk', { data: chunk({ role: 'assistant', content: '' }) }],
    // Read without a parse (chunkCarriesOutputQuickly): a quoted key inside a string value is escaped, no member.
    [
      'a role chunk whose other strings quote the keys',
      { data: chunk({ role: 'assistant', content: '' }, { system_fingerprint: '"content":"x","tool_calls":[' }) },
    ],
    ['an empty delta with a finish reason', { data: chunk({}, {}) }],
    [
      'the usage chunk',
      {
        data: JSON.stringify({
          object: 'chat.completion.chunk',
          choices: [],
          usage: { prompt_tokens: 5, completion_tokens: 2 },
        }),
      },
    ],
    ['[DONE]', { data: '[DONE]' }],
    ['data that is not JSON', { data: 'keep-alive' }],
    ['a JSON array', { data: '[1,2]' }],
    ['malformed JSON', { data: '{"choices":[' }],
    ['an empty tool-call delta', { data: chunk({ tool_calls: [{ index: 0, function: { arguments: '' } }] }) }],
    ['Responses created', { event: 'response.created', data: JSON.stringify({ type: 'response.created' }) }],
    [
      'Responses in progress',
      { event: 'response.in_progress', data: JSON.stringify({ type: 'response.in_progress' }) },
    ],
    [
      'a Responses message item added empty',
      {
        event: 'response.output_item.added',
        data: JSON.stringify({
          type: 'response.output_item.added',
          item: { type: 'message', role: 'assistant', content: [], status: 'in_progress' },
        }),
      },
    ],
    [
      'a Responses reasoning item added empty',
      {
        event: 'response.output_item.added',
        data: JSON.stringify({ type: 'response.output_item.added', item: { type: 'reasoning', summary: [] } }),
      },
    ],
    [
      'a Responses content part added empty',
      {
        event: 'response.content_part.added',
        data: JSON.stringify({ type: 'response.content_part.added', part: { type: 'output_text', text: '' } }),
      },
    ],
    [
      'Responses completed',
      { event: 'response.completed', data: JSON.stringify({ type: 'response.completed', response: { usage: {} } }) },
    ],
    [
      'Anthropic message_start',
      {
        event: 'message_start',
        data: JSON.stringify({ type: 'message_start', message: { usage: { input_tokens: 5 } } }),
      },
    ],
    ['Anthropic ping', { event: 'ping', data: '{"type":"ping"}' }],
    [
      'an empty Anthropic input_json_delta',
      {
        event: 'content_block_delta',
        data: JSON.stringify({ type: 'content_block_delta', delta: { type: 'input_json_delta', partial_json: '' } }),
      },
    ],
    [
      'an Anthropic text block start with no text yet',
      {
        event: 'content_block_start',
        data: JSON.stringify({ type: 'content_block_start', content_block: { type: 'text', text: '' } }),
      },
    ],
    ['an error event', { event: 'error', data: JSON.stringify({ type: 'error', error: { message: 'overloaded' } }) }],
  ])('does not count %s', (_what, event) => {
    expect(eventCarriesOutput(event)).toBe(false);
  });
});
