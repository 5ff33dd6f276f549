import { spawn, type ChildProcess } from 'node:child_process';
import { findFreePort, findFreePorts } from '@kvroute/testing';
import { nodeArgsFor } from './app-process';

/** Starts vllm-sim processes on free loopback ports, for the demo and benchmarks. */
export interface LocalSim {
  readonly url: string;
  readonly process: ChildProcess;
}

export async function startLocalSims(
  count: number,
  simArgs: readonly string[],
  options: { pinToCore?: number } = {},
): Promise<LocalSim[]> {
  const sims: LocalSim[] = [];
  // All ports at once (held open together, so distinct): one at a time, a port freed for a sim that has
  // not bound it yet can be handed out again (64 sims collided on one).
  for (const port of await findFreePorts(count)) {
    const args = [...nodeArgsFor('vllm-sim'), '--port', String(port), '--log-level', 'warn', ...simArgs];
    const child =
      options.pinToCore === undefined
        ? spawn(process.execPath, args, { stdio: ['ignore', 'inherit', 'inherit'] })
        : spawn('taskset', ['-c', String(options.pinToCore), process.execPath, ...args], {
            stdio: ['ignore', 'inherit', 'inherit'],
          });
    sims.push({ url: `http://127.0.0.1:${port}`, process: child });
  }
  await Promise.all(sims.map((sim) => waitReady(`${sim.url}/health`)));
  return sims;
}

/** How long a stopped process may take to exit before SIGKILL, ms. */
const STOP_DEADLINE_MS = 10_000;

export async function stopLocalSims(sims: readonly LocalSim[]): Promise<void> {
  await Promise.all(
    sims.map(
      (sim) =>
        new Promise<void>((resolve) => {
          if (sim.process.exitCode !== null || sim.process.signalCode !== null) return resolve();
          // A process that has not exited this long after SIGTERM (a router waiting on a stuck stream) is killed.
          const killer = setTimeout(() => sim.process.kill('SIGKILL'), STOP_DEADLINE_MS);
          sim.process.once('exit', () => {
            clearTimeout(killer);
            resolve();
          });
          sim.process.kill('SIGTERM');
        }),
    ),
  );
}

export async function waitReady(probeUrl: string): Promise<void> {
  for (let attempt = 0; attempt < 300; attempt++) {
    try {
      if ((await fetch(probeUrl)).ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`${probeUrl} did not answer 200 in time`);
}

/** The bench's name for @kvroute/testing's findFreePort, which bench/src/runner and the proxies import from here. */
export const freePort = findFreePort;

export interface LocalRouter {
  readonly url: string;
  readonly process: ChildProcess;
}

/** Starts a kvroute router process over `backendUrls` and waits until it is ready. */
export async function startLocalRouter(
  backendUrls: readonly string[],
  routerArgs: readonly string[],
  options: { pinToCore?: number } = {},
): Promise<LocalRouter> {
  const port = await freePort();
  const args = [
    ...nodeArgsFor('router'),
    '--host',
    '127.0.0.1',
    '--port',
    String(port),
    '--backends',
    backendUrls.join(','),
    '--log-level',
    'warn',
    '--shutdown-drain-delay-ms',
    '0',
    ...routerArgs,
  ];
  const child =
    options.pinToCore === undefined
      ? spawn(process.execPath, args, { stdio: ['ignore', 'inherit', 'inherit'] })
      : spawn('taskset', ['-c', String(options.pinToCore), process.execPath, ...args], {
          stdio: ['ignore', 'inherit', 'inherit'],
        });
  const url = `http://127.0.0.1:${port}`;
  await waitReady(`${url}/readyz`);
  return { url, process: child };
}

export async function stopLocalProcess(target: { readonly process: ChildProcess }): Promise<void> {
  await stopLocalSims([{ url: '', process: target.process }]);
}
