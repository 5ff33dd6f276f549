import { spawn } from 'node:child_process';
import { nodeArgsFor } from '../app-process';
import { freePort, startOwnListener, type LocalRouter } from '../local-sims';

/**
 * Starts the oracle router (main.ts) as a child process on a free loopback port over `backendUrls`
 * and waits until its /readyz answers 200. `args` are extra flags (e.g. `--match-timeout-ms 1000`).
 * Stop it with local-sims' `stopLocalProcess`, as a router.
 */
export async function startOracleProcess(
  backendUrls: readonly string[],
  args: readonly string[] = [],
): Promise<LocalRouter> {
  // The child's early exit and a port another process took first are startOwnListener's to notice.
  return startOwnListener([await freePort()], ([port]) => {
    const argv = [
      ...nodeArgsFor('oracle'),
      '--host',
      '127.0.0.1',
      '--port',
      String(port),
      '--backends',
      backendUrls.join(','),
      ...args,
    ];
    const url = `http://127.0.0.1:${port}`;
    const child = spawn(process.execPath, argv, { stdio: ['ignore', 'ignore', 'inherit'] });
    return { probeUrl: `${url}/readyz`, started: { url, process: child } };
  });
}
