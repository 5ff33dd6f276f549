import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
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

describe('waitReady with the process expected to answer', () => {
  /** An in-process server answering 200 on a port of its own: "another process" to a child. */
  async function foreignServer(): Promise<{ port: number; close: () => Promise<void> }> {
    const server = createServer((_, response) => response.end('ok'));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    return { port, close: () => new Promise((resolve) => server.close(() => resolve())) };
  }

  it('does not take another process answering on the port for the one it started', async () => {
    const foreign = await foreignServer();
    const child = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 10000)'], { stdio: 'ignore' });
    try {
      await expect(
        waitReady(`http://127.0.0.1:${foreign.port}/health`, { process: child, port: foreign.port }),
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
        waitReady(`http://127.0.0.1:${foreign.port}/health`, { process: child, port: foreign.port }),
      ).rejects.toThrow(/exited \(1\) before it was ready: its port is taken/);
    } finally {
      await foreign.close();
    }
    // Nobody on the port any more: an exit for another reason (a bad flag), not a taken port.
    const error = await waitReady(`http://127.0.0.1:${foreign.port}/health`, {
      process: child,
      port: foreign.port,
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

  it('starts again on other ports when its port was taken, and not when the process fails otherwise', async () => {
    const foreign = await (async () => {
      const server = createServer((_, response) => response.end('ok'));
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      return { port: (server.address() as AddressInfo).port, close: () => server.close() };
    })();
    const tried: number[] = [];
    try {
      const started = await startOwnListener([foreign.port], (ports) => {
        const port = ports[0] as number;
        tried.push(port);
        // On the taken port the child fails (as with EADDRINUSE); on the next one it listens.
        const child = port === foreign.port ? spawn(process.execPath, ['-e', 'process.exit(1)']) : listener(port);
        return { probeUrl: `http://127.0.0.1:${port}/`, started: { process: child } };
      });
      expect(tried).toHaveLength(2);
      expect(tried[1]).not.toBe(foreign.port);
      expect(started.process.exitCode).toBeNull();
      started.process.kill('SIGKILL');
    } finally {
      foreign.close();
    }
    let starts = 0;
    await expect(
      startOwnListener([], () => {
        starts++;
        return {
          probeUrl: 'http://127.0.0.1:9/',
          started: { process: spawn(process.execPath, ['-e', 'process.exit(2)']) },
        };
      }),
    ).rejects.toThrow(/exited \(2\)/);
    expect(starts).toBe(1);
  });
});
