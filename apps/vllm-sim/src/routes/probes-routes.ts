import type { FastifyInstance, FastifyReply } from 'fastify';
import { EngineError } from '../engine-errors';
import type { FaultInjector } from '../faults';
import type { MetricsDialect } from '../metrics/render-metrics';

export interface ProbesRoutesOptions {
  readonly dialect: MetricsDialect;
  readonly faults: FaultInjector;
  readonly version: string;
}

/**
 * Health and version as each engine answers them: vLLM `GET /health` → 200 with an empty body
 * (503 when the engine is dead), llama.cpp → `{"status":"ok"}` or 503 "Loading model".
 */
export async function probesRoutes(app: FastifyInstance, options: ProbesRoutesOptions): Promise<void> {
  const health = async (reply: FastifyReply): Promise<unknown> => {
    if (options.faults.current.unhealthy) {
      throw new EngineError('unavailable', options.dialect === 'llamacpp' ? 'Loading model' : 'Engine is not healthy.');
    }
    return options.dialect === 'llamacpp' ? { status: 'ok' } : reply.code(200).send();
  };
  app.get('/health', (_request, reply) => health(reply));
  app.get('/ping', (_request, reply) => health(reply));
  app.get('/version', async () => ({ version: options.version }));
}
