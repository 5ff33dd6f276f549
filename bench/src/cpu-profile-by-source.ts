/**
 * Where a process's CPU went, by original source file: the self time of a V8 CPU profile (`node --cpu-prof`,
 * a `.cpuprofile`) summed per source file of a bundle, through its source map, so two builds whose bundles
 * differ line by line compare file by file (a function-level comparison of two bundles mismatches names:
 * esbuild renames clashing ones, `send2`, `parse4`). Pure: the caller gives the position lookup.
 */

/** The parts of a `.cpuprofile` this reads (Chrome DevTools protocol, Profiler.Profile). */
export interface CpuProfile {
  readonly nodes: readonly {
    readonly id: number;
    readonly callFrame: {
      readonly functionName: string;
      readonly url: string;
      /** 0-based. */
      readonly lineNumber: number;
      /** 0-based. */
      readonly columnNumber: number;
    };
  }[];
  readonly samples: readonly number[];
  /** µs between consecutive samples; the first is from the profile's start. */
  readonly timeDeltas: readonly number[];
}

/** The original source of a generated position (1-based line, 0-based column), or null when the map has none. */
export type OriginalSourceOf = (line: number, column: number) => string | null;

/** Self time per source, µs; `busyUs` excludes V8's (idle) and (program) samples. */
export interface SelfTimeBySource {
  readonly busyUs: number;
  readonly bySource: ReadonlyMap<string, number>;
}

/** Frames V8 records while the thread waits or runs outside JavaScript it can name: not the process's work. */
const NOT_BUSY = new Set(['(idle)', '(program)']);

/**
 * Self time of `profile` per source file. Frames in `bundleUrl` (a suffix of their url) map through
 * `originalSourceOf`, shortened to a package (`node_modules/<name>` or `<@scope>/<name>`) or a path from
 * `apps/` or `libs/`; other frames (Node's own JavaScript, native code, the garbage collector) count as
 * `[native] <function name>`. A sample's time is the delta of the next sample, as DevTools counts it.
 */
export function selfTimeBySource(
  profile: CpuProfile,
  bundleUrl: string,
  originalSourceOf: OriginalSourceOf,
): SelfTimeBySource {
  const frameOf = new Map(profile.nodes.map((node) => [node.id, node.callFrame]));
  const selfUs = new Map<number, number>();
  profile.samples.forEach((nodeId, index) => {
    selfUs.set(nodeId, (selfUs.get(nodeId) ?? 0) + (profile.timeDeltas[index + 1] ?? 0));
  });
  const bySource = new Map<string, number>();
  let busyUs = 0;
  for (const [nodeId, us] of selfUs) {
    const frame = frameOf.get(nodeId);
    if (frame === undefined || NOT_BUSY.has(frame.functionName)) continue;
    busyUs += us;
    const source = frame.url.endsWith(bundleUrl)
      ? shortSource(originalSourceOf(frame.lineNumber + 1, frame.columnNumber) ?? '(unmapped)')
      : `[native] ${frame.functionName || frame.url || '(anonymous)'}`;
    bySource.set(source, (bySource.get(source) ?? 0) + us);
  }
  return { busyUs, bySource };
}

/** `../../node_modules/@scope/name/lib/x.js` → `node_modules/@scope/name`; `../../libs/a/src/b.ts` → `libs/a/src/b.ts`. */
export function shortSource(source: string): string {
  const packageAt = source.lastIndexOf('node_modules/');
  if (packageAt >= 0) {
    const parts = source.slice(packageAt).split('/');
    return parts.slice(0, parts[1]?.startsWith('@') ? 3 : 2).join('/');
  }
  const ownAt = source.search(/(^|\/)(apps|libs|bench)\//);
  return ownAt < 0 ? source : source.slice(ownAt).replace(/^\//, '');
}

/** One source's self time in two profiles, ms, and the difference (after − before). */
export interface SourceChange {
  readonly source: string;
  readonly beforeMs: number;
  readonly afterMs: number;
  readonly changeMs: number;
}

/** Every source of either side, the largest change (either sign) first. */
export function compareBySource(before: SelfTimeBySource, after: SelfTimeBySource): SourceChange[] {
  const sources = new Set([...before.bySource.keys(), ...after.bySource.keys()]);
  return [...sources]
    .map((source) => {
      const beforeMs = (before.bySource.get(source) ?? 0) / 1000;
      const afterMs = (after.bySource.get(source) ?? 0) / 1000;
      return { source, beforeMs, afterMs, changeMs: afterMs - beforeMs };
    })
    .sort((a, b) => Math.abs(b.changeMs) - Math.abs(a.changeMs) || a.source.localeCompare(b.source));
}
