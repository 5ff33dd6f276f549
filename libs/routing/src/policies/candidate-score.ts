import type { Candidate, CandidateScore } from '../types';

/** One candidate's line in a decision's explanation; `parts` and `excluded` only when given. */
export function candidateScore(
  candidate: Candidate,
  score: number,
  extra: { readonly parts?: Readonly<Record<string, number>>; readonly excluded?: string | undefined } = {},
): CandidateScore {
  return {
    backendId: candidate.backend.id,
    matchBlocks: candidate.matchBlocks,
    inflight: candidate.inflight,
    score,
    ...(extra.parts === undefined ? {} : { parts: extra.parts }),
    ...(extra.excluded === undefined ? {} : { excluded: extra.excluded }),
  };
}
