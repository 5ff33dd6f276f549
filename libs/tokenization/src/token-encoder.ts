/**
 * Text → token ids with @huggingface/tokenizers (the choice and its measurements: README.md), plus a cache of
 * segments that makes a conversation's next turn cost about what its new text costs.
 *
 * Why segments are exact: the tokenizer first splits the text at its added tokens (<|im_start|>, <|eot_id|>…),
 * then normalizes, pre-tokenizes and runs the model on each piece between them on its own. So encoding each
 * piece separately and concatenating gives the same ids, and a piece seen before (a system prompt, an earlier
 * message: chat templates put added tokens around every message) is a cache hit. This holds when the added
 * tokens match as plain text: none strips space around itself (lstrip/rstrip), none is single_word, and
 * those matched after normalization see an identity normalizer. For any other tokenizer the cache is off
 * and every text is encoded whole. Tests compare both paths on all three real vocabularies.
 *
 * The cache is bounded by the UTF-16 units of the pieces it holds, and evicts the least recently used.
 */

import { Tokenizer } from '@huggingface/tokenizers';
import { pieceEncoderOf, type PieceEncoder } from './piece-encoder';

/** transformers' tokenizer classes that rebuild the post-processor from add_bos_token/add_eos_token. */
const LLAMA_FAST_CLASSES = new Set(['LlamaTokenizerFast', 'CodeLlamaTokenizerFast', 'GemmaTokenizerFast']);

/** Pieces shorter than this are encoded rather than cached (a Map entry costs more than encoding them). */
const MIN_CACHED_UNITS = 64;

export interface TokenEncoderOptions {
  /** UTF-16 units of text whose ids the segment cache keeps (0 turns it off). */
  readonly segmentCacheUnits?: number;
}

interface AddedTokenJson {
  content: string;
  lstrip?: boolean;
  rstrip?: boolean;
  single_word?: boolean;
  normalized?: boolean;
}

export class TokenEncoder {
  private readonly tokenizer: Tokenizer;
  /** Splits at every added token, keeping the tokens as pieces (plainSplitter). */
  private readonly splitter: ((text: string) => string[]) | null;
  private readonly addedIds = new Map<string, number>();
  private readonly cache = new Map<string, number[]>();
  private cachedUnits = 0;
  private readonly cacheLimit: number;
  /** The ids the post-processor adds around a single text (BOS for Llama 3), found once. */
  private readonly prefixIds: number[];
  private readonly suffixIds: number[];
  /** A piece (no added token in it) to ids: piece-encoder.ts's shorter path where it applies, else the library's encode. */
  private readonly encodePlainPiece: PieceEncoder;

  constructor(
    tokenizerJson: Record<string, unknown>,
    tokenizerConfig: Record<string, unknown>,
    options: TokenEncoderOptions = {},
  ) {
    this.tokenizer = new Tokenizer(tokenizerJson, tokenizerConfig);
    const added = (tokenizerJson['added_tokens'] ?? []) as AddedTokenJson[];
    for (const token of added) this.addedIds.set(token.content, this.tokenizer.token_to_id(token.content) as number);
    this.splitter = plainSplitter(added, tokenizerJson['normalizer']);
    this.cacheLimit = this.splitter === null ? 0 : (options.segmentCacheUnits ?? 0);
    this.encodePlainPiece =
      (this.splitter !== null && pieceEncoderOf(this.tokenizer, tokenizerJson, this.addedIds)) ||
      ((piece) => this.tokenizer.encode(piece, { add_special_tokens: false }).ids);
    [this.prefixIds, this.suffixIds] = this.specialTokenFrame(tokenizerConfig);
  }

  /**
   * The ids add_special_tokens puts before and after a text. Usually the tokenizer.json post-processor's
   * (found by encoding one letter both ways). transformers' Llama fast tokenizers (LlamaTokenizerFast,
   * CodeLlamaTokenizerFast, GemmaTokenizerFast) replace it at load from tokenizer_config.json's add_bos_token
   * (default true) and add_eos_token (default false): DeepSeek V3's tokenizer.json adds nothing, its config
   * says add_bos_token, and vLLM's completions prompts start with its BOS.
   */
  private specialTokenFrame(config: Record<string, unknown>): [number[], number[]] {
    if (LLAMA_FAST_CLASSES.has(config['tokenizer_class'] as string)) {
      const bos = config['add_bos_token'] === false ? undefined : this.idOf(config['bos_token']);
      const eos = config['add_eos_token'] === true ? this.idOf(config['eos_token']) : undefined;
      return [bos === undefined ? [] : [bos], eos === undefined ? [] : [eos]];
    }
    const bare = this.tokenizer.encode('a', { add_special_tokens: false }).ids;
    const full = this.tokenizer.encode('a', { add_special_tokens: true }).ids;
    const at = indexOfRun(full, bare);
    return [full.slice(0, at), full.slice(at + bare.length)];
  }

  private idOf(token: unknown): number | undefined {
    const content =
      typeof token === 'string' ? token : ((token as { content?: unknown } | null)?.content as string | undefined);
    return typeof content === 'string' ? this.tokenizer.token_to_id(content) : undefined;
  }

  /** Token ids of `text`; with `addSpecialTokens` the post-processor's tokens too (BOS for Llama 3 and DeepSeek V3, none for Qwen3). */
  encode(text: string, addSpecialTokens: boolean): number[] {
    // Without the segment cache (cacheLimit 0) pieces still take the piece path; only none are remembered.
    if (this.splitter === null) return this.encodeWhole(text, addSpecialTokens);
    const ids: number[] = addSpecialTokens ? [...this.prefixIds] : [];
    for (const piece of this.splitter(text)) {
      if (piece === '') continue;
      const added = this.addedIds.get(piece);
      if (added !== undefined) ids.push(added);
      else for (const id of this.encodePiece(piece)) ids.push(id);
    }
    if (addSpecialTokens) ids.push(...this.suffixIds);
    return ids;
  }

  /** The encoder without the cache: what the library gives for the whole text. */
  encodeWhole(text: string, addSpecialTokens: boolean): number[] {
    const ids = this.tokenizer.encode(text, { add_special_tokens: false }).ids;
    return addSpecialTokens ? [...this.prefixIds, ...ids, ...this.suffixIds] : ids;
  }

  get segmentCacheEnabled(): boolean {
    return this.cacheLimit > 0;
  }

  private encodePiece(piece: string): number[] {
    if (piece.length < MIN_CACHED_UNITS) return this.encodePlainPiece(piece);
    const hit = this.cache.get(piece);
    if (hit !== undefined) {
      // Re-insert: a Map iterates in insertion order, so its first key is the least recently used.
      this.cache.delete(piece);
      this.cache.set(piece, hit);
      return hit;
    }
    const ids = this.encodePlainPiece(piece);
    if (piece.length <= this.cacheLimit) {
      this.cache.set(piece, ids);
      this.cachedUnits += piece.length;
      for (const [key] of this.cache) {
        if (this.cachedUnits <= this.cacheLimit) break;
        this.cache.delete(key);
        this.cachedUnits -= key.length;
      }
    }
    return ids;
  }
}

/**
 * The added-token splitter when every added token matches as plain text (see the header), else null: the text's
 * pieces between added tokens and the tokens themselves, in order (empty pieces possible), as `String.split` gives
 * them with a capturing group of the tokens, the longest first. Only the places holding an added token's first
 * character (`<` for every token of the tested vocabularies) are tried: a chat has a few, where a regular expression
 * of all the tokens was tried at every position of the text.
 */
function plainSplitter(added: readonly AddedTokenJson[], normalizer: unknown): ((text: string) => string[]) | null {
  if (added.length === 0) return null;
  const identityNormalizer =
    normalizer === null ||
    normalizer === undefined ||
    ((normalizer as { type?: unknown }).type === 'Sequence' &&
      ((normalizer as { normalizers?: unknown[] }).normalizers ?? []).length === 0);
  for (const token of added) {
    if (token.lstrip || token.rstrip || token.single_word) return null;
    if (token.normalized && !identityNormalizer) return null;
  }
  const contents = added.map((token) => token.content).sort((a, b) => b.length - a.length);
  const escape = (text: string): string => text.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&');
  if (contents.some((content) => content === '')) return null;
  const tokenAt = new RegExp(contents.map(escape).join('|'), 'y');
  // Where a token may start: its first code unit (a surrogate pair's high half is enough). One shared first character
  // (`<` in the tested vocabularies) is found by indexOf, ~0.4 µs a chat cheaper than a character class (measured).
  const firsts = [...new Set(contents.map((content) => content[0] as string))];
  const only = firsts.length === 1 ? (firsts[0] as string) : null;
  const anyFirst = new RegExp(`[${firsts.map(escape).join('')}]`, 'g');
  const candidateFrom = (text: string, from: number): number => {
    if (only !== null) return text.indexOf(only, from);
    anyFirst.lastIndex = from;
    return anyFirst.exec(text)?.index ?? -1;
  };
  return (text) => {
    const pieces: string[] = [];
    let pieceStart = 0;
    for (let at = candidateFrom(text, 0); at >= 0; ) {
      tokenAt.lastIndex = at;
      const token = tokenAt.exec(text)?.[0];
      if (token === undefined) {
        at = candidateFrom(text, at + 1);
        continue;
      }
      pieces.push(text.slice(pieceStart, at), token);
      pieceStart = at + token.length;
      at = candidateFrom(text, pieceStart);
    }
    pieces.push(text.slice(pieceStart));
    return pieces;
  };
}

function indexOfRun(haystack: readonly number[], needle: readonly number[]): number {
  for (let i = 0; i + needle.length <= haystack.length; i++) {
    if (needle.every((id, k) => haystack[i + k] === id)) return i;
  }
  return 0;
}
