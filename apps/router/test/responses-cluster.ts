import OpenAI from 'openai';
import { SimConfig } from '@kvroute/vllm-sim/config';
import { createSimServer, type SimServer } from '@kvroute/vllm-sim';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';

/**
 * Router replicas over vllm-sim backends that store Responses, with the official openai client, for the
 * Responses API tests. Each sim stores only its own responses (another answers 404 to a
 * `previous_response_id` it does not hold), so a follow-up succeeds only if the replica that routes it
 * finds the backend that learnt the id (in Redis, when the replicas share it).
 */
export interface ResponsesCluster {
  sims: Array<{ url: string; sim: SimServer; id: string }>;
  routers: RouterServer[];
  clients: OpenAI[];
}

export async function startResponsesCluster(
  replicas: number,
  redisUrl: string | undefined,
  extra: Partial<RouterConfig> = {},
  backends = 3,
): Promise<ResponsesCluster> {
  const sims = await Promise.all(
    Array.from({ length: backends }, async () => {
      const sim = await createSimServer(SimConfig.parse({ port: 0, profile: 'fast', model: 'test-model' }));
      const url = await sim.listen();
      return { url, sim, id: new URL(url).host };
    }),
  );
  const routers: RouterServer[] = [];
  const clients: OpenAI[] = [];
  for (let index = 0; index < replicas; index++) {
    const router = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        opsPort: 0,
        backends: sims.map((sim) => sim.url),
        retryBackoffMs: 1,
        ...(redisUrl ? { redisUrl, redisTimeoutMs: 200 } : {}),
        ...extra,
      }),
    );
    routers.push(router);
    clients.push(new OpenAI({ baseURL: `${await router.listen()}/v1`, apiKey: 'unused', maxRetries: 0 }));
  }
  return { sims, routers, clients };
}

export async function stopResponsesCluster(cluster: ResponsesCluster): Promise<void> {
  for (const router of cluster.routers) await router.close();
  await Promise.all(cluster.sims.map((sim) => sim.sim.close()));
}

/** A different long system prompt per conversation: its first turn is prefix-routed on it. */
export function instructionsOf(conversation: number): string {
  return `Conversation ${conversation}: you are agent number ${conversation * 7919}. `.repeat(30);
}
