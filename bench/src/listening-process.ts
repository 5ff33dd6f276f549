import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

/**
 * Finds the local process listening on a TCP port, from Linux /proc: the overhead benchmark's private
 * redis-server (`startRedis({ fresh: true })` does not expose its pid), and local-sims.ts's check that a
 * process started on a port is the one answering there. Two steps, as `ss -ltnp` does: the listening
 * socket's inode from /proc/net/tcp{,6}, then the process holding a file descriptor `socket:[inode]` in
 * /proc/<pid>/fd.
 */

/** TCP state LISTEN in /proc/net/tcp's `st` column. */
const TCP_LISTEN = '0A';

/**
 * Inodes of the sockets in LISTEN state on `port` (any local address) in the text of /proc/net/tcp or
 * /proc/net/tcp6. Columns: sl, local_address (hex addr:port), rem_address, st, tx:rx queue, tr:when,
 * retrnsmt, uid, timeout, inode, …
 */
export function listeningSocketInodes(procNetTcp: string, port: number): string[] {
  const inodes: string[] = [];
  for (const line of procNetTcp.split('\n').slice(1)) {
    const fields = line.trim().split(/\s+/);
    if (fields.length < 10) continue;
    const local = fields[1] ?? '';
    const localPort = Number.parseInt(local.slice(local.lastIndexOf(':') + 1), 16);
    const inode = fields[9] ?? '0';
    if (fields[3] === TCP_LISTEN && localPort === port && inode !== '0') inodes.push(inode);
  }
  return inodes;
}

export interface ListeningProcess {
  readonly pid: number;
  /** /proc/<pid>/comm: the executable's name (e.g. `redis-server`). */
  readonly command: string;
}

/**
 * The process listening on TCP `port`, or undefined when none is found (not Linux, the socket belongs
 * to another network namespace, e.g. a container behind docker-proxy, or its fds cannot be read).
 * Processes in `preferPids` (and their children) are checked first, then every process.
 */
export function processListeningOn(port: number, preferPids: readonly number[] = []): ListeningProcess | undefined {
  const inodes = listeningInodes(port);
  if (inodes.size === 0) return undefined;
  const targets = new Set([...inodes].map((inode) => `socket:[${inode}]`));
  let all: number[] = [];
  try {
    all = readdirSync('/proc')
      .filter((name) => /^\d+$/.test(name))
      .map(Number);
  } catch {
    return undefined;
  }
  const preferred = preferPids.flatMap((pid) => [pid, ...childPids(pid)]);
  for (const pid of new Set([...preferred, ...all])) {
    if (holdsSocket(pid, targets)) return { pid, command: commandOf(pid) };
  }
  return undefined;
}

function holdsSocket(pid: number, targets: ReadonlySet<string>): boolean {
  let fds: string[];
  try {
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return false; // gone, or not ours to read
  }
  for (const fd of fds) {
    try {
      if (targets.has(readlinkSync(`/proc/${pid}/fd/${fd}`))) return true;
    } catch {
      // closed meanwhile
    }
  }
  return false;
}

function commandOf(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
  } catch {
    return '?';
  }
}

/** Children of every thread of `pid` (Node spawns from its main thread, but be thorough). */
function childPids(pid: number): number[] {
  try {
    return readdirSync(`/proc/${pid}/task`).flatMap((tid) => {
      try {
        return readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8')
          .trim()
          .split(/\s+/)
          .filter(Boolean)
          .map(Number);
      } catch {
        return [];
      }
    });
  } catch {
    return [];
  }
}

/**
 * Pins every thread of a running process to `core` (`taskset -a -cp core pid`: redis-server has
 * background I/O threads besides its main one) and returns the process's allowed CPU list afterwards
 * (/proc/<pid>/status `Cpus_allowed_list`), or an error message.
 */
export function pinRunningProcess(
  pid: number,
  core: number,
): { ok: true; cpus: string } | { ok: false; error: string } {
  const result = spawnSync('taskset', ['-a', '-cp', String(core), String(pid)], { encoding: 'utf8' });
  if (result.error || result.status !== 0)
    return {
      ok: false,
      error: (result.error?.message ?? result.stderr).trim() || `taskset exited with ${result.status}`,
    };
  try {
    const line = readFileSync(`/proc/${pid}/status`, 'utf8')
      .split('\n')
      .find((entry) => entry.startsWith('Cpus_allowed_list:'));
    const cpus = line?.split(':')[1]?.trim() ?? '?';
    return cpus === String(core)
      ? { ok: true, cpus }
      : { ok: false, error: `taskset ran, but the process may run on cores ${cpus}` };
  } catch (error) {
    return { ok: false, error: error instanceof Error ? error.message : String(error) };
  }
}

/** Whether some socket listens on `port` (any process, any local address); false where /proc cannot tell. */
export function portListenedOn(port: number): boolean {
  return listeningInodes(port).size > 0;
}

function listeningInodes(port: number): Set<string> {
  const inodes = new Set<string>();
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    try {
      for (const inode of listeningSocketInodes(readFileSync(file, 'utf8'), port)) inodes.add(inode);
    } catch {
      // no IPv6, or not Linux
    }
  }
  return inodes;
}
