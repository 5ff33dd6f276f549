import { randomBytes } from 'node:crypto';

let counter = 0;

/**
 * A key prefix unique per call, `test:<label>:<pid>:<counter>:<random>` (no trailing colon), so tests sharing one
 * Redis never see each other's keys. The random part keeps it unique across vitest workers that share a pid.
 */
export function uniqueKeyPrefix(label: string): string {
  counter += 1;
  const safeLabel = label.replace(/[\s:]+/g, '-') || 'unnamed';
  return `test:${safeLabel}:${process.pid}:${counter}:${randomBytes(4).toString('hex')}`;
}
