import { spawn, type ChildProcess } from 'node:child_process';
import { findFreePort, findFreePorts } from '@kvroute/testing';
import { nodeArgsFor } from './app-process';

/** Starts vllm-sim processes on free loopback ports, for the demo and benchmarks. */
export interface LocalSim {
  readonly url: string;
  readonly process: ChildProcess;
  /** Its KV-event PUB and replay ROUTER ports (`kvEvents`); absent: it publishes none. */
  readonly kvEvents?: { readonly port: number; readonly replayPort: number };
}

export async function startLocalSims(
  count: number,
  simArgs: readonly string[],
  options: { pinToCore?: number; kvEvents?: boolean } = {},
): Promise<LocalSim[]> {
  const sims: LocalSim[] = [];
  // All ports at once (held open together, so distinct): one at a time, a port freed for a sim that has
  // not bound it yet can be handed out again (64 sims collided on one).
  const ports = await findFreePorts(options.kvEvents === true ? 3 * count : count);
  for (let index = 0; index < count; index++) {
    const port = ports[index] as number;
    const kvEvents =
      options.kvEvents === true
        ? { port: ports[count + 2 * index] as number, replayPort: ports[count + 2 * index + 1] as number }
        : undefined;
    const eventArgs =
      kvEvents === undefined
        ? []
        : ['--kv-events-port', String(kvEvents.port), '--kv-events-replay-port', String(kvEvents.replayPort)];
    const args = [...nodeArgsFor('vllm-sim'), '--port', String(port), '--log-level', 'warn', ...eventArgs, ...simArgs];
    const child =
      options.pinToCore === undefined
        ? spawn(process.execPath, args, { stdio: ['ignore', 'inherit', 'inherit'] })
        : spawn('taskset', ['-c', String(options.pinToCore), process.execPath, ...args], {
            stdio: ['ignore', 'inherit', 'inherit'],
          });
    sims.push({ url: `http://127.0.0.1:${port}`, process: child, ...(kvEvents === undefined ? {} : { kvEvents }) });
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

/**
 * Polls `probeUrl` every 50 ms until it answers 200, for up to 30 s: a bound, not a wait. An app started
 * from its sources under tsx on 2 busy cores (the whole suite at once) has taken over 15 s to listen.
 */
export async function waitReady(probeUrl: string): Promise<void> {
  for (let attempt = 0; attempt < 600; attempt++) {
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
/** Likewise findFreePorts: `count` distinct free ports, held open together until all are known. */
export const freePorts = findFreePorts;

export interface LocalRouter {
  readonly url: string;
  /** Its ops listener (/metrics, the full /readyz); absent for a router that has none (the bench's oracle). */
  readonly opsUrl?: string;
  readonly process: ChildProcess;
}

/**
 * Starts a kvroute router process over `backendUrls` and waits until it is ready. An empty list passes no
 * `--backends` (the router's `--config` file in `routerArgs` names them, e.g. with their data-parallel ranks).
 */
export async function startLocalRouter(
  backendUrls: readonly string[],
  routerArgs: readonly string[],
  options: { pinToCore?: number } = {},
): Promise<LocalRouter> {
  // Both at once (held together, so distinct): several routers run side by side, and the ops default
  // (9464) would clash between them and with the poller.
  const [port, opsPort] = (await findFreePorts(2)) as [number, number];
  const args = [
    ...nodeArgsFor('router'),
    '--host',
    '127.0.0.1',
    '--port',
    String(port),
    '--ops-port',
    String(opsPort),
    ...(backendUrls.length === 0 ? [] : ['--backends', backendUrls.join(',')]),
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
  return { url, opsUrl: `http://127.0.0.1:${opsPort}`, process: child };
}

export async function stopLocalProcess(target: { readonly process: ChildProcess }): Promise<void> {
  await stopLocalSims([{ url: '', process: target.process }]);
}
