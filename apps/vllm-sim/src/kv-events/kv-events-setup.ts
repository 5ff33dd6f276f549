import type { SimConfig } from '../config';
import { encodeEventBatch } from './kv-event-encoding';
import { KvEventRecorder } from './kv-event-recorder';
import type { VllmBlockHasher } from './vllm-block-hash';
import { ZmqEventPublisher, type ZeromqModule } from './zmq-event-publisher';

/** One data-parallel rank's KV events: the recorder its engine feeds, the sockets it publishes on. */
export interface RankKvEvents {
  readonly rank: number;
  readonly recorder: KvEventRecorder;
  readonly publisher: ZmqEventPublisher;
}

/** The PUB and replay ports of `rank`: each offset by the rank, as vLLM's `offset_endpoint_port` does. */
export function kvEventPorts(config: SimConfig, rank: number): { pub: number; replay: number | null } {
  const base = config.kvEventsPort as number;
  const replayBase = config.kvEventsReplayPort ?? base + config.dataParallelSize;
  return { pub: base + rank, replay: replayBase === 0 ? null : replayBase + rank };
}

/**
 * Refuses port layouts where one rank's PUB port is another's replay port. vLLM offsets both endpoints by the
 * rank, so `endpoint` :5557 with `replay_endpoint` :5558 and two ranks would collide there too (the second
 * bind fails); the sim's default replay base, port + N, avoids it.
 */
export function checkKvEventPorts(config: SimConfig): void {
  if (config.kvEventsPort === undefined) return;
  const used = new Map<number, string>();
  for (let rank = 0; rank < config.dataParallelSize; rank++) {
    const { pub, replay } = kvEventPorts(config, rank);
    for (const [port, role] of [
      [pub, `PUB of rank ${rank}`],
      [replay, `replay of rank ${rank}`],
    ] as const) {
      if (port === null) continue;
      if (port > 65_535) throw new Error(`KV events: the ${role} would be port ${port}, above 65535`);
      const other = used.get(port);
      if (other) throw new Error(`KV events: port ${port} is both the ${other} and the ${role}`);
      used.set(port, role);
    }
  }
}

/** Builds rank `rank`'s recorder and publisher (not yet bound: see `ZmqEventPublisher.bind`). */
export function createRankKvEvents(
  config: SimConfig,
  rank: number,
  hasher: VllmBlockHasher,
  nowUnixSeconds: () => number,
  zmq: ZeromqModule,
): RankKvEvents {
  const ports = kvEventPorts(config, rank);
  const publisher = new ZmqEventPublisher({
    zmq,
    host: config.host,
    port: ports.pub,
    replayPort: ports.replay,
    topic: config.kvEventsTopic,
    bufferSteps: config.kvEventsBufferSteps,
    hwm: config.kvEventsHwm,
    maxQueueSize: config.kvEventsMaxQueueSize,
  });
  const recorder = new KvEventRecorder({
    hasher,
    hashForm: config.kvEventsBlockHashes,
    sessionId: config.kvEventsSessionId && config.kvEventsEncoding === 'map',
    nowUnixSeconds,
    sink: { publish: (batch) => publisher.publish(encodeEventBatch(batch, rank, config.kvEventsEncoding)) },
  });
  return { rank, recorder, publisher };
}
