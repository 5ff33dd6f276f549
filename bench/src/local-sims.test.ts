import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { findFreePorts, startLoopbackServer } from '@kvroute/testing';
import { startLocalSims, startOwnListener, stopLocalSims, waitReady } from './local-sims';

describe('startLocalSims', () => {
  it('starts real vllm-sim processes on free ports and stops them', async () => {
    const sims = await startLocalSims(2, ['--profile', 'fast', '--model', 'm']);
    try {
      expect(new Set(sims.map((sim) => sim.url)).size).toBe(2);
      for (const sim of sims) {
        const models = (await (await fetch(`${sim.url}/v1/models`)).json()) as { data: Array<{ id: string }> };
        expect(models.data[0]?.id).toBe('m');
      }
    } finally {
      await stopLocalSims(sims);
    }
    expect(sims.every((sim) => sim.process.exitCode !== null || sim.process.signalCode !== null)).toBe(true);
  });
});

/** An in-process server answering 200 on a port of its own: "another process" to a child. */
async function foreignServer(): Promise<{ port: number; close: () => Promise<void> }> {
  const server = await startLoopbackServer((_, response) => response.end('ok'));
  return { port: Number(new URL(server.url).port), close: () => server.close() };
}

/** A child that exits at once with `code` (as one failing to bind, or refusing a flag). */
const exiting = (code: number) => spawn(process.execPath, ['-e', `process.exit(${code})`], { stdio: 'ignore' });

describe('waitReady with the process expected to answer', () => {
  it('does not take another process answering on the port for the one it started', async () => {
    const foreign = await foreignServer();
    const child = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 10000)'], { stdio: 'ignore' });
    try {
      await expect(
        waitReady(`http://127.0.0.1:${foreign.port}/health`, { process: child, ports: [foreign.port] }),
      ).rejects.toThrow(/answered by another process/);
    } finally {
      child.kill('SIGKILL');
      await foreign.close();
    }
  });

  it('gives up at once when the process it started has exited, saying whether its port is taken', async () => {
    const foreign = await foreignServer();
    const child = spawn(process.execPath, ['-e', 'process.exit(1)'], { stdio: 'ignore' });
    await new Promise((resolve) => child.once('exit', resolve));
    try {
      await expect(
        waitReady(`http://127.0.0.1:${foreign.port}/health`, { process: child, ports: [foreign.port] }),
      ).rejects.toThrow(/exited \(1\) before it was ready: its port is taken/);
    } finally {
      await foreign.close();
    }
    // Nobody on the port any more: an exit for another reason (a bad flag), not a taken port.
    const error = await waitReady(`http://127.0.0.1:${foreign.port}/health`, {
      process: child,
      ports: [foreign.port],
    }).catch((caught: unknown) => caught as Error);
    expect(error?.message).toMatch(/exited \(1\) before it was ready$/);
  });
});

describe.runIf(process.platform === 'linux')('startOwnListener', () => {
  /** A child that listens on `port` and answers 200. */
  const listener = (port: number) =>
    spawn(
      process.execPath,
      ['-e', `require('node:http').createServer((q, r) => r.end('ok')).listen(${port}, '127.0.0.1')`],
      { stdio: 'ignore' },
    );

  it('starts again on other ports when one of its ports was taken, the probe port or another', async () => {
    for (const takenAt of [0, 1]) {
      const foreign = await foreignServer();
      const [free] = await findFreePorts(1);
      const first = takenAt === 0 ? [foreign.port, free as number] : [free as number, foreign.port];
      const tried: (readonly number[])[] = [];
      try {
        const started = await startOwnListener(first, (ports) => {
          tried.push(ports);
          // With the taken port among its own the child fails (as with EADDRINUSE); on fresh ones it listens.
          const child = ports.includes(foreign.port) ? exiting(1) : listener(ports[0] as number);
          return { probeUrl: `http://127.0.0.1:${ports[0]}/`, started: { process: child } };
        });
        expect(tried).toHaveLength(2);
        expect(tried[1]).not.toContain(foreign.port);
        expect(started.process.exitCode).toBeNull();
        started.process.kill('SIGKILL');
      } finally {
        await foreign.close();
      }
    }
  });

  it('does not start again a process that fails for another reason (its ports free)', async () => {
    const own = await findFreePorts(2);
    let starts = 0;
    await expect(
      startOwnListener(own, (ports) => {
        starts++;
        return { probeUrl: `http://127.0.0.1:${ports[0]}/`, started: { process: exiting(2) } };
      }),
    ).rejects.toThrow(/exited \(2\)/);
    expect(starts).toBe(1);
  });
});
