import { describe, expect, it } from 'vitest';
import { detectContentFormat } from './content-format';

describe('detectContentFormat', () => {
  it("is 'openai' when a loop over messages (or an alias or slice of them) iterates a message's content", () => {
    expect(
      detectContentFormat('{% for m in messages %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}'),
    ).toBe('openai');
    expect(
      detectContentFormat(
        "{% set loop_messages = messages[1:] %}{% for m in loop_messages %}{% for p in m['content'] | list %}x{% endfor %}{% endfor %}",
      ),
    ).toBe('openai');
  });

  it("is 'string' when content is only read as a value, or the template does not parse", () => {
    expect(detectContentFormat("{% for m in messages %}{{ m['content'] | trim }}{% endfor %}")).toBe('string');
    expect(detectContentFormat('{% for p in other.content %}{% endfor %}')).toBe('string');
    expect(detectContentFormat('{% for m in messages %')).toBe('string');
  });
});
