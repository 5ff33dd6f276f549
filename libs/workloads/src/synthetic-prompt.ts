/**
 * Deterministic synthetic prompts as token ids, for benchmarks and tests that need exact prompt
 * lengths and controlled sharing: equal seeds give equal prompts, different seeds share no prefix.
 * Ids stay in [1000, 91000), inside every common BPE vocabulary and below special-token ids.
 */
export function syntheticTokenPrompt(length: number, seed: number): number[] {
  const tokens = new Array<number>(length);
  let state = (seed * 2654435761 + 7) % 2147483648;
  for (let i = 0; i < length; i++) {
    state = (state * 1103515245 + 12345) % 2147483648;
    tokens[i] = 1000 + (state % 90_000);
  }
  return tokens;
}
