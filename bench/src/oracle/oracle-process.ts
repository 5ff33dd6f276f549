import { spawn } from 'node:child_process';
import { nodeArgsFor } from '../app-process';
import { freePort, waitReady, type LocalRouter } from '../local-sims';

/**
 * Starts the oracle router (main.ts) as a child process on a free loopback port over `backendUrls`
 * and waits until its /readyz answers 200. `args` are extra flags (e.g. `--match-timeout-ms 1000`).
 * Stop it with local-sims' `stopLocalProcess`, as a router.
 */
export async function startOracleProcess(
  backendUrls: readonly string[],
  args: readonly string[] = [],
): Promise<LocalRouter> {
  const port = await freePort();
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
  const child = spawn(process.execPath, argv, { stdio: ['ignore', 'ignore', 'inherit'] });
  const url = `http://127.0.0.1:${port}`;
  const exited = new Promise<never>((_resolve, reject) =>
    child.once('exit', (code, signal) =>
      reject(new Error(`oracle router exited (${signal ?? code}) before it was ready`)),
    ),
  );
  try {
    await Promise.race([waitReady(`${url}/readyz`), exited]);
  } catch (error) {
    child.kill('SIGKILL');
    throw error;
  }
  return { url, process: child };
}
