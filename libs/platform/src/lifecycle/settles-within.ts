/**
 * True if `promise` settles (resolves or rejects) within `timeoutMs`, false if the time runs out first.
 * A rejection counts as settled and is not rethrown: shutdown steps use this to bound a wait, not to
 * learn its outcome. The timer never outlives the answer.
 */
export async function settlesWithin(promise: Promise<unknown>, timeoutMs: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const settled = promise.then(
    () => true,
    () => true,
  );
  const timedOut = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), timeoutMs)));
  const result = await Promise.race([settled, timedOut]);
  clearTimeout(timer);
  return result;
}
