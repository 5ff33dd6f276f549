import { describe, expect, it } from 'vitest';
import { ChatCompletionRequest, CompletionRequest } from '../openai/chat-completions';
import {
  formatIssuePath,
  formatValidationIssues,
  safeParseFirstIssue,
  truncateUtf8,
  type ValidationIssue,
} from './validation-issues';

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
const bytes = (text: string) => Buffer.byteLength(text, 'utf8');
const issue = (path: PropertyKey[], message = 'Invalid input'): ValidationIssue => ({ path, message });
const roleIssues = (count: number) =>
  Array.from({ length: count }, (_, index) =>
    issue(['messages', index, 'role'], 'Invalid option: expected one of "system"|"user"'),
  );

describe('formatValidationIssues', () => {
  it('spells out the first issues and counts the others', () => {
    expect(formatValidationIssues(roleIssues(200_000))).toBe(
      'Invalid request: ' +
        [0, 1, 2, 3, 4]
          .map((index) => `messages[${index}].role: Invalid option: expected one of "system"|"user"`)
          .join('; ') +
        ' (and 199,995 more issues)',
    );
    expect(formatValidationIssues([issue(['model'], 'Required'), issue([], 'Bad')], { maxIssues: 1 })).toBe(
      'Invalid request: model: Required (and 1 more issue)',
    );
    expect(formatValidationIssues([issue(['model'], 'Required')])).toBe('Invalid request: model: Required');
    expect(formatValidationIssues([])).toBe('Invalid request.');
    expect(formatValidationIssues(roleIssues(3), { maxIssues: 0 })).toBe('Invalid request (3 issues).');
  });

  it('drops issues that do not fit into the count, and stays within maxBytes', () => {
    const text = formatValidationIssues(roleIssues(10), { maxIssues: 5, maxBytes: 200 });
    expect(bytes(text)).toBeLessThanOrEqual(200);
    expect(text).toMatch(/^Invalid request: messages\[0\]\.role: .+ \(and [6-9] more issues\)$/);
  });

  it('cuts a single issue too long to fit, never inside a surrogate pair', () => {
    for (let maxBytes = 60; maxBytes <= 120; maxBytes++) {
      const text = formatValidationIssues([issue(['model'], '😀'.repeat(100)), issue(['x'])], { maxBytes });
      expect(bytes(text)).toBeLessThanOrEqual(maxBytes);
      expect(text).toMatch(/^Invalid request: model: (😀)*… \(and 1 more issue\)$/u);
      expect(text).not.toMatch(LONE_SURROGATE);
    }
    expect(bytes(formatValidationIssues([issue(['model'], 'x'.repeat(100))], { maxBytes: 10 }))).toBeLessThanOrEqual(
      10,
    );
  });

  it('caps keys and paths a client chose, so one huge key cannot fill the message', () => {
    const hugeKey = 'k'.repeat(1_000_000);
    const text = formatValidationIssues([issue(['metadata', hugeKey]), issue(['model'])]);
    expect(text).toContain('; model: Invalid input');
    expect(bytes(text)).toBeLessThan(400);
  });

  it('reads only the issues it shows', () => {
    const issues = new Proxy(roleIssues(10), {
      get(target, key, receiver) {
        if (typeof key === 'string' && /^\d+$/.test(key) && Number(key) >= 5) throw new Error(`read issue ${key}`);
        return Reflect.get(target, key, receiver) as unknown;
      },
    });
    expect(() => formatValidationIssues(issues)).not.toThrow();
  });
});

describe('formatIssuePath', () => {
  it.each<[PropertyKey[], string]>([
    [[], 'body'],
    [['model'], 'model'],
    [['messages', 3, 'content'], 'messages[3].content'],
    [['tools', 0, 'function', 'name'], 'tools[0].function.name'],
    [['metadata', 'a.b'], 'metadata["a.b"]'],
    [['metadata', 'line\nbreak'], 'metadata["line\\nbreak"]'],
    [[0, 'x'], '[0].x'],
  ])('spells %j as %s', (path, expected) => {
    expect(formatIssuePath(path)).toBe(expected);
  });

  it('cuts long keys to 64 characters and paths to 256 bytes', () => {
    expect(formatIssuePath(['a'.repeat(100)])).toBe(`["${'a'.repeat(63)}…"]`);
    const deep = formatIssuePath(Array.from({ length: 10_000 }, (_, index) => (index % 2 === 0 ? 'key' : index)));
    expect(bytes(deep)).toBeLessThanOrEqual(256);
    expect(deep.startsWith('key[1].key[3]')).toBe(true);
  });
});

describe('truncateUtf8', () => {
  it('keeps text that fits and cuts the rest with an ellipsis, by code point', () => {
    expect(truncateUtf8('héllo', 6)).toBe('héllo');
    expect(truncateUtf8('héllo', 5)).toBe('h…');
    expect(truncateUtf8('a😀bcd', 7)).toBe('a…');
    expect(truncateUtf8('a😀bcdef', 8)).toBe('a😀…');
    expect(truncateUtf8('a\ud83d', 2)).toBe('');
    expect(truncateUtf8('abc', 2)).toBe('');
  });
});

describe('safeParseFirstIssue', () => {
  it('stops at the first issue: 200,000 invalid messages give one', () => {
    const body = { model: 'm', messages: Array.from({ length: 200_000 }, () => ({ role: 1 })) };
    const result = safeParseFirstIssue(ChatCompletionRequest, body);
    expect(result.success).toBe(false);
    expect(result.error?.issues.map((item) => item.path)).toEqual([['messages', 0, 'role']]);
  });

  it('finds the same first issue as a full parse', () => {
    const bodies: unknown[] = [
      { messages: [{ role: 'user', content: 'x' }] },
      { model: 'm', messages: [{ role: 'user', content: 'x' }, { role: 'user', content: 5 }, { role: 'wizard' }] },
      { model: 'm', messages: [{ role: 'user', content: [{ type: 'text' }, { text: 'no type' }] }] },
      { model: 'm', prompt: ['a', 1] },
      { model: 'm', messages: [{ role: 'user' }], max_tokens: 0 },
    ];
    for (const body of bodies) {
      const schema = 'prompt' in (body as object) ? CompletionRequest : ChatCompletionRequest;
      const first = safeParseFirstIssue(schema, body);
      const full = schema.safeParse(body);
      expect(first.success).toBe(false);
      expect(first.error?.issues[0]?.path).toEqual(full.error?.issues[0]?.path);
      expect(first.error?.issues[0]?.code).toEqual(full.error?.issues[0]?.code);
    }
  });

  it('parses valid requests exactly as safeParse does', () => {
    const chat = {
      model: 'm',
      messages: [
        { role: 'system', content: 'be brief' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'hi' },
            { type: 'image_url', image_url: { url: 'https://x/y.png' } },
          ],
          extra: { a: [1] },
        },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{}' } }],
        },
      ],
      tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }],
      stream: true,
      max_tokens: 5,
      top_k: 3,
    };
    expect(safeParseFirstIssue(ChatCompletionRequest, chat)).toEqual(ChatCompletionRequest.safeParse(chat));
    for (const prompt of ['text', ['a', 'b'], [1, 2, 3], [[1, 2], [3]]]) {
      const body = { model: 'm', prompt, echo: false };
      expect(safeParseFirstIssue(CompletionRequest, body)).toEqual(CompletionRequest.safeParse(body));
    }
  });
});
