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
   * The engine figures of `backends` this replica has not sent yet (`<id>\t<waiting> <free>\n` each, at
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
      figures += `${backend.id}\t${load === undefined ? '0 0' : this.figuresOfLoad(load)}\n`;
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
      // Base 36, free + 1 (so -1 = unknown is 0): route.lua reads them with strtoul (lib/pool-members.lua engineFigures).
      const { waiting, freeTokens } = engineFigures(load);
      figures = `${waiting.toString(36)} ${(freeTokens + 1).toString(36)}`;
      this.figuresOf.set(load, figures);
    }
    return figures;
  }
}

/** Engine figures of a stored field (figuresOfLoad's format; '' = unknown); null when it is not one. */
export function engineFiguresOfField(field: string): EngineFigures | null {
  if (field === '') return UNKNOWN_ENGINE;
  const space = field.indexOf(' ');
  const waiting = parseInt(field.slice(0, space), 36);
  const freePlusOne = parseInt(field.slice(space + 1), 36);
  if (space <= 0 || !Number.isSafeInteger(waiting) || !Number.isSafeInteger(freePlusOne)) return null;
  return { waiting, freeTokens: freePlusOne - 1 };
}

const UNKNOWN_ENGINE: EngineFigures = { waiting: 0, freeTokens: -1 };

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
