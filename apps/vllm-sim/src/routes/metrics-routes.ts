import type { FastifyInstance } from 'fastify';
import type { Engine } from '../engine/engine';
import { renderLlamaCppProps, renderLlamaCppSlots } from '../metrics/llamacpp-slots';
import { metricsContentType, renderMetrics, type MetricsDialect } from '../metrics/render-metrics';

export interface MetricsRoutesOptions {
  /** One per data-parallel rank (vLLM dialect only above one). */
  readonly engines: readonly Engine[];
  readonly dialect: MetricsDialect;
  readonly servedModel: string;
  readonly startedAtUnixSeconds: number;
  readonly slots: number;
}

/**
 * `GET /metrics` in the chosen engine's Prometheus text format; with the llama.cpp dialect also
 * `GET /slots` and `GET /props`, which a poller needs to derive llama.cpp's load.
 */
export async function metricsRoutes(app: FastifyInstance, options: MetricsRoutesOptions): Promise<void> {
  app.get('/metrics', async (_request, reply) => {
    const text = renderMetrics(options.dialect, {
      engine: options.engines[0] as Engine,
      engines: options.engines,
      modelName: options.servedModel,
      startedAtUnixSeconds: options.startedAtUnixSeconds,
      slots: options.slots,
    });
    return reply.type(metricsContentType(options.dialect)).send(text);
  });
  if (options.dialect !== 'llamacpp') return;
  const engine = options.engines[0] as Engine;
  app.get('/slots', async () => renderLlamaCppSlots(engine, options.slots));
  app.get('/props', async () => renderLlamaCppProps(engine, options.servedModel, options.slots));
}
