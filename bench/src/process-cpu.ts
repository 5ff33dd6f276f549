import { readFileSync } from 'node:fs';

/** Clock ticks per second of /proc/<pid>/stat's utime and stime (USER_HZ, 100 on Linux). */
const TICKS_PER_SECOND = 100;

/**
 * CPU time (user + system) used so far by a process and its direct children, in seconds, from
 * Linux /proc; 0 for what cannot be read (process gone, not Linux).
 */
export function processCpuSeconds(pid: number): number {
  let ticks = 0;
  for (const id of [pid, ...childPids(pid)]) {
    try {
      ticks += cpuTicksFromStat(readFileSync(`/proc/${id}/stat`, 'utf8'));
    } catch {
      // process gone
    }
  }
  return ticks / TICKS_PER_SECOND;
}

/** utime + stime of one /proc/<pid>/stat line (fields 14 and 15; the command name may hold spaces). */
export function cpuTicksFromStat(stat: string): number {
  const fields = statFields(stat);
  const ticks = Number(fields[11]) + Number(fields[12]);
  if (!Number.isFinite(ticks)) throw new Error('unreadable /proc stat line');
  return ticks;
}

/** The fields of a /proc/<pid>/stat line after the command name: [0] is field 3 (state). */
function statFields(stat: string): string[] {
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
}

function childPids(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/**
 * CPU of the whole machine from /proc/stat's first line, in clock ticks: `busy` is user + nice +
 * system (work some process asked for; interrupts left out, as loopback traffic lands there),
 * `steal` is time the hypervisor gave to someone else.
 */
export function systemCpuTicks(stat: string): { busy: number; steal: number } {
  const fields = (stat.split('\n')[0] ?? '').trim().split(/\s+/).slice(1).map(Number);
  if (fields.length < 8 || fields.some((value) => !Number.isFinite(value))) throw new Error('unreadable /proc/stat');
  const [user = 0, nice = 0, system = 0, , , , , steal = 0] = fields;
  return { busy: user + nice + system, steal };
}

/** The machine's CPU so far, in seconds (see systemCpuTicks); undefined without /proc/stat. */
export function machineCpuSeconds(): { busy: number; steal: number } | undefined {
  try {
    const ticks = systemCpuTicks(readFileSync('/proc/stat', 'utf8'));
    return { busy: ticks.busy / TICKS_PER_SECOND, steal: ticks.steal / TICKS_PER_SECOND };
  } catch {
    return undefined;
  }
}

/** CPU of this process and of its children that have exited (wrk runs), in seconds. */
export function ownCpuSeconds(): number {
  try {
    const fields = statFields(readFileSync('/proc/self/stat', 'utf8'));
    return (Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14])) / TICKS_PER_SECOND;
  } catch {
    return 0;
  }
}

/**
 * How many cores' worth of CPU the whole machine used over `ms` (all processes), from /proc/stat;
 * undefined where /proc/stat cannot be read.
 */
export async function machineBusyCores(ms: number): Promise<number | undefined> {
  const before = machineCpuSeconds();
  await new Promise((resolve) => setTimeout(resolve, ms));
  const after = machineCpuSeconds();
  if (!before || !after) return undefined;
  return (after.busy - before.busy + after.steal - before.steal) / (ms / 1000);
}
