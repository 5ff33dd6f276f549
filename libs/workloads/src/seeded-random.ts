/**
 * Deterministic randomness: mulberry32, a 32-bit-state PRNG. Equal seeds give equal sequences, so a
 * workload, a fault pattern or a failing test replays exactly. Values are uniform in [0, 1), like
 * Math.random. Not for anything that must be unpredictable.
 */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
