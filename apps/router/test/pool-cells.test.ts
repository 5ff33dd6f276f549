import { backendCell } from '@kvroute/redis-store';
import { findFreePorts, startRedis, type TestRedis } from '@kvroute/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestCluster, type TestCluster } from './start-test-cluster';

/**
 * Issue 15 (docs/adr/0007) through the router: with `poolCells: 2`, each conversation is decided in one
 * cell of the pool, every one of its turns in the same (so its later turns find its backend), different
 * conversations over a shared system prompt spread over both cells, and `/debug/route` names the cell
 * and explains the decision the request then gets.
 */

const CELLS = 2;
let redis: TestRedis;
let cluster: TestCluster;

beforeAll(async () => {
  redis = await startRedis({ fresh: true });
  // Three backends in each cell, whatever ports are free: a backend's cell is a function of its id
  // (host:port), so random ports could leave a cell empty or hold five of six, and the test would then
  // depend on them. With 3 + 3, which cell a conversation lands in depends on its text alone.
  const ports: number[] = [];
  const perCell = [0, 0];
  for (const port of await findFreePorts(40)) {
    const cell = backendCell(`127.0.0.1:${port}`, CELLS);
    if ((perCell[cell] as number) < 3) {
      perCell[cell] = (perCell[cell] as number) + 1;
      ports.push(port);
    }
  }
  expect(ports).toHaveLength(6);
  cluster = await startTestCluster({
    sims: ports.map((port) => ({ port })),
    router: { debugRoutes: true, redisUrl: redis.url, poolCells: CELLS },
  });
  expect(cluster.sims.map((sim) => backendCell(sim.id, CELLS)).sort()).toEqual([0, 0, 0, 1, 1, 1]);
});

afterAll(async () => {
  await cluster?.close();
  await redis?.stop();
});

const SYSTEM = {
  role: 'system' as const,
  content: `You are the assistant of a cells test. ${'Answer briefly and cite the routing rules. '.repeat(50)}`,
};

interface Explained {
  cell: number | null;
  decision: { kind: string; backendId: string };
}

async function turn(
  messages: readonly { role: 'system' | 'user' | 'assistant'; content: string }[],
): Promise<{ backend: string; explained: Explained }> {
  const body = JSON.stringify({ model: 'test-model', messages, max_tokens: 4 });
  const explained = (await (await cluster.debugRoute(body)).json()) as Explained;
  const response = await fetch(`${cluster.routerUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
  });
  expect(response.status).toBe(200);
  await response.text();
  return { backend: response.headers.get('x-router-backend') ?? '', explained };
}

describe('a pool split into cells, through the router', () => {
  it('decides each conversation in one cell, every turn in the same, and explains it in /debug/route', async () => {
    const cellsUsed = new Set<number>();
    for (let conversation = 0; conversation < 8; conversation++) {
      const opening = [
        SYSTEM,
        {
          role: 'user' as const,
          content: `Conversation ${conversation}: plan the routing of ${'a long agent session '.repeat(8)}`,
        },
      ];
      const first = await turn(opening);
      const cell = first.explained.cell as number;
      expect([0, 1]).toContain(cell);
      expect(first.explained.decision.backendId).toBe(first.backend);
      expect(backendCell(first.backend, CELLS)).toBe(cell);
      cellsUsed.add(cell);
      const second = await turn([
        ...opening,
        { role: 'assistant', content: 'Done: four steps.' },
        { role: 'user', content: 'And the fifth?' },
      ]);
      expect(second.explained.cell).toBe(cell);
      expect(second.backend).toBe(first.backend);
    }
    expect(cellsUsed.size).toBe(CELLS);
    const metrics = await (await fetch(`${cluster.opsUrl}/metrics`)).text();
    expect(metrics).toContain('kvroute_router_cell_spills_total');
  });
});
