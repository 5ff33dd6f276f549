/**
 * The keys a JSON text repeats within one object, as `path.key` (e.g. `component`, `req.headers.host`).
 * JSON.parse keeps the last of two equal keys without a word, and log stores differ: Elasticsearch refuses
 * the whole document. So a log line's keys are checked on its text, before any parser folds them.
 * Throws on text that is not JSON.
 */
export function duplicateKeysIn(text: string): string[] {
  const reader = new JsonReader(text);
  const duplicates: string[] = [];
  reader.skipSpace();
  reader.value('', duplicates);
  reader.skipSpace();
  if (!reader.atEnd()) reader.fail('text after the JSON value');
  return duplicates;
}

/** A recursive-descent reader that keeps only what the check needs: each object's keys. */
class JsonReader {
  #at = 0;

  constructor(private readonly text: string) {}

  atEnd(): boolean {
    return this.#at >= this.text.length;
  }

  fail(what: string): never {
    throw new SyntaxError(`not JSON: ${what} at ${this.#at}`);
  }

  skipSpace(): void {
    while (!this.atEnd() && ' \t\r\n'.includes(this.text[this.#at] as string)) this.#at += 1;
  }

  value(path: string, duplicates: string[]): void {
    const next = this.text[this.#at];
    if (next === '{') return this.object(path, duplicates);
    if (next === '[') return this.array(path, duplicates);
    if (next === '"') {
      this.string();
      return;
    }
    // A number, true, false or null: one token with no nested keys, checked by JSON.parse.
    const token = /^(-?\d+(\.\d+)?([eE][+-]?\d+)?|true|false|null)/.exec(this.text.slice(this.#at, this.#at + 64));
    if (token === null) this.fail('a value expected');
    this.#at += token[0].length;
  }

  private object(path: string, duplicates: string[]): void {
    this.#at += 1;
    const seen = new Set<string>();
    this.skipSpace();
    if (this.text[this.#at] === '}') {
      this.#at += 1;
      return;
    }
    for (;;) {
      this.skipSpace();
      if (this.text[this.#at] !== '"') this.fail('a key expected');
      const key = this.string();
      const keyPath = path === '' ? key : `${path}.${key}`;
      if (seen.has(key)) duplicates.push(keyPath);
      seen.add(key);
      this.skipSpace();
      if (this.text[this.#at] !== ':') this.fail('":" expected');
      this.#at += 1;
      this.skipSpace();
      this.value(keyPath, duplicates);
      this.skipSpace();
      const separator = this.text[this.#at];
      this.#at += 1;
      if (separator === '}') return;
      if (separator !== ',') this.fail('"," or "}" expected');
    }
  }

  private array(path: string, duplicates: string[]): void {
    this.#at += 1;
    this.skipSpace();
    if (this.text[this.#at] === ']') {
      this.#at += 1;
      return;
    }
    for (let index = 0; ; index += 1) {
      this.skipSpace();
      this.value(`${path}[${index}]`, duplicates);
      this.skipSpace();
      const separator = this.text[this.#at];
      this.#at += 1;
      if (separator === ']') return;
      if (separator !== ',') this.fail('"," or "]" expected');
    }
  }

  /** A string's decoded value (JSON.parse decodes its escapes); the reader moves past it. */
  private string(): string {
    const start = this.#at;
    this.#at += 1;
    while (!this.atEnd() && this.text[this.#at] !== '"') this.#at += this.text[this.#at] === '\\' ? 2 : 1;
    if (this.atEnd()) this.fail('an unterminated string');
    this.#at += 1;
    return JSON.parse(this.text.slice(start, this.#at)) as string;
  }
}
