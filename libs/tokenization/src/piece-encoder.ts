/**
 * A shorter way through @huggingface/tokenizers for a piece of text that holds no added token (TokenEncoder
 * splits the text at them first): the library's own normalizer, Split pre-tokenizers and BPE model, called
 * directly, with two of its steps done here:
 *
 * - byte-level mapping. The library maps every pre-token through a TextEncoder, `Array.from` and `join`; here
 *   an ASCII pre-token (most of them) needs one regular-expression pass (only controls, space and DEL change),
 *   and only the others go through UTF-8 bytes and a table. The table is GPT-2's bytes_to_unicode (printable Latin-1 bytes stand for themselves,
 *   the other 68 bytes for U+0100 onwards, in byte order), as the library's ByteLevel pre-tokenizer uses it.
 * - the frame around the model: `Tokenizer.encode` splits at added tokens again, runs the Sequence through
 *   `map` and `flat` per step, and builds tokens, ids and an attention mask; here the pieces go straight from
 *   one step to the next and only ids come out, and a pre-token's ids are remembered (bounded): the model
 *   encodes each pre-token on its own, so a word seen before skips byte-level mapping, BPE and the lookups.
 *
 * Measured in the router (issue 29, docs/results.md): the library's byte-level mapping and its frame were
 * about half of a short chat's tokenizing. Taken only for the pipeline every tokenizer this project tests has
 * (normalizer any; pre-tokenizer a Sequence of Split(Isolated, not inverted) then ByteLevel without prefix space
 * or regex; model BPE without byte fallback or unknown-token fusing); anything else keeps the library's encode.
 * Tests compare both on random and adversarial text with all three real vocabularies.
 */

import type { Tokenizer } from '@huggingface/tokenizers';

/** Encodes one piece (no added token in it) to ids, as `Tokenizer.encode(piece, { add_special_tokens: false })`. */
export type PieceEncoder = (piece: string) => number[];

/** The library's parts this calls (@huggingface/tokenizers 0.2: Tokenizer's own fields). */
interface LibraryParts {
  readonly normalizer: ((text: string) => string) | null;
  readonly pre_tokenizer: { readonly tokenizers?: readonly unknown[] } | null;
  readonly model: ((tokens: string[]) => string[]) & {
    readonly tokens_to_ids?: Map<string, number>;
    readonly unk_token_id?: number;
  };
  readonly remove_space?: unknown;
  readonly do_lowercase_and_remove_accent?: unknown;
}

interface SplitStep {
  pre_tokenize_text(text: string): string[];
}

interface PreTokenizerJson {
  type?: string;
  pretokenizers?: PreTokenizerJson[];
  behavior?: string;
  invert?: boolean;
  add_prefix_space?: boolean;
  use_regex?: boolean;
}

/** ASCII bytes that stand for another character in byte-level form: controls, space and DEL. */
const REMAPPED_ASCII = /[\u0000-\u0020\u007f]/g;
const NON_ASCII = /[^\u0000-\u007f]/;

/**
 * A pre-token in byte-level form, `byteCharacters` the ByteLevel step's own table (GPT-2's bytes_to_unicode: byte →
 * the character that stands for it). ASCII (most pre-tokens): printable characters stand for themselves, so only
 * controls, space and DEL are replaced (one regular-expression pass); else from its UTF-8 bytes.
 */
export function byteLevelForm(token: string, byteCharacters: readonly string[]): string {
  if (NON_ASCII.test(token)) {
    let mapped = '';
    for (const byte of Buffer.from(token, 'utf8')) mapped += byteCharacters[byte];
    return mapped;
  }
  return token.replace(REMAPPED_ASCII, (character) => byteCharacters[character.charCodeAt(0)] as string);
}

/** The ByteLevel step's byte → character table (its `byte_encoder`), as an array; null if it is not all there. */
function byteCharactersOf(byteLevel: unknown): string[] | null {
  const encoder = (byteLevel as { byte_encoder?: Record<number, unknown> } | undefined)?.byte_encoder;
  if (encoder === undefined || encoder === null) return null;
  const characters = Array.from({ length: 256 }, (_, byte) => encoder[byte]);
  return characters.every((character) => typeof character === 'string') ? (characters as string[]) : null;
}

/**
 * The Sequence's Split steps and its ByteLevel step's byte table when the pipeline is the one this supports (see the
 * header), else null.
 */
function supportedSplits(
  tokenizerJson: Record<string, unknown>,
  parts: LibraryParts,
): { readonly splits: SplitStep[]; readonly byteCharacters: string[] } | null {
  const pre = tokenizerJson['pre_tokenizer'] as PreTokenizerJson | null | undefined;
  const model = tokenizerJson['model'] as Record<string, unknown> | undefined;
  if (pre?.type !== 'Sequence' || !Array.isArray(pre.pretokenizers) || pre.pretokenizers.length < 2) return null;
  if (model?.['type'] !== 'BPE' || model['byte_fallback'] === true || model['fuse_unk'] === true) return null;
  if (parts.remove_space === true || parts.do_lowercase_and_remove_accent === true) return null;
  const steps = pre.pretokenizers;
  const last = steps[steps.length - 1] as PreTokenizerJson;
  if (last.type !== 'ByteLevel' || last.add_prefix_space === true || last.use_regex !== false) return null;
  const splits = steps.slice(0, -1);
  if (!splits.every((step) => step.type === 'Split' && step.behavior === 'Isolated' && step.invert !== true))
    return null;
  const instances = parts.pre_tokenizer?.tokenizers;
  if (!Array.isArray(instances) || instances.length !== steps.length) return null;
  const splitInstances = instances.slice(0, -1) as SplitStep[];
  if (!splitInstances.every((step) => typeof step?.pre_tokenize_text === 'function')) return null;
  const byteCharacters = byteCharactersOf(instances.at(-1));
  return byteCharacters === null ? null : { splits: splitInstances, byteCharacters };
}

/**
 * The shorter path for `tokenizer` built from `tokenizerJson`, or null when its pipeline is not the supported one
 * or the library does not expose its parts as expected (then the caller keeps `Tokenizer.encode`). `addedIds`:
 * the added tokens' ids (the library looks a token up there before the vocabulary). A piece is not split at added
 * tokens again after normalization (the library's second split): only right because the caller's splitter
 * (token-encoder.ts plainSplitter) refuses a vocabulary with normalized added tokens under a normalizer that changes text.
 */
export function pieceEncoderOf(
  tokenizer: Tokenizer,
  tokenizerJson: Record<string, unknown>,
  addedIds: ReadonlyMap<string, number>,
): PieceEncoder | null {
  const parts = tokenizer as unknown as LibraryParts;
  if (typeof parts.model !== 'function' || !(parts.model.tokens_to_ids instanceof Map)) return null;
  if (parts.normalizer !== null && typeof parts.normalizer !== 'function') return null;
  const supported = supportedSplits(tokenizerJson, parts);
  if (supported === null) return null;
  const { splits, byteCharacters } = supported;
  const { normalizer, model } = parts;
  const vocabulary = model.tokens_to_ids as Map<string, number>;
  const unknownId = model.unk_token_id;
  // A pre-token's ids depend on it alone (the model encodes each on its own): remembered, so a word seen before
  // costs one lookup (the library's own BPE cache still maps it, re-inserts it, and looks its tokens up).
  let known = new Map<string, readonly number[]>();
  const idsOf = (word: string): readonly number[] => {
    const hit = known.get(word);
    if (hit !== undefined) return hit;
    const ids: number[] = [];
    for (const token of model([byteLevelForm(word, byteCharacters)])) {
      const id = addedIds.get(token) ?? vocabulary.get(token) ?? unknownId;
      if (id !== undefined) ids.push(id);
    }
    if (word.length <= MAX_REMEMBERED_WORD_UNITS) {
      if (known.size >= MAX_REMEMBERED_WORDS) known = new Map();
      known.set(word, ids);
    }
    return ids;
  };
  return (piece) => {
    const text = normalizer === null ? piece : normalizer(piece);
    if (text === '') return [];
    let words = [text];
    for (const split of splits) {
      const next: string[] = [];
      for (const part of words) for (const word of split.pre_tokenize_text(part)) next.push(word);
      words = next;
    }
    const ids: number[] = [];
    for (const word of words) for (const id of idsOf(word)) ids.push(id);
    return ids;
  };
}

/** Words remembered with their ids, at most (then forgotten all at once: bounded memory, no bookkeeping per hit). */
const MAX_REMEMBERED_WORDS = 50_000;
/** Longer pre-tokens (a run of spaces, a long number of digits split or not) are encoded each time. */
const MAX_REMEMBERED_WORD_UNITS = 64;
