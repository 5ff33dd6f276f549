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
