/**
 * Deterministic pseudo-text for generated tokens. Each output token is one common English word with
 * a leading space, chosen so that every word is a single token of the sim's vocabulary (the codec's,
 * text/prompt-codec.ts): the text a client receives re-tokenizes to exactly the generated ids, so when it
 * comes back as the assistant turn of the next request, the cached blocks of generated tokens can be hit
 * as in a real engine.
 *
 * The word sequence is a pure function of (seed, prompt), like greedy decoding: the same request
 * always gets the same answer, whatever else the engine is doing.
 */
const WORDS = (
  'the of and to in is that for it as with was on be by at this from have or an are not but had his they ' +
  'you were her she which will one all would there their what so up out if about who get cache route token ' +
  'model prefix block queue batch step fast warm cold'
).split(' ');

/** Fewer words than this and the text would be too repetitive to look generated. */
const MIN_WORDS = 16;

/** The output words of one vocabulary: `texts[i]` (with its leading space) is the single token `tokens[i]`. */
export interface OutputWords {
  readonly texts: readonly string[];
  readonly tokens: readonly number[];
}

/**
 * The word table for a vocabulary: WORDS in their fixed order, less those that are not one token in it
 * (so every vocabulary gets the same table each start). `textTokens` encodes without special tokens.
 */
export function buildOutputWords(textTokens: (text: string) => readonly number[]): OutputWords {
  const texts: string[] = [];
  const tokens: number[] = [];
  for (const word of WORDS) {
    const ids = textTokens(` ${word}`);
    if (ids.length !== 1) continue;
    texts.push(` ${word}`);
    tokens.push(ids[0] as number);
  }
  if (texts.length < MIN_WORDS)
    throw new Error(`only ${texts.length} of the output words are single tokens in this vocabulary`);
  return { texts, tokens };
}

export class OutputText {
  private state: number;
  /** Word indices of the output tokens drawn so far. */
  private readonly words: number[] = [];

  constructor(
    private readonly vocabulary: OutputWords,
    seed: number,
    promptTokens: readonly number[],
  ) {
    let hash = (seed ^ 0x9e3779b9) >>> 0;
    for (let i = 0; i < promptTokens.length; i += 7)
      hash = Math.imul(hash ^ (promptTokens[i] as number), 2654435761) >>> 0;
    this.state = (hash ^ promptTokens.length) >>> 0 || 1;
  }

  /** A number in [0, 1) from the same stream, drawn before any word (e.g. the random EOS position). */
  fraction(): number {
    return this.nextState() / 4294967296;
  }

  private wordAt(index: number): number {
    while (this.words.length <= index) {
      this.words.push(this.nextState() % this.vocabulary.texts.length);
    }
    return this.words[index] as number;
  }

  /** xorshift32: tiny, fast, deterministic. */
  private nextState(): number {
    let x = this.state;
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    this.state = x >>> 0;
    return this.state;
  }

  tokenAt(index: number): number {
    return this.vocabulary.tokens[this.wordAt(index)] as number;
  }

  textAt(index: number): string {
    return this.vocabulary.texts[this.wordAt(index)] as string;
  }
}
