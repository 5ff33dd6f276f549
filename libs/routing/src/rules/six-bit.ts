/**
 * Numbers as Lua reads them cheapest: with one `string.byte` over the whole text, where a decimal costs a
 * pattern step and a `tonumber` (strtod, ~1.7k instructions in Redis's Lua) each. The text is a width digit w
 * (the characters per number: 6 bits each), then each number in w characters, most significant first, as the
 * characters '0' (48) to 'o' (111): never a line's end, never outside ASCII (arguments travel as text).
 * Read by cost.lua (its rank line) and route.lua (the boundary blocks).
 */

/** The first character's code, the digit 0. */
export const SIX_BIT_BASE = 48;

/** `values` (integers in 0..max) in the six-bit form, each as wide as `max` needs; a RangeError for any other. */
export function sixBitNumbers(values: readonly number[], max: number): string {
  let width = 1;
  while (64 ** width <= max) width++;
  let text = String(width);
  for (const value of values) {
    if (!Number.isInteger(value) || value < 0 || value > max)
      throw new RangeError(`six-bit numbers: ${value} is not an integer in 0..${max}`);
    for (let shift = width - 1; shift >= 0; shift--)
      text += String.fromCharCode(SIX_BIT_BASE + (Math.floor(value / 64 ** shift) % 64));
  }
  return text;
}
