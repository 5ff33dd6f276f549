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
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(fields[11]) + Number(fields[12]);
  if (!Number.isFinite(ticks)) throw new Error('unreadable /proc stat line');
  return ticks;
}

function childPids(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/** Busy and total jiffies of all cores together, from /proc/stat's first line. */
export function systemCpuTicks(stat: string): { busy: number; total: number } {
  const fields = (stat.split('\n')[0] ?? '').trim().split(/\s+/).slice(1).map(Number);
  if (fields.length < 4 || fields.some((value) => !Number.isFinite(value))) throw new Error('unreadable /proc/stat');
  const total = fields.slice(0, 8).reduce((sum, value) => sum + value, 0);
  const idle = (fields[3] ?? 0) + (fields[4] ?? 0);
  return { busy: total - idle, total };
}

/**
 * How many cores' worth of CPU the whole machine used over `ms` (all processes), from /proc/stat;
 * undefined where /proc/stat cannot be read.
 */
export async function machineBusyCores(ms: number): Promise<number | undefined> {
  try {
    const before = systemCpuTicks(readFileSync('/proc/stat', 'utf8'));
    await new Promise((resolve) => setTimeout(resolve, ms));
    const after = systemCpuTicks(readFileSync('/proc/stat', 'utf8'));
    return (after.busy - before.busy) / TICKS_PER_SECOND / (ms / 1000);
  } catch {
    return undefined;
  }
}
