import {
  CALIBRATED_PARAMS,
  type BackendId,
  type CalibratedParam,
  type LearnInput,
  type LearnReply,
} from '@kvroute/routing';
import { packBlockHashes } from './keys';
import type { PoolLayout } from './pool-cells';
import type { PoolLeases } from './pool-leases';
import { RECORD_BLOCKS_PER_CALL } from './store-limits';
import { RedisStoreError } from './redis-store-error';
import { runScript, SCRIPTS, type RedisClient } from './scripts';

/** What learn.lua needs of the store. */
export interface PoolLearnOptions {
  readonly redis: RedisClient;
  readonly layout: PoolLayout;
  readonly leases: PoolLeases;
  readonly nowMs: () => number;
  readonly blockIdleTtlMs: number;
  readonly maxBlocksPerPool: number;
  /** An entry younger than this is no evidence of an eviction. */
  readonly minEvidenceAgeMs: number;
  /** The longest retention learned. */
  readonly maxRetentionMs: number;
}

/**
 * learn.lua: a correction and a calibration batch in one call (see RoutingStateStore.learn). In a
 * split pool the correction goes to its backend's cell and the calibration to cell 0 (one set of
 * learned figures per pool): two calls when those differ.
 */
export async function learnInPool(options: PoolLearnOptions, pool: string, input: LearnInput): Promise<LearnReply> {
  const correction = input.correction;
  const batch = Object.entries(input.calibration ?? {})
    .filter(([, figures]) => figures.samples > 0 && Number.isFinite(figures.sum))
    .map(([name, figures]) => `${name},${figures.samples},${figures.sum}`)
    .join(';');
  const correctionCell = correction === null ? 0 : options.layout.cellOf(correction.backendId);
  if (correctionCell === 0 || batch === '') return learnInCell(options, pool, correctionCell, correction, batch);
  const [corrected, calibrated] = await Promise.all([
    learnInCell(options, pool, correctionCell, correction, ''),
    learnInCell(options, pool, 0, null, batch),
  ]);
  return { retentionMs: corrected.retentionMs, calibration: calibrated.calibration };
}

async function learnInCell(
  options: PoolLearnOptions,
  pool: string,
  cell: number,
  correction: LearnInput['correction'],
  batch: string,
): Promise<LearnReply> {
  const keys = options.layout.keys(pool, cell);
  const reply = await runScript(
    options.redis,
    SCRIPTS.learn,
    [keys.forgotten, keys.ownersNew, keys.ownersOld, keys.generation, keys.calibration],
    [
      options.nowMs(),
      correction?.backendId ?? '',
      options.blockIdleTtlMs,
      options.maxBlocksPerPool,
      correction === null ? '' : correction.outcome === 'overpredicted' ? 'over' : 'under',
      correction === null ? '' : packBlockHashes(correction.blockHashes),
      correction?.matchRecordedAtMs ?? -1,
      correction?.routedAtMs ?? 0,
      options.minEvidenceAgeMs,
      RECORD_BLOCKS_PER_CALL,
      batch,
      options.maxRetentionMs,
    ],
  );
  const [retentionMs, recordedTo, calibration] = decodeLearnReply(reply);
  if (correction !== null && recordedTo > 0) {
    await options.leases.recordRestOfTaken(pool, correction.backendId as BackendId, correction.blockHashes, recordedTo);
  }
  return { retentionMs, calibration };
}

/** learn.lua's reply: retention (-1: none), blocks recorded, then (name, value, samples) triples. */
function decodeLearnReply(reply: unknown): [number | null, number, LearnReply['calibration']] {
  if (
    !Array.isArray(reply) ||
    reply.length < 2 ||
    (reply.length - 2) % 3 !== 0 ||
    !Number.isInteger(reply[0]) ||
    !Number.isInteger(reply[1])
  ) {
    throw new RedisStoreError(
      'REDIS_STORE_ERR_BAD_REPLY',
      SCRIPTS.learn.name,
      `learn.lua returned ${JSON.stringify(reply)?.slice(0, 120)}`,
    );
  }
  const calibration: Partial<Record<CalibratedParam, { value: number; samples: number }>> = {};
  for (let at = 2; at < reply.length; at += 3) {
    const name = String(reply[at]) as CalibratedParam;
    const value = Number(String(reply[at + 1]));
    if (CALIBRATED_PARAMS.includes(name) && Number.isFinite(value))
      calibration[name] = { value, samples: Number(reply[at + 2]) };
  }
  const retention = reply[0] as number;
  return [retention < 0 ? null : retention, reply[1] as number, calibration];
}
