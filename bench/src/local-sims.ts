import { spawn, type ChildProcess } from 'node:child_process';
import { findFreePort, findFreePorts } from '@kvroute/testing';
import { nodeArgsFor } from './app-process';
import { portListenedOn, processListeningOn } from './listening-process';

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
  const portsEach = options.kvEvents === true ? 3 : 1;
  // All ports at once (held open together, so distinct): one at a time, a port freed for a sim that has
  // not bound it yet can be handed out again (64 sims collided on one).
  const ports = await findFreePorts(portsEach * count);
  return Promise.all(
    Array.from({ length: count }, (_, index) =>
      startOwnListener(ports.slice(index * portsEach, (index + 1) * portsEach), (own) => {
        const [port, eventPort, replayPort] = own as [number, number?, number?];
        const kvEvents =
          eventPort === undefined || replayPort === undefined ? undefined : { port: eventPort, replayPort };
        const eventArgs =
          kvEvents === undefined
            ? []
            : ['--kv-events-port', String(kvEvents.port), '--kv-events-replay-port', String(kvEvents.replayPort)];
        const args = [
          ...nodeArgsFor('vllm-sim'),
          '--port',
          String(port),
          '--log-level',
          'warn',
          ...eventArgs,
          ...simArgs,
        ];
        const url = `http://127.0.0.1:${port}`;
        const child = spawnPinned(args, options.pinToCore);
        return {
          probeUrl: `${url}/health`,
          started: { url, process: child, ...(kvEvents === undefined ? {} : { kvEvents }) } as LocalSim,
        };
      }),
    ),
  );
}

function spawnPinned(args: readonly string[], pinToCore: number | undefined): ChildProcess {
  return pinToCore === undefined
    ? spawn(process.execPath, args, { stdio: ['ignore', 'inherit', 'inherit'] })
    : spawn('taskset', ['-c', String(pinToCore), process.execPath, ...args], {
        stdio: ['ignore', 'inherit', 'inherit'],
      });
}

/** How many times a process whose port another process took first is started again on other ports. */
const PORT_TRIES = 3;

/**
 * Starts a listening process on `ports` (else on as many fresh ones) and waits until it answers its probe, as the
 * process listening there: the sims, routers, poller and oracle of the bench's local clusters. A port
 * found free can be taken by another process before the child binds it (the suite's files start servers side by
 * side): the child then exits (address in use), and a probe alone would reach that other process, a server of
 * another test (a 404 for this test's model). Such a start is tried again on other ports, up to PORT_TRIES times.
 */
export async function startOwnListener<T extends { readonly process: ChildProcess }>(
  ports: readonly number[],
  start: (ports: readonly number[]) => { probeUrl: string; started: T },
): Promise<T> {
  let own = ports;
  for (let attempt = 1; ; attempt++) {
    const started = start(own);
    try {
      await waitReady(started.probeUrl, { process: started.started.process, ports: own });
      return started.started;
    } catch (error) {
      started.started.process.kill('SIGKILL');
      if (!(error instanceof PortTakenError) || attempt >= PORT_TRIES) throw error;
      own = await findFreePorts(ports.length);
    }
  }
}

/** The process started did not become the one listening on its port (see startOwnListener). */
class PortTakenError extends Error {}

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
 * With `own` (the process expected to answer, and its ports, the probe's first): fails as soon as that process has
 * exited (with PortTakenError when another process listens on any of its ports: a router's ops port, a sim's event
 * ports fail its start as its main port does), and with PortTakenError when the answer comes from another process
 * listening on the probe's port (Linux's /proc tells; where it cannot, the answer is taken as the process's, and an
 * exit is not retried).
 */
export async function waitReady(
  probeUrl: string,
  own?: { readonly process: ChildProcess; readonly ports: readonly number[] },
): Promise<void> {
  const exited = (): boolean => own !== undefined && (own.process.exitCode !== null || own.process.signalCode !== null);
  for (let attempt = 0; attempt < 600; attempt++) {
    if (exited()) {
      const { exitCode, signalCode } = own?.process ?? {};
      const reason = `${probeUrl}: the process exited (${signalCode ?? exitCode}) before it was ready`;
      // Taken only when another process holds the port: a bad flag or a missing bundle fails at once, not 3 times.
      if (own !== undefined && own.ports.some(portListenedOn)) throw new PortTakenError(`${reason}: its port is taken`);
      throw new Error(reason);
    }
    try {
      if ((await fetch(probeUrl)).ok) {
        const pid = own?.process.pid;
        const holder =
          own === undefined || pid === undefined ? undefined : processListeningOn(own.ports[0] as number, [pid]);
        if (holder !== undefined && holder.pid !== pid)
          throw new PortTakenError(`${probeUrl} is answered by another process (${holder.command}, pid ${holder.pid})`);
        return;
      }
    } catch (error) {
      if (error instanceof PortTakenError) throw error;
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
  const started = await startOwnListener(await findFreePorts(2), (ports) => {
    const [port, opsPort] = ports as [number, number];
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
    const url = `http://127.0.0.1:${port}`;
    const router: LocalRouter = {
      url,
      opsUrl: `http://127.0.0.1:${opsPort}`,
      process: spawnPinned(args, options.pinToCore),
    };
    return { probeUrl: `${url}/readyz`, started: router };
  });
  return started;
}

export async function stopLocalProcess(target: { readonly process: ChildProcess }): Promise<void> {
  await stopLocalSims([{ url: '', process: target.process }]);
}
