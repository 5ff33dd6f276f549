/**
 * `promise`, or a rejection once it has taken longer than `timeoutMs` (`what` names the call in the
 * error). A timer that fires late because this process was busy (a large body parsed on the event loop)
 * is no sign of a slow Redis: the reply may be read already and waiting, so before giving up the
 * deadline lets one poll phase run (setImmediate runs after it). `onLateValue` gets what the call
 * resolved to after the deadline passed (a lease taken then is the caller's to give back).
 */
export function withDeadline<T>(
  promise: Promise<T>,
  timeoutMs: number,
  what: string,
  onLateValue?: (value: T) => void,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let state: 'pending' | 'settled' | 'timed-out' = 'pending';
    const timer = setTimeout(() => {
      setImmediate(() => {
        if (state !== 'pending') return;
        state = 'timed-out';
        reject(new Error(`${what} did not answer within ${timeoutMs} ms`));
      });
    }, timeoutMs);
    promise.then(
      (value) => {
        clearTimeout(timer);
        if (state === 'timed-out') return onLateValue?.(value);
        state = 'settled';
        resolve(value);
      },
      (error: unknown) => {
        clearTimeout(timer);
        if (state === 'timed-out') return;
        state = 'settled';
        reject(error);
      },
    );
  });
}
