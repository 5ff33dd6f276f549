/**
 * A backend's part in prefill/decode disaggregation (issue 32): `prefill` and `decode` engines serve one leg each of a
 * disaggregated request, `both` (the default) serve whole requests or either leg. A model with a prefill-capable and a
 * decode-capable backend is disaggregated (pipeline/prefill.ts).
 */
export const BACKEND_ROLES = ['both', 'prefill', 'decode'] as const;
export type BackendRole = (typeof BACKEND_ROLES)[number];

/** Whether a backend of `role` may serve a disaggregated request's prefill leg. */
export function servesPrefill(role: BackendRole): boolean {
  return role !== 'decode';
}

/** Whether a backend of `role` may serve a disaggregated request's decode leg, or a whole request. */
export function servesDecode(role: BackendRole): boolean {
  return role !== 'prefill';
}
