import {
  engineFigures,
  hashString53,
  type BackendId,
  type BackendInfo,
  type EngineFigures,
  type EngineLoad,
} from '@kvroute/routing';

/**
 * What a decision tells route.lua about its candidates without shipping them every call. The
 * candidates (ids and weights, configuration order) are a member set stored once in the pool's slot
 * under its version, a digest of the set, so a call names the version only; replicas with the same
 * eligible backends share the stored set, and one whose set differs (a breaker open here only) stores
 * its own. The engines' own figures (requests waiting, free KV: the health poller's, as this replica
 * sees them) live in the pool's slot too, and a call carries only the figures that changed since this
 * replica last sent them. At 1,024 backends a decision's arguments went from ~40 KB to the block hashes
 * and a few hundred bytes (docs/results.md).
 */

/** A member set as route.lua stores it: records `<id>\t<weight>\n` in configuration order, and its version. */
export interface MemberSet {
  readonly version: string;
  readonly records: string;
  /** How many members (records). */
  readonly count: number;
}

/** How long a stored member set lives, ms: a set no replica uses any more goes; one in use is stored again when it does. */
export const MEMBER_SET_TTL_MS = 600_000;

/** Engine figures one call carries at most (each ~30 bytes): a replica's first calls spread its initial ones. */
export const ENGINE_FIGURES_PER_CALL = 128;

/** One replica's view of one pool cell: its member set and the engine figures it has sent there. */
export class PoolMembers {
  private backends: readonly BackendInfo[] = [];
  private memberSet: MemberSet = { version: '', records: '', count: 0 };
  /**
   * Whether a call of this replica's stored the current member set or found it stored: until then calls
   * bring it along (a new set costs no extra round trip), after that only when Redis lost it.
   */
  storedHere = false;
  /** backend → the engine load whose figures this replica last sent (undefined: none known, sent as unknown). */
  private readonly sent = new Map<BackendId, EngineLoad | undefined>();
  /** Figures of each engine load, computed once per load object (a poller update is a new object). */
  private readonly figuresOf = new WeakMap<EngineLoad, string>();

  /** The member set of `backends`; recomputed only when the ids or weights changed since the last call. */
  membersOf(backends: readonly BackendInfo[]): MemberSet {
    if (!sameMembers(backends, this.backends)) {
      let records = '';
      for (const backend of backends) records += `${backend.id}\t${backend.weight}\n`;
      const version = hashString53(records).toString(36);
      if (version !== this.memberSet.version) this.storedHere = false;
      // Backends that left keep no entry here (discovered pods come and go).
      const members = new Set(backends.map((backend) => backend.id));
      for (const id of this.sent.keys()) if (!members.has(id)) this.sent.delete(id);
      this.memberSet = { version, records, count: backends.length };
      this.backends = backends;
    }
    return this.memberSet;
  }

  /**
   * The engine figures of `backends` this replica has not sent yet (`<id>\t<field>\n` each: engineFiguresField, at
   * most ENGINE_FIGURES_PER_CALL), marked sent. `everything`: as if none were sent (Redis lost them).
   */
  engineFiguresToSend(
    backends: readonly BackendInfo[],
    engine: ReadonlyMap<BackendId, EngineLoad> | undefined,
    everything: boolean,
  ): string {
    if (everything) this.sent.clear();
    let figures = '';
    let count = 0;
    for (const backend of backends) {
      const load = engine?.get(backend.id);
      if (this.sent.has(backend.id) && this.sent.get(backend.id) === load) continue;
      if (count === ENGINE_FIGURES_PER_CALL) break;
      figures += `${backend.id}\t${load === undefined ? UNKNOWN_ENGINE_FIELD : this.figuresOfLoad(load)}\n`;
      this.sent.set(backend.id, load);
      count++;
    }
    return figures;
  }

  /** Forgets that `backendId`'s figures were sent (Redis dropped them: forget-backend.lua). */
  forgetSent(backendId: BackendId): void {
    this.sent.delete(backendId);
  }

  /** Forgets what was sent for a call that failed: its figures may not have been stored. */
  unsend(figures: string): void {
    for (const line of figures.split('\n')) {
      const tab = line.indexOf('\t');
      if (tab > 0) this.sent.delete(line.slice(0, tab));
    }
  }

  private figuresOfLoad(load: EngineLoad): string {
    let figures = this.figuresOf.get(load);
    if (figures === undefined) {
      figures = engineFiguresField(engineFigures(load));
      this.figuresOf.set(load, figures);
    }
    return figures;
  }
}

/**
 * An engine's figures as route.lua keeps them (and reads them, per candidate): 8 characters, '0' (48) to
 * 'o' (111), 6 bits each, most significant first: waiting in 3 (at most 262,143) and free KV tokens + 1 in 5
 * (at most 1,073,741,822 tokens; 0 = no limit known), clamped. One string.byte reads them, where two base-36
 * numbers cost a pattern match and two tonumber calls (18 k instructions a decision more at 16 backends, issue 28).
 */
export function engineFiguresField(figures: EngineFigures): string {
  // A figure that is not a number (a scrape's NaN) is unknown: the field stays 8 characters from '0' to 'o'.
  if (!Number.isFinite(figures.waiting) || !Number.isFinite(figures.freeTokens)) return UNKNOWN_ENGINE_FIELD;
  return (
    sixBitDigits(Math.min(Math.max(0, figures.waiting), MAX_WAITING), 3) +
    sixBitDigits(Math.min(Math.max(0, figures.freeTokens + 1), MAX_FREE_PLUS_ONE), 5)
  );
}

/** Engine figures of a stored field (engineFiguresField's; '' = unknown); null when it is not one. */
export function engineFiguresOfField(field: string): EngineFigures | null {
  if (field === '') return UNKNOWN_ENGINE;
  if (field.length !== 8) return null;
  let waiting = 0;
  let freePlusOne = 0;
  for (let at = 0; at < 8; at++) {
    const digit = field.charCodeAt(at) - SIX_BIT_BASE;
    if (digit < 0 || digit > 63) return null;
    if (at < 3) waiting = waiting * 64 + digit;
    else freePlusOne = freePlusOne * 64 + digit;
  }
  return { waiting, freeTokens: freePlusOne - 1 };
}

const SIX_BIT_BASE = 48;
const MAX_WAITING = 64 ** 3 - 1;
const MAX_FREE_PLUS_ONE = 64 ** 5 - 1;
/** No engine figures known: 0 waiting, no KV limit. */
export const UNKNOWN_ENGINE: EngineFigures = { waiting: 0, freeTokens: -1 };
const UNKNOWN_ENGINE_FIELD = engineFiguresField(UNKNOWN_ENGINE);

function sixBitDigits(value: number, width: number): string {
  let digits = '';
  for (let shift = width - 1; shift >= 0; shift--)
    digits += String.fromCharCode(SIX_BIT_BASE + (Math.floor(value / 64 ** shift) % 64));
  return digits;
}

function sameMembers(a: readonly BackendInfo[], b: readonly BackendInfo[]): boolean {
  if (a === b) return true;
  if (a.length !== b.length) return false;
  for (let index = 0; index < a.length; index++) {
    const x = a[index] as BackendInfo;
    const y = b[index] as BackendInfo;
    if (x !== y && (x.id !== y.id || x.weight !== y.weight)) return false;
  }
  return true;
}
